#!/bin/bash
# Build the pmuvm guest Linux kernel: Debian 12's linux-source-6.1 + the quilt series in this
# folder + config.fragment on top of `make tinyconfig`. Writes OUTDIR/bzImage.
#
#   build.sh OUTDIR            build (or take from the cache) and copy bzImage (+ .config)
#   build.sh --print-cache-key print the key the cache uses and exit
#   build.sh --help
#
# The build happens outside the tree, in $PMUVM_LINUX_CACHE, else /var/cache/pmuvm/linux if it
# is writable, else ~/.cache/pmuvm/linux:
#   src-<srcversion>/        the unpacked linux-source tree, patched with quilt (series applied
#                            from this folder; re-applied when the key changes, so a changed
#                            series rebuilds incrementally)
#   out/<key>/bzImage        finished kernels, one per key
#   lock                     flock: one build at a time per cache
# The key hashes series, every patch it names, config.fragment, build.sh and the installed
# linux-source-6.1 package version: an unchanged input copies the cached bzImage.
# Progress goes to stderr, one line per phase with the elapsed time; the full make output to
# <cache>/build-<key>.log. Exit status: 0 ok, 1 failure, 2 usage.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_PKG=linux-source-6.1
SRC_TARBALL=/usr/src/linux-source-6.1.tar.xz
T0=$(date +%s.%N)

