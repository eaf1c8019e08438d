#!/usr/bin/env bash
# The persistent weight-stream probe alone on an idle GPU (tests/kernels/measure_weight_stream.cu,
# docs/PERFORMANCE.md version 25 step 4): builds it in the harnesses' shared build directory and
# runs it. gpu_verify.sh also runs it, but beside the engine's checks, which spoils its numbers.
# Output: $OUT/weight_stream.txt.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/weight-stream-out}
BUILD=${GPU_KERNELS_BUILD:-/tmp/gemma-kernels-build}
mkdir -p "$OUT"
source "$ROOT/scripts/lib/build_harnesses.sh"
build_harnesses "$BUILD" "$OUT/build.log" measure_weight_stream || exit 1
rm -f "$OUT/build.log"
timeout 300 "$BUILD/measure_weight_stream" | tee "$OUT/weight_stream.txt"
