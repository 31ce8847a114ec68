/* LD_PRELOAD shim for GuestBoot.AKvmWhoseBreakpointsNeverFireIsRefusedAtStart: a KVM whose
 * instruction breakpoints and single steps never stop the guest, as on a PVM KVM (kvm_pvm; see
 * tools/kvm-host/README.md), which cannot be had here. KVM_SET_GUEST_DEBUG loses its
 * KVM_GUESTDBG_USE_HW_BP and KVM_GUESTDBG_SINGLESTEP bits; every other call goes to the real
 * ioctl. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <linux/kvm.h>
#include <stdarg.h>
#include <sys/ioctl.h>

int ioctl(int fd, unsigned long request, ...) {
  static int (*real)(int, unsigned long, ...);
  va_list ap;
  va_start(ap, request);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  if (!real) real = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
  if (request == KVM_SET_GUEST_DEBUG && arg) {
    struct kvm_guest_debug copy = *(const struct kvm_guest_debug *)arg;
    copy.control &= ~(unsigned)(KVM_GUESTDBG_USE_HW_BP | KVM_GUESTDBG_SINGLESTEP);
    return real(fd, request, &copy);
  }
  return real(fd, request, arg);
}
