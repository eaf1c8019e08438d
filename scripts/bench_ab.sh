#!/usr/bin/env bash
# Alternating A/B rounds of gemma-bench flag sets on one GPU, so that clock and thermal drift hit
# every set alike (used by scripts/gpu_verify.sh).
#   bench_ab.sh GEMMA_BENCH ROUNDS VARIANTS [gemma-bench arguments for every run...]
# VARIANTS: ';'-separated flag sets (an empty set = the defaults). Prints, per run, a line
# "=== round R: [flags] exit N" and that run's markdown. BENCH_AB_TIMEOUT: seconds per run
# (default 0: no limit).
set -uo pipefail
bench=$1 rounds=$2 variants=$3
shift 3
markdown=$(mktemp)
IFS=';' read -r -a sets <<< "$variants"
for ((round = 0; round < rounds; ++round)); do
  for v in "${sets[@]}"; do
    : > "$markdown"
    timeout "${BENCH_AB_TIMEOUT:-0}" "$bench" "$@" $v --markdown "$markdown" > /dev/null 2>&1
    echo "=== round $round: [${v:-defaults}] exit $?"
    cat "$markdown"
  done
done
rm -f "$markdown"
