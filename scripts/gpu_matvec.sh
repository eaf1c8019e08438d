#!/usr/bin/env bash
# Fast kernel iteration on the GPU machine: builds only the named kernel harnesses (standalone
# tests/kernels project, sm_90), runs them, and profiles the FP4 matvec on the 12b shapes with
# Nsight Compute (clocks untouched). Output: $OUT/matvec.txt.
#   GEMMA_HARNESS   harnesses to build and run (default: test_fp4_matvec)
#   GEMMA_PROFILE_SHAPES   preset shapes (name substrings) Nsight Compute profiles, the tiled integer
#                          kernels the engine runs (default "12b.down 12b.gate_up"); GEMMA_PROFILE=0 skips
#   GEMMA_REPEAT_QUICK=N   then run each harness N more times with small fixtures and fresh seeds,
#                          keeping the failing checks and their seeds (flaky-check hunting)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gemma-out}
mkdir -p "$out"
build=/tmp/gemma-kernels-build
harnesses=${GEMMA_HARNESS:-test_fp4_matvec}
{
source scripts/lib/build_harnesses.sh
build_harnesses "$build" "$out/build.log" $harnesses || exit 1
rm -f "$out/build.log"
for h in $harnesses; do
  echo "--- $h"
  timeout 300 "$build/$h" > "$out/$h.log" 2>&1
  echo "exit $?"
  grep -E "GB/s|FAIL|SUMMARY|TFLOP| us " "$out/$h.log"
  grep -q "FAIL" "$out/$h.log" || rm -f "$out/$h.log"
done
for h in $harnesses; do
  for ((i = 0; i < ${GEMMA_REPEAT_QUICK:-0}; ++i)); do
    GEMMA_HARNESS_QUICK=1 timeout 120 "$build/$h" > "$out/quick.log" 2>&1
    rc=$?
    [[ $rc == 0 ]] || { echo "$h quick run $i: exit $rc"; grep -E "^seed|FAIL" "$out/quick.log"; }
  done
  echo "$h: ${GEMMA_REPEAT_QUICK:-0} quick runs done"
done
rm -f "$out/quick.log"
if [[ "${GEMMA_PROFILE:-1}" == 1 ]]; then
  # The engine's kernels: integer x, tiled layout (the 5th template argument), on the big shapes
  # by default; the source counters name the sectors and wavefronts in excess.
  for shape in ${GEMMA_PROFILE_SHAPES:-12b.down 12b.gate_up}; do
    echo "--- Nsight Compute, $shape, tiled kernels"
    # Mangled names: the demangled ones spell the enum and bools out (XForm 2 = integer, Lb1 = tiled).
    GEMMA_SHAPES=$shape timeout 150 ncu --clock-control none --kernel-name-base mangled \
      --kernel-name "regex:fp4MatvecMmaKernelILb[01]ELNS1_5XFormE2ELi[0-9]ELi1ELb1E" --launch-count 2 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section SourceCounters --section MemoryWorkloadAnalysis \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,dram__bytes_read.sum,smsp__issue_active.avg.pct_of_peak_sustained_active" \
      "$build/test_fp4_matvec" > "$out/ncu-raw.txt" 2>&1
    grep -E '^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Achieved Occupancy|issue_stalled|inst_executed|issue_active|dram__bytes|L2 Hit|excessive' "$out/ncu-raw.txt" \
      | awk '!/issue_stalled/ || $NF+0 >= 0.3' | cut -c1-150
  done
  rm -f "$out/ncu-raw.txt"
fi
} 2>&1 | tee "$out/matvec.txt"
