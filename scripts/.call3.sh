#!/usr/bin/env bash
# Session 19 call 3: full verification of the final tree, then e2b / e4b head split A/B.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/out}
GPU_KERNELS_QUICK_RUN=1 GEMMA_BENCH_PRESETS="e2b e4b 31b" bash scripts/gpu_verify.sh > /tmp/verify.txt 2>&1
echo "verify exit $?"
B=/tmp/gemma-build/app/cli/gemma-bench
{
  BENCH_AB_TIMEOUT=60 bash scripts/bench_ab.sh $B 2 ";--no-cluster-head-split" --preset e2b --skip depth,prefill,kernels --allocations 4096 | grep -E "===|\| e2b"
  BENCH_AB_TIMEOUT=60 bash scripts/bench_ab.sh $B 1 ";--no-cluster-head-split" --preset e4b --skip depth,prefill,kernels --allocations 4096 | grep -E "===|\| e4b"
} > $out/ab.txt 2>&1
cat $out/summary.txt | head -60; cat $out/ab.txt
