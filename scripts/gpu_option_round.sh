#!/usr/bin/env bash
# One call on a fresh machine for a kernel option that is off by default (written for version
# 45's tile queue, first run in version 46): the harness's checks (quick fixtures, then the chosen
# preset shapes, each timed), memcheck and racecheck over the quick fixtures beside them, then the
# gemma-bench A/B of the option against the defaults on one preset. The engine builds while the
# checks run, so the whole costs about one engine build more than the A/B. The A/B starts only
# once every check and sanitizer has finished (nothing else on the GPU while it times). The
# harness's own timing lines run beside the sanitizers and the engine build: information only.
#   OPTION_FLAG     the gemma-bench flag under test (required)
#   OPTION_HARNESS  the tests/kernels harness that checks it (required)
#   OPTION_SHAPES   GEMMA_SHAPES substrings, one harness run each (default "31b 12b e4b"; empty: none)
#   OPTION_PRESET   the A/B's preset (default 31b)
#   OPTION_ROUNDS   the A/B's rounds (default 2; 0: the checks only, no engine build)
#   OPTION_SAN_TIMEOUT  seconds per sanitizer run (default 300)
#   OPTION_CHECKS   0: the A/B only (a later call on a warm machine, another preset; default 1)
# Output: the checks' lines and the A/B's table rows on stdout; $OUT/ab.txt (the A/B's tables and
# run headers, self-checks included), $OUT/h_*.log (the harness runs).
set -u
cd "$(dirname "$0")/.."
H=/tmp/gemma-kernels-build
: "${OPTION_FLAG:?the gemma-bench flag under test}" "${OPTION_HARNESS:?the harness that checks it}"
rounds=${OPTION_ROUNDS:-2}
san=${OPTION_SAN_TIMEOUT:-300}
source scripts/lib/build_engine.sh
source scripts/lib/build_harnesses.sh
start=$(date +%s)
engine=
: > /tmp/engine-build.log
if ((rounds > 0)); then
  (build_engine . /tmp/gemma-build /tmp/engine-build.log gemma-bench gpu_parity_tests; echo "engine rc $?" >> /tmp/engine-build.log) &
  engine=$!
fi
if [ "${OPTION_CHECKS:-1}" != 0 ]; then
  build_harnesses "$H" /tmp/harness-build.log "$OPTION_HARNESS" || exit 1
  echo "harness built at $(( $(date +%s) - start )) s"
  tools=(racecheck memcheck)
  pids=()
  for tool in "${tools[@]}"; do
    # racecheck: the attention kernels' cp.async staging, as scripts/gpu_kernels.sh runs it
    # (GEMMA_HARNESS_THREAD_COPIES, tests/kernels/HarnessCommon.h)
    copies=; [[ $tool == racecheck ]] && copies=1
    GEMMA_HARNESS_QUICK=1 GEMMA_HARNESS_THREAD_COPIES=$copies timeout "$san" compute-sanitizer --tool "$tool" --error-exitcode 99 \
      "$H/$OPTION_HARNESS" > "/tmp/$tool.log" 2>&1 &
    pids+=($!)
  done
  GEMMA_HARNESS_QUICK=1 timeout 200 "$H/$OPTION_HARNESS" > "$OUT/h_quick.log" 2>&1
  echo "quick fixtures rc $?"; grep -E "FAIL|^SUMMARY" "$OUT/h_quick.log"
  for s in ${OPTION_SHAPES-31b 12b e4b}; do
    GEMMA_SHAPES=$s timeout 150 "$H/$OPTION_HARNESS" > "$OUT/h_$s.log" 2>&1
    echo "shapes $s rc $?"; grep -E "FAIL|^SUMMARY" "$OUT/h_$s.log"
  done
  for i in "${!tools[@]}"; do
    wait "${pids[$i]}"; echo "${tools[$i]} rc $?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|^SUMMARY" "/tmp/${tools[$i]}.log" | head -3
  done
  echo "checks done at $(( $(date +%s) - start )) s"
fi
((rounds > 0)) || exit 0
wait "$engine"; tail -1 /tmp/engine-build.log
grep -q "engine rc 0" /tmp/engine-build.log || { tail -30 /tmp/engine-build.log; exit 1; }
OUT=/tmp/option-ab GEMMA_AB_VARIANTS="; $OPTION_FLAG" GEMMA_AB_PARITY=0 GEMMA_AB_PRESET=${OPTION_PRESET:-31b} \
  GEMMA_AB_ROUNDS=$rounds GEMMA_AB_ARGS="--skip prefill,kernels,depth --allocations 4096" bash scripts/gpu_ab_builds.sh | tail -12
cp /tmp/option-ab/ab.txt "$OUT/ab.txt"
echo "self-checks in the run headers: $(grep -o 'self-check passed' "$OUT/ab.txt" | wc -l) passed, $(grep -oi 'self-check failed' "$OUT/ab.txt" | wc -l) failed"
echo "all done at $(( $(date +%s) - start )) s"
