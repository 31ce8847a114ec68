#!/usr/bin/env bash
# Prints mkinitramfs arguments that put Debian's real tools into an initramfs: each file named as
# DEST=SOURCE (DEST relative to the initramfs root), every shared library `ldd SOURCE` resolves
# for the executables among them (at the same paths), and the dynamic loader, with the
# directories they need. Fails when a file or one of its libraries is missing, naming the package
# (tools/setup.sh installs them).
#
#   tool_files.sh bin/perf=/usr/bin/perf@linux-perf usr/bin/rr=/usr/bin/rr@rr ...
set -euo pipefail
declare -A dirs=() seen=()
files=()
add_dirs() {
  local d
  d=$(dirname "$1")
  while [[ $d != . && -z ${dirs[$d]:-} ]]; do dirs[$d]=1; d=$(dirname "$d"); done
}
add() {  # DEST SOURCE
  [[ -n ${seen[$1]:-} ]] && return
  seen[$1]=1
  add_dirs "$1"
  files+=("file:$1:$(readlink -f "$2")")
}
for spec in "$@"; do
  dest=${spec%%=*} rest=${spec#*=}
  src=${rest%@*} package=${rest##*@}
  [[ -e $src ]] || { echo "tool_files.sh: $src missing (apt-get install $package)" >&2; exit 1; }
  add "$dest" "$src"
  [[ -x $src && ! -d $src ]] || continue
  while read -r line; do
    lib=$(awk '{ if ($2 == "=>") print $3; else if ($1 ~ /^\//) print $1 }' <<<"$line")
    [[ -n $lib ]] || continue
    [[ -e $lib ]] || { echo "tool_files.sh: $lib (for $src) missing" >&2; exit 1; }
    add "${lib#/}" "$lib"
  done < <(ldd "$src" 2>/dev/null || true)
done
for d in $(printf '%s\n' "${!dirs[@]}" | sort); do printf 'dir:%s ' "$d"; done
printf '%s ' "${files[@]}"
echo
