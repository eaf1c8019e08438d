#!/usr/bin/env bash
# compute-sanitizer racecheck over kernel harnesses, alone on the GPU, each harness split into
# shards (GEMMA_HARNESS_SHARD, tests/kernels/HarnessCommon.h) that run through a pool of parallel
# jobs. The full verification (scripts/gpu_verify.sh) runs racecheck beside every other sanitizer
# job, where test_attention's slowest cases cannot finish (docs/PERFORMANCE.md version 22 step 4:
# alone, in shards of 42, the slowest shard took ≈ 240 s); this script is the call that covers
# every case. A harness without shards (all but test_attention) runs as one job.
#   GPU_RACE_HARNESSES  harnesses to check (default: test_attention test_topk)
#   GPU_RACE_SHARDS     shards of test_attention (default 42)
#   GPU_RACE_SHARD_LIST test_attention's shards as a list of i/n (e.g. "12/126 54/126 96/126": the
#                       cases of shard 12 of 42 in three jobs), instead of all of GPU_RACE_SHARDS
#   GPU_RACE_JOBS       jobs at once (default: the CPU count)
#   GPU_RACE_TIMEOUT    seconds per job (default 420: the slowest shard of 42 took ≈ 240 s alone in
#                       version 22, before steps 8 and 9 added checks to every fused case)
#   GEMMA_FIXTURES      passed through to test_attention: only the fixtures whose name holds this
#                       substring (e.g. "sliding": every head-dim-256 layer, where a change to one
#                       kernel instance can be checked without the rest), sharded among themselves
# Builds the harnesses it checks (as scripts/gpu_kernels.sh does) when /tmp/gemma-kernels-build
# lacks them.
# Output: $OUT/race.txt, a line per job (exit status, checks, racecheck summary) and a total.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/race-out}
BUILD=${GPU_KERNELS_BUILD:-/tmp/gemma-kernels-build}
HARNESSES=${GPU_RACE_HARNESSES:-"test_attention test_topk"}
SHARDS=${GPU_RACE_SHARDS:-42}
JOBS=${GPU_RACE_JOBS:-$(nproc)}
TIMEOUT=${GPU_RACE_TIMEOUT:-420}
mkdir -p "$OUT" "$BUILD/race"
start=$(date +%s)

for h in $HARNESSES; do
  if [[ ! -x "$BUILD/$h" ]]; then
    source "$ROOT/scripts/lib/build_harnesses.sh"
    build_harnesses "$BUILD" "$OUT/build.log" $HARNESSES || exit 1
    break
  fi
done

# One line per job: "harness shard": the shard is i/n, or "-" for the whole harness.
jobs_file="$BUILD/race/jobs.txt"
: > "$jobs_file"
for h in $HARNESSES; do
  if [[ $h == test_attention ]]; then
    if [[ -n ${GPU_RACE_SHARD_LIST:-} ]]; then
      for s in $GPU_RACE_SHARD_LIST; do echo "$h $s" >> "$jobs_file"; done
    else
      for ((i = 0; i < SHARDS; ++i)); do echo "$h $i/$SHARDS" >> "$jobs_file"; done
    fi
  else
    echo "$h -" >> "$jobs_file"
  fi
done

run_job() {
  local h=$1 shard=$2 log
  log="$BUILD/race/$h.${shard//\//-of-}.log"
  local env_shard=
  [[ $shard != - ]] && env_shard=$shard
  GEMMA_HARNESS_QUICK=1 GEMMA_HARNESS_SHARD=$env_shard GEMMA_HARNESS_THREAD_COPIES=1 timeout "$TIMEOUT" compute-sanitizer --tool racecheck \
    --error-exitcode 99 --print-limit 20 "$BUILD/$h" > "$log" 2>&1
  local rc=$?
  echo "$h $shard rc=$rc $(grep -E '^SUMMARY' "$log" | sed 's/^SUMMARY //') | $(grep -E 'RACECHECK SUMMARY' "$log" | sed 's/=* *//')"
}
export -f run_job
export BUILD TIMEOUT
xargs -P "$JOBS" -L 1 bash -c 'run_job "$0" "$1"' < "$jobs_file" | sort -V > "$OUT/race.txt"

total=$(wc -l < "$OUT/race.txt")
clean=$(grep -c "rc=0 .*0 hazards displayed (0 errors, 0 warnings)" "$OUT/race.txt")
echo "racecheck: $clean of $total jobs clean${GEMMA_FIXTURES:+ (fixtures holding \"$GEMMA_FIXTURES\")} in $(( $(date +%s) - start )) s (jobs at once: $JOBS, timeout $TIMEOUT s)" >> "$OUT/race.txt"
# A failing job's log explains it (at most three come back).
grep -v "rc=0 " "$OUT/race.txt" | grep -v "^racecheck:" | head -3 | while read -r h shard _; do
  cp "$BUILD/race/$h.${shard//\//-of-}.log" "$OUT/" 2>/dev/null
done
cat "$OUT/race.txt"
