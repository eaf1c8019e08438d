#!/usr/bin/env bash
# One development round on the GPU machine: scripts/gpu_check.sh (build, CTest with the GPU tests
# and kernel harnesses, model parity, end-to-end decode under the sanitizers, gemma-bench), the
# FP4 matvec harness's timing table, then Nsight Compute over one decode step. Keeps at most 8
# files in $OUT (the device returns no more): summary.txt, bench.md, bench.json, ncu.txt, and the
# logs of anything that failed.
#   GEMMA_BENCH_ARGS   passed to gemma-bench (default: --skip depth,prefill)
#   GEMMA_HARNESS      extra harness binaries to run with timing (default: test_fp4_matvec)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gemma-out}
mkdir -p "$out"
GEMMA_BENCH=1 GEMMA_BENCH_ARGS="${GEMMA_BENCH_ARGS:---skip depth,prefill}" bash scripts/gpu_check.sh > "$out/check.txt" 2>&1
for h in ${GEMMA_HARNESS:-test_fp4_matvec}; do
  echo "--- $h" >> "$out/harness.txt"
  timeout 300 /tmp/gemma-build/tests/kernels/$h > "$out/$h.log" 2>&1
  echo "exit $?" >> "$out/harness.txt"
  grep -E "GB/s|us |FAIL|SUMMARY|TFLOP" "$out/$h.log" >> "$out/harness.txt"
  grep -q "FAIL" "$out/$h.log" || rm -f "$out/$h.log"
done
[[ "${GEMMA_PROFILE:-1}" == 1 ]] && bash scripts/gpu_profile.sh > /dev/null 2>&1
rm -f "$out/ncu-raw.txt" "$out/gpu.txt" "$out/e2e.log"
grep -q "build: ok" "$out/check.txt" && rm -f "$out/build.log"
grep -q "tests passed" "$out/check.txt" && grep -q "100% tests passed" "$out/ctest.log" && rm -f "$out/ctest.log"
grep -q "0 failed lines" "$out/check.txt" && rm -f "$out/gpu_parity.log"
for f in "$out"/sanitizer-*.log; do grep -q "ERROR SUMMARY: 0 errors\|RACECHECK SUMMARY: 0" "$f" 2>/dev/null && rm -f "$f"; done
rm -f "$out/bench.log"
{ tail -12 "$out/check.txt"; cat "$out/harness.txt"; } > "$out/summary.txt"; rm -f "$out/harness.txt"
ls "$out"
cat "$out/summary.txt"
