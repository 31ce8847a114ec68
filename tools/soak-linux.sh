#!/usr/bin/env bash
# Soak of the KVM stepper under Linux (issue 19; kept in the tree, not run by CI):
#   tools/soak-linux.sh [N]      N runs (default 20) of //tests/e2e:linux_stepper_test
# Each run boots the Linux guest three times in its own nested host (one TCG thread, as every
# suite): twice with LWP counting (plain, and paused every 300 exits) and once with perf counting
# on intel-netburst (Debian's perf stat/record/report/script), and checks every exact value. N
# runs are 2N LWP boots and N perf boots; tools/test.sh prints the verdict of each run and the
# wall time. Runs go two at a time on a 2-core machine: 20 runs take about 2 hours.
set -euo pipefail
n=${1:-20}
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "usage: tools/soak-linux.sh [N]" >&2; exit 2; }
exec "$(dirname -- "${BASH_SOURCE[0]}")/test.sh" --repeat "$n" //tests/e2e:linux_stepper_test
