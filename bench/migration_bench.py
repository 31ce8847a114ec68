#!/usr/bin/env python3
"""Live migration, snapshot and restore: what pmuvm's own numbers are, in one run.

Four measurements, each of pmuvm driven through its API socket (`pmuvm ctl`, DESIGN §4.10):
 1. Live migration of idle guests of 128, 256 and 512 MiB whose RAM is mostly non-zero (one
    guest/programs/dirty_pages task per 128 MiB, each making 120 MiB of its .bss non-zero and
    then sleeping), 3 repetitions each (sizes interleaved), source and destination on this host
    over a Unix socket: medians of vm.send-migration's total_ms and downtime_ms, and round 0's
    MiB/s (round 0 = every non-zero page; its time is total - downtime - the later rounds, the
    later rounds timed by the source's "migration: round N sent" log lines, so it includes the
    connection, the hello and the zero-page scan).
 2. Snapshot write throughput (bytes of memory.bin + state.bin / vm.snapshot's milliseconds,
    i.e. pause to resume) and restore read throughput (`pmuvm restore`'s "read N bytes of guest
    memory in X ms (checksum checked)") against `cp` of a file of the same number of bytes to a new
    file in the same directory under /tmp, cp and pmuvm alternating, nothing dropped from any
    cache, the copy fsync'ed as pmuvm's snapshot is (`cp` then `sync FILE`; `dd conv=fsync`);
    ratio pmuvm / cp per repetition, median (goal: >= 0.5). GNU cp (coreutils 9) copies
    with copy_file_range, which the nested host's virtio-9p /tmp turns into small writes
    (~20 MiB/s there), so two stricter baselines are measured alongside in the same way:
    `dd bs=4M` (plain reads and writes) for the snapshot and `cp FILE /dev/null` (reading only)
    for the restore. Also printed: what `xxhsum -H1` (reading memory.bin and computing the XXH64
    pmuvm computes over it both ways) takes for the same file.
 3. Pre-copy convergence: a 128 MiB guest whose one task writes RATE distinct pages per second
    (cycling through its 120 MiB, kept to the rate by its calibrated TSC) is migrated once per
    rate; prints the pages sent per round, the final (paused) pages and the downtime, plus the
    rate the guest reports having reached while pre-copy ran. Pre-copy stops at a round of
    <= 64 dirty pages or after 30 rounds.
 4. Live migration of a guest that profiles itself with LWP while it is migrated (the 256 MiB
    guest of 1. plus guest/programs/lwp_forever: instructions and branches events, every user
    instruction stepped): downtime (goal <= 50 ms) beside the state size.
A hand-over that leaves no working VM at the destination (a guest that died during pre-copy:
the source still hands it over and exits 0) is reported and tried again, at most 3 attempts per
measurement; the summary counts them. (Under QEMU's multi-threaded TCG, a guest dirtying >= 25000
pages/s died that way now and then; tools/kvm-host/run now uses one TCG thread, see its README.)
After every migration and restore each guest task reads its whole arena back and checks that it
holds exactly what the task last wrote (guest/programs/dirty_pages.c), before the VM is shut
down; lost writes are reported and make the exit status 1.
Prints a table of the results at the end.

Needs /dev/kvm; where there is none (these machines), run it inside the nested KVM host:
  bazel build -c opt //vmm:pmuvm //guest/programs:dirty_pages //guest/programs:lwp_forever &&
  tools/kvm-host/run --timeout 1800 -- bench/migration_bench.py bazel-bin/vmm/pmuvm \\
      bazel-bin/guest/programs/dirty_pages
Options: --sizes 128,256,512 --reps 3 --snapshot-mem 512 --rates 2000,10000,25000 --lwp-mem 256
--parts migration,snapshot,precopy,lwp
--dir /tmp (where the scratch directory goes; the nested host's /tmp is the machine's, over
virtio-9p). Everything it writes is removed at the end.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ARENA_MIB = 120  # guest/programs/dirty_pages.c: ARENA_MIB
MIB = 1 << 20
ROUND_LINE = re.compile(r"migration: round (\d+) sent (\d+) pages")
RESTORE_LINE = re.compile(r"read (\d+) bytes of guest memory in ([0-9.]+) ms")
RATE_LINE = re.compile(r"dirty_pages \S+: at \d+ s, (\d+) pages dirtied in the last second")
# Each task's check of its whole arena, once a second (guest/programs/dirty_pages.c).
CHECK_LINE = r"dirty_pages (\S+): at \d+ s(, \d+ pages dirtied .* hold what was written|: LOST WRITES.*)"


class Failure(Exception):
    """Something went wrong; main() ends the bench with it unless a caller records it."""


def fail(why):
    raise Failure(why)


class Process:
    """A pmuvm process whose stdout and stderr lines are collected with their arrival times."""

    def __init__(self, argv, name):
        self.name = name
        self.argv = argv
        self.lines = {"out": [], "err": []}  # (monotonic time, text)
        self.cond = threading.Condition()
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        self.readers = [threading.Thread(target=self._read, args=(s, k), daemon=True)
                        for s, k in ((self.p.stdout, "out"), (self.p.stderr, "err"))]
        for r in self.readers:
            r.start()

    def _read(self, stream, kind):
        for raw in stream:
            line = raw.decode(errors="replace").rstrip("\n")
            with self.cond:
                self.lines[kind].append((time.monotonic(), line))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, kind, pattern, count=1, timeout=300, distinct=False):
        """The first `count` (time, match) of `pattern` in the stream (with `distinct`, the first
        match of each of `count` different values of its group 1); fails if the process ends or
        `timeout` passes first."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = [(t, m) for t, l in self.lines[kind] for m in [rx.search(l)] if m]
                if distinct:
                    firsts = {}
                    for t, m in found:
                        firsts.setdefault(m.group(1), (t, m))
                    found = list(firsts.values())
                if len(found) >= count:
                    return found[:count]
                if self.p.poll() is not None and not any(r.is_alive() for r in self.readers):
                    self.fail(f"ended (status {self.p.returncode}) before printing /{pattern}/")
                if time.monotonic() > deadline:
                    self.fail(f"did not print /{pattern}/ within {timeout} s")
                self.cond.wait(0.2)

    def wait(self, timeout=120):
        try:
            status = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.fail(f"did not end within {timeout} s")
        for r in self.readers:
            r.join()
        return status

    def text(self, kind):
        with self.cond:
            return "\n".join(l for _, l in self.lines[kind])

    def fail(self, why):
        if self.p.poll() is None:
            self.p.kill()
        tail = "\n".join(self.text("out").splitlines()[-10:] + self.text("err").splitlines()[-10:])
        fail(f"{self.name}: {why}\n  {' '.join(self.argv)}\n{tail}")

    def last_error(self):
        """pmuvm's last stderr line that is not an [info] line (its failure, if it failed)."""
        with self.cond:
            lines = [l for _, l in self.lines["err"] if "[info]" not in l and "[warning]" not in l]
        return lines[-1] if lines else "(nothing on stderr)"


