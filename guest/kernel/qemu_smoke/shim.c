/* Test-only boot shim: reproduces pmuvm's boot protocol (vmm/boot/long_mode.cc, guest_loader.cc)
 * under QEMU so the bundled kernel can be smoke-tested with TCG. */
#include <elf.h>
#include <stdint.h>
#include "guest/abi/pmuvm_abi.h"

struct payload { const uint8_t *data; uint64_t size; const char *args; uint64_t args_size; const char *name; };
extern uint32_t payload_count;
extern struct payload payload_table[];
extern uint64_t ram_size_mib;
extern uint32_t vcpus;
void jump_to_kernel(uint64_t entry, uint64_t boot_info, uint64_t index) __attribute__((noreturn));

static void *memset_(void *d, int c, uint64_t n) { uint8_t *p = d; for (uint64_t i = 0; i < n; ++i) p[i] = (uint8_t)c; return d; }
static void *memcpy_(void *d, const void *s, uint64_t n) { uint8_t *p = d; const uint8_t *q = s; for (uint64_t i = 0; i < n; ++i) p[i] = q[i]; return d; }
void *memset(void *d, int c, unsigned long n) { return memset_(d, c, n); }
void *memcpy(void *d, const void *s, unsigned long n) { return memcpy_(d, s, n); }
static uint64_t page_up(uint64_t a) { return (a + 4095) & ~4095ull; }
static uint64_t page_down(uint64_t a) { return a & ~4095ull; }
static void out(const char *s) { while (*s) __asm__ volatile("outb %0, %1" : : "a"(*s++), "Nd"((uint16_t)0x3f8)); }

static uint64_t descriptor(uint8_t type, uint8_t dpl, int lm, int db) {
  uint64_t d = 0xFFFF;
  d |= (uint64_t)type << 40; d |= 1ull << 44; d |= (uint64_t)dpl << 45; d |= 1ull << 47;
  d |= 0xFull << 48; d |= (uint64_t)lm << 53; d |= (uint64_t)db << 54; d |= 1ull << 55;
  return d;
}

