#!/usr/bin/env bash
# The README's main command: build pmuvm and the demo workload, boot the bundled guest under KVM
# and let the demo profile itself with virtual LWP, then print the LWP report.
# Extra arguments go to `pmuvm run` (e.g. --cpu amd-lwp-lite, --seed 7, --vcpus 2).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
bazel build -c opt //vmm:pmuvm //guest/programs:lwp_demo
exec bazel-bin/vmm/pmuvm run --lwp-report - "$@" -- bazel-bin/guest/programs/lwp_demo
