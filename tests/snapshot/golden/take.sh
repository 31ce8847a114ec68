#!/usr/bin/env bash
# Takes the golden snapshots of tests/snapshot/golden_state_test.cc again, after a change to what
# a component saves (and the bump of its kStateVersion): builds pmuvm and the two guest programs,
# runs each in a KVM host (tools/kvm-host/run: the nested one where this machine has none that
# works), snapshots it through the API socket, and writes NAME.state.bin.gz and
# NAME.manifest.json here (memory.bin is not kept).
#   lwp_kvm         --cpu amd-lwp, lwp_forever profiling itself, paused at 20000 counted
#                   instructions
#   netburst_guest  --cpu intel-netburst --stepper guest, netburst_sampler 160 997 paused at
#                   3000 counted instructions
# (the pause points are the test's anchors: the instructions each vCPU had counted).
set -euo pipefail
cd "$(dirname "$0")/../../.."
bazel build -c opt //vmm:pmuvm //guest/programs:lwp_forever //guest/programs:netburst_sampler
work="$(mktemp -d "${TMPDIR:-/tmp}/pmuvm-golden.XXXXXX")"
cp bazel-bin/vmm/pmuvm bazel-bin/guest/programs/lwp_forever bazel-bin/guest/programs/netburst_sampler "$work/"
cat > "$work/take" <<'INNER'
#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")"
snapshot() {  # NAME RUN-ARGUMENTS... (with --pause-at-instructions)
  local name=$1 socket=$PWD/$1.sock
  shift
  ./pmuvm run --api-socket "$socket" "$@" >"$name.out" 2>"$name.err" &
  local pid=$!
  for _ in $(seq 600); do ./pmuvm ctl --api-socket "$socket" vm.info >/dev/null 2>&1 && break; sleep 0.1; done
  for _ in $(seq 1200); do grep -q "pmuvm: paused" "$name.err" && break; sleep 0.1; done
  ./pmuvm ctl --api-socket "$socket" vm.snapshot "{\"destination_url\":\"file://$PWD/$name\"}"
  kill "$pid"
  wait "$pid" || true
  ./pmuvm ctl --api-socket "$socket" vm.info >/dev/null 2>&1 || true
}
snapshot lwp_kvm --pause-at-instructions 20000 -- ./lwp_forever
snapshot netburst_guest --cpu intel-netburst --stepper guest --pause-at-instructions 3000 -- \
  ./netburst_sampler 160 997
INNER
chmod +x "$work/take"
tools/kvm-host/run -- "$work/take"  # a usable /dev/kvm here, else the nested KVM host
for name in lwp_kvm netburst_guest; do
  gzip -9 -n -c "$work/$name/state.bin" > "tests/snapshot/golden/$name.state.bin.gz"
  cp "$work/$name/manifest.json" "tests/snapshot/golden/$name.manifest.json"
  chmod 644 "tests/snapshot/golden/$name.manifest.json"
done
echo "golden snapshots written to tests/snapshot/golden/ (work files in $work)"
