#!/bin/bash
# The forbidden-instruction checker must reject a sample that contains one instruction of each
# kind it looks for (forbidden_insns_sample.S) and name each of them.
set -uo pipefail
checker=$1 sample=$2
out=$("$checker" "$sample" 2>&1)
rc=$?
echo "$out"
if [[ $rc -ne 1 ]]; then
  echo "FAIL: checker exited $rc on the forbidden sample, expected 1"
  exit 1
fi
missing=0
for what in "SSE/AVX register" "MMX register" "x87 register" "xsave/xrstor" "fxsave/fxrstor" \
            "cmpxchg8b/16b" "int n / int3" "CET endbr" "ud2 outside the syscall trampoline" \
            "SSE2 fence" "BMI/ABM"; do
  if ! grep -qF -- "$what" <<<"$out"; then
    echo "FAIL: the checker did not report: $what"
    missing=1
  fi
done
# ud2 inside a function named syscall_trampoline is allowed in kernel mode.
if grep -q "<syscall_trampoline>: ud2" <<<"$out"; then
  echo "FAIL: ud2 inside syscall_trampoline was flagged"
  missing=1
fi
[[ $missing -eq 0 ]] && echo "PASS: the checker reports every forbidden kind"
exit $missing
