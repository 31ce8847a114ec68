#!/usr/bin/env bash
# The README's test command: installs what is missing, builds everything, runs every test
# (unit, conformance, property, end-to-end), checks the C++ layout (tools/check_format.sh), runs
# each fuzzer for FUZZ_SECONDS (default 10), and closes with one line `N passed, N failed` summed
# over all test cases. Prints how long each phase and each test target took.
#
#   tools/test.sh                          everything (CI: .ci/run)
#   tools/test.sh --repeat N TARGET...     only TARGET(s), N runs each in a row, no cached
#                                          results, no fuzzing: a flaky suite shows here, e.g.
#                                          tools/test.sh --repeat 10 //tests/e2e:migration_test
set -uo pipefail
cd "$(dirname "$0")/.."

repeat=0 targets=(//...)
if [[ ${1:-} == --repeat ]]; then
  [[ ${2:-} =~ ^[1-9][0-9]*$ && $# -ge 3 ]] ||
    { echo "usage: tools/test.sh [--repeat N TARGET...]" >&2; exit 2; }
  repeat=$2
  targets=("${@:3}")
elif (($#)); then
  echo "usage: tools/test.sh [--repeat N TARGET...]" >&2
  exit 2
fi

started=$SECONDS
phase_started=$SECONDS
phases=()
end_phase() {  # records how long the phase that just ended took
  phases+=("$(printf '%6d s  %s' $((SECONDS - phase_started)) "$1")")
  phase_started=$SECONDS
}

tools/setup.sh || { echo "setup failed"; exit 1; }
end_phase "set-up (Debian packages, nested KVM host)"

bep=$(mktemp --suffix=.bep.json)
trap 'rm -f "$bep"' EXIT
# Everything a test needs is built first, so the test phase's time is the tests' own (the Linux
# guest kernel alone takes minutes on a cold cache).
echo "== bazel build ${targets[*]}"
if ! bazel build "${targets[@]}"; then
  echo "bazel build failed"
  echo "0 passed, 1 failed"
  exit 1
fi
end_phase "build"

echo "== bazel test ${targets[*]}"
run_options=()
((repeat > 0)) && run_options=(--runs_per_test="$repeat" --nocache_test_results)
bazel test "${targets[@]}" "${run_options[@]}" --test_output=errors --build_event_json_file="$bep"
bazel_status=$?
end_phase "tests"
# 0 = all passed, 3 = some tests failed (counted below); anything else is a build/infra failure.
if [[ $bazel_status -ne 0 && $bazel_status -ne 3 ]]; then
  echo "bazel test failed before running tests (exit $bazel_status)"
  echo "0 passed, 1 failed"
  exit 1
fi

extra=()
if ((repeat == 0)); then
  # The layout of the C++ (.clang-format), one case of the closing line.
  echo "== format"
  format_result=pass
  tools/check_format.sh || format_result=fail
  extra+=(--extra "format.clang_format=$format_result")

  # Every fuzz target of tests/fuzz/BUILD, built with --config=fuzz in its own output base,
  # FUZZ_SECONDS each (their seeds already ran as tests above, in this build).
  echo "== fuzzing: every target for ${FUZZ_SECONDS:=10} s"
  fuzz_log=$(mktemp --suffix=.fuzz.log)
  FUZZ_SECONDS=$FUZZ_SECONDS tests/fuzz/run_fuzzer.sh 2>&1 | tee "$fuzz_log" |
    grep -vE '^(\[[0-9]|INFO: |Loading|Analyzing|Target |  /|Starting local Bazel)'
  for fuzzer in $(sed -n 's/^\([a-z_]*_fuzz\): .*/\1/p' "$fuzz_log"); do
    fuzz_result=fail
    grep -q "^${fuzzer}: .*, no crash " "$fuzz_log" && fuzz_result=pass
    extra+=(--extra "fuzz.${fuzzer}=$fuzz_result")
  done
  grep -q '_fuzz: ' "$fuzz_log" || extra+=(--extra "fuzz.build=fail")
  rm -f "$fuzz_log"
  end_phase "fuzzing"
fi

echo "== time per phase"
printf '%s\n' "${phases[@]}"
printf '%6d s  in all\n' $((SECONDS - started))
echo "== summary"
python3 tools/test_summary.py "$bep" "${extra[@]}"
