#!/usr/bin/env bash
# End-to-end decode on the GPU from a package made by gemma-quantize (the e2b_like golden), once
# plainly and then under compute-sanitizer memcheck, initcheck and racecheck, with both prefill
# paths (the GEMM prefill through cuBLASLt and the matvec prefill). Called by scripts/gpu_check.sh;
# alone, it checks one configuration's kernel instances (e.g. "--kv-cache f16").
#   scripts/gpu_e2e_sanitize.sh BUILD OUT [gemma-cli flags...]
# BUILD must hold app/cli/gemma-cli and gemma-quantize. Prints one "== " line per run; each run's
# log stays in OUT as sanitizer-TOOL-PREFILL.log (e2e.log for the plain run).
set -uo pipefail
cd "$(dirname "$0")/.."
build=$1 out=$2
shift 2
mkdir -p "$out"
pkg=/tmp/e2e.gemma
"$build/app/cli/gemma-quantize" tests/data/goldens/e2b_like/hf -o "$pkg" --quiet
ids=$(python3 -c "import json;print(','.join(map(str,json.load(open('tests/data/goldens/e2b_like/golden_fp4.json'))['prompt_ids'])))")
"$build/app/cli/gemma-cli" --model "$pkg" --device cuda --tokens "$ids" --max-new-tokens 16 --greedy --ignore-eos --print-ids "$@" \
  > "$out/e2e.log" 2>&1
echo "== gemma-cli --device cuda${*:+ $*}: exit $? ($(tail -1 "$out/e2e.log"))"
for tool in memcheck initcheck racecheck; do
  for prefill in gemm matvec; do
    flags=("$@")
    [[ $prefill == matvec ]] && flags+=(--no-gemm-prefill)
    # racecheck cannot see the bulk copies' mbarrier completion (tests/kernels/HarnessCommon.h)
    [[ $tool == racecheck ]] && flags+=(--thread-copies)
    compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 "$build/app/cli/gemma-cli" --model "$pkg" --device cuda \
      --tokens "$ids" --max-new-tokens 4 --greedy --ignore-eos --quiet "${flags[@]}" > "$out/sanitizer-$tool-$prefill.log" 2>&1
    echo "== sanitizer $tool (e2e, $prefill prefill${*:+, $*}): exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer-$tool-$prefill.log" | tail -1)"
  done
done
