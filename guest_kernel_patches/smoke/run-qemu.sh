#!/bin/bash
# QEMU/TCG smoke test of a guest kernel (no KVM needed, no LWP or NetBurst PMU in it):
#
#   smoke/run-qemu.sh BZIMAGE [CPU]      CPU defaults to qemu64
#   MACHINE=microvm SMP=2 smoke/run-qemu.sh BZIMAGE
#
# Builds lwp_probe and an initramfs with busybox (init.sh as /init), boots with the options
# pmuvm uses (console=ttyS0, no ACPI in the kernel: MP table), prints the serial log. Exits 0
# when the guest reached init.sh's last line.
# MACHINE=pc (default): SeaBIOS, whose MP table lists only the boot CPU under TCG.
# MACHINE=microvm: qboot's MP table lists every CPU, no ACPI, no PCI - closest to pmuvm's
# machine; it does not exit on reboot, so the script stops it after init.sh's last line.
# TCG has no LWP (QEMU drops +lwp: "TCG doesn't support requested feature") and ignores
# writes to unknown MSRs, so LWP cannot be switched on here: LLWPCB is SIGILL.
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
MACHINE=${MACHINE:-pc}
case "$MACHINE" in
  pc) QARGS+=(-M pc) ;;
  microvm) QARGS+=(-M microvm,acpi=off,pit=on,pic=on,rtc=on,isa-serial=on) ;;
  *) echo "run-qemu.sh: MACHINE is pc or microvm" >&2; exit 2 ;;
esac
echo "run-qemu.sh: $QEMU -M $MACHINE -cpu $CPU -smp ${SMP:-2}" >&2
: > "$W/log"
"$QEMU" "${QARGS[@]}" -accel tcg -cpu "$CPU" -smp "${SMP:-2}" -m 256 -nographic \
  -serial "file:$W/log" -monitor none -no-reboot -kernel "$BZ" -initrd "$W/initrd.cpio.gz" \
  -append "console=ttyS0 earlyprintk=serial,ttyS0,115200 panic=-1" </dev/null &
qpid=$!
for _ in $(seq 1 300); do
  grep -q -e 'smoke: done' -e 'Kernel panic' "$W/log" 2>/dev/null && break
  kill -0 "$qpid" 2>/dev/null || break
  sleep 1
done
sleep 1
kill "$qpid" 2>/dev/null || true
wait "$qpid" 2>/dev/null || true
tr -d '\r' < "$W/log"
grep -q 'smoke: done' "$W/log"
