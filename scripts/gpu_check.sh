#!/usr/bin/env bash
# One command on the GPU machine (DEVICE.md): build the engine, tools and tests for sm_90, run the
# whole CTest suite there (GPU tests included), an end-to-end `gemma-cli --device cuda` generation
# under compute-sanitizer (memcheck, initcheck, racecheck), and optionally gemma-bench.
# Logs and JSON go to $OUT (at most 8 files come back); a summary table is printed last.
#   GEMMA_BENCH=1        also run gemma-bench --preset ${GEMMA_BENCH_PRESET:-12b}
#   GEMMA_KERNELS=1      also run scripts/gpu_kernels.sh (harnesses + sanitizers over them)
#   GEMMA_PARITY_REPEAT=N  run the model-level parity tests N times (scripts/gpu_parity.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gemma-out}
mkdir -p "$out"
summary=()
note() { summary+=("$1"); echo "== $1"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
build=/tmp/gemma-build
source scripts/lib/build_engine.sh
: > "$out/build.log"
build_engine . "$build" "$out/build.log"
if [[ $? -ne 0 ]]; then note "build: FAILED (see build.log)"; tail -40 "$out/build.log"; exit 1; fi
note "build: ok"

# GEMMA_CTEST_ARGS: e.g. -E "^kernels\." when scripts/gpu_kernels.sh runs the harnesses anyway.
(cd "$build" && ctest --output-on-failure -j 8 --timeout 900 ${GEMMA_CTEST_ARGS:-}) > "$out/ctest.log" 2>&1
note "ctest: $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)"
note "$(bash scripts/gpu_parity.sh "$build" "$out")"

# End-to-end decode on the GPU from a package made by gemma-quantize, then under the sanitizers.
while read -r line; do note "${line#== }"; done < <(bash scripts/gpu_e2e_sanitize.sh "$build" "$out")

if [[ "${GEMMA_KERNELS:-0}" == 1 && -x scripts/gpu_kernels.sh ]]; then
  OUT=$out/kernels bash scripts/gpu_kernels.sh > "$out/kernels.log" 2>&1
  note "kernel harnesses + sanitizers: exit $?"
fi
if [[ "${GEMMA_BENCH:-0}" == 1 ]]; then
  "$build/app/cli/gemma-bench" --preset "${GEMMA_BENCH_PRESET:-12b}" --json "$out/bench.json" --markdown "$out/bench.md" \
    ${GEMMA_BENCH_ARGS:-} > "$out/bench.log" 2>&1
  note "gemma-bench: exit $?"
  cat "$out/bench.md" 2>/dev/null
fi
echo
echo "================ summary ================"
printf '%s\n' "${summary[@]}"
