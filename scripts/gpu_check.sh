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
pkg=/tmp/e2e.gemma
"$build/app/cli/gemma-quantize" tests/data/goldens/e2b_like/hf -o "$pkg" --quiet
ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('tests/data/goldens/e2b_like/golden_fp4.json'))['prompt_ids'])))")
"$build/app/cli/gemma-cli" --model "$pkg" --device cuda --tokens "$ids" --max-new-tokens 16 --greedy --ignore-eos --print-ids \
  > "$out/e2e.log" 2>&1
note "gemma-cli --device cuda: exit $? ($(tail -1 "$out/e2e.log"))"
# Both prefill paths: the default GEMM prefill (cuBLASLt) and the matvec prefill.
for tool in memcheck initcheck racecheck; do
  for prefill in gemm matvec; do
    flag=""; [[ $prefill == matvec ]] && flag="--no-gemm-prefill"
    # racecheck cannot see the bulk copies' mbarrier completion (tests/kernels/HarnessCommon.h)
    [[ $tool == racecheck ]] && flag="$flag --thread-copies"
    compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 "$build/app/cli/gemma-cli" --model "$pkg" --device cuda --tokens "$ids" \
      --max-new-tokens 4 --greedy --ignore-eos --quiet $flag > "$out/sanitizer-$tool-$prefill.log" 2>&1
    note "sanitizer $tool (e2e, $prefill prefill): exit $? $(grep -E 'ERROR SUMMARY' "$out/sanitizer-$tool-$prefill.log" | tail -1)"
  done
done

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
