/* lwp_bad: LLWPCB with a misaligned LWPCB. LWPCBs must be 16-byte aligned (DESIGN.md §4.1), so
 * WRMSR LWPMSR1 raises #GP in the kernel's emulation and the kernel ends this task with status
 * 11 and a console line naming LLWPCB. Reaching the end is a failure (exit 1). */
#include "guest/lib/lwp.h"
#include "guest/lib/pmuvm.h"

static uint8_t storage[2 * sizeof(struct lwpcb)] __attribute__((aligned(64)));
static uint8_t ring[64 * LWP_RECORD_SIZE] __attribute__((aligned(4096)));

int main(void) {
  struct lwp_info info;
  sys_lwp_info(&info);
  /* A well-formed LWPCB, except that it starts 8 bytes past a 16-byte boundary. */
  struct lwpcb *cb = (struct lwpcb *)(void *)(storage + 8);
  memset(storage, 0, sizeof storage);
  cb->buffer_size = sizeof ring;
  cb->buffer_base = (uint64_t)(uintptr_t)ring;
  cb->events[0].interval_id = lwp_event(LWP_EVENT_INSTRUCTIONS, 1000);
  printf_("lwp_bad: CPUID 8000001C eax=%#x; LLWPCB with misaligned LWPCB %p (expect status 11)\n",
          info.eax, (void *)cb);
  llwpcb(cb);
  print("lwp_bad: FAIL: LLWPCB with a misaligned LWPCB did not end the task\n");
  llwpcb(0);
  return 1;
}
