#!/usr/bin/env bash
# Checks that pmuvm's C++ (pmu/, vmm/, tests/, bench/) is laid out as .clang-format says, with
# Debian's clang-format-14; prints each file that is not, and how to fix it. Exits 1 then.
#
#   tools/check_format.sh          check (tools/test.sh runs it; its result is one test case)
#   tools/check_format.sh --fix    lay the files out in place
#
# Tables laid out by hand sit between `// clang-format off` and `// clang-format on`. guest/ is
# left alone: its programs' code decides their exact counts, and it is C and assembly.
set -uo pipefail
cd "$(dirname "$0")/.."

formatter=clang-format-14
command -v "$formatter" >/dev/null ||
  { echo "check_format.sh: $formatter is missing (tools/setup.sh installs it)" >&2; exit 2; }
mapfile -t files < <(find pmu vmm tests bench -type f \( -name '*.cc' -o -name '*.h' \) | sort)

if [[ ${1:-} == --fix ]]; then
  "$formatter" -i "${files[@]}"
  echo "check_format.sh: laid out ${#files[@]} files"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$formatter" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  printf 'not laid out as .clang-format says: %s\n' "${bad[@]}"
  echo "check_format.sh: ${#bad[@]} of ${#files[@]} files; tools/check_format.sh --fix lays them out"
  exit 1
fi
echo "check_format.sh: all ${#files[@]} files laid out as .clang-format says"
