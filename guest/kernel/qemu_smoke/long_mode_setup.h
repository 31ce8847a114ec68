/* The part of the switch to long mode that the shim's BSP (pvh_entry.S) and AP (ap.S) paths share,
 * with pmuvm's boot values (vmm/boot/long_mode.cc): CR4 |= OSXMMEXCPT|OSFXSR|PAE, CR3 = the
 * identity tables at 0x8000, EFER |= NXE|LMA|LME|SCE. Each caller then sets CR0 itself (the AP
 * comes out of reset with CD/NW set and overwrites CR0; the BSP ORs its bits in). 32-bit code;
 * clobbers eax, ecx, edx. */
.macro LONG_MODE_SETUP
        mov %cr4, %eax
        or $0x620, %eax
        mov %eax, %cr4
        mov $0x8000, %eax
        mov %eax, %cr3
        mov $0xC0000080, %ecx
        rdmsr
        or $0xD01, %eax
        wrmsr
.endm