void shim_main(void) {
  out("shim: loading\n");
  uint64_t *gdt = (uint64_t *)0x1000;
  gdt[0] = 0;
  gdt[1] = descriptor(0xB, 0, 1, 0);
  gdt[2] = descriptor(0x3, 0, 0, 1);
  gdt[3] = descriptor(0x3, 3, 0, 1);
  gdt[4] = descriptor(0xB, 3, 1, 0);
  memset((void *)0x2000, 0, 0x1000);
  const uint64_t tss = 0x2000;
  gdt[5] = 0x67 | ((tss & 0xFFFFFF) << 16) | (0x9ull << 40) | (1ull << 47) | (((tss >> 24) & 0xFF) << 56);
  gdt[6] = tss >> 32;
  struct __attribute__((packed)) { uint16_t l; uint64_t b; } gdtr = {0x37, 0x1000};
  __asm__ volatile("lgdt %0\n\t"
                   "pushq $0x08\n\tlea 1f(%%rip), %%rax\n\tpushq %%rax\n\tlretq\n1:\n\t"
                   "mov $0x10, %%ax\n\tmov %%ax, %%ds\n\tmov %%ax, %%es\n\tmov %%ax, %%ss\n\tmov %%ax, %%fs\n\tmov %%ax, %%gs\n\t"
                   "mov $0x28, %%ax\n\tltr %%ax" : : "m"(gdtr) : "rax", "memory");

  /* kernel */
  const Elf64_Ehdr *k = (const Elf64_Ehdr *)payload_table[0].data;
  uint64_t kend = 0;
  for (int i = 0; i < k->e_phnum; ++i) {
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(payload_table[0].data + k->e_phoff) + i;
    if (ph->p_type != PT_LOAD || !ph->p_memsz) continue;
    memcpy((void *)ph->p_paddr, payload_table[0].data + ph->p_offset, ph->p_filesz);
    memset((void *)(ph->p_paddr + ph->p_filesz), 0, ph->p_memsz - ph->p_filesz);
    if (ph->p_paddr + ph->p_memsz > kend) kend = ph->p_paddr + ph->p_memsz;
  }
  struct pmuvm_boot_info *bi = (struct pmuvm_boot_info *)PMUVM_BOOT_INFO_ADDR;
  memset(bi, 0, sizeof *bi);
  bi->magic = PMUVM_BOOT_MAGIC;
  bi->version = PMUVM_BOOT_VERSION;
  bi->vcpu_count = vcpus;
  bi->ram_size = ram_size_mib << 20;
  bi->timer_hz = 100;
  bi->program_count = payload_count - 1;
  uint64_t next = page_up(kend);
  for (uint32_t p = 1; p < payload_count; ++p) {
    const struct payload *pl = &payload_table[p];
    const Elf64_Ehdr *e = (const Elf64_Ehdr *)pl->data;
    struct pmuvm_program *out_p = &bi->programs[p - 1];
    for (int i = 0; pl->name[i] && i < PMUVM_MAX_NAME - 1; ++i) out_p->name[i] = pl->name[i];
    out_p->entry = e->e_entry;
    uint32_t n = 0;
    for (int i = 0; i < e->e_phnum; ++i) {
      const Elf64_Phdr *ph = (const Elf64_Phdr *)(pl->data + e->e_phoff) + i;
      if (ph->p_type != PT_LOAD || !ph->p_memsz) continue;
      const uint64_t first = page_down(ph->p_vaddr), span = page_up(ph->p_vaddr + ph->p_memsz) - first;
      memset((void *)next, 0, span);
      memcpy((void *)(next + (ph->p_vaddr - first)), pl->data + ph->p_offset, ph->p_filesz);
      out_p->segments[n].vaddr = ph->p_vaddr;
      out_p->segments[n].paddr = next + (ph->p_vaddr - first);
      out_p->segments[n].memsz = ph->p_memsz;
      out_p->segments[n].flags = ph->p_flags & 7;
      ++n;
      next += span;
    }
    out_p->segment_count = n;
    /* args: name\0 args... (args payload already has NUL separators) */
    uint64_t len = 0;
    for (int i = 0; pl->name[i]; ++i) ((char *)next)[len++] = pl->name[i];
    ((char *)next)[len++] = 0;
    memcpy((void *)(next + len), pl->args, pl->args_size);
    uint32_t argc = 1;
    for (uint64_t i = 0; i < pl->args_size; ++i) argc += pl->args[i] == 0;
    out_p->argc = argc;
    out_p->args_paddr = next;
    out_p->args_size = len + pl->args_size;
    next += page_up(out_p->args_size);
  }
  bi->free_phys_start = next;
  if (vcpus > 1) {
    extern const uint8_t ap_tramp[], ap_tramp_end[];
    extern const uint64_t ap_counter_off, ap_entry_off;
    memcpy((void *)0x7000, ap_tramp, ap_tramp_end - ap_tramp);
    *(volatile uint64_t *)(0x7000 + ap_entry_off) = k->e_entry;
    volatile uint32_t *counter = (volatile uint32_t *)(0x7000 + ap_counter_off);
    *counter = 0;
    volatile uint32_t *apic = (volatile uint32_t *)0xFEE00000;
    apic[0xF0 / 4] = 0x1FF;
    apic[0x310 / 4] = 0;
    apic[0x300 / 4] = 0x000C4500; /* INIT, all excluding self */
    for (volatile int i = 0; i < 1000000; ++i) {}
    for (int n = 0; n < 2; ++n) {
      apic[0x300 / 4] = 0x000C4607; /* SIPI vector 7 */
      for (volatile int i = 0; i < 1000000; ++i) {}
    }
    for (volatile long i = 0; i < 200000000 && *counter < vcpus - 1; ++i) {}
    out(*counter == vcpus - 1 ? "shim: secondary vCPUs started\n" : "shim: SECONDARY vCPUs DID NOT START\n");
  }
  out("shim: jumping to the kernel\n");
  __asm__ volatile("mov %0, %%cr0" : : "r"(0x80050033ull));
  __asm__ volatile("mov %0, %%cr4" : : "r"(0x620ull));
  jump_to_kernel(k->e_entry, PMUVM_BOOT_INFO_ADDR, 0);
}
