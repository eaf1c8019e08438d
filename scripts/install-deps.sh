#!/usr/bin/env bash
# Installs what Gemma Desk needs to build and test on Debian 12 (or Ubuntu 24.04).
# Idempotent: packages already present are skipped by apt. The CUDA toolkit is not installed
# here: it is optional, and picked up from /usr/local/cuda when present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libsentencepiece-dev nlohmann-json3-dev libspdlog-dev libfmt-dev libgtest-dev
  qt6-base-dev qt6-charts-dev libqt6opengl6-dev libqt6sql6-sqlite libgl-dev
  xvfb xauth
)
if [[ "${GEMMA_PACKAGING:-0}" == 1 ]]; then
  packages+=(dpkg-dev file lintian fakeroot desktop-file-utils appstream strace)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) != 0 ]]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
