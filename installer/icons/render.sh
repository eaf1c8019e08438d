#!/usr/bin/env bash
# Renders the application icon's PNGs (committed) from the SVG (committed) at the hicolor sizes.
# Run after editing the SVG:  bash installer/icons/render.sh   (needs rsvg-convert: librsvg2-bin)
set -euo pipefail
cd "$(dirname "$0")"
id=io.github.gemmadesk.GemmaDesk
for size in 16 22 24 32 48 64 128 256 512; do
  mkdir -p "hicolor/${size}x${size}"
  rsvg-convert --width "$size" --height "$size" --format png "$id.svg" -o "hicolor/${size}x${size}/$id.png"
done
echo "rendered $(ls hicolor | wc -l) sizes of $id.png"
