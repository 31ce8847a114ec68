#!/usr/bin/env bash
# Boots the bundled guest kernel under QEMU/TCG (guest/kernel/qemu_smoke: a PVH shim reproduces
# pmuvm's boot protocol) and checks task execution, arguments, syscalls, task switching, SMP and
# exit status. This is the only place the kernel runs on machines without /dev/kvm; it does not
# exercise pmuvm itself, the PVM quirks, LWP or the PV MSRs (see guest/README.md).
set -uo pipefail
root="${TEST_SRCDIR}/pmuvm"
run="${root}/guest/kernel/qemu_smoke/run.py"
bin="${root}/guest"
command -v qemu-system-x86_64 >/dev/null || { echo "qemu-system-x86_64 missing: run tools/setup.sh"; exit 1; }

failures=0
check() {  # check NAME EXPECTED_STATUS PATTERN... -- RUN_ARGS...
  local name=$1 want=$2; shift 2
  local patterns=()
  while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
  shift
  local out status
  out=$(python3 "$run" --bin "$bin" --timeout 60 "$@" 2>&1)
  status=$?
  local ok=1
  [[ $status -eq $want ]] || { echo "FAIL $name: status $status, expected $want"; ok=0; }
  for p in "${patterns[@]}"; do
    grep -qE -- "$p" <<<"$out" || { echo "FAIL $name: no line matching /$p/"; ok=0; }
  done
  if ((ok)); then echo "PASS $name"; else failures=$((failures + 1)); echo "$out" | tail -40; fi
}

check hello_arguments 0 'hello from hello \(3 arguments\)' 'argv\[2\] = "two"' -- hello:one,two
check exit_status 7 'exited with status 7' -- exit_code:7
check nonzero_status_wins 5 'exit status 5' -- exit_code:0 exit_code:5 exit_code:0
# With two failing tasks the first to *exit* decides, which depends on scheduling: either is right.
out=$(python3 "$run" --bin "$bin" --timeout 60 exit_code:5 exit_code:6 2>&1); status=$?
if [[ $status -eq 5 || $status -eq 6 ]]; then echo "PASS first_failure_decides"
else echo "FAIL first_failure_decides: status $status"; echo "$out" | tail -20; failures=$((failures + 1)); fi
check syscalls 0 -- smoke_test:sys
check two_tasks_one_vcpu 0 'A done' 'B done' -- yield_ping:4,A yield_ping:4,B
check two_vcpus 0 'A done' 'B done' -- --vcpus 2 yield_ping:20,A yield_ping:20,B
check time_slicing 0 -- smoke_test:spin,A smoke_test:spin,B

# Interleaving on one vCPU: B's first ping comes before A is done (yield switches tasks).
out=$(python3 "$run" --bin "$bin" --timeout 60 yield_ping:4,A yield_ping:4,B 2>&1)
a_done=$(grep -n 'A done' <<<"$out" | head -1 | cut -d: -f1)
b_first=$(grep -n 'B ping 1/4' <<<"$out" | head -1 | cut -d: -f1)
if [[ -n $a_done && -n $b_first && $b_first -lt $a_done ]]; then echo "PASS yield_interleaves"
else echo "FAIL yield_interleaves"; echo "$out" | tail -20; failures=$((failures + 1)); fi

exit $((failures > 0))
