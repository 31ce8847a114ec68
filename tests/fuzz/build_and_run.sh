#!/usr/bin/env bash
# Builds one of the fuzzers with clang's libFuzzer, ASan and UBSan, and runs it for a while on a
# working copy of its checked-in seed corpus:
#   lwp_msr_fuzz      the LWP MSR/LWPCB surface (tests/fuzz/lwp_msr_fuzz.cc; the default)
#   model_state_fuzz  cache-model and branch-predictor state loaded from untrusted bytes
#   block_planner_fuzz  the KVM stepper's step controller (block stepping) over untrusted guest
#                     code, registers and exits
#   netburst_state_fuzz  NetBurst PMU state from untrusted bytes, and quiet_retirements()'s
#                     promise (no overflow or PMI before a run's last instruction)
#
#   tests/fuzz/build_and_run.sh [FUZZER]   # from any directory
#   FUZZ_SECONDS=600 FUZZ_BUILD_DIR=/tmp/f tests/fuzz/build_and_run.sh model_state_fuzz
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
# To replay a crash: $FUZZ_BUILD_DIR/FUZZER $FUZZ_BUILD_DIR/FUZZER.artifacts/crash-...
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

name="${1:-lwp_msr_fuzz}"
libs=()
case "${name}" in
  lwp_msr_fuzz) sources=(pmu/lwp/*.cc); seeds=tests/fuzz/corpus ;;
  model_state_fuzz)
    sources=(pmu/cache/cache_model.cc pmu/branch/branch_predictor.cc)
    seeds=tests/fuzz/corpus_model_state ;;
  block_planner_fuzz)
    sources=(vmm/precise/step_controller.cc vmm/precise/instruction_decoder.cc
             vmm/precise/kernel_entry_points.cc vmm/precise/debug_slots.cc
             vmm/precise/step_accountant.cc vmm/memory/guest_ram.cc vmm/memory/page_walker.cc
             pmu/cache/cache_model.cc pmu/branch/branch_predictor.cc)
    libs=(-lZydis)
    seeds=tests/fuzz/corpus_block_planner ;;
  netburst_state_fuzz) sources=(pmu/netburst/*.cc); seeds=tests/fuzz/corpus_netburst_state ;;
  *) echo "build_and_run.sh: no fuzzer ${name} (lwp_msr_fuzz, model_state_fuzz, block_planner_fuzz, netburst_state_fuzz)" >&2
     exit 2 ;;
esac

build_dir="${FUZZ_BUILD_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/pmuvm-fuzz.XXXXXX")}"
seconds="${FUZZ_SECONDS:-60}"
cxx="${FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}"
if [[ -z "${cxx}" ]]; then
  echo "${name}: no clang++ found (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi

mkdir -p "${build_dir}/${name}.corpus" "${build_dir}/${name}.artifacts"
rm -f "${build_dir}/${name}".artifacts/*

binary="${build_dir}/${name}"
"${cxx}" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I. \
  "tests/fuzz/${name}.cc" "${sources[@]}" "${libs[@]}" -o "${binary}"

# The fuzzer adds what it finds to the working corpus, never to the checked-in seeds.
cp "${seeds}"/* "${build_dir}/${name}.corpus/"

log="${build_dir}/${name}.log"
set +e
"${binary}" -max_total_time="${seconds}" -timeout=30 -print_final_stats=1 \
  -artifact_prefix="${build_dir}/${name}.artifacts/" "${build_dir}/${name}.corpus" >"${log}" 2>&1
status=$?
set -e

execs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "${log}" | grep -oE '[0-9]+$' | tail -n1 || true)"
artifacts="$(find "${build_dir}/${name}.artifacts" -type f | head -n5 | tr '\n' ' ')"
corpus_size="$(find "${build_dir}/${name}.corpus" -type f | wc -l)"

if [[ ${status} -ne 0 || -n "${artifacts}" ]]; then
  tail -n 40 "${log}" >&2
  echo "${name}: ${execs:-?} executions in ${seconds}s, corpus ${corpus_size} inputs, CRASH FOUND (exit ${status}) ${artifacts}— log: ${log}"
  exit 1
fi
echo "${name}: ${execs:-?} executions in ${seconds}s, corpus ${corpus_size} inputs, no crash (log: ${log})"
