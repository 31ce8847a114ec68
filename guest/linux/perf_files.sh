#!/usr/bin/env bash
# Prints mkinitramfs arguments that put Debian's perf into an initramfs: /bin/perf, every shared
# library `ldd /usr/bin/perf` resolves (at the same paths), and the dynamic loader. Fails when
# perf or one of its libraries is missing (tools/setup.sh installs linux-perf).
set -euo pipefail
perf=/usr/bin/perf
[[ -x $perf ]] || { echo "perf_files.sh: $perf missing (apt-get install linux-perf)" >&2; exit 1; }
declare -A dirs=()
files=("file:bin/perf:$perf")
while read -r line; do
  lib=$(awk '{ if ($2 == "=>") print $3; else if ($1 ~ /^\//) print $1 }' <<<"$line")
  [[ -n $lib ]] || continue
  [[ -e $lib ]] || { echo "perf_files.sh: $lib (for perf) missing" >&2; exit 1; }
  path=${lib#/}
  d=$(dirname "$path")
  while [[ $d != . && -z ${dirs[$d]:-} ]]; do dirs[$d]=1; d=$(dirname "$d"); done
  files+=("file:$path:$(readlink -f "$lib")")
done < <(ldd "$perf")
for d in $(printf '%s\n' "${!dirs[@]}" | sort); do printf 'dir:%s ' "$d"; done
printf '%s ' "${files[@]}"
echo
