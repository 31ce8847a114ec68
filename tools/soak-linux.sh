#!/usr/bin/env bash
# Soak of the KVM stepper under Linux (kept in the tree, not run by CI):
#   tools/soak-linux.sh [N]      N Linux boots counting with LWP and N counting with perf
# Every boot runs the stepper's window programs (guest/linux: signal_count, rep_count, self_tf,
# int3_count, ptrace_check step and bp, vdso_count), each of which checks its own exact value
# and exits non-zero otherwise; a boot is exact when pmuvm exits 0 (init's worst status) after
# all seven said "exited 0". Perf boots also run Debian's perf (guest/linux/perf_checks: perf stat over
# loop_known, the load that double-faulted under one TCG thread before the nested host had one
# vCPU) and must print its exact counts, 200004 instructions and 100000 branches. LWP boots use --cpu amd-lwp, perf boots --cpu intel-netburst (Linux's P4
# driver). Each mode runs its N boots one after the other in one nested KVM host (one TCG
# thread, one vCPU: tools/kvm-host/README.md), the two modes side by side. Prints one line per
# boot and "soak: lwp X/N exact, perf Y/N exact"; exit status 0 only when all 2N were exact.
# The console output of a boot that was not exact stays in the work directory it names.
# About 1–2 minutes per boot on a 2-core machine: N=20 takes 30–45 minutes.
#   (inside the nested host it calls itself: soak-linux.sh --boots MODE N DIR)
set -euo pipefail
here=$(cd "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)

window_programs() {
  local m=$1
  echo "signal_count $m 100 , rep_count $m , self_tf $m 10 , int3_count $m 10 ," \
       "ptrace_check $m step 50 , ptrace_check $m bp 50 , vdso_count $m"
}

if [[ ${1:-} == --boots ]]; then  # inside the nested host: N boots of one mode
  mode=$2 n=$3 dir=$4
  case $mode in
    lwp) cpu=amd-lwp initrd=$dir/initramfs.cpio cmdline="console=ttyS0 -- $(window_programs lwp)" ;;
    perf) cpu=intel-netburst initrd=$dir/initramfs_perf.cpio
          cmdline="console=ttyS0 nmi_watchdog=0 -- $(window_programs perf) , @perf_checks" ;;
  esac
  exact=0
  for ((i = 1; i <= n; i++)); do
    start=$SECONDS
    status=0
    "$dir/pmuvm" run --stats --cpu "$cpu" --mem 512 --kernel "$dir/bzImage" --initrd "$initrd" \
      --cmdline "$cmdline" >"$dir/$mode.$i.out" 2>&1 || status=$?
    # (the serial console ends its lines with CR LF)
    text=$(tr -d '\r' <"$dir/$mode.$i.out")
    exact_counts=1
    [[ $mode == perf ]] && { grep -q '^200004;;instructions:u;' <<<"$text" &&
                             grep -q '^100000;;r52001e0000000000:u;' <<<"$text" || exact_counts=0; }
    windows=$(grep -cE '^init: (signal_count|rep_count|self_tf|int3_count|ptrace_check|vdso_count) exited 0$' <<<"$text")
    if ((status == 0 && exact_counts == 1 && windows == 7)); then
      exact=$((exact + 1))
      echo "soak: $mode boot $i/$n exact ($((SECONDS - start)) s)"
      rm -f "$dir/$mode.$i.out"
    else
      echo "soak: $mode boot $i/$n NOT exact (pmuvm status $status, $((SECONDS - start)) s):" \
           "$dir/$mode.$i.out"
      grep -E '^(init|signal_count|rep_count|self_tf|int3_count|ptrace_check|vdso_count):|panic|fault|instructions:u' \
        "$dir/$mode.$i.out" | head -20 | sed 's/^/    /'
    fi
  done
  echo "$exact" >"$dir/$mode.exact"
  exit 0
fi

n=${1:-20}
[[ $n =~ ^[1-9][0-9]*$ && $# -le 1 ]] || { echo "usage: tools/soak-linux.sh [N]" >&2; exit 2; }
cd "$here/.."
started=$SECONDS
targets=(//vmm:pmuvm //guest_kernel_patches:bzImage //guest/linux:initramfs
         //guest/linux:initramfs_perf)
bazel build "${targets[@]}"
# A copy: a build during the soak does not change what it runs.
dir=$(mktemp -d "${TMPDIR:-/tmp}/soak-linux.XXXXXX")
cp bazel-bin/vmm/pmuvm bazel-bin/guest_kernel_patches/bzImage bazel-bin/guest/linux/initramfs.cpio \
   bazel-bin/guest/linux/initramfs_perf.cpio "$dir/"
echo "soak: $n boots with LWP and $n with perf, in $dir"
pids=()
for mode in lwp perf; do
  KVM_HOST_QUIET=1 tools/kvm-host/run --timeout $((n * 900)) -- "$here/soak-linux.sh" --boots \
    "$mode" "$n" "$dir" &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
lwp=$(cat "$dir/lwp.exact" 2>/dev/null || echo 0)
perf=$(cat "$dir/perf.exact" 2>/dev/null || echo 0)
echo "soak: lwp $lwp/$n exact, perf $perf/$n exact ($(((SECONDS - started) / 60)) min)"
((failed == 0 && lwp == n && perf == n)) || exit 1
rm -rf "$dir"
