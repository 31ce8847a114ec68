#!/usr/bin/env bash
# Builds fuzz targets of tests/fuzz/BUILD with --config=fuzz (clang-14, libFuzzer, ASan, UBSan;
# .bazelrc) and fuzzes each for a while from a working copy of its checked-in seeds:
#
#   tests/fuzz/run_fuzzer.sh [FUZZER...]     # from any directory; no FUZZER: all of them
#   FUZZ_SECONDS=3600 tests/fuzz/run_fuzzer.sh manifest_fuzz
#
# Environment:
#   FUZZ_SECONDS      run time per fuzzer in seconds (default 60; libFuzzer's -max_total_time)
#   FUZZ_WORK_DIR     working corpora, logs and crash artifacts (default: a new private
#                     directory from mktemp -d, named in each summary line); nothing is written
#                     into the source tree
#   FUZZ_OUTPUT_BASE  Bazel output base of the fuzz build (default ~/.cache/pmuvm/bazel-fuzz-KEY,
#                     KEY from this checkout's path):
#                     another C++ toolchain, so it keeps its own cache and leaves the normal
#                     build's alone; its Bazel server is shut down at the end
#
# Each runs with -rss_limit_mb=1024 (block_exactness_fuzz: 2560, below) -malloc_limit_mb=256: an
# input that makes a target allocate that much is a finding, as a crash is.
# Prints one summary line per fuzzer; exits 1 when one found a crash, 2 when the build failed.
# Replay a crash: BINARY ARTIFACT (the summary line names both).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

fuzzers=("$@")
# No names: every pmuvm_fuzzer of tests/fuzz/BUILD, in its order (one list, kept there).
((${#fuzzers[@]} == 0)) &&
  mapfile -t fuzzers < <(sed -n '/^pmuvm_fuzzer(/,/)/s/^ *name = "\([a-z_]*\)",$/\1/p' tests/fuzz/BUILD)

seconds="${FUZZ_SECONDS:-60}"
work="${FUZZ_WORK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/pmuvm-fuzz.XXXXXX")}"
# One output base per checkout, as Bazel's own default is (a second clone must not share it).
workspace_key="$(pwd -P | md5sum | cut -c1-12)"
output_base="${FUZZ_OUTPUT_BASE:-${XDG_CACHE_HOME:-$HOME/.cache}/pmuvm/bazel-fuzz-${workspace_key}}"
bazel_fuzz() { bazel --output_base="${output_base}" "$@"; }

if ! command -v clang-14 >/dev/null; then
  echo "run_fuzzer.sh: clang-14 is missing (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi
targets=()
for f in "${fuzzers[@]}"; do targets+=("//tests/fuzz:${f}"); done
echo "== bazel build --config=fuzz ${targets[*]} (output base ${output_base})"
# A target that does not build is reported below, where its binary is missing.
bazel_fuzz build --config=fuzz "${targets[@]}" 2>&1 | grep -v "Cannot export local symbol"
bin="$(bazel_fuzz info --config=fuzz bazel-bin 2>/dev/null)"
status=0
for f in "${fuzzers[@]}"; do
  if [[ ! -x "${bin}/tests/fuzz/${f}" ]]; then
    echo "${f}: did not build (see above)"
    status=2
    continue
  fi
  seeds="tests/fuzz/$(sed -n "/name = \"${f}\"/,/)/s/.*seeds = \"\([^\"]*\)\".*/\1/p" tests/fuzz/BUILD)"
  corpus="${work}/${f}.corpus"
  artifacts="${work}/${f}.artifacts"
  log="${work}/${f}.log"
  mkdir -p "${corpus}" "${artifacts}"
  cp "${seeds}"/* "${corpus}/"  # new inputs go to the copy, never to the checked-in seeds
  # Memory is a finding too (DESIGN §4.12): an input of a few kilobytes that makes a target
  # allocate 256 MiB at once, or grow past 1 GiB, is an amplification a hostile peer could use.
  # block_exactness_fuzz's reference CPU (Unicorn 2.0.1, QEMU's TCG) maps a 1 GiB translation
  # buffer of its own and touches it as it translates (1063 MB resident on an empty input, 25 MB
  # of it heap): its resident limit is that much higher; its malloc limit is the same.
  rss_limit=1024
  [[ ${f} == block_exactness_fuzz ]] && rss_limit=2560
  "${bin}/tests/fuzz/${f}" -max_total_time="${seconds}" -timeout=30 -print_final_stats=1 \
    -rss_limit_mb="${rss_limit}" -malloc_limit_mb=256 \
    -artifact_prefix="${artifacts}/" "${corpus}" >"${log}" 2>&1
  rc=$?
  execs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "${log}" | grep -oE '[0-9]+$' | tail -n1)"
  found="$(find "${artifacts}" -type f | head -n5 | tr '\n' ' ')"
  size="$(find "${corpus}" -type f | wc -l)"
  if ((rc != 0)) || [[ -n "${found}" ]]; then
    tail -n 40 "${log}" >&2
    echo "${f}: ${execs:-?} executions in ${seconds} s, corpus ${size} inputs, CRASH FOUND (exit ${rc}) ${found}— binary ${bin}/tests/fuzz/${f}, log ${log}"
    ((status == 0)) && status=1
  else
    echo "${f}: ${execs:-?} executions in ${seconds} s, corpus ${size} inputs, no crash (log ${log})"
  fi
done
bazel_fuzz shutdown >/dev/null 2>&1 || true
exit "${status}"
