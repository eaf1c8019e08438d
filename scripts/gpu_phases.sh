#!/usr/bin/env bash
# Where a kernel's time goes, phase by phase (docs/PERFORMANCE.md version 23): builds the harnesses
# with the phase clock on (kernels/cuda/PhaseClock.h) and runs chosen cases alone. Each timing line
# of the instrumented kernels is followed by its phases: the mean over blocks and the slowest
# block, in ns per launch, from SM cycles at the clock the SMs ran.
#   measure_attention_phases: the cluster attention (each cluster timing line) and the tensor-core
#     pieces with the norm + RoPE inside (each full layer's `inside` line);
#   measure_matvec_phases: the FP4 matvec's tiled launches (matvec and GeGLU), alone and as a
#     programmatic chain (marks 7-9 split the staging of x without an input norm).
#   GPU_PHASE_CASES   ';'-separated fused attention cases (default: the 12b sliding layer at
#                     position 150 and over a full f32 window, the 12b full layer at position 150)
#   GPU_PHASE_SHAPES  a substring of test_fp4_matvec's preset shapes (default: 12b; empty: none)
# Builds in /tmp/gemma-kernels-build (scripts/gpu_kernels.sh's build directory).
# Output: $OUT/phases.txt.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/phases-out}
BUILD=${GPU_KERNELS_BUILD:-/tmp/gemma-kernels-build}
CASES=${GPU_PHASE_CASES-"12b sliding pos 150 f32;12b sliding ring wrap f32;12b full pos 150 f32"}
SHAPES=${GPU_PHASE_SHAPES-12b}
mkdir -p "$OUT"
report="$OUT/phases.txt"
: > "$report"
# Only the tools the run uses: an empty SHAPES (scripts/gpu_ab_builds.sh's phases) skips the
# matvec tool, whose build (test_fp4_matvec with Fp4Matvec.cu) is the longer of the two.
IFS=';' read -r -a cases <<< "$CASES"
tools=()
[ ${#cases[@]} -gt 0 ] && tools+=(measure_attention_phases)
[ -n "$SHAPES" ] && tools+=(measure_matvec_phases)
[ ${#tools[@]} -gt 0 ] || { echo "GPU_PHASE_CASES and GPU_PHASE_SHAPES are both empty: nothing to time" | tee "$report"; exit 0; }
source "$ROOT/scripts/lib/build_harnesses.sh"
build_harnesses "$BUILD" "$OUT/build.log" "${tools[@]}" || exit 1
rm -f "$OUT/build.log"
for c in "${cases[@]}"; do
  echo "=== attention: $c" >> "$report"
  GEMMA_FIXTURES="$c" timeout 200 "$BUILD/measure_attention_phases" > "$OUT/run.txt" 2>&1
  echo "exit $?" >> "$report"
  grep -E "FAIL|^SUMMARY" "$OUT/run.txt" >> "$report"
  sed -n '/^attention timing/,$p' "$OUT/run.txt" >> "$report"
done
if [ -n "$SHAPES" ]; then
  echo "=== matvec: $SHAPES" >> "$report"
  GEMMA_SHAPES="$SHAPES" timeout 300 "$BUILD/measure_matvec_phases" > "$OUT/run.txt" 2>&1
  echo "exit $?" >> "$report"
  # Everything but the passing checks: the timing lines, the phase reports, any failure, the summary.
  grep -vE " ok$| ok " "$OUT/run.txt" >> "$report"
fi
rm -f "$OUT/run.txt"
cat "$report"
