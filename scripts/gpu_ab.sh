#!/usr/bin/env bash
# A/B of engine options on the GPU machine in one call: scripts/gpu_ab_builds.sh without base
# builds (build, gpu_parity_tests on the defaults, then gemma-bench once per flag set, alternating
# so that clock and thermal drift hit every set alike), with this script's defaults:
#   GEMMA_AB_VARIANTS  ';'-separated gemma-bench flag sets (default: ";--fp16-matvec", i.e. the
#                      defaults against x as fp16 in the matvecs); an empty set = the defaults;
#                      NAME=VALUE words go to that run's environment (a getenv switch), as there
#   GEMMA_AB_ARGS      flags for every run (default: --skip depth,prefill --allocations 4096)
#   GEMMA_AB_ROUNDS, GEMMA_AB_PRESET, GEMMA_PARITY_REPEAT: as there.
# Output: $OUT/ab.txt: the parity summary and per-model figures, then per run the bench markdown.
GEMMA_AB_VARIANTS="${GEMMA_AB_VARIANTS:-;--fp16-matvec}" GEMMA_AB_ARGS="${GEMMA_AB_ARGS:---skip depth,prefill --allocations 4096}" \
  GEMMA_AB_BASE= exec bash "$(dirname "$0")/gpu_ab_builds.sh"
