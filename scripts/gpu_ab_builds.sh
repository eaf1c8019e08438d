#!/usr/bin/env bash
# A/B on the GPU machine in one call: flag sets of the working tree's build, and optionally other
# builds that differ from it in a few files (a kernel change that has no runtime switch). Builds
# each (sm_90, no UI), runs the model-level parity tests (gpu_parity_tests) on the working tree,
# then gemma-bench on every base and every flag set in turn, round after round, so that clock and
# thermal drift hit all alike. scripts/gpu_ab.sh is this without bases.
#   GEMMA_AB_BASE    space-separated directories, each holding one base's versions of the changed
#                    files at their paths inside the repository (e.g. made with `git show REV:PATH`);
#                    a run is labelled with its directory's name (default: none)
#   GEMMA_AB_VARIANTS  ';'-separated gemma-bench flag sets run on the working tree's build (default:
#                    one empty set, the defaults), each a run of its own in every round; labelled
#                    with its flags ("defaults" for the empty set), after "new" where there are bases.
#                    A set's NAME=VALUE words are put in that run's environment instead of its flags
#                    (a temporary switch read with getenv, e.g. "GEMMA_X=1 --no-pdl")
#   GEMMA_AB_ARGS    flags for every run (default: --skip prefill,kernels --allocations 4096 --depths 32768)
#   GEMMA_AB_ROUNDS  rounds (default 2; 0 = build and parity only)
#   GEMMA_AB_PARITY  0 skips the parity tests (a second call on a warm machine after a first one)
#   GEMMA_AB_PREBUILT  a carried directory from scripts/prebuild_ab.sh (run on the CPU machine
#                    first; the call names it in `carry`): every tree whose sources hash as its
#                    binary's did runs that binary instead of building (the working tree's only with
#                    GEMMA_AB_PARITY=0; a binary that does not start here is built too); ab.txt
#                    says which did. The same for the harnesses of GEMMA_AB_HARNESSES, where the
#                    prebuild named them. GEMMA_AB_SASS and GEMMA_AB_PHASES need the trees built here.
#   GEMMA_AB_PRESET  the gemma-bench preset (default 12b)
#   GEMMA_PARITY_REPEAT  runs of the parity tests (scripts/gpu_parity.sh; default 1)
#   GEMMA_AB_HARNESSES  kernel harnesses (tests/kernels targets, e.g. "test_attention") built and run
#                    on the working tree after the parity tests (GEMMA_HARNESS_QUICK=1 for small
#                    fixtures, as the harnesses read it); their SUMMARY and FAIL lines go to ab.txt,
#                    a failing harness's log stays in $OUT, and a failure ends the call before the A/B
#   GEMMA_AB_PHASES  ';'-separated attention phase cases (scripts/gpu_phases.sh's GPU_PHASE_CASES,
#                    e.g. "12b sliding pos 150 f32") timed with the phase clock on every base and on
#                    the working tree, each from its own tree, before the A/B; into ab.txt (a base
#                    then needs its own version of a changed harness source too, e.g. a kernel's
#                    test file that uses a new parameter)
#   GEMMA_AB_SASS    a regex over mangled kernel names (e.g. "fp4MatvecMmaKernel.*XFormE2E.*Lb1EE"):
#                    those kernels' compute-loop hot path in every tree, from its build's object of
#                    GEMMA_AB_SASS_SOURCE (default Fp4Matvec.cu), by scripts/sass_item_path.py
#                    (instructions per 1 KB weight item, the refill's places), into ab.txt
#   GEMMA_AB_STEP_TIMELINE  1: every run also writes its traced step's launch sequence
#                    (--step-timeline; with --trace-point depth in GEMMA_AB_ARGS, the deepest depth
#                    point's), and after the rounds scripts/compare_step_timelines.py compares the
#                    trees per kernel and per position (duration and marginal: end − previous end),
#                    the first tree as reference, into ab.txt (the CSVs into $OUT/timelines;
#                    GEMMA_AB_STEP_TOP: how many moved positions it lists, default 10;
#                    GEMMA_AB_STEP_EACH: a kernel-name regex whose every position it lists, e.g.
#                    'MmaKernel<true' for each layer's GeGLU; GEMMA_AB_STEP_FOLD: a regex whose matches
#                    in kernel names are ignored, e.g. '__half|float' to match one kernel over cache types)
# Output: $OUT/ab.txt: the parity summary and per-model figures, the harnesses' summaries, the
# SASS hot paths and the phases where asked, then per run the bench markdown; lines "--- at N s:
# ..." say when each stage ended (seconds since the script started: what the builds cost).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-/tmp/gemma-out}
mkdir -p "$out"
source scripts/lib/build_engine.sh
source scripts/lib/ab_trees.sh
readBases || exit 1
# A base's tree: the working tree with the base's files laid over it (layBaseTree).
baseBuild() { echo "/tmp/gemma-ab-$(basename "$1")-build"; }
baseSource() { echo "/tmp/gemma-ab-$(basename "$1")-src"; }
# Each tree's gemma-bench, by its label ("new" for the working tree, else the base's name).
declare -A bench
bench[new]=/tmp/gemma-build/app/cli/gemma-bench
for b in "${bases[@]}"; do bench[$(basename "$b")]="$(baseBuild "$b")/app/cli/gemma-bench"; done
# GEMMA_AB_PREBUILT (a carried directory from scripts/prebuild_ab.sh): a tree whose binary in it
# was built from the same sources (abTreeHash) runs that binary instead of building here.
# usePrebuilt LABEL SOURCE: status 0 and bench[LABEL] set when the binary fits SOURCE.
usePrebuilt() {
  local dir=${GEMMA_AB_PREBUILT:-} label=$1
  [ -n "$dir" ] || return 1
  if [ ! -f "$dir/$label/gemma-bench.xz" ] || ! command -v xz > /dev/null; then
    echo "prebuilt [$label]: none usable in $dir, built here" >> "$out/prebuilt.txt"
    return 1
  fi
  if [ "$(cat "$dir/$label/tree.hash" 2> /dev/null)" != "$(abTreeHash "$2")" ]; then
    echo "prebuilt [$label]: built from other sources than this tree's, built here" >> "$out/prebuilt.txt"
    return 1
  fi
  local binary=/tmp/gemma-prebuilt-$label/gemma-bench started
  unpackBinary "$dir/$label/gemma-bench.xz" "$binary" || return 1
  # Built on another machine: one that cannot start here (a library missing) is built instead of
  # failing every run of the rounds.
  if ! started=$("$binary" --version 2>&1); then
    echo "prebuilt [$label]: the carried binary does not start here ($(head -1 <<< "$started")), built here" >> "$out/prebuilt.txt"
    return 1
  fi
  bench[$label]=$binary
  echo "prebuilt [$label]: the carried binary (its sources' hash matches)" >> "$out/prebuilt.txt"
}
buildBase() { build_engine "$(baseSource "$1")" "$(baseBuild "$1")" "$out/build-$(basename "$1").log" gemma-bench; }
# The harnesses (tests/kernels): carried from scripts/prebuild_ab.sh when every one named was
# built from the same sources as this tree's (one hash for all), else built here alongside the
# engine: they run after the parity tests, which need the working tree's engine only (call 1 of
# version 52 spent 96 s building them after parity).
harnessDir=/tmp/gemma-kernels-build
harnessPid=
usePrebuiltHarnesses() {
  local dir=${GEMMA_AB_PREBUILT:-}/harnesses h
  [ -n "${GEMMA_AB_PREBUILT:-}" ] || return 1
  if [ "$(cat "$dir/tree.hash" 2> /dev/null)" != "$(abTreeHash "$root" "${abHarnessPaths[@]}")" ]; then
    echo "prebuilt harnesses: none built from this tree's sources in $dir, built here" >> "$out/prebuilt.txt"
    return 1
  fi
  for h in ${GEMMA_AB_HARNESSES}; do
    [ -f "$dir/$h.xz" ] || { echo "prebuilt harnesses: $h not among them, built here" >> "$out/prebuilt.txt"; return 1; }
  done
  for h in ${GEMMA_AB_HARNESSES}; do
    unpackBinary "$dir/$h.xz" "/tmp/gemma-prebuilt-harnesses/$h" || return 1
    # Built on another machine (a harness has no harmless way to start it): a library it needs
    # and this machine lacks means building it here.
    if ldd "/tmp/gemma-prebuilt-harnesses/$h" 2>&1 | grep -q "not found"; then
      echo "prebuilt harnesses: $h needs a library this machine lacks, built here" >> "$out/prebuilt.txt"
      return 1
    fi
  done
  harnessDir=/tmp/gemma-prebuilt-harnesses
  echo "prebuilt harnesses: the carried ${GEMMA_AB_HARNESSES} (their sources' hash matches)" >> "$out/prebuilt.txt"
}
: > "$out/prebuilt.txt"
buildHarnesses=0
[ -n "${GEMMA_AB_HARNESSES:-}" ] && ! usePrebuiltHarnesses && buildHarnesses=1
# The trees build at once, each with its share of the CPUs: one tree's build ends on a few long
# nvcc compiles (AttentionDecode.cu, AttentionPrefill.cu) that leave most cores idle, so built
# one after another three trees took 184 s of device time (version 52) for about one tree's
# critical path of work in parallel. A share, not every core each: nvcc's memory per job.
trees=$((1 + ${#bases[@]} + buildHarnesses))
export BUILD_JOBS=${BUILD_JOBS:-$(( $(nproc) / trees > 4 ? $(nproc) / trees + 2 : 6 ))}
if ((buildHarnesses)); then
  source scripts/lib/build_harnesses.sh
  HARNESS_JOBS=$BUILD_JOBS build_harnesses "$harnessDir" "$out/harness-build.log" ${GEMMA_AB_HARNESSES} \
    > "$out/harness-build.tail" 2>&1 &
  harnessPid=$!
fi
# The working tree: the parity tests need its build; without them a prebuilt binary may do.
buildPids=()
buildLogs=()
if ! { [ "${GEMMA_AB_PARITY:-1}" = 0 ] && usePrebuilt new "$root"; }; then
  build_engine "$root" /tmp/gemma-build "$out/build-new.log" gemma-bench gpu_parity_tests &
  buildPids+=($!)
  buildLogs+=("$out/build-new.log")
fi
for b in "${bases[@]}"; do
  # Laid out and matched here (usePrebuilt sets bench[] in this shell), built in the background.
  layBaseTree "$root" "$b" "$(baseSource "$b")" "${bases[@]}"
  usePrebuilt "$(basename "$b")" "$(baseSource "$b")" && continue
  buildBase "$b" &
  buildPids+=($!)
  buildLogs+=("$out/build-$(basename "$b").log")
done
buildFailed=0
for i in "${!buildPids[@]}"; do
  if ! wait "${buildPids[$i]}"; then
    echo "build failed: ${buildLogs[$i]}"
    tail -40 "${buildLogs[$i]}"
    buildFailed=1
  fi
done
((buildFailed)) && { [ -n "$harnessPid" ] && kill "$harnessPid" 2> /dev/null; exit 1; }
rm -f "${buildLogs[@]}"  # none when every tree was prebuilt
: > "$out/ab.txt"
# Where the call's time goes (a fresh machine builds every tree from nothing): seconds since start.
stamp() { echo "--- at ${SECONDS} s: $1" >> "$out/ab.txt"; }
stamp "engine builds done (working tree and ${#bases[@]} base(s))"
cat "$out/prebuilt.txt" >> "$out/ab.txt" && rm -f "$out/prebuilt.txt"
if [ "${GEMMA_AB_PARITY:-1}" != 0 ]; then
  bash scripts/gpu_parity.sh /tmp/gemma-build "$out" | tee -a "$out/ab.txt"  # after the first stamp
  grep -E '^\[ (gpu|flip) ' "$out/gpu_parity.log" >> "$out/ab.txt"
  grep -q "FAILED" "$out/gpu_parity.log" || rm -f "$out/gpu_parity.log"
  stamp "parity done"
fi
if [ -n "${GEMMA_AB_HARNESSES:-}" ]; then
  if [ -n "$harnessPid" ]; then
    wait "$harnessPid"
    harnessBuilt=$?
    tee -a "$out/ab.txt" < "$out/harness-build.tail"
    rm -f "$out/harness-build.tail"
    [ "$harnessBuilt" = 0 ] || exit 1
    rm -f "$out/harness-build.log"
    stamp "harnesses built"
  fi
  for h in ${GEMMA_AB_HARNESSES}; do
    timeout 400 "$harnessDir/$h" > "$out/$h.log" 2>&1
    rc=$?
    { echo "harness $h: exit $rc"; grep -E "^SUMMARY|FAIL" "$out/$h.log" | head -40; } | tee -a "$out/ab.txt"
    [ $rc = 0 ] || exit 1
    rm -f "$out/$h.log"
  done
  stamp "harnesses run"
fi
if [ -n "${GEMMA_AB_SASS:-}" ]; then
  sassPath() {  # sassPath BUILD LABEL
    local object
    object=$(find "$1" -name "${GEMMA_AB_SASS_SOURCE:-Fp4Matvec.cu}.o" -path '*gemma_kernels_cuda*' | head -1)
    echo "=== SASS [$2] ${object:-(no object of ${GEMMA_AB_SASS_SOURCE:-Fp4Matvec.cu} found)}" >> "$out/ab.txt"
    [ -n "$object" ] || return 0
    cuobjdump -sass "$object" > "$out/sass.tmp" 2>&1 &&
      python3 scripts/sass_item_path.py "$out/sass.tmp" --function "$GEMMA_AB_SASS" >> "$out/ab.txt" 2>&1
    rm -f "$out/sass.tmp"
  }
  for b in "${bases[@]}"; do sassPath "$(baseBuild "$b")" "$(basename "$b")"; done
  sassPath /tmp/gemma-build new
fi
if [ -n "${GEMMA_AB_PHASES:-}" ]; then
  # Each tree times its own kernels: a base's from the tree buildBase laid out.
  phases() {  # phases SOURCE LABEL
    local phaseOut="$out/phases-$2"
    # Timed: never in quick mode, whatever GEMMA_HARNESS_QUICK says for GEMMA_AB_HARNESSES.
    env -u GEMMA_HARNESS_QUICK OUT="$phaseOut" GPU_KERNELS_BUILD="/tmp/gemma-phases-$2-build" GPU_PHASE_SHAPES="" \
      GPU_PHASE_CASES="$GEMMA_AB_PHASES" bash "$1/scripts/gpu_phases.sh" > /dev/null 2>&1
    {
      echo "=== phases [$2]"
      cat "$phaseOut/phases.txt" 2>/dev/null
      # gpu_phases.sh keeps its build log only when the build failed.
      [ -f "$phaseOut/build.log" ] && { echo "(the phase clock's build failed:)"; tail -20 "$phaseOut/build.log"; }
    } >> "$out/ab.txt"
    rm -rf "$phaseOut"
  }
  for b in "${bases[@]}"; do phases "$(baseSource "$b")" "$(basename "$b")"; done
  phases "$root" new
  stamp "phases built and run"
fi
markdown=$(mktemp)
stepDir=$(mktemp -d)
stepRuns=()
IFS=';' read -r -a variants <<< "${GEMMA_AB_VARIANTS:-}"
[ ${#variants[@]} -eq 0 ] && variants=("")
runBench() {  # runBench BENCH LABEL [NAME=VALUE...] [FLAGS...]
  local bench=$1 label=$2 word
  local environment=() flags=()
  shift 2
  for word in "$@"; do
    if [[ $word =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then environment+=("$word"); else flags+=("$word"); fi
  done
  : > "$markdown"
  if [ "${GEMMA_AB_STEP_TIMELINE:-0}" = 1 ]; then
    local csv="$stepDir/$(echo "$label" | tr -c 'A-Za-z0-9\n-' '_')-r$round.csv"
    flags+=(--step-timeline "$csv")
    stepRuns+=("$label=$csv")
  fi
  env "${environment[@]}" "$bench" --preset "${GEMMA_AB_PRESET:-12b}" ${GEMMA_AB_ARGS:---skip prefill,kernels --allocations 4096 --depths 32768} \
    "${flags[@]}" --markdown "$markdown" > /dev/null 2>&1
  echo "=== round $round: [$label] exit $?" >> "$out/ab.txt"
  cat "$markdown" >> "$out/ab.txt"
}
for ((round = 0; round < ${GEMMA_AB_ROUNDS:-2}; ++round)); do
  for b in "${bases[@]}"; do runBench "${bench[$(basename "$b")]}" "$(basename "$b")"; done
  for v in "${variants[@]}"; do
    label=${v:-defaults}
    [ ${#bases[@]} -gt 0 ] && label="new${v:+ $v}"
    runBench "${bench[new]}" "$label" $v
  done
done
[ "${GEMMA_AB_ROUNDS:-2}" -gt 0 ] && stamp "rounds done"
if [ ${#stepRuns[@]} -gt 0 ]; then
  { echo "=== step timelines (scripts/compare_step_timelines.py)"
    python3 scripts/compare_step_timelines.py --top "${GEMMA_AB_STEP_TOP:-10}" ${GEMMA_AB_STEP_EACH:+--each "$GEMMA_AB_STEP_EACH"} \
      ${GEMMA_AB_STEP_FOLD:+--fold "$GEMMA_AB_STEP_FOLD"} \
      "${stepRuns[@]}" 2>&1; } >> "$out/ab.txt"
  mkdir -p "$out/timelines" && cp "$stepDir"/*.csv "$out/timelines/"
fi
grep -E "^===|^\| ${GEMMA_AB_PRESET:-12b} " "$out/ab.txt" || true  # nothing to list with GEMMA_AB_ROUNDS=0
