#!/usr/bin/env bash
# Nsight Compute over one decode step of gemma-bench (GPU machine, after scripts/gpu_check.sh has
# built /tmp/gemma-build). Profiles GEMMA_PROFILE_COUNT kernels after skipping the first
# GEMMA_PROFILE_SKIP (prefill, warm-up), so one layer's kernels are covered. Clocks are left alone
# (--clock-control none, DEVICE.md). GEMMA_PROFILE_FILTER: an ncu kernel filter (-k; the skip and
# count then count matching kernels only); GEMMA_PROFILE_BENCH replaces the gemma-bench arguments
# after the preset (default: a short decode at allocation 4096). Output: $OUT/ncu.txt (per kernel: duration, DRAM throughput,
# issue activity, occupancy, top stall reasons).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gemma-out}
build=${GEMMA_BUILD:-/tmp/gemma-build}
mkdir -p "$out"
filter=()
[[ -n "${GEMMA_PROFILE_FILTER:-}" ]] && filter=(-k "$GEMMA_PROFILE_FILTER")
timeout "${GEMMA_PROFILE_TIMEOUT:-240}" ncu --clock-control none "${filter[@]}" \
  --launch-skip "${GEMMA_PROFILE_SKIP:-4000}" --launch-count "${GEMMA_PROFILE_COUNT:-30}" \
  --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats --section LaunchStats \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
  "$build/app/cli/gemma-bench" --preset "${GEMMA_PROFILE_PRESET:-12b}" \
  ${GEMMA_PROFILE_BENCH:---allocations 4096 --prompt-tokens 8 --decode-tokens 64 --skip depth,prefill,kernels} ${GEMMA_PROFILE_ARGS:-} > "$out/ncu-raw.txt" 2>&1
echo "ncu exit $?"
# Keep the lines that matter, a block per kernel.
grep -E '^  [a-zA-Z_].*\(|issue_stalled|Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Issued Warp Per Scheduler|Achieved Occupancy|Registers Per Thread|Grid Size|Block Size|Theoretical Occupancy|No Eligible|Stall|Warp Cycles Per Issued' \
  "$out/ncu-raw.txt" > "$out/ncu.txt"
wc -l "$out/ncu.txt"
