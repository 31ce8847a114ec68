#!/usr/bin/env bash
# The README's test command: installs what is missing, builds everything, runs every test
# (unit, conformance, property, end-to-end), runs the LWP fuzzer for FUZZ_SECONDS (default 60),
# and closes with one line `N passed, N failed` summed over all test cases.
set -uo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh || { echo "setup failed"; exit 1; }

echo "== bazel test //..."
bep=$(mktemp --suffix=.bep.json)
trap 'rm -f "$bep"' EXIT
bazel test //... --test_output=errors --build_event_json_file="$bep"
bazel_status=$?
# 0 = all passed, 3 = some tests failed (counted below); anything else is a build/infra failure.
if [[ $bazel_status -ne 0 && $bazel_status -ne 3 ]]; then
  echo "bazel test failed before running tests (exit $bazel_status)"
  echo "0 passed, 1 failed"
  exit 1
fi

echo "== fuzzing the LWP MSR/LWPCB surface for ${FUZZ_SECONDS:-60} s"
fuzz_result=pass
tests/fuzz/build_and_run.sh || fuzz_result=fail

echo "== summary"
python3 tools/test_summary.py "$bep" --extra "fuzz.lwp_msr_fuzz=$fuzz_result"
