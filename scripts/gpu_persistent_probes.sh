#!/usr/bin/env bash
# The persistent-design probes alone on an idle GPU (docs/PERFORMANCE.md version 25 step 4 and
# lever 1's gates A and B): measure_weight_stream (the weight stream across op boundaries) and
# measure_persistent_layer (the 12b's decode matvecs in one persistent kernel against their
# launches, checked against the engine's kernel). Builds them in the harnesses' shared build
# directory. gpu_verify.sh runs measure_weight_stream too, but beside the engine's checks, which
# spoils its numbers.
# Output: $OUT/weight_stream.txt and $OUT/persistent_layer.txt.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-/tmp/persistent-probes-out}
BUILD=${GPU_KERNELS_BUILD:-/tmp/gemma-kernels-build}
mkdir -p "$OUT"
source "$ROOT/scripts/lib/build_harnesses.sh"
build_harnesses "$BUILD" "$OUT/build.log" measure_weight_stream measure_persistent_layer || exit 1
rm -f "$OUT/build.log"
timeout 300 "$BUILD/measure_weight_stream" | tee "$OUT/weight_stream.txt"
echo "exit $?"
timeout 200 "$BUILD/measure_persistent_layer" | tee "$OUT/persistent_layer.txt"
echo "exit $?"
