#!/bin/bash
# Build an initramfs (newc cpio, gzip-compressed when OUT ends in .gz) for the pmuvm guest kernel.
#
#   mkinitramfs.sh OUT.cpio[.gz] --init PROGRAM [--busybox] [FILE...]
#
#   --init PROGRAM  a static executable (or a #! script when --busybox is given) that becomes
#                   /init, the first process (pid 1). Linux runs /init from the initramfs.
#   --busybox       add busybox-static as /bin/busybox with a link for every applet it has
#                   (sh, cat, mount, ...), so /init may be a shell script and a shell is there.
#   FILE...         more files, copied to /bin/<basename> (static programs the init runs).
#
# The archive has /dev with a console and a null node (so pid 1 has stdin/stdout before any
# mount), /proc, /sys, /tmp, /bin, /sbin and /root. The kernel's devtmpfs (CONFIG_DEVTMPFS_MOUNT
# does not apply to initramfs) can be mounted over /dev by the init: mount -t devtmpfs dev /dev.
# Built with the kernel tree's usr/gen_init_cpio when one is given in $GEN_INIT_CPIO, else with
# GNU cpio; no root rights are needed (ownership is set to 0:0 in the archive).
set -euo pipefail

die() { echo "mkinitramfs.sh: error: $*" >&2; exit 1; }
usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

OUT=""; INIT=""; BUSYBOX=0; FILES=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage ;;
    --init) [ $# -ge 2 ] || usage; INIT=$2; shift 2 ;;
    --init=*) INIT=${1#--init=}; shift ;;
    --busybox) BUSYBOX=1; shift ;;
    --) shift; FILES+=("$@"); break ;;
    -*) echo "mkinitramfs.sh: unknown option $1" >&2; usage ;;
    *) if [ -z "$OUT" ]; then OUT=$1; else FILES+=("$1"); fi; shift ;;
  esac
done
[ -n "$OUT" ] && [ -n "$INIT" ] || usage
[ -f "$INIT" ] || die "--init $INIT: no such file"

is_static_elf() { # ELF without a PT_INTERP (program interpreter) = statically linked
  head -c4 "$1" | grep -q $'\x7fELF' || return 1
  ! LC_ALL=C readelf -l "$1" 2>/dev/null | grep -q 'Requesting program interpreter'
}
check_program() {
  local f=$1 what=$2
  if head -c2 "$f" | grep -q '^#!'; then
    [ $BUSYBOX -eq 1 ] || echo "mkinitramfs.sh: warning: $what $f is a script; without --busybox there may be no interpreter" >&2
  elif ! is_static_elf "$f"; then
    die "$what $f is not a static ELF executable (the initramfs has no libc; link with -static)"
  fi
}
check_program "$INIT" "--init"
for f in "${FILES[@]}"; do [ -f "$f" ] || die "$f: no such file"; done

BB=""
if [ $BUSYBOX -eq 1 ]; then
  BB=$(command -v busybox || true)
  [ -n "$BB" ] && is_static_elf "$BB" || BB=/bin/busybox
  [ -x "$BB" ] && is_static_elf "$BB" \
    || die "--busybox needs a static busybox; install it with: apt-get install -y busybox-static"
fi

command -v cpio >/dev/null || [ -n "${GEN_INIT_CPIO:-}" ] \
  || die "cpio is missing; install it with: apt-get install -y cpio"

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
LIST=$STAGE/list
R=$STAGE/root
mkdir -p "$R"

# gen_init_cpio list format; converted into a staged tree for GNU cpio when needed
{
  for d in /dev /proc /sys /tmp /bin /sbin /root /etc; do echo "dir $d 0755 0 0"; done
  echo "nod /dev/console 0600 0 0 c 5 1"
  echo "nod /dev/null 0666 0 0 c 1 3"
  echo "file /init $(readlink -f "$INIT") 0755 0 0"
  for f in "${FILES[@]}"; do
    echo "file /bin/$(basename "$f") $(readlink -f "$f") 0755 0 0"
  done
  if [ -n "$BB" ]; then
    echo "file /bin/busybox $(readlink -f "$BB") 0755 0 0"
    "$BB" --list-full | while read -r app; do
      [ "$app" = "bin/busybox" ] && continue
      case "$app" in linuxrc) continue ;; esac
      echo "slink /$app /bin/busybox 0777 0 0"
    done
  fi
} > "$LIST"

RAW=$STAGE/initramfs.cpio
if [ -n "${GEN_INIT_CPIO:-}" ]; then
  "$GEN_INIT_CPIO" "$LIST" > "$RAW" || die "$GEN_INIT_CPIO failed"
else
  # Stage the tree; device nodes cannot be created without root, so they are appended as a
  # second newc archive made from a tiny fake tree via cpio's --owner and a mknod-free trick:
  # the kernel's initramfs unpacker accepts concatenated archives.
  while read -r type path a b c d e f; do
    case "$type" in
      dir) mkdir -p "$R$path"; chmod "$a" "$R$path" ;;
      file) mkdir -p "$(dirname "$R$path")"; cp "$a" "$R$path"; chmod "$b" "$R$path" ;;
      slink) mkdir -p "$(dirname "$R$path")"; ln -sf "$a" "$R$path" ;;
    esac
  done < "$LIST"
  (cd "$R" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0) > "$RAW" \
    || die "cpio failed"
  if [ "$(id -u)" = 0 ]; then
    mkdir -p "$STAGE/nodes/dev"
    mknod -m 0600 "$STAGE/nodes/dev/console" c 5 1
    mknod -m 0666 "$STAGE/nodes/dev/null" c 1 3
    (cd "$STAGE/nodes" && printf 'dev/console\ndev/null\n' | cpio --quiet -o -H newc -R 0:0) \
      >> "$RAW" || die "cpio (device nodes) failed"
  else
    echo "mkinitramfs.sh: note: not root, no /dev/console in the archive; the kernel opens" \
         "the console after devtmpfs is mounted by /init (or set GEN_INIT_CPIO=<linux>/usr/gen_init_cpio)" >&2
  fi
fi

case "$OUT" in
  *.gz) gzip -9 -n < "$RAW" > "$OUT.tmp.$$" ;;
  *) cp "$RAW" "$OUT.tmp.$$" ;;
esac
mv "$OUT.tmp.$$" "$OUT"
echo "mkinitramfs.sh: wrote $OUT ($(stat -c %s "$OUT") bytes; /init = $(basename "$INIT")${BB:+, busybox}${FILES:+, ${#FILES[@]} file(s) in /bin})" >&2
