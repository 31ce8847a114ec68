#!/usr/bin/env bash
# Runs one GoogleTest suite on a KVM host (see kvm_host_test.bzl): directly where /dev/kvm opens,
# else inside the nested host. Arguments: [--vcpus N] [--mem MiB] SUITE [ARGS…].
set -u
host_args=()
while [[ $# -gt 0 && $1 == --* ]]; do host_args+=("$1" "$2"); shift 2; done
suite=$1
shift
runner="${TEST_SRCDIR:?not run by bazel test}/pmuvm/tools/kvm-host/run"
# The suite's own time limit is Bazel's; the runner's is a little shorter so that a hung guest is
# reported by the runner (exit 124, with the nested host's boot log) rather than killed silently.
limit=$(( ${TEST_TIMEOUT:-900} - 30 ))
start=$SECONDS
"$runner" "${host_args[@]}" --timeout "$limit" -- "$PWD/$suite" "$@"
status=$?
# 125: the nested host itself broke (seen about once in 30 boots: a QEMU 10 TCG assertion while
# the host boots), not the suite. One more try if time is left; the suite's own failures
# (any other status) are never retried, and the first attempt's reason stays in the log.
left=$(( limit - (SECONDS - start) ))
if (( status == 125 && left > 120 )); then
  echo "run_in_kvm_host: no KVM host on the first try (reason above); trying once more (${left} s left)" >&2
  exec "$runner" "${host_args[@]}" --timeout "$left" -- "$PWD/$suite" "$@"
fi
exit "$status"
