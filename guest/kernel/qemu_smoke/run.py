#!/usr/bin/env python3
"""QEMU/TCG smoke run of the bundled guest kernel (also run in CI by //tests/qemu).

The kernel needs pmuvm's boot protocol (64-bit entry, GDT at 0x1000, boot info at 0x3000,
identity page tables at 0x8000, programs placed after the kernel: vmm/boot/long_mode.cc and
guest_loader.cc). A small PVH shim (pvh_entry.S, shim.c, ap.S) reproduces it under QEMU, including
starting the secondary vCPUs at the kernel's entry with RSI = index. Under TCG, SYSCALL enters
CPL 0 like real KVM (the PVM quirks of DESIGN.md §3 are not reproduced), there are no pmuvm PV
leaves and no LWP, and TCG decodes the XOP bytes of LLWPCB/SLWPCB as `pop` instead of raising
#UD, so the LWP emulation cannot be exercised here.

usage: guest/kernel/qemu_smoke/run.py [--vcpus N] [--cpu MODEL] [--mem MIB] [--timeout S]
                                      [--bin DIR] PROGRAM[:ARG,ARG...]...
  --bin DIR: where kernel/kernel and programs/NAME are (default: bazel-bin/guest)
  PROGRAM: a program of //guest/programs (bazel build //guest/... first) or `smoke_test`
  (smoke_test.c, built here). Example:
    guest/kernel/qemu_smoke/run.py --vcpus 2 smoke_test:sys smoke_test:spin,A smoke_test:spin,B
Exit status: the guest's exit status; 3 for a kernel panic; 124 for a timeout. Needs
qemu-system-x86_64 (Debian: qemu-system-x86) and gcc.

Port 0x510 (PMUVM_PORT_EXIT) is QEMU's fw_cfg port, so the exit status is taken from the kernel's
last console line ("kernel: all N task(s) finished; exit status S") instead.
"""
import argparse, os, re, select, shutil, signal, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, '..', '..', '..'))
BIN = os.path.join(ROOT, 'bazel-bin', 'guest')
FLAGS = ['-std=gnu11', '-O2', '-ffreestanding', '-fno-builtin', '-fno-stack-protector', '-fno-pic',
         '-fno-pie', '-mno-red-zone', '-mgeneral-regs-only', '-mno-sse', '-fcf-protection=none',
         '-fno-asynchronous-unwind-tables', '-iquote', ROOT]


def sh(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit('command failed: %s\n%s' % (' '.join(cmd), r.stdout))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--vcpus', type=int, default=1)
    ap.add_argument('--cpu', default='max')
    ap.add_argument('--mem', type=int, default=256)
    ap.add_argument('--timeout', type=float, default=120)
    ap.add_argument('--bin', default=BIN, help='directory holding kernel/kernel and programs/NAME')
    ap.add_argument('programs', nargs='+')
    a = ap.parse_args()
    for tool in ('qemu-system-x86_64', 'gcc', 'objcopy'):
        if not shutil.which(tool):
            sys.exit('%s not found (Debian: apt-get install qemu-system-x86)' % tool)
    kernel = os.path.join(a.bin, 'kernel', 'kernel')
    if not os.path.exists(kernel):
        sys.exit('%s missing: run bazel build //guest/... first' % kernel)
    work = tempfile.mkdtemp(prefix='pmuvm-qemu-smoke-')
    lib = os.path.join(ROOT, 'guest', 'lib')
    link = ['-nostdlib', '-static', '-no-pie', '-Wl,--build-id=none', '-Wl,-z,max-page-size=4096',
            '-Wl,-z,noexecstack']
    specs = []
    for p in a.programs:
        name, _, args = p.partition(':')
        if name == 'smoke_test':
            path = os.path.join(work, 'smoke_test')
            if not os.path.exists(path):
                sh(['gcc'] + FLAGS + link + ['-Wl,-T,' + os.path.join(lib, 'user.ld'), '-o', path,
                    os.path.join(HERE, 'smoke_test.c'), os.path.join(lib, 'crt0.S'),
                    os.path.join(lib, 'pmuvm.c'), os.path.join(lib, 'format.c'),
                    os.path.join(lib, 'string.c')])
        else:
            path = os.path.join(a.bin, 'programs', name)
            if not os.path.exists(path):
                sys.exit('%s missing: run bazel build //guest/... first' % path)
        specs.append(path + (':' + args if args else ''))
    payload = os.path.join(work, 'payload.S')
    sh([sys.executable, os.path.join(HERE, 'mkpayload.py'), payload, str(a.mem), str(a.vcpus), kernel] + specs)
    shim64, shim = os.path.join(work, 'shim64.elf'), os.path.join(work, 'shim.elf')
    sh(['gcc', '-m64', '-ffreestanding', '-fno-pic', '-fno-pie', '-mno-red-zone', '-mgeneral-regs-only',
        '-O2', '-fno-asynchronous-unwind-tables', '-iquote', ROOT] + link +
       ['-Wl,-T,' + os.path.join(HERE, 'shim.ld'), '-o', shim64, os.path.join(HERE, 'pvh_entry.S'),
        os.path.join(HERE, 'ap.S'), os.path.join(HERE, 'shim.c'), payload])
    sh(['objcopy', '-O', 'elf32-i386', shim64, shim])  # QEMU's PVH loader takes ELF32

    qemu = ['qemu-system-x86_64', '-accel', 'tcg', '-cpu', a.cpu, '-m', str(a.mem), '-smp', str(a.vcpus),
            '-display', 'none', '-no-reboot', '-serial', 'stdio', '-monitor', 'none', '-kernel', shim]
    p = subprocess.Popen(qemu, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    buf, start, status, shown = b'', time.time(), None, 0
    while time.time() - start < a.timeout and p.poll() is None:
        if select.select([p.stdout], [], [], 0.2)[0]:
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            text = buf.decode(errors='replace')
            begin = text.find('shim: loading')
            if begin >= 0:
                sys.stdout.write(text[max(begin, shown):])
                sys.stdout.flush()
                shown = len(text)
            m = re.search(r'all \d+ task\(s\) finished; exit status (\d+)', text)
            if m or 'panic:' in text:
                time.sleep(0.5)
                if select.select([p.stdout], [], [], 0)[0]:
                    rest = os.read(p.stdout.fileno(), 65536).decode(errors='replace')
                    sys.stdout.write(rest)
                status = int(m.group(1)) if m else 3
                break
    os.killpg(p.pid, signal.SIGTERM)
    shutil.rmtree(work, ignore_errors=True)
    if status is None:
        print('\nrun.py: no final kernel line within %.0f s' % a.timeout)
        sys.exit(124)
    print('\nrun.py: guest exit status %d (%.1f s)' % (status, time.time() - start))
    sys.exit(status)


if __name__ == '__main__':
    main()
