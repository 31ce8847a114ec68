/* Physical pages and page tables.
 *
 * Physical memory: a bump allocator over [boot_info.free_phys_start, ram_size). Pages are never
 * freed (a run has at most PMUVM_MAX_PROGRAMS tasks).
 *
 * Kernel tables (kernel_pml4), shared by reference in every task's tables:
 *   PML4[0]   -> PDPT -> PD0: [0] 4 KiB pages for 4 KiB..2 MiB (page 0 unmapped),
 *                             [1] one 2 MiB page for 2..4 MiB. Identity, supervisor-only, RWX.
 *   PML4[256] -> direct map of physical 0 .. max(4 GiB, RAM) at PHYS_BASE: 2 MiB pages,
 *                supervisor, NX; ranges that are not RAM (the xAPIC at 0xFEE00000) uncached.
 * A task's tables (as_create) copy PD0[0..1] and PML4[256] and add user mappings in the rest of
 * the user half (layout.h).
 *
 * Demand paging (mm_demand_fault): the PMUVM_DEMAND_ZERO_VA region starts unmapped in every task;
 * user #PFs there map pages on first touch (pmuvm_abi.h), which is what LWP ring buffers that
 * are not present at LLWPCB rely on (DESIGN.md §4.1). Any other user #PF ends the task. */
#include "guest/kernel/kernel.h"

extern const uint8_t _kernel_start[], _kernel_end[];

uint64_t phys_map_base;
uint64_t kernel_pml4;
static uint64_t kernel_pd0;

static spinlock_t alloc_lock;
static uint64_t alloc_next, alloc_end;

uint64_t kernel_virt_to_phys(const void *p) {
  uint64_t v = (uint64_t)(uintptr_t)p;
  if (v >= PHYS_BASE) return v - PHYS_BASE;
  if (v >= KERNEL_IMAGE_LIMIT) panic("kernel_virt_to_phys(%p): not a kernel address", p);
  return v; /* the kernel image is identity mapped */
}

uint64_t phys_try_alloc_pages(uint64_t count) {
  uint64_t f = spin_lock_irqsave(&alloc_lock);
  if (count == 0 || count > (alloc_end - alloc_next) / PAGE_SIZE) {
    spin_unlock_irqrestore(&alloc_lock, f);
    return 0;
  }
  uint64_t p = alloc_next;
  alloc_next += count * PAGE_SIZE;
  spin_unlock_irqrestore(&alloc_lock, f);
  memset(phys_to_virt(p), 0, count * PAGE_SIZE);
  return p;
}

uint64_t phys_alloc_pages(uint64_t count) {
  const uint64_t p = phys_try_alloc_pages(count);
  if (!p)
    panic("out of memory: %llu page(s) wanted, %llu KiB left of guest RAM",
          (unsigned long long)count, (unsigned long long)((alloc_end - alloc_next) >> 10));
  return p;
}

static uint64_t *table(uint64_t entry_or_phys) { return phys_to_virt(entry_or_phys & PTE_ADDR); }

