#!/usr/bin/env bash
# Where the decode attention's fixed cost goes (docs/PERFORMANCE.md version 22, next lever 0):
# test_attention's timing lines and Nsight Compute's stall metrics for chosen fused cases, each
# alone (GEMMA_FIXTURES filters the fused cases by name since version 22). The
# defaults are the 12b's sliding layer at the full f32 window (the cluster form, 16.5 µs per
# layer), the same at a short band (8 µs), and the 12b's full layer at a short band (the pieces
# with the norm + RoPE inside, then the merge: ≈ 14 µs per layer in the step's kernel timeline).
#   GPU_PROFILE_CASES   ';'-separated fused-case names (default: the three above)
#   GPU_PROFILE_COUNT   kernels profiled per case (default 6: the case's first matching launches)
#   GPU_PROFILE_KERNELS kernel-name regex (default: the cluster form and the pieces; version 23's
#                       run matched the split kernel too, whose checks launch first, and profiled
#                       mostly that)
# Builds test_attention in /tmp/gemma-kernels-build (scripts/gpu_kernels.sh's build directory).
# Output: $OUT/attention-profile.txt (timing lines, then per kernel: duration, throughput, issue
# activity, occupancy, stall reasons) and $OUT/attention-source.txt (each kernel's Source Counters
# section: branch efficiency and the uncoalesced shared and global access estimates; the CLI prints
# no table by source line without --page source). Where the time goes phase by phase:
# scripts/gpu_phases.sh (the phase clock) instead.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/attention-profile-out}
BUILD=${GPU_KERNELS_BUILD:-/tmp/gemma-kernels-build}
CASES=${GPU_PROFILE_CASES:-"12b sliding ring wrap f32;12b sliding pos 150 f32;12b full pos 150 f32"}
COUNT=${GPU_PROFILE_COUNT:-6}
KERNELS=${GPU_PROFILE_KERNELS:-"attention(Cluster|Prefill)Kernel"}
mkdir -p "$OUT"
report="$OUT/attention-profile.txt"
source_report="$OUT/attention-source.txt"
: > "$report"
: > "$source_report"

# An existing harness build is reused.
source "$ROOT/scripts/lib/build_harnesses.sh"
build_harnesses "$BUILD" "$OUT/build.log" test_attention || exit 1

IFS=';' read -r -a cases <<< "$CASES"
for c in "${cases[@]}"; do
  {
    echo "=== $c: timing (median of 30, one launch each, not programmatic)"
    GEMMA_FIXTURES="$c" timeout 120 "$BUILD/test_attention" 2>&1 | grep -E "^  (fused|default|inside|cluster) |^SUMMARY|FAIL"
    echo "=== $c: Nsight Compute, the first $COUNT attention kernels"
  } >> "$report"
  raw="$OUT/ncu-raw.txt"
  GEMMA_FIXTURES="$c" timeout 200 ncu --clock-control none --kernel-name "regex:$KERNELS" \
    --launch-count "$COUNT" --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats \
    --section LaunchStats --section SourceCounters \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    "$BUILD/test_attention" > "$raw" 2>&1
  echo "ncu exit $?" >> "$report"
  grep -E '^  [a-zA-Z_].*\(|issue_stalled|Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Issued Warp Per Scheduler|Achieved Occupancy|Registers Per Thread|Grid Size|Block Size|Cluster Size|No Eligible|Warp Cycles Per Issued' "$raw" \
    | awk '!/issue_stalled/ || $NF+0 >= 0.2' >> "$report"
  # Each kernel's name line and its whole Source Counters section (up to the next section).
  { echo "=== $c"; awk '/^  [a-zA-Z_].*\(/ {print; next} /Section: Source Counters/ {on = 1} /Section: / && !/Source Counters/ {on = 0} on' "$raw"; } >> "$source_report"
done
rm -f "$OUT/ncu-raw.txt"
wc -l "$report" "$source_report"
