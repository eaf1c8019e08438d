#!/usr/bin/env bash
# The model-level parity tests (tests/gpu_parity_tests) of a build, for the GPU scripts: one place
# that runs them and words their summary line. Output: OUT/gpu_parity.log, then one line
# "gpu parity: exit N (K ok, M failed lines)" on stdout; the script exits with the tests' status.
#   gpu_parity.sh BUILD OUT [SECONDS]   (SECONDS: a time limit; default none)
#   GEMMA_PARITY_REPEAT=N   run them N times (gtest repeat, default 1): a failure that shows only
#                           sometimes (docs/PERFORMANCE.md version 13) needs several
set -u
build=$1 out=$2 limit=${3:-0}
timeout "$limit" "$build/tests/gpu_parity_tests" --gtest_repeat="${GEMMA_PARITY_REPEAT:-1}" > "$out/gpu_parity.log" 2>&1
status=$?
echo "gpu parity: exit $status ($(grep -cE '^\[       OK \]' "$out/gpu_parity.log") ok, $(grep -cE '^\[  FAILED  \]' "$out/gpu_parity.log") failed lines)"
exit $status