void mm_init(void) {
  const uint64_t kernel_end = (uint64_t)(uintptr_t)_kernel_end;
  alloc_next = boot_info.free_phys_start;
  alloc_end = boot_info.ram_size & ~(uint64_t)(PAGE_SIZE - 1);
  if (alloc_next & (PAGE_SIZE - 1)) panic("boot info: free_phys_start %#llx is not page aligned",
                                          (unsigned long long)alloc_next);
  if (alloc_next < kernel_end)
    panic("boot info: free_phys_start %#llx lies inside the kernel image (ends at %#llx)",
          (unsigned long long)alloc_next, (unsigned long long)kernel_end);
  if (alloc_next >= alloc_end)
    panic("boot info: no free RAM (free_phys_start %#llx, ram_size %#llx)",
          (unsigned long long)alloc_next, (unsigned long long)boot_info.ram_size);
  uint64_t gib = (boot_info.ram_size + (1ull << 30) - 1) >> 30;
  if (gib < 4) gib = 4;
  if (gib > 512) panic("guest RAM of %llu GiB exceeds the 512 GiB direct map",
                       (unsigned long long)gib);
  /* Until CR3 is switched below, the VMM's identity map of the first min(RAM, 4 GiB) is live,
   * so the pages allocated here are reached at their physical addresses: they must lie in it. */
  const uint64_t boot_mapped = alloc_end < (4ull << 30) ? alloc_end : (4ull << 30);
  if (alloc_next + (5 + gib) * PAGE_SIZE > boot_mapped)
    panic("boot info: free RAM at %#llx is not inside the boot identity map",
          (unsigned long long)alloc_next);

  const uint64_t pml4 = phys_alloc_pages(1);
  const uint64_t pdpt_low = phys_alloc_pages(1);
  const uint64_t pd0 = phys_alloc_pages(1);
  const uint64_t pt0 = phys_alloc_pages(1);
  const uint64_t dm_pdpt = phys_alloc_pages(1);
  const uint64_t dm_pds = phys_alloc_pages(gib);

  uint64_t *pt = table(pt0);
  for (uint64_t i = 1; i < 512; ++i) pt[i] = (i * PAGE_SIZE) | PTE_P | PTE_W;
  uint64_t *pd = table(pd0);
  pd[0] = pt0 | PTE_P | PTE_W;
  pd[1] = 0x200000ull | PTE_P | PTE_W | PTE_PS;
  table(pdpt_low)[0] = pd0 | PTE_P | PTE_W;

  uint64_t *dpt = table(dm_pdpt);
  for (uint64_t g = 0; g < gib; ++g) {
    uint64_t *d = table(dm_pds + g * PAGE_SIZE);
    for (uint64_t e = 0; e < 512; ++e) {
      const uint64_t pa = (g << 30) | (e << 21);
      uint64_t flags = PTE_P | PTE_W | PTE_PS | PTE_NX;
      const bool ram = pa < boot_info.ram_size;
      const bool apic_page = pa == 0xFEE00000ull;  /* the xAPIC page is 2 MiB aligned */
      if (!ram || apic_page) flags |= PTE_PCD | PTE_PWT;
      d[e] = pa | flags;
    }
    dpt[g] = (dm_pds + g * PAGE_SIZE) | PTE_P | PTE_W;
  }

  uint64_t *top = table(pml4);
  top[0] = pdpt_low | PTE_P | PTE_W;
  top[256] = dm_pdpt | PTE_P | PTE_W | PTE_NX;

  kernel_pml4 = pml4;
  kernel_pd0 = pd0;
  write_cr3(pml4);
  (void)__atomic_exchange_n(&phys_map_base, PHYS_BASE, __ATOMIC_SEQ_CST); /* xchg: no mfence */
  kprintf("kernel: paging: kernel PML4 at %#llx, direct map of %llu GiB at %#llx, "
          "%llu KiB free from %#llx\n",
          (unsigned long long)pml4, (unsigned long long)gib, (unsigned long long)PHYS_BASE,
          (unsigned long long)((alloc_end - alloc_next) >> 10), (unsigned long long)alloc_next);
}

uint64_t as_create(void) {
  const uint64_t pml4 = phys_alloc_pages(1);
  const uint64_t pdpt = phys_alloc_pages(1);
  const uint64_t pd0 = phys_alloc_pages(1);
  const uint64_t *kpd0 = table(kernel_pd0);
  uint64_t *pd = table(pd0);
  pd[0] = kpd0[0];
  pd[1] = kpd0[1];
  table(pdpt)[0] = pd0 | PTE_P | PTE_W | PTE_U;
  uint64_t *top = table(pml4);
  top[0] = pdpt | PTE_P | PTE_W | PTE_U;
  top[256] = table(kernel_pml4)[256];
  return pml4;
}

/* Maps one 4 KiB page. Intermediate tables are created user-accessible and writable (the leaf
 * decides). Returns 0, -1 if va runs into a kernel large page, -2 if va is already mapped. */
