#!/usr/bin/env bash
# Nsight Compute on measure_persistent_layer (docs/PERFORMANCE.md version 26): the even split's
# decode alone (16 consumer warps × 1 item, no barriers, no x staging) and its full step, beside
# one of the engine's GeGLU launches on the same weights, for issue activity, instruction counts
# and stall reasons; then the decode alone's stall samples per SASS instruction (where version 26
# found the integer pipe's throttle on the byte permutes and sign flips). The launch indices
# follow the probe's order: the even split's check runs (one per form, 4 forms), then per form and
# depth 8 launches (warm-up + 7) each of the step, its decode alone and its decode on raw code
# words; the engine's launches: 16 checks of the tile-per-block form and 64 of the even forms, then
# the timed chain, op k at 80 + k.
# Output: $OUT/persistent-profile.txt and $OUT/even-decode-source.csv (ncu's source page, SASS).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/persistent-profile-out}
BUILD=${GPU_KERNELS_BUILD:-/tmp/gemma-kernels-build}
mkdir -p "$OUT"
source "$ROOT/scripts/lib/build_harnesses.sh"
build_harnesses "$BUILD" "$OUT/build.log" measure_persistent_layer || exit 1
report="$OUT/persistent-profile.txt"
: > "$report"
profile() {  # name, kernel regex, launches to skip
  echo "=== $1" >> "$report"
  timeout 240 ncu --clock-control none --kernel-name "regex:$2" --launch-skip "$3" --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats --section InstructionStats \
    --metrics "smsp__inst_executed.sum,sm__pipe_tensor_op_imma_cycles_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    "$BUILD/measure_persistent_layer" > "$OUT/raw.txt" 2>&1
  echo "ncu exit $?" >> "$report"
  grep -E 'issue_stalled|inst_executed|imma|Duration|DRAM Throughput|Issue Slots Busy|Issued Warp Per Scheduler|Achieved Occupancy|Registers Per Thread|No Eligible|Warp Cycles Per Issued|Executed Ipc' "$OUT/raw.txt" \
    | awk '!/issue_stalled/ || $NF+0 >= 0.1' >> "$report"
}
profile "even split, 16 warps × 1 item, decode alone" evenSplitStepKernel 12
profile "even split, 16 warps × 1 item, the step" evenSplitStepKernel 4
profile "engine GeGLU launch (op 34, the timed chain's warm-up)" fp4MatvecMmaKernel 114
timeout 240 ncu --clock-control none --kernel-name regex:evenSplitStepKernel --launch-skip 12 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source no -o /tmp/even-decode "$BUILD/measure_persistent_layer" > "$OUT/raw.txt" 2>&1
echo "source profile: ncu exit $?" >> "$report"
ncu -i /tmp/even-decode.ncu-rep --page source --csv --print-source sass > "$OUT/even-decode-source.csv" 2>> "$report"
rm -f "$OUT/raw.txt" /tmp/even-decode.ncu-rep
cat "$report"
