/* Creating the ring-3 tasks from the programs the VMM loaded (boot_info.programs).
 *
 * Each task gets its own page tables (mm.c: as_create) with
 *   - every PT_LOAD segment's pages at its ELF vaddr, user, writable if PF_W, NX unless PF_X
 *     (the VMM placed each segment's pages contiguously at segment.paddr);
 *   - the syscall trampoline page at TRAMPOLINE_VA (user, read + execute);
 *   - a USER_STACK_SIZE stack below USER_STACK_TOP (user, RW, NX), holding the SysV x86-64
 *     process entry block: RSP -> argc, argv[0..argc-1], NULL, envp NULL, auxv AT_NULL (0, 0);
 *     the argument strings sit above it, RSP is 16-byte aligned, RDX = 0 (no atexit function).
 * A program that cannot be set up is reported on the console and counts as exited with
 * status 127. */
#include "guest/kernel/entry_stack.h"
#include "guest/kernel/kernel.h"


#define TASK_SETUP_FAILED 127u

static uint64_t page_down(uint64_t a) { return a & ~(uint64_t)(PAGE_SIZE - 1); }
static uint64_t page_up(uint64_t a) { return (a + PAGE_SIZE - 1) & ~(uint64_t)(PAGE_SIZE - 1); }

static bool fail(struct task *t, const char *what, uint64_t a, uint64_t b) {
  kprintf("kernel: task %u (%s): cannot start: %s (%#llx, %#llx); exit status %u\n", t->id,
          t->name, what, (unsigned long long)a, (unsigned long long)b, TASK_SETUP_FAILED);
  return false;
}

static bool map_segments(struct task *t, const struct pmuvm_program *p) {
  bool entry_ok = false;
  if (p->segment_count == 0 || p->segment_count > PMUVM_MAX_SEGMENTS)
    return fail(t, "bad segment count", p->segment_count, PMUVM_MAX_SEGMENTS);
  for (uint32_t i = 0; i < p->segment_count; ++i) {
    const struct pmuvm_segment *s = &p->segments[i];
    if (s->memsz == 0) continue;
    if (s->vaddr < USER_BASE || s->vaddr >= USER_LIMIT || s->memsz > USER_LIMIT - s->vaddr)
      return fail(t, "segment outside the user range 0x400000..USER_LIMIT", s->vaddr, s->memsz);
    if ((s->vaddr ^ s->paddr) & (PAGE_SIZE - 1))
      return fail(t, "segment vaddr and paddr have different page offsets", s->vaddr, s->paddr);
    const uint64_t first = page_down(s->vaddr), end = page_up(s->vaddr + s->memsz);
    const uint64_t phys = page_down(s->paddr);
    if (phys + (end - first) > boot_info.ram_size || phys + (end - first) < phys)
      return fail(t, "segment lies outside guest RAM", s->paddr, s->memsz);
    const uint64_t flags = PTE_U | ((s->flags & PMUVM_SEG_W) ? PTE_W : 0) |
                           ((s->flags & PMUVM_SEG_X) ? 0 : PTE_NX);
    for (uint64_t va = first; va < end; va += PAGE_SIZE) {
      const int r = as_map(t->cr3, va, phys + (va - first), flags);
      if (r == -2) return fail(t, "two segments share a page", va, s->vaddr);
      if (r != 0) return fail(t, "cannot map segment page", va, (uint64_t)(int64_t)r);
    }
    if ((s->flags & PMUVM_SEG_X) && p->entry >= s->vaddr && p->entry < s->vaddr + s->memsz)
      entry_ok = true;
  }
  if (!entry_ok) return fail(t, "entry point is not in an executable segment", p->entry, 0);
  return true;
}

static bool build_stack(struct task *t, const struct pmuvm_program *p, uint64_t *rsp_out) {
  const uint64_t pages = USER_STACK_SIZE / PAGE_SIZE;
  const uint64_t bottom = USER_STACK_TOP - USER_STACK_SIZE;
  const uint64_t stack_phys = phys_alloc_pages(pages);
  for (uint64_t i = 0; i < pages; ++i)
    if (as_map(t->cr3, bottom + i * PAGE_SIZE, stack_phys + i * PAGE_SIZE,
               PTE_U | PTE_W | PTE_NX) != 0)
      return fail(t, "cannot map the user stack", bottom + i * PAGE_SIZE, 0);

  const uint64_t argc = p->argc, size = p->args_size;
  if (argc == 0 || argc > 1024 || size == 0 || size > 16384)
    return fail(t, "bad argument block (argc, size)", argc, size);
  if (p->args_paddr + size > boot_info.ram_size || p->args_paddr + size < p->args_paddr)
    return fail(t, "argument block outside guest RAM", p->args_paddr, size);
  uint64_t rsp;
  if (!build_entry_stack(phys_to_virt(stack_phys), bottom, USER_STACK_TOP,
                         phys_to_virt(p->args_paddr), size, argc, &rsp))
    return fail(t, "argument block does not hold argc NUL-terminated strings", argc, size);
  *rsp_out = rsp;
  return true;
}

static bool setup_task(struct task *t, const struct pmuvm_program *p) {
  t->cr3 = as_create();
  if (!map_segments(t, p)) return false;
  if (as_map(t->cr3, TRAMPOLINE_VA, kernel_virt_to_phys(syscall_trampoline), PTE_U) != 0)
    return fail(t, "cannot map the syscall trampoline", TRAMPOLINE_VA, 0);
  uint64_t rsp;
  if (!build_stack(t, p, &rsp)) return false;
  memset(&t->frame, 0, sizeof t->frame);
  t->frame.rip = p->entry;
  t->frame.cs = USER_CS;
  t->frame.rflags = RFLAGS_IF | 0x2;
  t->frame.rsp = rsp;
  t->frame.ss = USER_DS;
  return true;
}

void tasks_init(void) {
  task_count = boot_info.program_count;
  for (uint32_t i = 0; i < task_count; ++i) {
    const struct pmuvm_program *p = &boot_info.programs[i];
    struct task *t = &tasks[i];
    t->id = i + 1;
    memcpy(t->name, p->name, PMUVM_MAX_NAME);
    t->name[PMUVM_MAX_NAME - 1] = '\0';
    t->cpu = -1;
    t->pinned_cpu = -1;
    if (!setup_task(t, p)) {
      sched_task_failed_at_boot(t, TASK_SETUP_FAILED);
      continue;
    }
    kprintf("kernel: task %u: %s, argc %u, entry %#llx, %u segment(s), stack top %#llx\n", t->id,
            t->name, p->argc, (unsigned long long)p->entry, p->segment_count,
            (unsigned long long)USER_STACK_TOP);
    sched_start_task(t);
  }
}
