#!/usr/bin/env bash
# The README's main command: build pmuvm and the demo workload, boot the bundled guest under KVM,
# let the demo profile itself with virtual LWP, and print the LWP report at the end.
# Where /dev/kvm is missing, the same pmuvm runs inside the nested KVM host of tools/kvm-host
# (one line on stderr says so; the first run prepares it, ~1 min, cached afterwards).
# Extra arguments go to `pmuvm run` (e.g. --cpu amd-lwp-lite, --seed 7, --vcpus 2).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel build -c opt //vmm:pmuvm //guest/programs:lwp_demo
# The progress line when stderr is a terminal here (in the nested KVM host it is a pipe).
progress=never
[[ -t 2 ]] && progress=always
exec tools/kvm-host/run -- bazel-bin/vmm/pmuvm run --lwp-report - --progress "${progress}" "$@" \
  -- bazel-bin/guest/programs/lwp_demo
