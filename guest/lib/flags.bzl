"""Compiler and linker flags shared by the bundled guest kernel and the guest user programs.

Everything under //guest is freestanding x86-64 code (no libc, no host headers beyond the
compiler's own freestanding ones). DESIGN.md §3: the host this must run on interprets guest
CPL-0 code with KVM's instruction emulator, which stops on SSE/AVX, xsave/xrstor, cmpxchg16b and
`int n`/`int3` at CPL 0. Hence general-registers-only code, no CET `endbr64` (an instruction the
emulator may not know), and no compiler-generated `ud2` traps. The same flags are used for user
programs for simplicity (they run natively at CPL 3 and could use SSE, but do not).

The kernel is linked at physical 1 MiB (< 2 GiB), so the default small code model with
-fno-pic is the right one (-mcmodel=kernel requires the top 2 GiB; -mcmodel=large is not needed).
The toolchain's own -fPIC/-fstack-protector/-fuse-ld=gold/-z relro come earlier on the command
line; the options below come later and override them.
"""

FREESTANDING_COPTS = [
    "-std=gnu11",
    "-O2",
    "-ffreestanding",
    "-fno-builtin",
    "-fno-stack-protector",
    "-fno-pic",
    "-fno-pie",
    "-mno-red-zone",
    "-mgeneral-regs-only",
    "-mno-mmx",
    "-mno-sse",
    "-mno-sse2",
    "-mno-avx",
    "-mcmodel=small",
    "-fcf-protection=none",
    "-fno-asynchronous-unwind-tables",
    "-fno-unwind-tables",
    "-fno-tree-loop-distribute-patterns",
    "-fno-isolate-erroneous-paths-dereference",
    "-fno-delete-null-pointer-checks",
    "-fno-strict-aliasing",
    "-fno-common",
    "-fno-omit-frame-pointer",
    # Keep the kernel's instruction mix boring for the emulator: no executed alignment NOPs
    # inside functions, and no `rep movs`/`rep stos` for inline copies (plain mov loops).
    "-falign-jumps=1",
    "-falign-loops=1",
    "-falign-labels=1",
    "-mstringop-strategy=loop",
    # DWARF line tables, so pmuvm's report can name file:line (vmm/report/code_places.h); GCC
    # generates the same code with and without -g.
    "-g",
    "-Wall",
    "-Wextra",
]

# Linker options for a static, non-PIE ET_EXEC with a custom linker script (append
# "-Wl,-T,$(location <script>)"). -fuse-ld=bfd: GNU ld implements PHDRS/ASSERT fully.
FREESTANDING_LINKOPTS = [
    "-nostdlib",
    "-static",
    "-no-pie",
    "-fuse-ld=bfd",
    "-Wl,--build-id=none",
    "-Wl,-z,norelro",
    "-Wl,-z,noexecstack",
    "-Wl,-z,max-page-size=4096",
    "-Wl,--no-gc-sections",
]
