# Sourced by the A/B scripts: scripts/gpu_ab_builds.sh on the GPU machine and
# scripts/prebuild_ab.sh on the CPU machine, so that both lay out and recognise the same trees.
#
# abTreeHash DIR [PATH...] prints one hash of the sources under the PATHs of DIR (default: those
# gemma-bench is built from: the top CMakeLists.txt, cmake/, kernels/, engine/, app/), by
# relative path and content: a binary built from DIR matches any copy of it, wherever it lies and
# whatever its files' times.
abTreeHash() {
  local dir=$1
  shift
  (($#)) || set -- CMakeLists.txt cmake kernels engine app
  (cd "$dir" && find "$@" -type f -print0 2> /dev/null | LC_ALL=C sort -z |
    xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}
# The sources the standalone kernel harnesses (tests/kernels) are built from.
abHarnessPaths=(cmake kernels tests/kernels)
# packBinary BINARY DEST: DEST.xz, BINARY stripped and compressed (gemma-bench ≈ 1.5 MB), for the
# carried prebuilt/ directory; unpackBinary DEST.xz EXE: the executable back on the GPU machine.
packBinary() { strip -o "$2" "$1" && xz -6 -f "$2"; }
unpackBinary() { mkdir -p "$(dirname "$2")" && xz -dc "$1" > "$2" && chmod +x "$2"; }
# layBaseTree ROOT BASE SRC [LEFT_OUT...]: SRC becomes ROOT's tree with BASE's files laid over it
# (BASE holds a few files at their paths inside the repository). Build outputs, prebuilt/ and the
# LEFT_OUT directories (the bases themselves) are not copied. Times kept (tar and cp -p), so that
# a second build of the same tree on a warm machine rebuilds nothing.
layBaseTree() {
  local root=$1 base=$2 src=$3
  shift 3
  local excludes=(--exclude=./build --exclude=./prebuilt) b
  for b in "$@"; do excludes+=(--exclude="./$(realpath --relative-to="$root" "$b")"); done
  rm -rf "$src" && mkdir -p "$src"
  tar -C "$root" "${excludes[@]}" -cf - . | tar -C "$src" -xf -
  (cd "$base" && find . -type f) | while read -r f; do mkdir -p "$(dirname "$src/$f")" && cp -p "$base/$f" "$src/$f"; done
}
# readBases: the array `bases` from GEMMA_AB_BASE (directories, as absolute paths); status 1 with a
# message for one that is not a directory or is named new (the working tree's label).
readBases() {
  bases=()
  local b
  for b in ${GEMMA_AB_BASE:-}; do
    [ -d "$b" ] || { echo "GEMMA_AB_BASE: $b is not a directory"; return 1; }
    [ "$(basename "$b")" != new ] || { echo "GEMMA_AB_BASE: a base may not be named new (the working tree's label)"; return 1; }
    bases+=("$(cd "$b" && pwd)")
  done
}