int as_map(uint64_t pml4, uint64_t va, uint64_t pa, uint64_t flags) {
  uint64_t *t = table(pml4);
  for (int shift = 39; shift > 12; shift -= 9) {
    uint64_t *e = &t[(va >> shift) & 511];
    if (!(*e & PTE_P)) *e = phys_alloc_pages(1) | PTE_P | PTE_W | PTE_U;
    else if (*e & PTE_PS) return -1;
    t = table(*e);
  }
  uint64_t *leaf = &t[(va >> 12) & 511];
  if (*leaf & PTE_P) return -2;
  *leaf = (pa & PTE_ADDR) | flags | PTE_P;
  return 0;
}

bool user_range_ok(uint64_t addr, uint64_t len) {
  return addr >= USER_BASE && addr <= USER_END && len <= USER_END - addr;
}

/* The leaf PTE of va in the tables at pml4, or 0 when a table on the way is missing or va lies in
 * a large page. */
static uint64_t *as_leaf(uint64_t pml4, uint64_t va) {
  uint64_t *t = table(pml4);
  for (int shift = 39; shift > 12; shift -= 9) {
    const uint64_t e = t[(va >> shift) & 511];
    if (!(e & PTE_P) || (e & PTE_PS)) return 0;
    t = table(e);
  }
  return &t[(va >> 12) & 511];
}

static spinlock_t zero_page_lock;
static uint64_t zero_page_phys; /* the shared zero page (allocated at the first read fault) */

static uint64_t zero_page(void) {
  uint64_t f = spin_lock_irqsave(&zero_page_lock);
  if (!zero_page_phys) zero_page_phys = phys_try_alloc_pages(1);
  const uint64_t z = zero_page_phys;
  spin_unlock_irqrestore(&zero_page_lock, f);
  return z;
}

#define PF_P 1ull /* error code: protection violation (0: not present) */
#define PF_W 2ull /* a write */
#define PF_U 4ull /* from user mode */

bool mm_demand_fault(struct task *t, uint64_t addr, uint64_t error) {
  if (!t || !(error & PF_U)) return false;
  if (addr < PMUVM_DEMAND_ZERO_VA || addr - PMUVM_DEMAND_ZERO_VA >= PMUVM_DEMAND_ZERO_SIZE) return false;
  const uint64_t va = addr & ~(uint64_t)(PAGE_SIZE - 1);
  uint64_t *leaf = as_leaf(t->cr3, va);
  const bool present = leaf && (*leaf & PTE_P);
  const char *what;
  if (!present && (error & (PF_P | PF_W)) == 0) { /* first touch, a read: the shared zero page */
    const uint64_t z = zero_page();
    if (!z || as_map(t->cr3, va, z, PTE_U | PTE_NX) != 0) return false;
    what = "zero page mapped read-only";
  } else if (!present && (error & (PF_P | PF_W)) == PF_W) { /* first touch, a write */
    const uint64_t p = phys_try_alloc_pages(1);
    if (!p || as_map(t->cr3, va, p, PTE_U | PTE_W | PTE_NX) != 0) return false;
    what = "mapped writable";
  } else if (present && (error & (PF_P | PF_W)) == (PF_P | PF_W) && !(*leaf & PTE_W) &&
             (*leaf & PTE_ADDR) == zero_page_phys) { /* a write to the zero page: copy on write */
    const uint64_t p = phys_try_alloc_pages(1); /* zeroed: the copy of the zero page */
    if (!p) return false;
    *leaf = p | PTE_P | PTE_U | PTE_W | PTE_NX;
    write_cr3(read_cr3()); /* drop the read-only translation from the TLB */
    what = "copied on write";
  } else {
    return false; /* a real protection fault, or a stale fault another path resolved */
  }
  kprintf("kernel: task %u (%s): demand-zero page %#llx: %s (error %#llx)\n", t->id, t->name,
          (unsigned long long)va, what, (unsigned long long)error);
  return true;
}
