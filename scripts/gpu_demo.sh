#!/usr/bin/env bash
# One command on the GPU machine (docs/DEMO_MODEL.md, docs/QUALITY.md): builds gemma-quantize and
# gemma-cli (CPU only), trains the demo model on the pre-tokenized corpus in .demo/ (made here by
# tools/prepare_corpus.py), writes three packages (float32, FP4 absmax, FP4 minimum-error),
# measures their quality against transformers and asks the FP4 packages a few questions.
#
#   OUT=/some/folder bash scripts/gpu_demo.sh        (the run tool sets OUT; carry .demo)
#
# Environment: OUT (results), WORK (scratch, default /tmp/gemma-demo), CORPUS (default .demo),
# TRAIN_SECONDS (default 170), TRAIN_STEPS (fixed step count instead of a time budget),
# SEED (default 4242), WINDOWS (held-out windows of 256 tokens, default 12), SRC (the source tree
# the tools are built from, default the repository; e.g. a frozen copy carried in .demo/src).
# Results in $OUT: log.txt, training.json, quality.json, fp4-absmax.gemma, fp4-minimum-error.gemma
# (a package over 16 MiB - 64 KiB comes as NAME.gemma.part-aa, -ab, ...: cat them back together).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gemma-demo-out}
WORK=${WORK:-/tmp/gemma-demo}
CORPUS=${CORPUS:-.demo}
TRAIN_SECONDS=${TRAIN_SECONDS:-170}
TRAIN_STEPS=${TRAIN_STEPS:-0}
SEED=${SEED:-4242}
WINDOWS=${WINDOWS:-12}
SRC=${SRC:-.}
mkdir -p "$OUT" "$WORK"
LOG="$OUT/log.txt"
T0=$(date +%s)
say() { echo "[demo +$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }

say "host: $(nproc) cores; GPU: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"
for f in train.npz heldout.npz tokenizer.model corpus.json; do
    [ -f "$CORPUS/$f" ] || { say "missing $CORPUS/$f: run tools/prepare_corpus.py and carry .demo"; exit 1; }
done

# 1. build the CPU tools in the background while the GPU trains
( cmake -S "$SRC" -B build -G Ninja -DGEMMA_BUILD_UI=OFF -DGEMMA_ENABLE_CUDA=OFF -DCMAKE_BUILD_TYPE=Release &&
  cmake --build build --target gemma-quantize gemma-cli -j "$(( $(nproc) > 4 ? $(nproc) - 2 : 2 ))" ) \
    > "$WORK/build.log" 2>&1 &
BUILD_PID=$!

# 2. train
say "training (seed $SEED, ${TRAIN_STEPS} steps or ${TRAIN_SECONDS}s)"
python3 tools/train_demo.py --corpus "$CORPUS" --out "$WORK/gemma4-wordnet-demo" --seed "$SEED" \
    --steps "$TRAIN_STEPS" --time-budget "$TRAIN_SECONDS" 2>&1 | tee -a "$LOG"
TRAIN_RC=${PIPESTATUS[0]}
[ -f "$WORK/training.json" ] && cp "$WORK/training.json" "$OUT/training.json"

wait "$BUILD_PID"
BUILD_RC=$?
say "build exit $BUILD_RC"
tail -n 5 "$WORK/build.log" | tee -a "$LOG"
[ "$BUILD_RC" -eq 0 ] || { tail -n 60 "$WORK/build.log" >> "$LOG"; }
if [ "$TRAIN_RC" -ne 0 ] || [ "$BUILD_RC" -ne 0 ] || [ ! -f "$WORK/gemma4-wordnet-demo/config.json" ]; then
    say "stopping: train exit $TRAIN_RC, build exit $BUILD_RC"
    exit 1
fi

# 3. packages
Q=build/app/cli/gemma-quantize
declare -A PKG=([unquantized]="--unquantized" [fp4-absmax]="--scale-rule absmax" [fp4-minimum-error]="--scale-rule minimum-error")
quantize() {
    local start=$(date +%s.%N) rc
    # shellcheck disable=SC2086
    "$Q" "$WORK/gemma4-wordnet-demo" -o "$WORK/$1.gemma" ${PKG[$1]} --quiet
    rc=$?
    echo "gemma-quantize $1: exit $rc, $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $start}") s"
}
for name in unquantized fp4-absmax fp4-minimum-error; do
    quantize "$name" > "$WORK/quantize-$name.log" 2>&1 &
done
wait
cat "$WORK"/quantize-*.log | tee -a "$LOG"
ls -l "$WORK"/*.gemma | tee -a "$LOG"

# 4. the FP4 packages come back before the measuring, so a timeout still returns them (big ones in parts)
for name in fp4-absmax fp4-minimum-error; do
    f="$WORK/$name.gemma"
    [ -f "$f" ] || continue
    sha256sum "$f" | tee -a "$LOG"
    if [ "$(stat -c %s "$f")" -gt $((16 * 1024 * 1024 - 65536)) ]; then
        split -b 15m "$f" "$OUT/$name.gemma.part-"
    else
        cp "$f" "$OUT/$name.gemma"
    fi
done

# 5. quality + sample answers
say "measuring quality"
python3 tools/measure_quality.py --corpus "$CORPUS" --hf "$WORK/gemma4-wordnet-demo" --cli build/app/cli/gemma-cli \
    --package "unquantized=$WORK/unquantized.gemma" --package "fp4-absmax=$WORK/fp4-absmax.gemma" \
    --package "fp4-minimum-error=$WORK/fp4-minimum-error.gemma" --windows "$WINDOWS" --seq 256 \
    --timeout 240 --out "$OUT/quality.json" 2>&1 | tee -a "$LOG"
say "measure exit ${PIPESTATUS[0]}"

say "done"
