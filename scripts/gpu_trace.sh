#!/usr/bin/env bash
# One call for a kernel change plus the engine's kernel timeline: builds the named harnesses
# (standalone tests/kernels, sm_90) and gemma-bench + engine_tests in parallel, then runs the
# harnesses in full (their timing lines), the kernel-trace tests on the GPU, and a 12b decode at
# allocation 4096 with the kernel table (buckets from event pairs and from the CUPTI timeline).
#   GEMMA_HARNESS   harnesses (default: test_fp8_lmhead)
#   GEMMA_BENCH_ARGS  gemma-bench flags (default: --preset 12b --allocations 4096 --skip depth,prefill)
# Output: $OUT/trace.txt, bench.md, bench.json.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gemma-out}
mkdir -p "$out"
build=/tmp/gemma-build
kbuild=/tmp/gemma-kernels-build
harnesses=${GEMMA_HARNESS:-test_fp8_lmhead}
{
  source scripts/lib/build_harnesses.sh
  HARNESS_JOBS=6 build_harnesses "$kbuild" "$out/kbuild.log" $harnesses > /dev/null
} &
source scripts/lib/build_engine.sh
: > "$out/build.log"
BUILD_JOBS=10 build_engine . "$build" "$out/build.log" gemma-bench engine_tests || { tail -30 "$out/build.log"; exit 1; }
wait || { tail -30 "$out/kbuild.log"; exit 1; }
rm -f "$out/build.log" "$out/kbuild.log"
{
  for h in $harnesses; do
    timeout 300 "$kbuild/$h" > "$out/$h.log" 2>&1
    echo "--- $h: exit $?"
    grep -E "GB/s|FAIL|SUMMARY| us " "$out/$h.log"
    grep -q "FAIL" "$out/$h.log" || rm -f "$out/$h.log"
  done
  "$build/tests/engine_tests" --gtest_filter='KernelTrace*:KernelBuckets*:StepAttribution*' 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran"
  timeout 200 "$build/app/cli/gemma-bench" ${GEMMA_BENCH_ARGS:---preset 12b --allocations 4096 --skip depth,prefill} \
    --json "$out/bench.json" --markdown "$out/bench.md" > "$out/bench.log" 2>&1
  echo "gemma-bench: exit $?"
  tail -5 "$out/bench.log"
  cat "$out/bench.md"
} 2>&1 | tee "$out/trace.txt"
