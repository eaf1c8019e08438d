#!/usr/bin/env bash
# One command for the GPU machine: configure + build the CUDA kernels and their harnesses
# (sm_90, Release, standalone project tests/kernels), run every harness, run compute-sanitizer
# memcheck / initcheck / racecheck over every harness (GEMMA_HARNESS_QUICK=1: small fixtures),
# dump SASS facts, time one kernel boundary (measure_hop), and print a summary table last. Logs go
# to $OUT (at most 8 files).
#
#   OUT=/tmp/out scripts/gpu_kernels.sh            # default OUT: /tmp/kernels-gpu-out
#   GEMMA_SEED=123 scripts/gpu_kernels.sh           # replay a seed
#   GPU_KERNELS_ARCH=89 scripts/gpu_kernels.sh      # another architecture
#   GPU_KERNELS_QUICK_RUN=1 scripts/gpu_kernels.sh  # small fixtures in the main runs too (no timing)
#   GPU_KERNELS_HARNESSES="test_fp4_matvec" scripts/gpu_kernels.sh  # only these harnesses (one kernel changed)
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/kernels-gpu-out}
BUILD=${GPU_KERNELS_BUILD:-/tmp/gemma-kernels-build}
ARCH=${GPU_KERNELS_ARCH:-90}
SAN_TIMEOUT=${GPU_KERNELS_SAN_TIMEOUT:-300}  # racecheck of test_attention ran past 240 s in version 11
RUN_TIMEOUT=${GPU_KERNELS_RUN_TIMEOUT:-300}
mkdir -p "$OUT"
HARNESSES=${GPU_KERNELS_HARNESSES:-"test_fp4_matvec test_fp8_lmhead test_rmsnorm test_qkv_rope test_attention test_attention_prefill test_fp4_dequantize test_topk"}
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
start=$(date +%s)

echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC') $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo no-commit)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/device.txt"
nvcc --version | tail -2 | tee -a "$OUT/device.txt"

echo "== configure + build (sm_$ARCH, Release)"
if ! cmake -S "$ROOT/tests/kernels" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DGEMMA_CUDA_PTXAS_VERBOSE=ON > "$OUT/build.log" 2>&1 ||
   ! cmake --build "$BUILD" -j "$(nproc)" >> "$OUT/build.log" 2>&1; then
  tail -60 "$OUT/build.log"
  echo "BUILD FAILED"
  exit 1
fi
echo "build ok in $(( $(date +%s) - start )) s"
# ptxas resource lines of the library's kernels (registers, spills, shared memory).
grep -E "Compiling entry|registers|spill" "$OUT/build.log" | sed 's/ptxas info    : //' > "$OUT/ptxas.txt" || true

echo "== SASS facts (library object files)"
{
  for obj in "$BUILD"/gemma_kernels_cuda/CMakeFiles/gemma_kernels_cuda.dir/*.o; do
    echo "--- $(basename "$obj")"
    cuobjdump --dump-resource-usage "$obj" 2>/dev/null | grep -E "Function|REG" | sed 's/^ *//'
    sass=$(cuobjdump --dump-sass "$obj" 2>/dev/null)
    echo "  LDG.128: $(grep -cE 'LDG\.E\.(EL\.)?(LTC[0-9]+B\.)?128|LDG.*\.128' <<<"$sass")  PRMT: $(grep -c PRMT <<<"$sass")  LDL/STL (local): $(grep -cE '\bLDL|\bSTL' <<<"$sass")  LDGSTS: $(grep -c LDGSTS <<<"$sass")"
  done
} > "$OUT/sass.txt" 2>&1
cat "$OUT/sass.txt"

echo "== harnesses (full fixtures, timing)"
RUNLOG="$OUT/run.log"
: > "$RUNLOG"
declare -A RUN_RC RUN_SUM
for h in $HARNESSES; do
  echo "--- $h" | tee -a "$RUNLOG"
  GEMMA_HARNESS_QUICK=${GPU_KERNELS_QUICK_RUN:-0} timeout "$RUN_TIMEOUT" "$BUILD/$h" >> "$RUNLOG" 2>&1
  RUN_RC[$h]=$?
  RUN_SUM[$h]=$(grep -E "^SUMMARY" "$RUNLOG" | tail -1 | sed 's/^SUMMARY //')
  echo "rc=${RUN_RC[$h]} ${RUN_SUM[$h]}"
done
# The cost of one programmatic kernel boundary and of the x hand-off (tests/kernels/measure_hop.cu,
# docs/PERFORMANCE.md version 12), for the timing section below.
timeout 60 "$BUILD/measure_hop" > "$OUT/hop.txt" 2>&1
# Whether one persistent kernel keeps a step's weight stream going across its op boundaries
# (tests/kernels/measure_weight_stream.cu, docs/PERFORMANCE.md version 25 step 4), sm_90+.
timeout 120 "$BUILD/measure_weight_stream" > "$OUT/weight_stream.txt" 2>&1
echo "harnesses done at $(( $(date +%s) - start )) s"

