#!/bin/bash
# Disassembles ELF files with objdump and fails if they contain an instruction the PVM host's
# CPL-0 emulator cannot run (DESIGN.md §3: KVM's instruction emulator stops with
# KVM_EXIT_INTERNAL_ERROR on SSE/AVX, xsave/xrstor, cmpxchg16b and int n/int3 at CPL 0), or one
# the emulator is unlikely to know (CET endbr, BMI/ABM, fences, x87, MMX, ...).
#
# usage: check_no_forbidden_insns.sh [--user] FILE...
#   default: kernel mode; `ud2` is allowed only inside the symbol `syscall_trampoline`
#   --user:  user-program mode; `ud2` is not allowed anywhere
# Exit status: 0 clean, 1 forbidden instructions found, 2 usage/tool error.
set -euo pipefail

mode=kernel
if [[ ${1:-} == --user ]]; then
  mode=user
  shift
fi
if [[ $# -eq 0 ]]; then
  echo "usage: $0 [--user] FILE..." >&2
  exit 2
fi
OBJDUMP=${OBJDUMP:-objdump}
if ! command -v "$OBJDUMP" >/dev/null 2>&1; then
  echo "$0: $OBJDUMP not found" >&2
  exit 2
fi

status=0
for file in "$@"; do
  if [[ ! -f $file ]]; then
    echo "$0: $file: no such file" >&2
    exit 2
  fi
  if ! listing=$("$OBJDUMP" -d --no-show-raw-insn -w "$file"); then
    echo "$0: $OBJDUMP failed on $file" >&2
    exit 2
  fi
  if ! printf '%s\n' "$listing" | awk -v file="$file" -v mode="$mode" '
    function flag(reason) {
      printf "%s: %s <%s>: %s    <- %s\n", file, addr, sym, insn, reason
      if (lastbad != NR) bad++
      lastbad = NR
    }
    /^[0-9a-f]+ <.*>:$/ {
      sym = $2; gsub(/[<>:]/, "", sym); next
    }
    /^ *[0-9a-f]+:\t/ {
      line = $0
      addr = line; sub(/:.*/, "", addr); gsub(/ /, "", addr)
      insn = line; sub(/^ *[0-9a-f]+:\t/, "", insn); sub(/[ \t]+#.*$/, "", insn)
      n++
      # The mnemonic: the first word after any prefixes.
      m = insn
      while (m ~ /^(lock|rep|repe|repz|repne|repnz|data16|addr32|notrack|bnd|rex[.a-zA-Z]*|cs|ds|ss|es|fs|gs) /)
        sub(/^[^ ]+ +/, "", m)
      split(m, parts, /[ \t]+/); mn = parts[1]
      ops = substr(m, length(mn) + 1)

      if (ops ~ /%[xyz]mm[0-9]/)            flag("SSE/AVX register")
      else if (ops ~ /%mm[0-7]/)            flag("MMX register")
      else if (ops ~ /%st(\(|$|,| )/)       flag("x87 register")
      else if (ops ~ /%k[0-7]([^0-9]|$)/)   flag("AVX-512 mask register")
      if (mn ~ /^(xsave|xrstor|xsaveopt|xsavec|xsaves|xrstors)(64)?$/) flag("xsave/xrstor")
      if (mn ~ /^(fxsave|fxrstor)(64)?$/)   flag("fxsave/fxrstor")
      if (mn ~ /^f/)                        flag("x87 instruction")
      if (mn ~ /^(emms|femms|ldmxcsr|stmxcsr|vldmxcsr|vstmxcsr|vzeroupper|vzeroall)$/) flag("SSE/AVX state instruction")
      if (mn ~ /^cmpxchg(16b|8b)$/)          flag("cmpxchg8b/16b")
      if (mn ~ /^(int3|int|int1|icebp|into)$/) flag("int n / int3")
      if (mn ~ /^endbr(32|64)$/)            flag("CET endbr (compile with -fcf-protection=none)")
      if (mn ~ /^(tzcnt|lzcnt|popcnt|movbe|adcx|adox|andn|bextr|blsi|blsmsk|blsr|bzhi|mulx|pdep|pext|rorx|sarx|shlx|shrx|crc32[bwlq]?)$/) flag("BMI/ABM/SSE4.2 integer instruction")
      if (mn ~ /^(lfence|sfence|mfence|clflush|clflushopt|clwb|movnti|prefetch[a-z0-9]*)$/) flag("SSE2 fence/cache-control instruction")
      if (mn ~ /^(rdrand|rdseed|rdpid|xbegin|xend|xabort|xtest|xgetbv|xsetbv)$/) flag("instruction the emulator may not implement")
      if (mn ~ /^(ud0|ud1)$/)               flag("undefined instruction")
      if (mn == "ud2" && !(mode == "kernel" && sym == "syscall_trampoline")) flag("ud2 outside the syscall trampoline")
      if (insn ~ /\(bad\)/)                 flag("undecodable bytes in code")
    }
    END {
      printf "%s: %d instructions checked (%s mode), %d forbidden\n", file, n, mode, bad
      exit (bad > 0 || n == 0) ? 1 : 0
    }'; then
    status=1
  fi
done
exit $status
