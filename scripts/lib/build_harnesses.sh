# Sourced by the GPU scripts: build_harnesses BUILD LOG [TARGET...] configures tests/kernels
# standalone in BUILD (sm_90, Release, Ninja; /tmp/gemma-kernels-build is the directory the
# scripts share, so a warm machine reuses it) and builds the targets (none: all of them), with
# HARNESS_JOBS jobs (default: the CPU count). Output into LOG; on failure its tail and
# "BUILD FAILED", and status 1. scripts/gpu_kernels.sh configures its own build (ptxas verbose).
build_harnesses() {
  local build=$1 log=$2
  shift 2
  local root targets=()
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  (($#)) && targets=(--target "$@")
  cmake -S "$root/tests/kernels" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$log" 2>&1 &&
    cmake --build "$build" -j "${HARNESS_JOBS:-$(nproc)}" "${targets[@]}" >> "$log" 2>&1 ||
    { tail -40 "$log"; echo "BUILD FAILED"; return 1; }
}
