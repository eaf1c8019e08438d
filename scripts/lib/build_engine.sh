# Sourced by the GPU scripts: build_engine SOURCE BUILD LOG [TARGET...] configures the project at
# SOURCE in BUILD the way every GPU script builds it (Release, Ninja, sm_90 only, no UI;
# /tmp/gemma-build is the directory the scripts share, so a warm machine reuses it) and builds
# the targets (none: all of them) with BUILD_JOBS jobs (default: the CPU count). Output appended
# to LOG; status 1 on failure (the caller shows the log's tail).
build_engine() {
  local source=$1 build=$2 log=$3
  shift 3
  local targets=()
  (($#)) && targets=(--target "$@")
  cmake -S "$source" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEMMA_BUILD_UI=OFF -DCMAKE_CUDA_ARCHITECTURES=90-real \
    >> "$log" 2>&1 && cmake --build "$build" -j "${BUILD_JOBS:-$(nproc)}" "${targets[@]}" >> "$log" 2>&1
}
