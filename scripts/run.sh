#!/usr/bin/env bash
# Builds everything and runs Gemma Desk's main job on the embedded default model:
#   - with a display (and Qt found): the desktop app;
#   - without one (a server, CI, a container): one chat turn with gemma-cli, streamed to stdout.
# Extra arguments go to gemma-cli (e.g. --prompt "Define harbor." --device cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${GEMMA_BUILD_DIR:-$(pwd)/build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"

if [[ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" && -x "$build/app/gemma-desk" && $# -eq 0 ]]; then
  exec "$build/app/gemma-desk"
fi
if [[ $# -eq 0 ]]; then
  set -- --prompt "What does the word harbor mean?"
fi
exec "$build/app/cli/gemma-cli" "$@"