echo "== compute-sanitizer (GEMMA_HARNESS_QUICK=1, in parallel)"
SANDIR="$BUILD/san"
mkdir -p "$SANDIR"
jobs_list=()
# racecheck of test_attention ran past 300 s in version 20 (and as 4 or 3 shards in version 21):
# it runs as SAN_SHARDS processes (GEMMA_HARNESS_SHARD, tests/kernels/HarnessCommon.h), each case
# in one of them; the row's log is theirs in turn and its exit status the first non-zero one.
SAN_SHARDS=${GPU_KERNELS_SAN_SHARDS:-8}
shards_of() { [[ $1 == racecheck && $2 == test_attention ]] && echo "$SAN_SHARDS" || echo 1; }
for tool in memcheck initcheck racecheck; do
  for h in $HARNESSES; do
    n=$(shards_of "$tool" "$h")
    for ((i = 0; i < n; ++i)); do
      (
        shard=; ((n > 1)) && shard="$i/$n"
        # racecheck: the attention kernels' cp.async staging (GEMMA_HARNESS_THREAD_COPIES; it
        # cannot see a bulk copy's mbarrier completion: tests/kernels/HarnessCommon.h)
        copies=; [[ $tool == racecheck ]] && copies=1
        GEMMA_HARNESS_QUICK=1 GEMMA_HARNESS_SHARD=$shard GEMMA_HARNESS_THREAD_COPIES=$copies timeout "$SAN_TIMEOUT" compute-sanitizer --tool "$tool" \
          --error-exitcode 99 --print-limit 20 "$BUILD/$h" > "$SANDIR/$tool.$h.$i.log" 2>&1
        echo $? > "$SANDIR/$tool.$h.$i.rc"
      ) &
      jobs_list+=($!)
    done
  done
done
wait "${jobs_list[@]}"
for tool in memcheck initcheck racecheck; do
  for h in $HARNESSES; do
    n=$(shards_of "$tool" "$h")
    : > "$SANDIR/$tool.$h.log"
    rc=0
    for ((i = 0; i < n; ++i)); do
      cat "$SANDIR/$tool.$h.$i.log" >> "$SANDIR/$tool.$h.log"
      r=$(cat "$SANDIR/$tool.$h.$i.rc" 2>/dev/null || echo 1)
      ((rc == 0)) && rc=$r
    done
    echo "$rc" > "$SANDIR/$tool.$h.rc"
  done
done
SANLOG="$OUT/sanitizer.log"
: > "$SANLOG"
SANROWS="$HARNESSES"
for tool in memcheck initcheck racecheck; do
  for h in $SANROWS; do
    { echo "--- $tool $h rc=$(cat "$SANDIR/$tool.$h.rc")"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|SUMMARY|Invalid|uninitialized|hazard|Error|FAIL|^seed" "$SANDIR/$tool.$h.log" | head -30; } >> "$SANLOG"
  done
done
echo "sanitizers done at $(( $(date +%s) - start )) s"

# ---- summary table (last) ----
{
  echo
  echo "== failing checks (if any)"
  grep -E "FAIL|error" "$RUNLOG" | grep -v "^SUMMARY" | head -40
  echo "== bandwidth / timing (information only)"
  grep -E "GB/s" "$RUNLOG"
  cat "$OUT/hop.txt" 2>/dev/null
  echo
  echo "== SUMMARY ($(date -u '+%Y-%m-%d %H:%M UTC'), sm_$ARCH, $(( $(date +%s) - start )) s)"
  printf "%-18s %-6s %-10s %-10s %-10s  %s\n" harness run memcheck initcheck racecheck "harness result"
  for h in $SANROWS; do
    cells=()
    for tool in memcheck initcheck racecheck; do
      rc=$(cat "$SANDIR/$tool.$h.rc" 2>/dev/null || echo "?")
      errs=$(grep -hoE "(ERROR|RACECHECK) SUMMARY: [0-9]+ (errors|hazards)" "$SANDIR/$tool.$h.log" | grep -oE "[0-9]+" | awk '{s += $1; n++} END {if (n) print s}')  # summed over shards
      # rc 1 with 0 sanitizer errors: a harness check failed under the tool (see sanitizer.log).
      # FAIL:99(N): the tool's error exit (--error-exitcode 99) with the N errors or hazards its
      # summary lines count (? when none was printed), so a summary alone says how many.
      case $rc in 0) cells+=("ok(${errs:-0})");; 124) cells+=("TIMEOUT");; 1) cells+=("ok(${errs:-?})+CHECK");; *) cells+=("FAIL:$rc(${errs:-?})");; esac
    done
    case ${RUN_RC[$h]:-none} in 0) run=PASS;; 77) run=SKIP;; none) run="-";; *) run="FAIL:${RUN_RC[$h]}";; esac
    printf "%-18s %-6s %-10s %-10s %-10s  %s\n" "$h" "$run" "${cells[0]}" "${cells[1]}" "${cells[2]}" "${RUN_SUM[$h]}"
  done
} | tee "$SUMMARY"
