#!/usr/bin/env bash
# Package acceptance checks, one step per CTest test (tests/installer/CMakeLists.txt):
#
#   package_test.sh --build DIR --work DIR --cpack CPACK --version X.Y.Z
#                   --programs a,b,c --model-packaged 0|1 --model-file PATH  STEP
#
# STEP is build | contents | lintian | cli | desk | userdata. `build` makes the packages with CPack
# and unpacks them into fresh roots under WORK; the other steps use what it left there.
# Exit status: 0 passed, 1 failed, 77 skipped (the message says what is missing; whatever could be
# checked before that was checked and passed).
set -uo pipefail

SKIP=77
build="" work="" cpack="" version="" programs="" model_packaged=0 model_file="" step=""
while (($#)); do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --cpack) cpack=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --programs) programs=$2; shift 2 ;;
    --model-packaged) model_packaged=$2; shift 2 ;;
    --model-file) model_file=$2; shift 2 ;;
    -*) echo "package_test: unknown option $1" >&2; exit 2 ;;
    *) step=$1; shift ;;
  esac
done
[[ -n $build && -n $work && -n $step ]] || { echo "package_test: missing arguments" >&2; exit 2; }
IFS=, read -r -a program_list <<<"$programs"

app_id=io.github.gemmadesk.GemmaDesk
packages=$work/packages
deb_root=$work/deb-root   # dpkg-deb -x of the DEB: files under usr/
tgz_root=$work/tgz-root   # the TGZ's top folder: bin/, share/
model_rel=share/gemma-desk/models/default.gemma
failures=0

say() { printf '%s\n' "$*"; }
pass() { printf 'ok    %s\n' "$*"; }
fail() { printf 'FAIL  %s\n' "$*"; failures=$((failures + 1)); }
skip() { printf 'SKIPPED: %s\n' "$*"; exit $SKIP; }
finish() {
  if ((failures)); then say "$step: $failures check(s) failed"; exit 1; fi
  say "$step: all checks passed"; exit 0
}
has_program() { local p; for p in "${program_list[@]}"; do [[ $p == "$1" ]] && return 0; done; return 1; }
need_packages() {
  [[ -f $work/built.ok ]] || skip "no packages: installer.build did not produce them (see its output)"
  deb=$(find "$packages" -maxdepth 1 -name '*.deb' | head -1)
}
# Runs a command with a time limit, output shown; returns its status.
run() { say "\$ ${*}" >&2; timeout 300 "$@"; }
# Runs a program from an unpacked root with a clean, throw-away home (never the real user's data).
in_root_env() {
  local home=$work/home-$step
  rm -rf "$home" && mkdir -p "$home"
  env -u GEMMA_DESK_DEFAULT_MODEL -u GEMMA_DESK_DATA_DIR HOME="$home" XDG_DATA_HOME="$home/.local/share" \
      XDG_CONFIG_HOME="$home/.config" XDG_CACHE_HOME="$home/.cache" XDG_RUNTIME_DIR="$home/runtime" "$@"
}