say() { printf 'build.sh [%6.1fs] %s\n' "$(echo "$(date +%s.%N) - $T0" | bc)" "$*" >&2; }
die() { printf 'build.sh: error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }

# --- inputs and the cache key ------------------------------------------------------------------
need_packages() {
  local missing=() p
  declare -A bin=([quilt]=quilt [flex]=flex [bison]=bison [bc]=bc [gcc]=gcc [make]=make
                  [xz]=xz-utils [cpio]=cpio [perl]=perl [flock]=util-linux)
  for p in "${!bin[@]}"; do command -v "$p" >/dev/null 2>&1 || missing+=("${bin[$p]}"); done
  [ -e /usr/include/libelf.h ] || missing+=(libelf-dev)
  [ -e /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
  dpkg-query -W -f='${Status}' "$SRC_PKG" 2>/dev/null | grep -q 'install ok installed' \
    || missing+=("$SRC_PKG")
  [ -r "$SRC_TARBALL" ] || { [[ " ${missing[*]} " == *" $SRC_PKG "* ]] || missing+=("$SRC_PKG"); }
  if [ ${#missing[@]} -gt 0 ]; then
    printf 'build.sh: error: missing packages; install them with:\n  apt-get install -y %s\n' \
      "$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')" >&2
    exit 1
  fi
}

series_patches() { grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$HERE/series" | awk '{print $1}'; }

series_key() { # what the patched tree depends on: the diffs, not the patch descriptions
  local p
  { series_patches; for p in $(series_patches); do
      echo "file $p"; sed -n '/^--- /,$p' "$HERE/$p"; done; } | sha256sum | cut -c1-16
}

cache_key() {
  local ver
  ver=$(dpkg-query -W -f='${Version}' "$SRC_PKG" 2>/dev/null) || die "$SRC_PKG is not installed"
  {
    echo "pkg $SRC_PKG $ver"
    echo "file series"; cat "$HERE/series"
    local p
    for p in $(series_patches); do
      [ -f "$HERE/$p" ] || die "series names $p, which is not in $HERE"
      echo "file $p"; cat "$HERE/$p"
    done
    echo "file config.fragment"; cat "$HERE/config.fragment"
    echo "file build.sh"; cat "$HERE/build.sh"
  } | sha256sum | cut -c1-16
}

# --- arguments ---------------------------------------------------------------------------------
[ $# -ge 1 ] || usage 2
case "$1" in
  -h|--help) usage 0 ;;
  --print-cache-key) need_packages; cache_key; exit 0 ;;
  -*) echo "build.sh: unknown option $1" >&2; usage 2 ;;
esac
[ $# -eq 1 ] || usage 2
OUTDIR=$1

need_packages
KEY=$(cache_key)
SRCVER=$(dpkg-query -W -f='${Version}' "$SRC_PKG")

if [ -n "${PMUVM_LINUX_CACHE:-}" ]; then
  CACHE=$PMUVM_LINUX_CACHE
elif mkdir -p /var/cache/pmuvm/linux 2>/dev/null && [ -w /var/cache/pmuvm/linux ]; then
  CACHE=/var/cache/pmuvm/linux
else
  CACHE=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/pmuvm/linux
fi
mkdir -p "$CACHE/out" || die "cannot create the cache directory $CACHE"
mkdir -p "$OUTDIR" || die "cannot create $OUTDIR"
say "cache $CACHE, key $KEY ($SRC_PKG $SRCVER)"

deliver() {
  cp "$CACHE/out/$KEY/bzImage" "$OUTDIR/bzImage.tmp.$$" && mv "$OUTDIR/bzImage.tmp.$$" "$OUTDIR/bzImage"
  cp "$CACHE/out/$KEY/config" "$OUTDIR/config"
  echo "$KEY" > "$OUTDIR/bzImage.key"
  say "wrote $OUTDIR/bzImage ($(stat -c %s "$OUTDIR/bzImage") bytes) and $OUTDIR/config"
}

# Fast path without the lock: a finished entry is only ever renamed into place.
if [ -f "$CACHE/out/$KEY/bzImage" ]; then
  say "cached"
  deliver
  exit 0
fi

exec 9>"$CACHE/lock"
if ! flock -n 9; then
  say "waiting for another build.sh using $CACHE"
  flock 9
fi
if [ -f "$CACHE/out/$KEY/bzImage" ]; then
  say "cached (built by the build we waited for)"
  deliver
  exit 0
fi

LOG=$CACHE/build-$KEY.log
: > "$LOG"
run() { # run CMD...: output to the log; on failure show its tail and stop
  if ! "$@" >>"$LOG" 2>&1; then
    echo "build.sh: error: '$*' failed; last lines of $LOG:" >&2
    tail -n 40 "$LOG" >&2
    exit 1
  fi
}

# --- source tree -------------------------------------------------------------------------------
SRC=$CACHE/src-$SRCVER
TREE=$SRC/linux-source-6.1
if [ ! -f "$SRC/.unpacked" ]; then
  say "unpacking $SRC_TARBALL"
  rm -rf "$SRC"
  mkdir -p "$SRC"
  tar -C "$SRC" -xJf "$SRC_TARBALL" || die "unpacking $SRC_TARBALL into $SRC failed"
  [ -f "$TREE/Makefile" ] || die "$SRC_TARBALL did not unpack to $TREE"
  touch "$SRC/.unpacked"
fi

# --- patches -----------------------------------------------------------------------------------
# The tree remembers which series (patch names + diffs) it carries; another series pops
# everything (quilt restores the pristine files from .pc/) and pushes this folder's series. A
# change elsewhere (fragment, build.sh, a patch's description) keeps the patched tree and only
# reconfigures and rebuilds incrementally.
export QUILT_PATCHES=$HERE QUILT_PC=.pc
QUILT=(quilt --quiltrc /dev/null)
cd "$TREE"
SKEY=$(series_key)
if [ "$(cat .pmuvm-series-key 2>/dev/null)" != "$SKEY" ]; then
  if [ -d .pc ] && [ -n "$(ls -A .pc 2>/dev/null | grep -v -e '^\.' || true)" ]; then
    say "removing the previously applied series"
    run "${QUILT[@]}" pop -a -f
  fi
  rm -rf .pc .pmuvm-series-key
  say "applying $(series_patches | wc -l) patches with quilt"
  for p in $(series_patches); do
    if ! "${QUILT[@]}" push "$p" >>"$LOG" 2>&1; then
      echo "build.sh: error: patch $p does not apply to $SRC_PKG $SRCVER; quilt said:" >&2
      tail -n 20 "$LOG" >&2
      "${QUILT[@]}" pop -a -f >/dev/null 2>&1 || true
      rm -rf .pc
      exit 1
    fi
  done
  echo "$SKEY" > .pmuvm-series-key
fi

# --- configuration -----------------------------------------------------------------------------
say "configuring: tinyconfig + config.fragment"
MK=(make ARCH=x86_64)
run "${MK[@]}" tinyconfig
run scripts/kconfig/merge_config.sh -m .config "$HERE/config.fragment"
run "${MK[@]}" olddefconfig
# Every fragment line must have survived (merge_config.sh only warns).
bad=0
while IFS= read -r line; do
  case "$line" in
    CONFIG_*=*) sym=${line%%=*}; want=${line#*=} ;;
    "# CONFIG_"*" is not set") sym=${line#\# }; sym=${sym%% *}; want=n ;;
    *) continue ;;
  esac
  got=$(grep -E "^$sym=" .config | head -1 | cut -d= -f2- || true)
  [ -n "$got" ] || got=n
  if [ "$got" != "$want" ]; then
    echo "build.sh: error: config.fragment asks $sym=$want, the merged .config has $sym=$got" >&2
    bad=1
  fi
done < "$HERE/config.fragment"
[ $bad -eq 0 ] || die "config.fragment was not honoured (dependencies missing or a typo)"

# --- build -------------------------------------------------------------------------------------
JOBS=$(nproc)
say "building bzImage with -j$JOBS (log: $LOG)"
run "${MK[@]}" -j"$JOBS" bzImage
[ -f arch/x86/boot/bzImage ] || die "make finished but arch/x86/boot/bzImage is missing"
say "built $(make -s ARCH=x86_64 kernelrelease 2>/dev/null || echo '?')"

tmp=$CACHE/out/.tmp-$KEY-$$
rm -rf "$tmp"; mkdir -p "$tmp"
cp arch/x86/boot/bzImage "$tmp/bzImage"
cp .config "$tmp/config"
echo "$KEY" > "$tmp/key"
rm -rf "$CACHE/out/$KEY"
mv "$tmp" "$CACHE/out/$KEY"
deliver
