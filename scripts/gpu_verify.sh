#!/usr/bin/env bash
# The whole GPU verification in one call, arranged to fit a short device lease: the kernel
# harnesses and their sanitizer runs (scripts/gpu_kernels.sh, standalone build) run beside the
# engine's checks (scripts/gpu_check.sh: build, CTest without the harnesses, model parity, the
# end-to-end decode under the three sanitizers), then gemma-bench runs alone on the idle GPU.
#   GEMMA_BENCH_ARGS    passed to gemma-bench (default: all parts)
#   GPU_KERNELS_QUICK_RUN=1   small harness fixtures only (GEMMA_FULL_HARNESSES still run in full)
#   GEMMA_FULL_HARNESSES      harnesses also run with every fixture and timing afterwards
#   GEMMA_BENCH_PRESETS       more presets benchmarked after 12b (e.g. "e2b e4b 31b"), each with
#                             GEMMA_PRESET_ARGS (default: --skip depth,prefill --allocations 4096);
#                             their markdown and JSON come back in presets.tar
#   GEMMA_AB_FLAGS            ';'-separated gemma-bench flag sets (an empty set = the defaults): 12b
#                             decode at 4096 once per set, two alternating rounds, into summary.txt
# Output under $OUT (at most 8 files come back): summary.txt first.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gemma-out}
mkdir -p "$out/k"
start=$(date +%s)
OUT=$out/k bash scripts/gpu_kernels.sh > "$out/k/kernels.log" 2>&1 &
kernels=$!
GEMMA_BENCH=0 GEMMA_CTEST_ARGS='-E ^kernels\.' bash scripts/gpu_check.sh > "$out/check.txt" 2>&1
wait $kernels
for h in ${GEMMA_FULL_HARNESSES:-}; do
  timeout 300 /tmp/gemma-kernels-build/$h > "$out/k/$h.full.log" 2>&1
  echo "$h (full fixtures): exit $? $(grep -E '^SUMMARY' "$out/k/$h.full.log")" >> "$out/k/full.txt"
  grep -E "GB/s|TFLOP" "$out/k/$h.full.log" >> "$out/k/full.txt"
done
/tmp/gemma-build/app/cli/gemma-bench --preset 12b --json "$out/bench.json" --markdown "$out/bench.md" ${GEMMA_BENCH_ARGS:-} \
  > "$out/bench.log" 2>&1
echo "gemma-bench: exit $?" >> "$out/check.txt"
if [[ -n "${GEMMA_BENCH_PRESETS:-}" ]]; then
  mkdir -p "$out/presets"
  for preset in $GEMMA_BENCH_PRESETS; do
    timeout 240 /tmp/gemma-build/app/cli/gemma-bench --preset "$preset" ${GEMMA_PRESET_ARGS:---skip depth,prefill --allocations 4096} \
      --json "$out/presets/bench-$preset.json" --markdown "$out/presets/bench-$preset.md" > "$out/presets/bench-$preset.log" 2>&1
    echo "gemma-bench --preset $preset: exit $?" >> "$out/check.txt"
  done
  tar -C "$out" -cf "$out/presets.tar" presets && rm -rf "$out/presets"
fi
# A/B on the same GPU in the same call: 12b decode at allocation 4096 per flag set, alternating.
if [[ -n "${GEMMA_AB_FLAGS:-}" ]]; then
  BENCH_AB_TIMEOUT=100 bash scripts/bench_ab.sh /tmp/gemma-build/app/cli/gemma-bench 2 "$GEMMA_AB_FLAGS" \
    --preset 12b --skip depth,prefill,kernels --allocations 4096 | grep -E '^===|^\| 12b \| 4096 \| 100 \| tg' >> "$out/ab.txt"
fi
{
  echo "== gpu_verify $(date -u '+%Y-%m-%d %H:%M UTC'), $(( $(date +%s) - start )) s"
  sed -n '/== summary ==/,$p' "$out/check.txt"
  sed -n '/== SUMMARY/,$p' "$out/k/summary.txt" 2>/dev/null
  cat "$out/k/hop.txt" 2>/dev/null  # measure_hop: one kernel boundary's cost, by form
  # measure_weight_stream: the persistent stream's forms (beside the engine's checks here, so not
  # clean numbers: run it alone for those, as PERFORMANCE.md version 25 step 4 did)
  cat "$out/k/weight_stream.txt" 2>/dev/null
  grep -E "FAIL" "$out/k/run.log" 2>/dev/null | head -20
  cat "$out/k/full.txt" 2>/dev/null
  cat "$out/ab.txt" 2>/dev/null
} > "$out/summary.txt"
# Keep what explains a failure; drop the rest (the device returns at most 8 files).
grep -qE "FAIL|TIMEOUT|CHECK" "$out/k/summary.txt" 2>/dev/null && cp "$out/k/sanitizer.log" "$out/kernels-sanitizer.log"
grep -q "FAIL" "$out/k/run.log" 2>/dev/null && cp "$out/k/run.log" "$out/kernels-run.log"
grep -q "100% tests passed" "$out/ctest.log" 2>/dev/null && rm -f "$out/ctest.log"
grep -q "0 failed lines" "$out/check.txt" && rm -f "$out/gpu_parity.log"
for f in "$out"/sanitizer-*.log; do grep -q "ERROR SUMMARY: 0 errors\|RACECHECK SUMMARY: 0" "$f" 2>/dev/null && rm -f "$f"; done
rm -rf "$out/k" "$out/ab.txt" "$out/build.log" "$out/gpu.txt" "$out/e2e.log" "$out/bench.log"
ls "$out"
cat "$out/summary.txt"
