/* lwp_probe: executes the real LWP instructions (DESIGN.md §4.3) once, with no signal handler.
 *
 *   llwpcb rax   8f e9 f8 12 c0   (rax = 0: disable LWP; returns the previous LWPCB in rax)
 *   slwpcb rax   8f e9 f8 12 c8
 *
 * Without LWP (no CPUID bit, or the kernel switched it off) LLWPCB is #UD and the process dies
 * with SIGILL (shell status 132). With the guest_kernel_patches series and LWP enabled, the
 * kernel emulates both and the program prints what they returned and exits 0.
 * Build: gcc -static -O2 -o lwp_probe lwp_probe.c */
#include <stdio.h>

int main(void) {
  unsigned long rax = 0;
  printf("lwp_probe: executing llwpcb rax (rax = 0)\n");
  fflush(stdout);
  __asm__ volatile(".byte 0x8f, 0xe9, 0xf8, 0x12, 0xc0" : "+a"(rax) : : "memory");
  printf("lwp_probe: llwpcb returned previous LWPCB %#lx\n", rax);
  rax = 0x1234;
  __asm__ volatile(".byte 0x8f, 0xe9, 0xf8, 0x12, 0xc8" : "+a"(rax) : : "memory");
  printf("lwp_probe: slwpcb returned %#lx\n", rax);
  return 0;
}
