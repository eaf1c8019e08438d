#!/usr/bin/env bash
# The shortest GPU check of one kernel change, for a nearly spent device budget: builds
# gemma-bench and gpu_parity_tests (sm_90) beside the named harnesses, then runs the harnesses
# (small fixtures), a 12b decode at allocation 4096 (greedy chain and host sampling, buckets) and
# the model-level parity, in that order, so the most telling results come back first.
#   GEMMA_HARNESS   harnesses to build and run (default: test_attention)
# Output: $OUT/quick.txt (and bench.md / bench.json).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gemma-out}
mkdir -p "$out"
build=/tmp/gemma-build
kbuild=/tmp/gemma-kernels-build
harnesses=${GEMMA_HARNESS:-test_attention}
{
  source scripts/lib/build_harnesses.sh
  HARNESS_JOBS=6 build_harnesses "$kbuild" "$out/kbuild.log" $harnesses > /dev/null
} &
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEMMA_BUILD_UI=OFF -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null &&
  cmake --build "$build" -j 10 --target gemma-bench gpu_parity_tests > "$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
wait || { tail -20 "$out/kbuild.log"; exit 1; }
{
  for h in $harnesses; do
    GEMMA_HARNESS_QUICK=1 timeout 60 "$kbuild/$h" > "$out/$h.log" 2>&1
    echo "$h: exit $? $(grep -E '^SUMMARY' "$out/$h.log")"
    grep -E "FAIL" "$out/$h.log" | head -10
  done
  timeout 100 "$build/app/cli/gemma-bench" --preset 12b --allocations 4096 --skip depth,prefill,kernels \
    --json "$out/bench.json" --markdown "$out/bench.md" > "$out/bench.log" 2>&1
  echo "gemma-bench: exit $?"
  grep -E "^GPU|\| 12b|Buckets|^\| [a-z_]+ \| [0-9]" "$out/bench.md" | cut -c1-200
  bash scripts/gpu_parity.sh "$build" "$out" 120
} | tee "$out/quick.txt"
