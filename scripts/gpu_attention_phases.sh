#!/usr/bin/env bash
# Where the decode attention's time goes, phase by phase (docs/PERFORMANCE.md version 23): builds
# measure_attention_phases (test_attention with the phase clock on, kernels/cuda/PhaseClock.h)
# and runs chosen fused cases alone. Each cluster timing line, and each full layer's `inside` line
# (the tensor-core pieces with the norm + RoPE inside), is followed by its phases: the mean over
# blocks and the slowest block, in ns per launch, from SM cycles at the clock the SMs ran.
#   GPU_PHASE_CASES  ';'-separated fused-case names (default: the 12b sliding layer at position
#                    150 and over a full f32 window, the 12b full layer at position 150)
# Builds in /tmp/gemma-kernels-build (scripts/gpu_kernels.sh's build directory).
# Output: $OUT/attention-phases.txt.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/attention-phases-out}
BUILD=${GPU_KERNELS_BUILD:-/tmp/gemma-kernels-build}
CASES=${GPU_PHASE_CASES:-"12b sliding pos 150 f32;12b sliding ring wrap f32;12b full pos 150 f32"}
mkdir -p "$OUT"
report="$OUT/attention-phases.txt"
: > "$report"
cmake -S "$ROOT/tests/kernels" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j "$(nproc)" --target measure_attention_phases >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
rm -f "$OUT/build.log"
IFS=';' read -r -a cases <<< "$CASES"
for c in "${cases[@]}"; do
  echo "=== $c" >> "$report"
  GEMMA_FIXTURES="$c" timeout 200 "$BUILD/measure_attention_phases" > "$OUT/run.txt" 2>&1
  echo "exit $?" >> "$report"
  grep -E "FAIL|^SUMMARY" "$OUT/run.txt" >> "$report"
  sed -n '/^attention timing/,$p' "$OUT/run.txt" >> "$report"
done
rm -f "$OUT/run.txt"
cat "$report"
