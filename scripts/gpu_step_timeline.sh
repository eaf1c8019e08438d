#!/usr/bin/env bash
# The decode step as a sequence of launches, on one build, once per gemma-bench flag set:
# builds gemma-bench (sm_90, no UI), runs `gemma-bench --preset P --allocations 4096 --skip
# depth,prefill,kernels --step-timeline` per set, then compares the sets around every launch
# whose kernel name matches a pattern (default: the full layers' tensor-core pieces), position
# by position: mean duration (end − start) and time charged by the buckets' rule, in µs.
#   GEMMA_TIMELINE_VARIANTS  ';'-separated flag sets (default ";--thread-copies"; empty = defaults)
#   GEMMA_TIMELINE_PATTERN   the anchor kernel's name, a Python regex (default attentionPrefillKernel)
#   GEMMA_TIMELINE_SPAN      positions shown from each anchor on (default 4)
#   GEMMA_TIMELINE_PRESET    the preset (default 12b)
# Output: $OUT/timeline-N.csv per set, $OUT/timeline.txt (the comparison and each run's table row).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gemma-out}
mkdir -p "$out"
build=/tmp/gemma-build
source scripts/lib/build_engine.sh
: > "$out/build.log"
build_engine . "$build" "$out/build.log" gemma-bench || { tail -30 "$out/build.log"; exit 1; }
rm -f "$out/build.log"
IFS=';' read -r -a variants <<< "${GEMMA_TIMELINE_VARIANTS-;--thread-copies}"
[[ ${#variants[@]} -eq 0 ]] && variants=("")
files=()
for i in "${!variants[@]}"; do
  # shellcheck disable=SC2086
  timeout 240 "$build/app/cli/gemma-bench" --preset "${GEMMA_TIMELINE_PRESET:-12b}" --allocations 4096 --skip depth,prefill,kernels \
    --step-timeline "$out/timeline-$i.csv" ${variants[$i]} > "$out/bench-$i.log" 2>&1
  echo "[${variants[$i]:-defaults}] exit $? $(grep -E '^\| [a-z0-9]+ \| 4096 ' "$out/bench-$i.log")" | tee -a "$out/timeline.txt"
  files+=("$out/timeline-$i.csv")
done
python3 - "${GEMMA_TIMELINE_PATTERN:-attentionPrefillKernel}" "${GEMMA_TIMELINE_SPAN:-4}" "${GEMMA_TIMELINE_VARIANTS-;--thread-copies}" "${files[@]}" <<'PY' | tee -a "$out/timeline.txt"
import csv, re, sys
pattern, span, labels, paths = re.compile(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(';'), sys.argv[4:]
runs = []
for path in paths:
    try:
        with open(path) as f:
            runs.append([r for r in csv.DictReader(f)])
    except OSError:
        runs.append([])
for label, rows in zip(labels, runs):
    if not rows:
        print(f"[{label or 'defaults'}] no timeline"); continue
    anchors = [i for i, r in enumerate(rows) if pattern.search(r['kernel'])]
    last = rows[-1]
    print(f"[{label or 'defaults'}] {len(rows)} launches, step span {float(last['end_us']):.1f} us, "
          f"charged {sum(float(r['charged_us']) for r in rows):.1f} us; {len(anchors)} anchors")
    for k in range(span):
        picked = [rows[i + k] for i in anchors if i + k < len(rows)]
        if not picked: continue
        names = sorted({r['kernel'] for r in picked})
        dur = sum(float(r['end_us']) - float(r['start_us']) for r in picked) / len(picked)
        charged = sum(float(r['charged_us']) for r in picked) / len(picked)
        print(f"  anchor+{k}: duration {dur:7.2f} us, charged {charged:7.2f} us  ({'; '.join(names)})")
    if anchors:
        window = sum(float(rows[min(i + span - 1, len(rows) - 1)]['end_us']) - float(rows[i]['start_us']) for i in anchors) / len(anchors)
        print(f"  anchor start to anchor+{span - 1} end: {window:.2f} us (mean)")
PY