# ---------------------------------------------------------------------------------------------------
step_build() {
  local missing=() tool
  for tool in dpkg-deb dpkg-shlibdeps file tar objdump; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  [[ -x $cpack ]] || missing+=("cpack ($cpack)")
  ((${#missing[@]} == 0)) ||
    skip "cannot build a DEB here, missing: ${missing[*]} (install them: GEMMA_PACKAGING=1 bash scripts/install-deps.sh)"
  rm -rf "$work" && mkdir -p "$packages" "$deb_root" "$tgz_root"
  run "$cpack" --config "$build/CPackConfig.cmake" -G "DEB;TGZ" -B "$packages" || { fail "cpack"; finish; }
  rm -rf "$packages/_CPack_Packages"
  local debs=("$packages"/*.deb) tgzs=("$packages"/*.tar.gz)
  [[ ${#debs[@]} == 1 && -f ${debs[0]} ]] && pass "one DEB: ${debs[0]##*/}" || fail "expected one .deb in $packages"
  [[ ${#tgzs[@]} == 1 && -f ${tgzs[0]} ]] && pass "one TGZ: ${tgzs[0]##*/}" || fail "expected one .tar.gz in $packages"
  ((failures)) && finish
  dpkg-deb -x "${debs[0]}" "$deb_root" && pass "dpkg-deb -x into a fresh root" || fail "dpkg-deb -x"
  tar -xzf "${tgzs[0]}" -C "$tgz_root" --strip-components=1 && pass "TGZ unpacked into a fresh root" || fail "tar -x"
  say "--- dpkg-deb --info"; dpkg-deb --info "${debs[0]}"
  say "--- sizes"; ls -l "$packages"
  ((failures)) || touch "$work/built.ok"
  finish
}

# ---------------------------------------------------------------------------------------------------
step_contents() {
  need_packages
  local control; control=$(dpkg-deb --field "$deb")
  say "$control" | sed -n '/^Depends:/p;/^Recommends:/p'

  # Control fields.
  [[ $(dpkg-deb --field "$deb" Package) == gemma-desk ]] && pass "Package: gemma-desk" || fail "package name"
  [[ $(dpkg-deb --field "$deb" Version) == "$version" ]] && pass "Version: $version" || fail "version is not $version"
  local depends; depends=$(dpkg-deb --field "$deb" Depends)
  # dpkg-shlibdeps lists a package per shared library the programs need: libc6 always, libstdc++6
  # when a program links libstdc++ dynamically (toolchains that link it statically need no entry).
  local wantStdcxx=0
  for exe in "$deb_root"/usr/bin/*; do
    objdump -p "$exe" 2>/dev/null | awk '$1 == "NEEDED" {print $2}' | grep -q '^libstdc++' && wantStdcxx=1
  done
  if [[ $depends == *libc6* ]] && { ((wantStdcxx == 0)) || [[ $depends == *libstdc++6* ]]; }; then
    pass "Depends from dpkg-shlibdeps (libc6$( ((wantStdcxx)) && echo ', libstdc++6'))"
  else
    fail "Depends lacks the shlibdeps entries: '$depends'"
  fi
  if has_program gemma-desk; then
    [[ $depends == *libqt6widgets6* && $depends == *libqt6sql6-sqlite* ]] && pass "Depends: Qt 6 widgets + SQLite driver" ||
      fail "Depends lacks libqt6widgets6 / libqt6sql6-sqlite: '$depends'"
  fi
  if grep -Eiq 'cuda|nvidia|cublas' <<<"$depends"; then fail "Depends names a CUDA/NVIDIA package: '$depends'"
  else pass "no CUDA/NVIDIA package in Depends"; fi

  # No maintainer scripts, no conffiles: dpkg never runs our code and never touches home folders.
  local ctrl_files; ctrl_files=$(dpkg-deb --ctrl-tarfile "$deb" | tar -t | sed 's|^\./||' | grep -v '^$' | sort | tr '\n' ' ')
  [[ $ctrl_files == "control md5sums " ]] && pass "control archive holds only control + md5sums" ||
    fail "control archive has more than control + md5sums: $ctrl_files"

  # Every file lives under /usr; nothing under home, /etc, /var, /opt.
  local outside; outside=$(dpkg-deb --contents "$deb" | awk '{print $6}' | grep -Ev '^\./(usr/.*)?$' || true)
  [[ -z $outside ]] && pass "every path is under /usr" || fail "paths outside /usr: $outside"

  # The expected files.
  local expect=()
  local p
  for p in "${program_list[@]}"; do expect+=("usr/bin/$p" "usr/share/man/man1/$p.1.gz"); done
  expect+=(usr/share/doc/gemma-desk/copyright usr/share/doc/gemma-desk/changelog.gz)
  if has_program gemma-desk; then
    expect+=("usr/share/applications/$app_id.desktop" "usr/share/metainfo/$app_id.metainfo.xml"
             "usr/share/icons/hicolor/scalable/apps/$app_id.svg")
    local s; for s in 16 22 24 32 48 64 128 256 512; do expect+=("usr/share/icons/hicolor/${s}x$s/apps/$app_id.png"); done
  fi
  ((model_packaged)) && expect+=("usr/$model_rel")
  local absent=0 f
  for f in "${expect[@]}"; do [[ -f $deb_root/$f ]] || { fail "missing $f"; absent=1; }; done
  ((absent)) || pass "all ${#expect[@]} expected files are in the DEB"
  # Programs and man pages match one to one.
  local extra; extra=$(cd "$deb_root/usr/bin" && find . -mindepth 1 -printf '%f\n' | grep -vxF -f <(printf '%s\n' "${program_list[@]}") || true)
  [[ -z $extra ]] && pass "usr/bin holds exactly: ${program_list[*]}" || fail "unexpected programs: $extra"
  extra=$(cd "$deb_root/usr/share/man/man1" && find . -mindepth 1 -printf '%f\n' | sed 's/\.1\.gz$//' | grep -vxF -f <(printf '%s\n' "${program_list[@]}") || true)
  [[ -z $extra ]] && pass "a man page per program, none extra" || fail "man pages without a program: $extra"

  # The model: present exactly when the source tree has one, and byte-identical to it.
  if [[ -f $model_file ]]; then
    if [[ -f $deb_root/usr/$model_rel ]] && cmp -s "$model_file" "$deb_root/usr/$model_rel"; then
      pass "default model packaged, identical to $model_file"
    else
      fail "$model_file exists but the package lacks it or differs (re-run cmake: the rule is made at configure time)"
    fi
  else
    [[ -f $deb_root/usr/$model_rel ]] && fail "the package has a default model but $model_file is gone (re-run cmake)"
    say "note  no $model_file yet: the package has no default model"
  fi

  # The TGZ has the same files as the DEB (DEB paths under usr/, TGZ paths under its top folder).
  if diff <(cd "$deb_root/usr" && find . -type f | sort) <(cd "$tgz_root" && find . -type f | sort) >/dev/null; then
    pass "TGZ and DEB hold the same files"
  else
    fail "TGZ and DEB differ:"; diff <(cd "$deb_root/usr" && find . -type f | sort) <(cd "$tgz_root" && find . -type f | sort)
  fi

  # Binaries: stripped ELF; the NVIDIA driver and the shared CUDA libraries are never link
  # dependencies (the static CUDA runtime dlopens libcuda.so.1); every other library resolves here.
  for p in "${program_list[@]}"; do
    local exe=$deb_root/usr/bin/$p info needed
    info=$(file -b "$exe")
    [[ $info == *ELF* && $info == *stripped* && $info != *"not stripped"* ]] && pass "$p: stripped ELF" || fail "$p: $info"
    needed=$(objdump -p "$exe" 2>/dev/null | awk '$1 == "NEEDED" {print $2}' | tr '\n' ' ')
    if grep -Eq 'libcuda\.|libcudart|libcublas|libnvidia' <<<"$needed"; then fail "$p links $needed"
    else pass "$p: no libcuda/libcudart/libcublas/libnvidia in NEEDED ($needed)"; fi
    if ldd "$exe" | grep -q 'not found'; then fail "$p: unresolved libraries:"; ldd "$exe" | grep 'not found'
    else pass "$p: every library resolves"; fi
    if objdump -p "$exe" | grep -Eq 'R(UN)?PATH'; then fail "$p has an RPATH/RUNPATH"; else pass "$p: no RPATH"; fi
  done

  # Man pages: render without warnings, and document every option the program's --help prints.
  for p in "${program_list[@]}"; do
    local page=$deb_root/usr/share/man/man1/$p.1.gz roff help opt undocumented=()
    roff=$(gzip -dc "$page")
    if command -v groff >/dev/null; then
      local warnings; warnings=$(gzip -dc "$page" | groff -man -Tutf8 -ww -z 2>&1)
      [[ -z $warnings ]] && pass "$p.1: groff renders it without warnings" || fail "$p.1: $warnings"
    fi
    [[ $roff == *"Gemma Desk $version"* ]] && pass "$p.1: says version $version" || fail "$p.1: no 'Gemma Desk $version' in .TH"
    help=$(in_root_env env QT_QPA_PLATFORM=offscreen timeout 60 "$deb_root/usr/bin/$p" --help 2>&1) ||
      { fail "$p --help exited non-zero: $help"; continue; }
    for opt in $(grep -oE -- '--[a-z][a-z0-9-]*' <<<"$help" | sort -u); do
      [[ $roff == *"${opt//-/\\-}"* ]] || undocumented+=("$opt")
    done
    ((${#undocumented[@]} == 0)) && pass "$p.1 documents every option of $p --help" ||
      fail "$p.1 does not document: ${undocumented[*]} (edit installer/man/$p.1.in)"
    # Each option has one entry (the tag line after .TP): a second one goes stale when the first
    # is edited.
    local repeated
    repeated=$(awk 'tag { print; tag = 0 } /^\.TP/ { tag = 1 }' <<<"$roff" | grep -oE -- '\\-\\-[a-z0-9\\-]+' | sort | uniq -d | tr '\n' ' ')
    [[ -z $repeated ]] && pass "$p.1: one entry per option" || fail "$p.1 has more than one entry for: $repeated(edit installer/man/$p.1.in)"
  done

  # Desktop entry, AppStream metainfo, icons.
  if has_program gemma-desk; then
    local desktop=$deb_root/usr/share/applications/$app_id.desktop meta=$deb_root/usr/share/metainfo/$app_id.metainfo.xml
    if command -v desktop-file-validate >/dev/null; then
      desktop-file-validate "$desktop" && pass "desktop-file-validate" || fail "desktop-file-validate"
    else say "note  desktop-file-validate not installed (desktop-file-utils): desktop entry not validated"; fi
    if command -v appstreamcli >/dev/null; then
      appstreamcli validate --no-net "$meta" && pass "appstreamcli validate" || fail "appstreamcli validate"
    else say "note  appstreamcli not installed (appstream): metainfo not validated"; fi
    grep -q "^Exec=gemma-desk" "$desktop" && grep -q "^Icon=$app_id$" "$desktop" && pass "desktop entry runs gemma-desk, icon $app_id" ||
      fail "desktop entry Exec/Icon"
    grep -q "<launchable type=\"desktop-id\">$app_id.desktop</launchable>" "$meta" && pass "metainfo launches $app_id.desktop" ||
      fail "metainfo launchable"
    local newest; newest=$(grep -m1 -oE '<release version="[^"]+"' "$meta" | cut -d'"' -f2)
    [[ $newest == "$version" ]] && pass "metainfo's newest release is $version" ||
      fail "metainfo's newest release is '$newest', not $version (add one to installer/$app_id.metainfo.xml)"
    local s dims
    for s in 16 22 24 32 48 64 128 256 512; do
      dims=$(file -b "$deb_root/usr/share/icons/hicolor/${s}x$s/apps/$app_id.png" | grep -oE '[0-9]+ x [0-9]+')
      [[ $dims == "$s x $s" ]] || fail "icon ${s}x$s is $dims"
    done
    pass "icons at 9 hicolor sizes with matching dimensions"
  fi
  local top; top=$(gzip -dc "$deb_root/usr/share/doc/gemma-desk/changelog.gz" | head -1)
  [[ $top == "gemma-desk ($version) "* ]] && pass "changelog's newest entry is $version" ||
    fail "changelog starts '$top', not gemma-desk ($version) (add an entry to installer/changelog)"
  finish
}

# ---------------------------------------------------------------------------------------------------
step_lintian() {
  need_packages
  command -v lintian >/dev/null ||
    skip "lintian is not installed (GEMMA_PACKAGING=1 bash scripts/install-deps.sh); the DEB was built but not linted"
  say "\$ lintian --fail-on error --display-info --tag-display-limit 0 $deb"
  local out status
  out=$(lintian --fail-on error --display-info --tag-display-limit 0 "$deb" 2>&1); status=$?
  say "$out"
  ((status == 0)) && pass "lintian: no errors ($(grep -c '^W:' <<<"$out") warnings, $(grep -c '^I:' <<<"$out") info)" ||
    fail "lintian reports errors"
  finish
}

# ---------------------------------------------------------------------------------------------------
step_cli() {
  need_packages
  local root out
  for root in "$deb_root/usr" "$tgz_root"; do
    out=$(in_root_env timeout 60 "$root/bin/gemma-cli" --version 2>&1)
    [[ $? == 0 && $out == "gemma-cli $version"* ]] && pass "${root#$work/}: gemma-cli --version: $out" || fail "gemma-cli --version: $out"
    out=$(in_root_env timeout 60 "$root/bin/gemma-quantize" --version 2>&1)
    [[ $? == 0 && $out == "gemma-quantize $version"* ]] && pass "${root#$work/}: gemma-quantize --version: $out" ||
      fail "gemma-quantize --version: $out"
  done
  if [[ ! -f $deb_root/usr/$model_rel ]]; then
    ((failures)) && finish
    [[ -f $model_file ]] && { fail "$model_file exists but is not packaged: re-run cmake"; finish; }
    skip "no default model yet ($model_file): --version checks passed, generation not tested"
  fi
  # The acceptance command, from both fresh roots: the default model found beside the program.
  # Under strace (when it works here) we also see which model file it opened: it must be the
  # installed copy, never one in the source tree the program was built from.
  local trace=$work/trace-$step.log tracer=()
  if command -v strace >/dev/null && strace -f -qq -o /dev/null true 2>/dev/null; then
    # shellcheck disable=SC2054  # "open,openat" is one strace argument
    tracer=(strace -f -qq -e trace=open,openat -o "$trace")
  else
    say "note  strace is not usable here: which model file gemma-cli opens is not checked"
  fi
  for root in "$deb_root/usr" "$tgz_root"; do
    say "--- ${root#$work/}"
    say "\$ $root/bin/gemma-cli --prompt hello --max-new-tokens 8 --device cpu"
    out=$(in_root_env "${tracer[@]}" timeout 300 "$root/bin/gemma-cli" --prompt "hello" --max-new-tokens 8 --device cpu)
    local status=$?
    say "$out"
    [[ $status == 0 && -n ${out//[[:space:]]/} ]] && pass "gemma-cli replied from the default model" ||
      fail "gemma-cli --prompt hello (status $status, output '$out')"
    if ((${#tracer[@]})); then
      local opened
      opened=$(grep -E 'default\.gemma", [^)]*\) = [0-9]+$' "$trace" | grep -oE '"[^"]+"' | head -1 | tr -d '"')
      if [[ $opened == "$root"/* ]]; then pass "it opened the installed model ($opened)"
      else fail "it opened '$opened', not the installed model: programs must look beside themselves (<exe>/../$model_rel) before any compiled-in build-tree path"; fi
    fi
    # The same with the installed file named explicitly, greedy: proves the packaged copy itself works.
    say "\$ $root/bin/gemma-cli --model $root/$model_rel --prompt hello --max-new-tokens 8 --device cpu --greedy --print-ids"
    out=$(in_root_env timeout 300 "$root/bin/gemma-cli" --model "$root/$model_rel" --prompt "hello" --max-new-tokens 8 \
          --device cpu --greedy --print-ids)
    status=$?
    say "$out"
    [[ $status == 0 && $(tail -1 <<<"$out") =~ ^[0-9]+(,[0-9]+)*$ ]] && pass "gemma-cli --model <installed default.gemma> generated ids" ||
      fail "gemma-cli --model $root/$model_rel (status $status)"
  done
  finish
}

# ---------------------------------------------------------------------------------------------------
step_desk() {
  need_packages
  has_program gemma-desk || skip "this build has no gemma-desk (Qt 6 not found, or GEMMA_BUILD_UI=OFF)"
  local exe=$deb_root/usr/bin/gemma-desk out status
  out=$(in_root_env timeout 60 "$exe" --version 2>&1); status=$?
  [[ $status == 0 && $out == *"$version"* ]] && pass "gemma-desk --version: $out" || fail "gemma-desk --version (status $status): $out"
  if [[ ! -f $deb_root/usr/$model_rel ]]; then
    ((failures)) && finish
    skip "no default model yet ($model_file): gemma-desk --version passed, --self-test not run"
  fi
  local home=$work/home-$step
  out=$(in_root_env env QT_QPA_PLATFORM=offscreen timeout 540 "$exe" --self-test 2>&1); status=$?
  say "$out"
  [[ $status == 0 && $out == *"self-test: OK"* ]] && pass "gemma-desk --self-test (offscreen)" ||
    fail "gemma-desk --self-test exited $status"
  local loaded; loaded=$(sed -n 's/^self-test: loading //p' <<<"$out" | head -1)
  [[ $loaded == "$deb_root/usr/$model_rel" ]] && pass "it loaded the installed model" ||
    fail "it loaded '$loaded', not $deb_root/usr/$model_rel: the app must look beside itself (<exe>/../$model_rel) before any compiled-in build-tree path"
  # The self-test keeps its conversations in a temporary folder: nothing in the user's data folder.
  if [[ -d $home/.local/share/GemmaDesk ]] && [[ -n $(find "$home/.local/share/GemmaDesk" -name '*.sqlite' 2>/dev/null) ]]; then
    fail "the self-test wrote a conversation database into the data folder"
  else
    pass "the self-test left the user's data folder alone"
  fi
  finish
}

# ---------------------------------------------------------------------------------------------------
# A real dpkg database in a fresh root (dpkg --root): install, upgrade to a newer version, remove and
# purge, with a user's data folder inside the same root. Needs root (or fakeroot).
step_userdata() {
  need_packages
  local dpkg=(dpkg)
  if [[ $(id -u) != 0 ]]; then
    command -v fakeroot >/dev/null || skip "dpkg --root needs root or fakeroot"
    dpkg=(fakeroot dpkg --force-not-root)
  fi
  local root=$work/dpkg-root user_data=$work/dpkg-root/home/user/.local/share/GemmaDesk/gemma-desk
  rm -rf "$root" && mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
  touch "$root/var/lib/dpkg/status" "$root/var/lib/dpkg/available"
  dpkg+=(--root="$root" --force-depends --force-script-chrootless --log=/dev/null)

  # The user's data as the app keeps it (conversations, settings, a converted model, logs).
  mkdir -p "$user_data/models" "$user_data/logs"
  printf 'conversation database\n' >"$user_data/conversations.sqlite"
  printf '[general]\nlast=1\n' >"$user_data/settings.ini"
  printf 'converted model\n' >"$user_data/models/mine-0123abcd.gemma"
  printf 'log\n' >"$user_data/logs/gemma-desk.log"
  local before; before=$(cd "$user_data" && find . -type f -exec sha256sum {} + | sort)

  # A newer version of the same package, for the upgrade (same files, version bumped).
  local newer=$work/upgrade/gemma-desk_${version}+upgrade_test.deb tree=$work/upgrade/tree
  rm -rf "$work/upgrade" && mkdir -p "$work/upgrade"
  dpkg-deb -R "$deb" "$tree" && sed -i "s/^Version: .*/Version: ${version}+upgrade/" "$tree/DEBIAN/control" &&
    dpkg-deb --root-owner-group -Zgzip -z1 -b "$tree" "$newer" >/dev/null || fail "could not make the upgrade package"
  rm -rf "$tree"

  # dpkg, without its list of the (deliberately absent) dependencies of the package.
  run_dpkg() {
    say "\$ ${dpkg[*]} $*"
    "${dpkg[@]}" "$@" 2>&1 | grep -Ev '^ +(gemma-desk depends on |Package .* is not installed)|dependency problems' | grep -v '^$'
    return "${PIPESTATUS[0]}"
  }
  unchanged() {
    local now; now=$(cd "$user_data" && find . -type f -exec sha256sum {} + | sort)
    [[ $now == "$before" ]] && pass "user data untouched after $1" || fail "user data changed by $1"
  }
  run_dpkg -i "$deb" && pass "dpkg --root -i" || fail "dpkg -i"
  [[ -x $root/usr/bin/gemma-cli ]] && pass "installed: /usr/bin/gemma-cli" || fail "gemma-cli not installed"
  unchanged "install"
  run_dpkg -i "$newer" && pass "dpkg --root -i (upgrade to ${version}+upgrade)" || fail "upgrade"
  [[ $(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Version}' gemma-desk) == "${version}+upgrade" ]] &&
    pass "upgraded" || fail "version after upgrade"
  unchanged "upgrade"
  local listed; listed=$(dpkg-query --admindir="$root/var/lib/dpkg" -L gemma-desk | grep -Ev '^/(\.|usr(/.*)?)$' || true)
  [[ -z $listed ]] && pass "dpkg -L: every path under /usr" || fail "dpkg -L lists paths outside /usr: $listed"
  run_dpkg -r gemma-desk && pass "dpkg --root -r" || fail "dpkg -r"
  unchanged "remove"
  [[ ! -e $root/usr/bin/gemma-cli ]] && pass "removed: /usr/bin/gemma-cli is gone" || fail "gemma-cli still there after -r"
  run_dpkg -i "$deb" && pass "dpkg --root -i (reinstall)" || fail "reinstall"
  unchanged "reinstall"
  run_dpkg -P gemma-desk && pass "dpkg --root -P" || fail "dpkg -P"
  unchanged "purge"
  [[ -z $(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Status}' gemma-desk 2>/dev/null) ||
     $(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Status}' gemma-desk 2>/dev/null) == *not-installed* ]] &&
    pass "purged from the dpkg database" || fail "gemma-desk still known to dpkg after purge"
  local left; left=$(find "$root/usr" -type f 2>/dev/null)
  [[ -z $left ]] && pass "purge removed every packaged file" || fail "files left after purge: $left"
  finish
}

case $step in
  build) step_build ;;
  contents) step_contents ;;
  lintian) step_lintian ;;
  cli) step_cli ;;
  desk) step_desk ;;
  userdata) step_userdata ;;
  *) echo "package_test: unknown step '$step'" >&2; exit 2 ;;
esac
