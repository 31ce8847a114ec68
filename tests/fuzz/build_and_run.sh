#!/usr/bin/env bash
# Builds the LWP MSR/LWPCB fuzzer (tests/fuzz/lwp_msr_fuzz.cc) with clang's libFuzzer, ASan and
# UBSan, and runs it for a while on a working copy of the checked-in seed corpus.
#
#   tests/fuzz/build_and_run.sh            # from any directory
#   FUZZ_SECONDS=600 FUZZ_BUILD_DIR=/tmp/f tests/fuzz/build_and_run.sh
#
# Environment:
#   FUZZ_SECONDS    run time in seconds (default 60; -max_total_time)
#   FUZZ_BUILD_DIR  binary, working corpus, log and crash artifacts (default: a new private
#                   directory from mktemp -d, named in the summary line; not a fixed /tmp path
#                   that another user could create first or another run share); nothing is
#                   written into the source tree
#   FUZZ_CXX        the compiler (default clang++-14, else clang++)
#
# Prints one summary line and exits non-zero when the fuzzer found a crash (or failed to build).
# To replay a crash: $FUZZ_BUILD_DIR/lwp_msr_fuzz $FUZZ_BUILD_DIR/artifacts/crash-...
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

build_dir="${FUZZ_BUILD_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/pmuvm-fuzz.XXXXXX")}"
seconds="${FUZZ_SECONDS:-60}"
cxx="${FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}"
if [[ -z "${cxx}" ]]; then
  echo "lwp_msr_fuzz: no clang++ found (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi

mkdir -p "${build_dir}/corpus" "${build_dir}/artifacts"
rm -f "${build_dir}"/artifacts/*

binary="${build_dir}/lwp_msr_fuzz"
"${cxx}" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I. \
  tests/fuzz/lwp_msr_fuzz.cc pmu/lwp/*.cc -o "${binary}"

# The fuzzer adds what it finds to the working corpus, never to tests/fuzz/corpus/.
cp tests/fuzz/corpus/* "${build_dir}/corpus/"

log="${build_dir}/fuzz.log"
set +e
"${binary}" -max_total_time="${seconds}" -timeout=30 -print_final_stats=1 \
  -artifact_prefix="${build_dir}/artifacts/" "${build_dir}/corpus" >"${log}" 2>&1
status=$?
set -e

execs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "${log}" | grep -oE '[0-9]+$' | tail -n1 || true)"
artifacts="$(find "${build_dir}/artifacts" -type f | head -n5 | tr '\n' ' ')"
corpus_size="$(find "${build_dir}/corpus" -type f | wc -l)"

if [[ ${status} -ne 0 || -n "${artifacts}" ]]; then
  tail -n 40 "${log}" >&2
  echo "lwp_msr_fuzz: ${execs:-?} executions in ${seconds}s, corpus ${corpus_size} inputs, CRASH FOUND (exit ${status}) ${artifacts}— log: ${log}"
  exit 1
fi
echo "lwp_msr_fuzz: ${execs:-?} executions in ${seconds}s, corpus ${corpus_size} inputs, no crash (log: ${log})"
