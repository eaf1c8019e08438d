#!/usr/bin/env bash
# Fast kernel iteration on the GPU machine: builds only the named kernel harnesses (standalone
# tests/kernels project, sm_90), runs them, and profiles the FP4 matvec on the 12b shapes with
# Nsight Compute (clocks untouched). Output: $OUT/matvec.txt.
#   GEMMA_HARNESS   harnesses to build and run (default: test_fp4_matvec)
#   GEMMA_PROFILE_SHAPES   preset shapes (name substring) Nsight Compute profiles (default 12b)
#   GEMMA_REPEAT_QUICK=N   then run each harness N more times with small fixtures and fresh seeds,
#                          keeping the failing checks and their seeds (flaky-check hunting)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gemma-out}
mkdir -p "$out"
build=/tmp/gemma-kernels-build
harnesses=${GEMMA_HARNESS:-test_fp4_matvec}
{
cmake -S tests/kernels -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null \
  && cmake --build "$build" -j 16 --target $harnesses > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
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
  GEMMA_SHAPES=${GEMMA_PROFILE_SHAPES:-12b} timeout 240 ncu --clock-control none --kernel-name regex:fp4Matvec --launch-count 12 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,dram__bytes_read.sum" \
    "$build/test_fp4_matvec" > "$out/ncu-raw.txt" 2>&1
  grep -E '^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Issued Warp|Achieved Occupancy|Registers Per|issue_stalled|inst_executed|dram__bytes' "$out/ncu-raw.txt" \
    | awk '!/issue_stalled/ || $NF+0 >= 0.3' | cut -c1-150
  rm -f "$out/ncu-raw.txt"
fi
} 2>&1 | tee "$out/matvec.txt"
