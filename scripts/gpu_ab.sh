#!/usr/bin/env bash
# A/B of engine options on the GPU machine in one call: builds the engine and tools (sm_90, no
# UI), runs the model-level parity tests (gpu_parity_tests) on the default options, then
# gemma-bench once per variant, alternating A and B so that clock and thermal drift hit both.
#   GEMMA_AB_VARIANTS  ';'-separated gemma-bench flag sets (default: ";--fp16-matvec", i.e. the
#                      defaults against x as fp16 in the matvecs); an empty set = the defaults
#   GEMMA_AB_ARGS      flags for every run (default: --skip depth,prefill --allocations 4096)
#   GEMMA_AB_ROUNDS    rounds over the variants (default 2; 0 = parity only)
#   GEMMA_PARITY_REPEAT  runs of the parity tests (scripts/gpu_parity.sh; default 1)
# Output: $OUT/ab.txt: the parity summary and per-model figures, then per run the bench markdown.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gemma-out}
mkdir -p "$out"
build=/tmp/gemma-build
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEMMA_BUILD_UI=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real \
  > "$out/build.log" 2>&1 && cmake --build "$build" -j 16 --target gemma-bench gpu_parity_tests >> "$out/build.log" 2>&1 \
  || { tail -40 "$out/build.log"; exit 1; }
rm -f "$out/build.log"
bash scripts/gpu_parity.sh "$build" "$out" | tee "$out/ab.txt"
grep -E '^\[ (gpu|flip) ' "$out/gpu_parity.log" >> "$out/ab.txt"  # the per-model figures
grep -q "FAILED" "$out/gpu_parity.log" || rm -f "$out/gpu_parity.log"
bash scripts/bench_ab.sh "$build/app/cli/gemma-bench" "${GEMMA_AB_ROUNDS:-2}" "${GEMMA_AB_VARIANTS:-;--fp16-matvec}" \
  --preset "${GEMMA_AB_PRESET:-12b}" ${GEMMA_AB_ARGS:---skip depth,prefill --allocations 4096} >> "$out/ab.txt"
cat "$out/ab.txt"
