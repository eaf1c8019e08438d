#!/usr/bin/env bash
# Builds gemma-bench on this (CPU) machine for the working tree and for each A/B base, and packs
# each binary into prebuilt/LABEL/: gemma-bench.xz (stripped, ≈ 1.5 MB) and tree.hash (abTreeHash
# of the sources it was built from). A device call that names prebuilt in `carry` and sets
# GEMMA_AB_PREBUILT=prebuilt then runs the carried binary of every tree whose sources hash the
# same there, instead of building it on device time (60–75 s a tree on a fresh machine;
# docs/PERFORMANCE.md version 52). The parity tests still build on the machine (GEMMA_AB_PARITY=0
# lets the working tree's binary be used), and so do trees whose hash differs.
#   GEMMA_AB_BASE  the same base directories scripts/gpu_ab_builds.sh takes (labels: their names;
#                  the working tree's: new)
#   GEMMA_AB_HARNESSES  kernel harnesses (tests/kernels targets, e.g. "test_attention") built from
#                  the working tree too, packed as prebuilt/harnesses/NAME.xz with the hash of
#                  their sources (cmake/, kernels/, tests/kernels/): a call with the same
#                  GEMMA_AB_HARNESSES runs them instead of building them (≈ 96 s of device time
#                  for test_attention alone, version 52)
# Same toolchain as the GPU machine's (nvcc 13.0, sm_90, Release, no UI); the host compiler differs
# (g++ 12 here, 13 there), alike for every tree of one A/B. Build directories stay in
# /tmp/gemma-prebuild/CHECKOUT/ (CHECKOUT: a hash of this checkout's path, as a CMake build
# belongs to one source directory), so a second run rebuilds only what changed. Log: build.log there.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
source scripts/lib/build_engine.sh
source scripts/lib/ab_trees.sh
command -v xz > /dev/null || { echo "prebuild_ab.sh: xz is needed (apt-get install xz-utils)"; exit 1; }
readBases || exit 1
work=/tmp/gemma-prebuild/$(echo "$root" | sha256sum | cut -c1-8)
mkdir -p "$work"
log=$work/build.log
: > "$log"
# prebuildTree LABEL SOURCE: builds SOURCE's gemma-bench and packs it as prebuilt/LABEL.
prebuildTree() {
  local label=$1 source=$2 build="$work/$1-build" dest="$root/prebuilt/$1"
  echo "building [$label] …"
  build_engine "$source" "$build" "$log" gemma-bench || { tail -30 "$log"; echo "prebuild_ab.sh: [$label] failed to build"; return 1; }
  mkdir -p "$dest"
  packBinary "$build/app/cli/gemma-bench" "$dest/gemma-bench" || return 1
  abTreeHash "$source" > "$dest/tree.hash"
  echo "prebuilt/$label: $(du -h "$dest/gemma-bench.xz" | cut -f1), sources $(cut -c1-12 "$dest/tree.hash")"
}
rm -rf "$root/prebuilt"
prebuildTree new "$root" || exit 1
if [ -n "${GEMMA_AB_HARNESSES:-}" ]; then
  source scripts/lib/build_harnesses.sh
  echo "building the harnesses ${GEMMA_AB_HARNESSES} …"
  build_harnesses "$work/harness-build" "$work/harness-build.log" ${GEMMA_AB_HARNESSES} || { echo "prebuild_ab.sh: the harnesses failed to build"; exit 1; }
  mkdir -p "$root/prebuilt/harnesses"
  for h in ${GEMMA_AB_HARNESSES}; do
    packBinary "$work/harness-build/$h" "$root/prebuilt/harnesses/$h" || exit 1
  done
  abTreeHash "$root" "${abHarnessPaths[@]}" > "$root/prebuilt/harnesses/tree.hash"
  echo "prebuilt/harnesses: ${GEMMA_AB_HARNESSES}, sources $(cut -c1-12 "$root/prebuilt/harnesses/tree.hash")"
fi
for b in "${bases[@]}"; do
  label=$(basename "$b")
  layBaseTree "$root" "$b" "$work/$label-src" "${bases[@]}"
  prebuildTree "$label" "$work/$label-src" || exit 1
done
echo "carry [\"prebuilt\"] and set GEMMA_AB_PREBUILT=prebuilt (with GEMMA_AB_PARITY=0 for the working tree's binary)"
