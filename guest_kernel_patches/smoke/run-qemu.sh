#!/bin/bash
# QEMU/TCG smoke test of a guest kernel (no KVM needed, no LWP or NetBurst PMU in it):
#
#   smoke/run-qemu.sh BZIMAGE [CPU]      CPU defaults to qemu64; try qemu64,+lwp
#
# Builds lwp_probe and an initramfs with busybox (init.sh as /init), boots with the options
# pmuvm uses (console=ttyS0, no ACPI in the kernel: MP table), prints the serial log. Exits 0
# when the guest reached init.sh's last line.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BZ=${1:?usage: run-qemu.sh BZIMAGE [CPU]}
CPU=${2:-qemu64}
QEMU=${QEMU:-}
if [ -z "$QEMU" ]; then
  QEMU=$(ls -d /var/cache/pmuvm/kvm-host/*/qemu/usr/bin/qemu-system-x86_64 2>/dev/null | head -1 || true)
  [ -n "$QEMU" ] || QEMU=$(command -v qemu-system-x86_64 || true)
fi
[ -x "$QEMU" ] || { echo "run-qemu.sh: no qemu-system-x86_64 (apt-get install -y qemu-system-x86)" >&2; exit 1; }
QARGS=()
case "$QEMU" in
  */qemu/usr/bin/*) QARGS+=(-L "${QEMU%/usr/bin/*}/usr/share/qemu") ;;
esac
QARGS+=(-L /usr/share/seabios)
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
gcc -static -O2 -o "$W/lwp_probe" "$HERE/lwp_probe.c"
"$HERE/../mkinitramfs.sh" "$W/initrd.cpio.gz" --init "$HERE/init.sh" --busybox "$W/lwp_probe"
echo "run-qemu.sh: $QEMU -cpu $CPU" >&2
timeout 300 "$QEMU" "${QARGS[@]}" -accel tcg -cpu "$CPU" -smp 2 -m 256 -nographic -serial stdio \
  -monitor none -no-reboot -kernel "$BZ" -initrd "$W/initrd.cpio.gz" \
  -append "console=ttyS0 earlyprintk=serial,ttyS0,115200 panic=-1" </dev/null | tee "$W/log" | tr -d '\r'
grep -q 'smoke: done' "$W/log"
