#!/usr/bin/env bash
# Builds everything and runs every test (the README's test command; .ci/run runs it too).
#   1. the full build (CUDA kernels too when a toolkit exists; the Qt app when Qt exists) and CTest;
#      GPU tests report as skipped where no GPU is present;
#   2. the engine tests again under AddressSanitizer and UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
# The installer tests (CPack DEB/TGZ, lintian) run too, so the packaging tools are installed.
GEMMA_PACKAGING=${GEMMA_PACKAGING:-1} bash scripts/install-deps.sh

jobs=$(nproc)
build=${GEMMA_BUILD_DIR:-$root/build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"

export QT_QPA_PLATFORM=offscreen
(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 900)

if [[ "${GEMMA_SKIP_SANITIZERS:-0}" != 1 ]]; then
  sanitized=${build}-sanitize
  cmake -S . -B "$sanitized" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGEMMA_SANITIZE=ON \
        -DGEMMA_ENABLE_CUDA=OFF -DGEMMA_BUILD_UI=OFF
  cmake --build "$sanitized" -j "$jobs" --target engine_tests
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$sanitized/tests/engine_tests" --gtest_brief=1
  echo "sanitizers: engine tests clean under ASan + UBSan"
fi
