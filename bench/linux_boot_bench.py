#!/usr/bin/env python3
"""Linux boot time: pmuvm vs QEMU microvm, same kernel, initramfs and host, one run.

Measures, for each VMM, the wall time from starting the process to the guest's /init printing
its first line ("init: N CPUs online", guest/linux/init.c) (and pmuvm's time to its exit). Rounds
alternate between the two so drift on a shared machine hits both alike. Prints the medians and
the ratio pmuvm / QEMU (DESIGN goal: <= 1.0, a microVM should boot faster than QEMU).

Needs /dev/kvm; where there is none (these machines), run it inside the nested KVM host:
  bazel build -c opt //vmm:pmuvm //guest/linux:initramfs //guest_kernel_patches:bzImage &&
  tools/kvm-host/run -- bench/linux_boot_bench.py bazel-bin/vmm/pmuvm \\
      bazel-bin/guest_kernel_patches/bzImage bazel-bin/guest/linux/initramfs.cpio
QEMU: $PMUVM_QEMU, else the QEMU 10 that tools/kvm-host unpacked, else qemu-system-x86_64.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

CMDLINE = "console=ttyS0 quiet --"  # no programs: init prints its first line and ends the VM


def find_qemu():
    if os.environ.get("PMUVM_QEMU"):
        return os.environ["PMUVM_QEMU"], []
    for cache in ("/var/cache/pmuvm/kvm-host/current", os.path.expanduser("~/.cache/pmuvm/kvm-host/current")):
        q = os.path.join(cache, "qemu/usr/bin/qemu-system-x86_64")
        if os.path.exists(q):
            return q, ["-L", os.path.join(cache, "qemu/usr/share/qemu"), "-L", "/usr/share/seabios"]
    q = shutil.which("qemu-system-x86_64")
    if not q:
        sys.exit("linux_boot_bench: no QEMU found (set PMUVM_QEMU)")
    return q, []


def timed_boot(argv, kill_at_init, marker=b"init:", timeout=300):
    """Seconds to the first line containing `marker`, seconds to exit (None if killed), status.

    QEMU microvm does not end on the guest's reboot (no reset device answers), so it is killed
    once init is reached; a watchdog kills anything that takes longer than `timeout`."""
    start = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    watchdog = threading.Timer(timeout, p.kill)
    watchdog.start()
    to_init = None
    tail = []
    for line in p.stdout:
        tail = (tail + [line])[-20:]
        if to_init is None and marker in line:
            to_init = time.monotonic() - start
            if kill_at_init:
                p.kill()
                break
    status = p.wait()
    watchdog.cancel()
    total = None if kill_at_init else time.monotonic() - start
    if to_init is None:
        sys.stderr.write(b"".join(tail).decode(errors="replace"))
        sys.exit(f"linux_boot_bench: {argv[0]} never reached init (status {status})")
    return to_init, total, status


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pmuvm")
    ap.add_argument("bzimage")
    ap.add_argument("initramfs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mem", default="256")
    a = ap.parse_args()
    if not os.path.exists("/dev/kvm"):
        sys.exit("linux_boot_bench: no /dev/kvm (run it through tools/kvm-host/run)")
    qemu, qemu_dirs = find_qemu()
    pmuvm_argv = [a.pmuvm, "run", "--mem", a.mem, "--kernel", a.bzimage, "--initrd", a.initramfs,
                  "--cmdline", CMDLINE]
    # microvm: no PCI, no firmware tables beyond what the kernel needs, ISA serial; -no-reboot so
    # the guest's reboot ends QEMU like pmuvm's exit port does.
    qemu_argv = [qemu, *qemu_dirs, "-accel", "kvm", "-M", "microvm,acpi=off", "-cpu", "host",
                 "-m", a.mem, "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none",
                 "-serial", "stdio", "-no-reboot", "-kernel", a.bzimage, "-initrd", a.initramfs,
                 "-append", CMDLINE]
    results = {"pmuvm": [], "qemu": []}
    for r in range(a.rounds):
        for name, argv in (("pmuvm", pmuvm_argv), ("qemu", qemu_argv)):
            to_init, total, status = timed_boot(argv, kill_at_init=name == "qemu")
            results[name].append(to_init)
            end = f"exit after {total * 1000:7.0f} ms (status {status})" if total else "killed at init"
            print(f"round {r + 1} {name:5}: init after {to_init * 1000:7.0f} ms, {end}", flush=True)
    med = {n: statistics.median(v) for n, v in results.items()}
    for n, m in med.items():
        print(f"median {n:5}: start to init {m * 1000:7.0f} ms")
    print(f"ratio pmuvm/qemu, start to init: {med['pmuvm'] / med['qemu']:.2f} (goal <= 1.0)")

if __name__ == "__main__":
    main()