class Bench:
    def __init__(self, a):
        self.pmuvm = os.path.abspath(a.pmuvm)
        self.program = os.path.abspath(a.dirty_pages)
        # Beside dirty_pages in bazel-bin/guest/programs.
        self.lwp_program = os.path.join(os.path.dirname(self.program), "lwp_forever")
        self.work = tempfile.mkdtemp(prefix="pmuvm-migration-bench.", dir=a.dir)
        self.serial = 0
        self.failures = []  # (what, why) of hand-overs that left no working VM

    def path(self, name):
        self.serial += 1
        return os.path.join(self.work, f"{self.serial}-{name}")

    def ctl(self, api, verb, body=None):
        argv = [self.pmuvm, "ctl", "--api-socket", api, verb] + ([json.dumps(body)] if body else [])
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=600)
        if r.returncode != 0:
            fail(f"pmuvm ctl {verb} failed (status {r.returncode}): {r.stdout}{r.stderr}")
        return json.loads(r.stdout)

    @staticmethod
    def wait_for_socket(path, proc, timeout=60):
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if proc.p.poll() is not None:
                proc.fail("ended before its socket appeared")
            if time.monotonic() > deadline:
                proc.fail(f"no socket at {path} within {timeout} s")
            time.sleep(0.02)

    def start_guest(self, mem, rate=0, copies=None, profiling=False):
        """A running source VM of `mem` MiB: `copies` dirty_pages tasks (default one per 128 MiB)
        of 120 MiB each, the first dirtying `rate` pages/s; with `profiling`, also lwp_forever
        (a task profiling itself with LWP instructions and branches events); returns once all
        are ready (lwp_forever: its first records)."""
        copies = copies or max(1, mem // 128)
        api = self.path("source.api")
        argv = [self.pmuvm, "run", "--api-socket", api, "--mem", str(mem), "--log-level", "info"]
        for i in range(copies):
            argv += ["--", self.program, f"t{i}", str(ARENA_MIB), str(rate if i == 0 else 0)]
        if profiling:
            argv += ["--", self.lwp_program]
        proc = Process(argv, f"source ({mem} MiB)")
        proc.tasks = copies
        self.wait_for_socket(api, proc)
        proc.wait_for("out", r"dirty_pages \S+: ready", copies)
        if profiling:
            proc.wait_for("out", r"lwp_forever: \d+ records")
        return proc, api

    @staticmethod
    def arena_checks(proc, tasks):
        """Waits for every task's next check of its arena in `proc` (a VM that just arrived or was
        restored); returns the LOST WRITES lines (the VM then ends by itself, status 3)."""
        found = proc.wait_for("out", CHECK_LINE, tasks, timeout=60, distinct=True)
        lost = [m.group(0) for _, m in found if "LOST WRITES" in m.group(0)]
        for line in lost:
            print(f"!! {proc.name}: {line}", flush=True)
        return lost

    def end(self, proc, api, lost):
        """Ends a VM whose arenas were checked: vm.shutdown (status 0), or, after lost writes,
        waits for the guest's own exit (status 3)."""
        if lost:
            if proc.wait() != 3:
                proc.fail("lost writes, but the exit status is not 3")
            return
        self.ctl(api, "vm.shutdown")
        if proc.wait() != 0:
            proc.fail("exit status after vm.shutdown is not 0")

    def migrate(self, source, source_api):
        """Migrates a running source to a new destination, lets every task check its arena there
        once, ends it; returns vm.send-migration's stats (plus round times, the time window and
        any lost writes) and the destination."""
        incoming = self.path("incoming.sock")
        dest_api = self.path("dest.api")
        dest = Process([self.pmuvm, "run", "--incoming", "unix:" + incoming, "--api-socket",
                        dest_api, "--log-level", "info"], "destination")
        self.wait_for_socket(incoming, dest)
        started = time.monotonic()
        stats = self.ctl(source_api, "vm.send-migration", {"destination_url": "unix:" + incoming})
        ended = time.monotonic()
        status = source.wait()
        if status != 0:
            source.fail(f"exit status {status} after the hand-over (0 expected)")
        # A hand-over that left no working VM at the destination is a result, not the end of
        # the bench: recorded as stats["failure"] (the source has already ended with 0).
        stats["failure"], stats["lost"] = None, []
        try:
            self.wait_for_socket(dest_api, dest)
            state = self.ctl(dest_api, "vm.info").get("state")
            if state not in (None, "running"):
                dest.fail(f"the migrated VM is {state!r}, not running")
            stats["lost"] = self.arena_checks(dest, source.tasks)
            self.end(dest, dest_api, stats["lost"])
        except Failure as e:
            running = dest.p.poll() is None
            if running:
                dest.p.kill()
            status = dest.wait()
            why = dest.last_error()
            stats["failure"] = (f"the destination was killed ({str(e).splitlines()[0]})" if running
                                else f"the destination ended with status {status}: {why}")
            if "rip=0xfff0" in why and "cs=0xf000" in why:
                stats["failure"] += (" [the vCPU arrived in its reset state: the guest had died "
                                     "at the source during pre-copy]")
        rounds = [(t, int(m.group(1))) for t, l in source.lines["err"] for m in [ROUND_LINE.search(l)] if m]
        if [r for _, r in rounds] != list(range(len(stats["pages_per_round"]))):
            source.fail(f"round log lines {rounds} do not match the stats {stats}")
        # Round 0: everything before the pause but the later rounds (each timed by its log line).
        later_ms = (rounds[-1][0] - rounds[0][0]) * 1000
        stats["round0_ms"] = stats["total_ms"] - stats["downtime_ms"] - later_ms
        stats["round_ms"] = [round((t - u) * 1000) for (u, _), (t, _) in zip(rounds, rounds[1:])]
        stats["window"] = (started, ended)
        return stats, dest

    @staticmethod
    def timed(argv):
        start = time.monotonic()
        subprocess.run(argv, check=True, stdin=subprocess.DEVNULL)
        return time.monotonic() - start

    def cp(self, src, dst):
        """cp, and for a file copy the fsync pmuvm's snapshot does too (`sync FILE`)."""
        if dst == "/dev/null":
            return self.timed(["cp", src, dst])
        return self.timed(["sh", "-c", 'cp "$1" "$2" && sync "$2"', "cp", src, dst])

    def dd(self, src, dst):
        """A plain read/write copy with 4 MiB buffers (no copy_file_range), fsync'ed."""
        return self.timed(["dd", f"if={src}", f"of={dst}", "bs=4M", "conv=fsync", "status=none"])

    def remove(self, path):
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


def mibps(nbytes, seconds):
    return nbytes / MIB / seconds if seconds > 0 else float("inf")


ATTEMPTS = 3  # per measured migration: a hand-over that left no working VM is tried again


def verdict(lost, failure=None):
    if failure:
        return "FAILED: " + failure
    return "LOST WRITES" if lost else "every arena holds what was written"


def migrate_until_good(b, start, what, failures):
    """Starts a source with start() and migrates it; a failed hand-over goes to `failures` (with
    `what`) and is tried again, up to ATTEMPTS in all. Returns the last attempt's stats and
    destination."""
    for attempt in range(1, ATTEMPTS + 1):
        source, api = start()
        s, dest = b.migrate(source, api)
        if not s["failure"]:
            break
        failures.append((what, s["failure"]))
        print(f"!! {what}, attempt {attempt}: {s['failure']}", flush=True)
    return s, source, dest


def migration_part(b, sizes, reps):
    print(f"== 1. live migration, {reps} repetition(s) per size, guests idle, "
          f"{ARENA_MIB} MiB non-zero per 128 MiB", flush=True)
    results = {m: [] for m in sizes}
    for r in range(reps):
        for mem in sizes:
            s, _, _ = migrate_until_good(b, lambda: b.start_guest(mem),
                                         f"migration of {mem} MiB", b.failures)
            if s["failure"]:
                continue
            r0 = s["pages_per_round"][0]
            s["round0_mibps"] = mibps(r0 * 4096, s["round0_ms"] / 1000)
            results[mem].append(s)
            print(f"rep {r + 1} {mem:4} MiB: total {s['total_ms']:8.1f} ms, downtime "
                  f"{s['downtime_ms']:7.1f} ms, round 0 {r0} pages in {s['round0_ms']:7.1f} ms "
                  f"({s['round0_mibps']:6.1f} MiB/s), rounds {s['pages_per_round']}, final "
                  f"{s['final_pages']}, state {s['state_bytes']} B; {verdict(s['lost'])}", flush=True)
    return results


def snapshot_part(b, mem, reps):
    print(f"== 2. snapshot and restore of a {mem} MiB guest vs cp, {reps} repetition(s), "
          f"in {b.work}", flush=True)
    source, api = b.start_guest(mem)
    # The cp source: a file of the snapshot's bytes (memory.bin + state.bin), written untimed.
    first = b.path("snapshot")
    b.ctl(api, "vm.snapshot", {"destination_url": "file://" + first})
    nbytes = sum(os.path.getsize(os.path.join(first, f)) for f in ("memory.bin", "state.bin"))
    cp_src = b.path("cp-source")
    with open(cp_src, "wb") as out:
        for f in ("memory.bin", "state.bin"):
            with open(os.path.join(first, f), "rb") as inp:
                shutil.copyfileobj(inp, out, 16 * MIB)
    b.remove(first)
    snap = {"pmuvm": [], "cp": [], "dd": []}
    last = None
    for r in range(reps):
        dst = b.path("cp-copy")
        t = b.cp(cp_src, dst)
        b.remove(dst)
        snap["cp"].append(mibps(nbytes, t))
        t_dd = b.dd(cp_src, dst)
        b.remove(dst)
        snap["dd"].append(mibps(nbytes, t_dd))
        d = b.path("snapshot")
        j = b.ctl(api, "vm.snapshot", {"destination_url": "file://" + d})
        got = sum(os.path.getsize(os.path.join(d, f)) for f in ("memory.bin", "state.bin"))
        snap["pmuvm"].append(mibps(got, j["milliseconds"] / 1000))
        print(f"rep {r + 1} snapshot: cp {nbytes} B in {t * 1000:7.1f} ms ({snap['cp'][-1]:6.1f} "
              f"MiB/s), dd bs=4M {t_dd * 1000:7.1f} ms ({snap['dd'][-1]:6.1f} MiB/s); "
              f"vm.snapshot {got} B in {j['milliseconds']:7.1f} ms "
              f"({snap['pmuvm'][-1]:6.1f} MiB/s)", flush=True)
        if last:
            b.remove(last)
        last = d
    b.ctl(api, "vm.shutdown")
    if source.wait() != 0:
        source.fail("exit status after vm.shutdown is not 0")
    b.remove(cp_src)

    memory_bin = os.path.join(last, "memory.bin")
    mem_bytes = os.path.getsize(memory_bin)
    restore = {"pmuvm": [], "cp": [], "cp_null": [], "lost": []}
    for r in range(reps):
        dst = b.path("cp-copy")
        t = b.cp(memory_bin, dst)
        b.remove(dst)
        restore["cp"].append(mibps(mem_bytes, t))
        t_null = b.cp(memory_bin, "/dev/null")
        restore["cp_null"].append(mibps(mem_bytes, t_null))
        rapi = b.path("restore.api")
        proc = Process([b.pmuvm, "restore", "--source", "file://" + last, "--log-level", "info",
                        "--api-socket", rapi], "restore")
        (_, m), = proc.wait_for("err", RESTORE_LINE.pattern)
        read_bytes, read_ms = int(m.group(1)), float(m.group(2))
        b.wait_for_socket(rapi, proc)
        lost = b.arena_checks(proc, source.tasks)
        restore["lost"] += lost
        b.end(proc, rapi, lost)
        restore["pmuvm"].append(mibps(read_bytes, read_ms / 1000))
        print(f"rep {r + 1} restore: cp {mem_bytes} B in {t * 1000:7.1f} ms "
              f"({restore['cp'][-1]:6.1f} MiB/s), cp to /dev/null {t_null * 1000:7.1f} ms "
              f"({restore['cp_null'][-1]:6.1f} MiB/s); restore read {read_bytes} B in "
              f"{read_ms:7.1f} ms ({restore['pmuvm'][-1]:6.1f} MiB/s); {verdict(lost)}", flush=True)
    # The file read and its checksum by xxHash's own tool (pmuvm's XXH64 comes from the same
    # libxxhash), for scale.
    start = time.monotonic()
    subprocess.run(["xxhsum", "-H1", memory_bin], check=True, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL)
    restore["xxhsum_mibps"] = mibps(mem_bytes, time.monotonic() - start)
    print(f"xxhsum -H1 memory.bin: {restore['xxhsum_mibps']:.1f} MiB/s", flush=True)
    b.remove(last)
    return snap, restore


def lwp_part(b, mem, reps):
    print(f"== 4. live migration of a {mem} MiB guest profiling with LWP (lwp_forever: "
          "instructions and branches events, stepped by the precise backend), "
          f"{reps} repetition(s)", flush=True)
    runs = []
    for r in range(reps):
        s, _, _ = migrate_until_good(b, lambda: b.start_guest(mem, profiling=True),
                                     f"migration of a profiling {mem} MiB guest", b.failures)
        if s["failure"]:
            continue
        runs.append(s)
        print(f"rep {r + 1}: total {s['total_ms']:8.1f} ms, downtime {s['downtime_ms']:7.1f} ms, "
              f"final {s['final_pages']} pages, state {s['state_bytes']} B; "
              f"{verdict(s['lost'])}", flush=True)
    return runs


def precopy_part(b, rates):
    print(f"== 3. pre-copy rounds of a 128 MiB guest dirtying RATE pages/s "
          f"(cycling through {ARENA_MIB} MiB)", flush=True)
    results = {}
    def start(rate):
        source, api = b.start_guest(128, rate=rate, copies=1)
        source.wait_for("out", RATE_LINE.pattern, 2)  # two seconds at the rate
        return source, api

    for rate in rates:
        s, source, dest = migrate_until_good(b, lambda: start(rate),
                                             f"pre-copy at {rate} pages/s", b.failures)
        if s["failure"]:
            results[rate] = None
            continue
        lo, hi = s["window"]
        # What the guest says it reached while pre-copy ran (its per-second lines, on the source
        # until the hand-over, then on the destination).
        during = [int(m.group(1)) for p in (source, dest) for t, l in p.lines["out"]
                  for m in [RATE_LINE.search(l)] if m and lo <= t <= hi + 1.0]
        before = [int(m.group(1)) for t, l in source.lines["out"] for m in [RATE_LINE.search(l)]
                  if m and t < lo]
        s["reached_before"] = before[-1] if before else None
        s["reached_during"] = (min(during), max(during)) if during else None
        results[rate] = s
        print(f"rate {rate:6} pages/s: rounds {s['pages_per_round']}, final {s['final_pages']}, "
              f"downtime {s['downtime_ms']:.1f} ms, total {s['total_ms']:.1f} ms; round 0 "
              f"{s['round0_ms']:.0f} ms, rounds 1.. took {s['round_ms']} ms; guest reached "
              f"{s['reached_before']} pages/s before, {s['reached_during']} during; "
              f"{verdict(s['lost'])}", flush=True)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pmuvm")
    ap.add_argument("dirty_pages", help="guest/programs/dirty_pages")
    ap.add_argument("--sizes", default="128,256,512", help="guest MiB for live migration")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--snapshot-mem", type=int, default=512)
    ap.add_argument("--rates", default="2000,10000,25000", help="pages/s for the pre-copy part")
    ap.add_argument("--dir", default="/tmp", help="where the scratch directory goes")
    ap.add_argument("--parts", default="migration,snapshot,precopy,lwp",
                    help="which of the four measurements to run")
    ap.add_argument("--lwp-mem", type=int, default=256, help="guest MiB for the LWP migration")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    if not parts or parts - {"migration", "snapshot", "precopy", "lwp"}:
        sys.exit("migration_bench: --parts takes migration, snapshot, precopy and/or lwp")
    if not os.path.exists("/dev/kvm"):
        sys.exit("migration_bench: no /dev/kvm (run it through tools/kvm-host/run)")
    sizes = [int(x) for x in a.sizes.split(",")]
    rates = [int(x) for x in a.rates.split(",")]
    b = Bench(a)
    started = time.monotonic()
    try:
        mig = migration_part(b, sizes, a.reps) if "migration" in parts else {}
        snap, restore = (snapshot_part(b, a.snapshot_mem, a.reps) if "snapshot" in parts
                         else (None, None))
        pre = precopy_part(b, rates) if "precopy" in parts else {}
        lwp = lwp_part(b, a.lwp_mem, a.reps) if "lwp" in parts else []
    except Failure as e:
        sys.exit(f"migration_bench: {e}")
    finally:
        shutil.rmtree(b.work, ignore_errors=True)
    bad = summary(a.reps, a.snapshot_mem, time.monotonic() - started, mig, snap, restore, pre,
                  lwp, a.lwp_mem, b.failures)
    sys.exit(1 if bad else 0)


def summary(reps, snapshot_mem, seconds, mig, snap, restore, pre, lwp, lwp_mem, failures):
    """Prints the tables; returns whether anything went wrong (lost writes, failed hand-overs)."""
    med = statistics.median

    def spread(values):
        v = list(values)
        return f"{med(v):.0f} ({min(v):.0f}-{max(v):.0f})"

    print(f"\n== summary: medians (min-max) of {reps}; {seconds:.0f} s in all")
    print("live migration, idle guest  total ms          downtime ms    round 0 MiB/s  "
          "round 0 pages  state bytes")
    for mem, runs in mig.items():
        if not runs:
            print(f"  {mem:4} MiB                 no migration succeeded (see below)")
            continue
        print(f"  {mem:4} MiB                 {spread(r['total_ms'] for r in runs):16}  "
              f"{spread(r['downtime_ms'] for r in runs):13}  "
              f"{spread(r['round0_mibps'] for r in runs):13}  "
              f"{med(r['pages_per_round'][0] for r in runs):13}  {runs[0]['state_bytes']}")
    if snap is not None:
        print(f"snapshot/restore of {snapshot_mem} MiB, MiB/s  pmuvm          baseline        "
              "pmuvm/baseline (goal >= 0.5 x cp)")
        print("  (ratios: the median of each repetition's ratio)")
        rows = [("snapshot write vs cp FILE COPY", snap["pmuvm"], snap["cp"]),
                ("snapshot write vs dd bs=4M", snap["pmuvm"], snap["dd"]),
                ("restore read vs cp FILE COPY", restore["pmuvm"], restore["cp"]),
                ("restore read vs cp FILE /dev/null", restore["pmuvm"], restore["cp_null"])]
        for name, ours, base in rows:
            # per repetition (cp and pmuvm ran back to back), then the median: steadier on a busy host
            ratio = med(o / b for o, b in zip(ours, base))
            print(f"  {name:34}  {spread(ours):13}  {spread(base):14}  {ratio:5.2f}")
        print(f"  (xxhsum -H1 of memory.bin here: {restore['xxhsum_mibps']:.0f} MiB/s)")
    print("pre-copy, 128 MiB guest     pages sent per round + final (paused); downtime")
    for rate, s in pre.items():
        if s is None:
            print(f"  {rate:6} pages/s: no migration succeeded (see below)")
            continue
        rounds = s["pages_per_round"]
        shown = rounds if len(rounds) <= 10 else rounds[:5] + ["..."] + rounds[-4:]
        conv = "converged" if len(rounds) < 30 else "did not converge"
        print(f"  {rate:6} pages/s: {len(rounds):2} rounds, {conv}: {shown} + "
              f"{s['final_pages']}; downtime {s['downtime_ms']:.0f} ms, total {s['total_ms']:.0f} ms")
        print(f"      guest reached {s['reached_before']} pages/s before migrating, "
              f"{s['reached_during']} (min, max per second) while pre-copy ran")
    if lwp:
        downtime = med(s["downtime_ms"] for s in lwp)
        print(f"live migration, {lwp_mem} MiB guest profiling with LWP (instructions, branches): "
              f"downtime {spread(s['downtime_ms'] for s in lwp)} ms (goal <= 50: "
              f"{'met' if downtime <= 50 else 'NOT met'}), total "
              f"{spread(s['total_ms'] for s in lwp)} ms, state {lwp[0]['state_bytes']} B "
              f"({lwp[0]['state_bytes'] / 1024:.1f} KiB for the machine and its vCPU)")
    restore = restore or {"lost": [], "pmuvm": []}
    lost = ([(f"migration of {m} MiB", l) for m, runs in mig.items() for r in runs for l in r["lost"]] +
            [("restore", l) for l in restore["lost"]] +
            [(f"pre-copy at {r} pages/s", l) for r, s in pre.items() if s for l in s["lost"]] +
            [("LWP-profiling migration", l) for s in lwp for l in s["lost"]])
    checks = (sum(len(runs) for runs in mig.values()) + len(restore["pmuvm"]) +
              sum(1 for s in pre.values() if s) + len(lwp))
    if lost:
        print(f"integrity: LOST WRITES in {len(lost)} of {checks} migrated/restored VMs:")
        for what, line in lost:
            print(f"  {what}: {line}")
    else:
        print(f"integrity: after each of the {checks} successful migrations and restores every "
              "guest task found its whole arena holding exactly what it had written")
    if failures:
        print(f"failed hand-overs (no working VM at the destination; each tried again, at most "
              f"{ATTEMPTS} attempts): {len(failures)}")
        for what, why in failures:
            print(f"  {what}: {why}")
    else:
        print("failed hand-overs: none")
    return bool(lost or failures)

if __name__ == "__main__":
    main()
