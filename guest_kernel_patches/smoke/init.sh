#!/bin/sh
# /init of the smoke-test initramfs (busybox sh): prints what the series should show, then
# ends the VM with reboot -f (QEMU -no-reboot exits; pmuvm ends the run with status 0).
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
echo "smoke: kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) cpu(s)"
echo "smoke: --- dmesg (LWP, perf) ---"
dmesg | grep -E 'LWP|Performance Events|perf|RDPMC' | sed 's/^/smoke:   /'
echo "smoke: --- /proc/cpuinfo (cpu 0) ---"
sed -n '1,/^$/p' /proc/cpuinfo | sed 's/^/smoke:   /'
if grep -qw lwp /proc/cpuinfo; then echo "smoke: cpuinfo flags: lwp"; else echo "smoke: cpuinfo flags: no lwp"; fi
echo "smoke: --- /proc/interrupts LWP ---"
grep -E '^ *LWP' /proc/interrupts | sed 's/^/smoke:   /'
echo "smoke: --- lwp_probe ---"
/bin/lwp_probe
st=$?
case $st in
  0) echo "smoke: lwp_probe exited 0 (LLWPCB/SLWPCB emulated)";;
  132) echo "smoke: lwp_probe died with SIGILL (status 132)";;
  *) echo "smoke: lwp_probe status $st";;
esac
echo "smoke: done"
reboot -f
