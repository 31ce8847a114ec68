/* Boot. Every vCPU enters _start (entry.S) and then kmain(boot_info_phys, vcpu_index).
 *
 * Boot vCPU (index 0), printing a line at each stage:
 *   1. copy the boot information block, serial console, check magic/version, load the IDT;
 *   2. CPUID probe (at CPL 0: the VMM's table): vendor/family, pmuvm PV leaves, LWP vector;
 *   3. page allocator + kernel page tables (identity 0..4 MiB, direct map), switch CR3;
 *   4. IDT; this CPU's GDT/TSS/IDT/SYSCALL MSRs; LAPIC; LWPMSR0; NetBurst probe;
 *   5. one task per program (page tables, stack with argv);
 *   6. release the secondary vCPUs, start the LAPIC timer, enter the scheduler.
 * Secondary vCPUs spin until step 6, switch to the kernel page tables, do their per-CPU part of
 * step 4, start their timer and enter the scheduler. */
#include "guest/kernel/kernel.h"

struct kconfig kcfg;
bool guest_stepper_on;
struct pmuvm_boot_info boot_info;
static volatile uint32_t smp_go;
static volatile uint32_t cpus_online;

void kmain(uint64_t boot_info_phys, uint64_t index);

/* "pmuvm" in CPUID 0x40000000 EBX, ECX, EDX (vmm/cpu/cpuid_table.h). */
static const char pv_signature[12] = {'p', 'm', 'u', 'v', 'm', 0, 0, 0, 0, 0, 0, 0};

void finish(uint32_t status) {
  kprintf("kernel: all %u task(s) finished; exit status %u\n", task_count, status);
  outl(PMUVM_PORT_EXIT, status);
  halt_forever();
}

static void enable_efer_bits(uint32_t cpu) {
  uint64_t efer;
  if (rdmsr_safe(MSR_EFER, &efer) || wrmsr_safe(MSR_EFER, efer | EFER_SCE | EFER_NXE))
    panic("cpu %u: cannot set EFER.NXE/SCE", cpu);
}

/* pmuvm's paravirtual leaves: true when present, with EAX/EBX of the features leaf. */
static int read_pv_leaves(uint32_t *features, uint32_t *lwp_vector) {
  uint32_t r[4];
  cpuid(PMUVM_CPUID_SIGNATURE_LEAF, 0, r);
  if (memcmp(&r[1], pv_signature, 4) != 0 || memcmp(&r[2], pv_signature + 4, 4) != 0 ||
      memcmp(&r[3], pv_signature + 8, 4) != 0 || r[0] < PMUVM_CPUID_FEATURES_LEAF)
    return 0;
  cpuid(PMUVM_CPUID_FEATURES_LEAF, 0, r);
  *features = r[0];
  *lwp_vector = r[1];
  return 1;
}

static void probe_cpuid(void) {
  uint32_t r[4];
  cpuid(0, 0, r);
  memcpy(kcfg.vendor + 0, &r[1], 4);
  memcpy(kcfg.vendor + 4, &r[3], 4);
  memcpy(kcfg.vendor + 8, &r[2], 4);
  kcfg.vendor[12] = '\0';
  cpuid(1, 0, r);
  const uint32_t base_family = (r[0] >> 8) & 0xF, ext_family = (r[0] >> 20) & 0xFF;
  kcfg.family = base_family == 0xF ? base_family + ext_family : base_family;
  cpuid(0x80000000u, 0, r);
  kcfg.max_ext_leaf = r[0] >= 0x80000000u ? r[0] : 0;

  kcfg.pv_present = read_pv_leaves(&kcfg.pv_features, &kcfg.pv_lwp_vector);
  guest_stepper_on = kcfg.pv_present && (kcfg.pv_features & PMUVM_PV_GUEST_STEPPER);
  kcfg.user_entry_on = kcfg.pv_present && (kcfg.pv_features & PMUVM_PV_USER_ENTRY);
  kcfg.profiled_entry_on = kcfg.user_entry_on && (kcfg.pv_features & PMUVM_PV_PROFILED_ENTRY);
  kcfg.task_msr_on = kcfg.pv_present;

  kcfg.lwp_vector = DEFAULT_LWP_VECTOR;
  if (kcfg.pv_present && kcfg.pv_lwp_vector != 0) {
    if (kcfg.pv_lwp_vector > TIMER_VECTOR && kcfg.pv_lwp_vector < SPURIOUS_VECTOR)
      kcfg.lwp_vector = (uint8_t)kcfg.pv_lwp_vector;
    else
      kprintf("kernel: the VMM's LWP vector %#x is unusable (timer %#x, spurious %#x); "
              "using %#x\n", kcfg.pv_lwp_vector, TIMER_VECTOR, SPURIOUS_VECTOR,
              DEFAULT_LWP_VECTOR);
  }

  kprintf("kernel: cpuid: %s family %#x, max extended leaf %#x\n", kcfg.vendor, kcfg.family,
          kcfg.max_ext_leaf);
  if (kcfg.pv_present)
    kprintf("kernel: pmuvm paravirtual interface: features %#x (guest stepper %s, user-entry "
            "notification %s), boot info says %#x\n", kcfg.pv_features,
            guest_stepper_on ? "on" : "off", kcfg.user_entry_on ? "on" : "off",
            boot_info.pv_features);
  else
    kprintf("kernel: no pmuvm paravirtual CPUID leaves: not writing the PMUVM_MSR_* MSRs\n");
}

