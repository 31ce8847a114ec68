#!/usr/bin/env bash
# The README's main command: boot the bundled guest under KVM and profile the demo workload
# with virtual LWP. The VMM (`pmuvm run`, issue 3) does not exist yet: say so plainly.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
echo "pmuvm: the KVM VMM ('pmuvm run') is not implemented yet; only the LWP model (pmu/lwp) and its tests exist." >&2
echo "pmuvm: run tools/test.sh to exercise it." >&2
exit 2