static void start_cpu(struct cpu *c) {
  cpu_init(c);
  lapic_init(c);
  lwp_cpu_init(c);
  lapic_timer_start();
  c->online = true;
  __atomic_add_fetch(&cpus_online, 1, __ATOMIC_SEQ_CST);
  kprintf("kernel: cpu %u: online (APIC id %u, LWP %s, timer %u Hz)\n", c->index, c->apic_id,
          c->lwp_ok ? "on" : "off", kcfg.timer_hz);
}

static NORETURN void bsp_main(uint64_t boot_info_phys) {
  cpus[0].index = 0;
  serial_init();
  uint32_t pv_features = 0, pv_lwp_vector = 0;  /* the console's first line goes out whole too */
  if (read_pv_leaves(&pv_features, &pv_lwp_vector) && (pv_features & PMUVM_PV_CONSOLE))
    console_use_block_port();
  kprintf("\nkernel: pmuvm guest kernel starting on vCPU 0 (boot info at %#llx)\n",
          (unsigned long long)boot_info_phys);
  if (boot_info_phys == 0 || boot_info_phys + sizeof boot_info > KERNEL_IMAGE_LIMIT)
    panic("boot info address %#llx is not in the first 4 MiB", (unsigned long long)boot_info_phys);
  memcpy(&boot_info, (const void *)(uintptr_t)boot_info_phys, sizeof boot_info);
  if (boot_info.magic != PMUVM_BOOT_MAGIC)
    panic("boot info magic %#llx, expected %#llx", (unsigned long long)boot_info.magic,
          (unsigned long long)PMUVM_BOOT_MAGIC);
  if (boot_info.version != PMUVM_BOOT_VERSION)
    panic("boot info version %u, expected %u", boot_info.version, PMUVM_BOOT_VERSION);
  if (boot_info.program_count > PMUVM_MAX_PROGRAMS)
    panic("boot info lists %u programs (at most %u)", boot_info.program_count,
          PMUVM_MAX_PROGRAMS);
  kcfg.vcpu_count = boot_info.vcpu_count ? boot_info.vcpu_count : 1;
  kcfg.timer_hz = boot_info.timer_hz;
  if (kcfg.timer_hz == PMUVM_TIMER_OFF) kcfg.timer_hz = 0; /* no tick: lapic_timer_start */
  else if (kcfg.timer_hz == 0) kcfg.timer_hz = 100;
  else if (kcfg.timer_hz > 10000) kcfg.timer_hz = 10000;
  kcfg.ram_size = boot_info.ram_size;
  idt_init();
  cpu_early_traps(&cpus[0]);
  kprintf("kernel: boot info: %u vCPU(s), %llu MiB RAM, %u program(s), free RAM from %#llx, "
          "timer %u Hz\n", boot_info.vcpu_count, (unsigned long long)(boot_info.ram_size >> 20),
          boot_info.program_count, (unsigned long long)boot_info.free_phys_start,
          kcfg.timer_hz);
  if (kcfg.vcpu_count > MAX_CPUS)
    kprintf("kernel: %u vCPUs, but this kernel uses at most %u\n", kcfg.vcpu_count, MAX_CPUS);

  enable_efer_bits(0);
  probe_cpuid();
  mm_init();
  struct cpu *c = &cpus[0];
  lwp_probe(); /* before start_cpu: lwp_cpu_init writes what lwp_probe computed */
  start_cpu(c);
  netburst_probe();
  tasks_init();

  __atomic_store_n(&smp_go, 1, __ATOMIC_RELEASE);
  if (kcfg.vcpu_count > 1)
    kprintf("kernel: released %u secondary vCPU(s)\n",
            (kcfg.vcpu_count > MAX_CPUS ? MAX_CPUS : kcfg.vcpu_count) - 1);
  if (sched_live_tasks() == 0) {
    kprintf("kernel: no task to run\n");
    finish(sched_exit_status());
  }
  kprintf("kernel: entering the scheduler\n");
  go_idle(c);
}

static NORETURN void ap_main(uint32_t index) {
  while (!__atomic_load_n(&smp_go, __ATOMIC_ACQUIRE)) pause();
  struct cpu *c = &cpus[index];
  c->index = index;
  cpu_early_traps(c);
  enable_efer_bits(index);
  write_cr3(kernel_pml4);
  start_cpu(c);
  go_idle(c);
}

void kmain(uint64_t boot_info_phys, uint64_t index) {
  if (index == 0) bsp_main(boot_info_phys);
  ap_main((uint32_t)index);
}
