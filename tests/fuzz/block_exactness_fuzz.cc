// libFuzzer target: the KVM stepper's count against a reference CPU (issue 37, DESIGN §4.7 "What
// a block may contain"). The input is a guest: six 4 KiB user pages whose page-table entries
// carry P, R/W, U/S and XD as the input says, code written across their boundaries (so
// instructions straddle into pages that cannot be fetched, and segment loads, stores into code
// and faults of every kind come up), registers, the block limit the PMU models allow, and debug
// slots the guest holds. Unicorn (QEMU's TCG, Debian's libunicorn-dev) plays the CPU over the same
// memory, zero-copy, with each page's permissions: it runs to the breakpoints the step controller
// arms (or one instruction where it asks for a single step), and a fault takes the vCPU into the
// kernel with the frame a CPU pushes at RSP0; the controller sees it there at another exit, or
// (as the input says) first at the kernel's IRET back to the faulting instruction, whose frame
// Linux builds where the CPU's was (swapgs_restore_regs_and_return_to_usermode). After every stop
// the instructions the controller reported retired must be exactly those the reference CPU
// completed: a block that runs into a page it cannot fetch, a decode made stale by a store, a fault
// after a block's first instruction, all show as a difference (a finding: __builtin_trap).
//
// Limits of the reference (documented, not hidden): Unicorn runs at CPL 0 without paging, so an
// instruction that is privileged at CPL 3 completes there (the controller must be, and is,
// consistent whatever the CPU does with it); episodes end at anything that enters the kernel on
// purpose (SYSCALL, INT n, HLT, ...) and at instructions KVM completes itself (CPUID, I/O).
// Built and run by tests/fuzz/run_fuzzer.sh block_exactness_fuzz.
#include <Zydis/Zydis.h>
#include <unicorn/unicorn.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "tests/fuzz/stepper_fuzz_guest.h"
#include "vmm/precise/step_controller.h"

namespace {

using stepper_fuzz::FuzzVcpu;
using stepper_fuzz::Input;
using stepper_fuzz::kCr3;
using stepper_fuzz::kEntryStack;
using stepper_fuzz::kHandler;
using stepper_fuzz::kIretSite;
using stepper_fuzz::kKernel;
using stepper_fuzz::P;
using stepper_fuzz::U;
using stepper_fuzz::W;
using stepper_fuzz::XD;
using vmm::DebugConfig;
using vmm::GuestRegisters;
using vmm::StepController;
using vmm::StepScope;

constexpr uint64_t kUser = 0x400000;
constexpr int kPages = 6;
constexpr uint64_t kFrames = 0x800000;  // user page i's frame: kFrames + i * 4 KiB
constexpr uint64_t kPage = 4096;

// Guest RAM: the kernel half (stepper_fuzz_guest.h) and a page table at 0x4000 for the user
// pages at 0x400000 (their entries are the input's).
vmm::GuestRam& ram() {
  static vmm::GuestRam* r = [] {
    auto* g = new vmm::GuestRam(16 << 20);
    stepper_fuzz::write_kernel(*g);
    g->write_u64(0x3000 + 2 * 8, 0x4000 | P | W | U);
    return g;
  }();
  return *r;
}

const int kUcRegs[] = {UC_X86_REG_RAX, UC_X86_REG_RCX, UC_X86_REG_RDX, UC_X86_REG_RBX,
                       UC_X86_REG_RSP, UC_X86_REG_RBP, UC_X86_REG_RSI, UC_X86_REG_RDI,
                       UC_X86_REG_R8,  UC_X86_REG_R9,  UC_X86_REG_R10, UC_X86_REG_R11,
                       UC_X86_REG_R12, UC_X86_REG_R13, UC_X86_REG_R14, UC_X86_REG_R15};

// What the reference CPU does in one run (Run::hook sees every instruction before it executes).
struct Run {
  const DebugConfig* applied = nullptr;
  bool resume_flag = false;          // the first instruction passes a breakpoint at its own address
  uint64_t started = 0;              // instructions begun in this run
  uint64_t last = 0;                 // the address of the last one begun
  std::array<uint64_t, 17> state{};  // its GPRs and RFLAGS then
  uint64_t dr6 = 0;        // the run ended at a breakpoint of ours (B0-B3) or a single step
  bool ended = false;      // the run ended before an instruction that ends the episode
  bool faulted = false;    // the page permissions refused a fetch or an access ...
  uint64_t fault_rip = 0;  // ... of the instruction here
};
Run* current = nullptr;

// The user pages' entries (and a seventh, never present, past them). Unicorn maps all of them
// readable, writable and executable: it checks a fetch's permission when it translates a block
// of code, not per instruction, and would fault before instructions that run on hardware. The
// hooks below apply the entries per instruction and per access instead, as a CPU does.
std::array<uint64_t, kPages + 1> page_flags{};
bool allowed(uint64_t linear, uint64_t size, bool write, bool fetch) {
  for (const uint64_t a : {linear, linear + size - 1}) {
    if (a < kUser || a >= kUser + page_flags.size() * kPage) return false;
    const uint64_t f = page_flags[(a - kUser) / kPage];
    if (!(f & P) || !(f & U) || (write && !(f & W)) || (fetch && (f & XD))) return false;
  }
  return true;
}
void refuse(uc_engine* uc, uint64_t rip) {
  Run& r = *current;
  if (!r.faulted) r.faulted = true, r.fault_rip = rip;
  uc_emu_stop(uc);
}

bool ends_episode(std::span<const uint8_t> bytes);

const ZydisDecoder& decoder() {
  static const ZydisDecoder d = [] {
    ZydisDecoder z;
    ZydisDecoderInit(&z, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    return z;
  }();
  return d;
}

// Before each instruction: stop at a breakpoint of ours (a code breakpoint fires before the
// instruction runs), after one instruction where a single step was asked for, and before
// anything that ends the episode. uc_emu_stop in a code hook stops before the instruction.
void hook(uc_engine* uc, uint64_t address, uint32_t, void*) {
  Run& r = *current;
  if (r.applied->single_step) {
    if (r.started == 1) {
      r.dr6 = vmm::kDr6SingleStep;
      uc_emu_stop(uc);
      return;
    }
  } else if (!(r.started == 0 && r.resume_flag)) {
    for (int i = 0; i < 4; ++i)
      if ((r.applied->ours & (1u << i)) && r.applied->address[i] == address) r.dr6 |= 1u << i;
    if (r.dr6) {
      uc_emu_stop(uc);
      return;
    }
  }
  if (r.faulted) {  // an access of the last instruction was refused: it did not complete
    uc_emu_stop(uc);
    return;
  }
  std::array<uint8_t, 15> next{};
  size_t have = 0;
  while (have < next.size() && uc_mem_read(uc, address + have, &next[have], 1) == UC_ERR_OK) ++have;
  // The fetch: every byte of the instruction on a present, user, executable page. Bytes that
  // are no instruction raise #UD (Zydis is as strict as hardware; Unicorn runs some of them,
  // LOCK STOS for one).
  ZydisDecodedInstruction insn;
  const bool valid = have && ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&decoder(), nullptr,
                                                                        next.data(), have, &insn));
  if (!valid || !allowed(address, insn.length, false, true)) {
    refuse(uc, address);
    return;
  }
  if ((have && ends_episode({next.data(), have})) || r.started == 4096) {
    r.ended = r.started < 4096;
    uc_emu_stop(uc);
    return;
  }
  // QEMU restarts an instruction whose store modified the code it was translated with (it
  // re-translates and runs it again, from the same state): that is one instruction, not two.
  std::array<uint64_t, 17> state{};
  for (int i = 0; i < 16; ++i) uc_reg_read(uc, kUcRegs[i], &state[i]);
  uc_reg_read(uc, UC_X86_REG_RFLAGS, &state[16]);
  if (r.started != 0 && address == r.last && state == r.state) return;
  ++r.started;
  r.last = address;
  r.state = state;
}

// A data access: refused where the entry does not allow it (the instruction does not complete;
// what it wrote no longer matters: the episode ends at the fault).
bool access(uc_engine* uc, uc_mem_type type, uint64_t address, int size, int64_t, void*) {
  if (!allowed(address, size, type == UC_MEM_WRITE, false)) refuse(uc, current->last);
  return true;
}

// One reference CPU for every input: Unicorn's engine is costly to make.
uc_engine* cpu() {
  static uc_engine* uc = [] {
    uc_engine* e = nullptr;
    uc_hook h;
    if (uc_open(UC_ARCH_X86, UC_MODE_64, &e) != UC_ERR_OK ||
        uc_hook_add(e, &h, UC_HOOK_CODE, reinterpret_cast<void*>(hook), nullptr, 1, 0) !=
            UC_ERR_OK ||
        uc_hook_add(e, &h, UC_HOOK_MEM_READ | UC_HOOK_MEM_WRITE, reinterpret_cast<void*>(access),
                    nullptr, 1, 0) != UC_ERR_OK)
      __builtin_trap();
    // All the user pages, and the never-present one past them, over guest RAM's frames.
    for (size_t i = 0; i < page_flags.size(); ++i)
      if (uc_mem_map_ptr(e, kUser + i * kPage, kPage, UC_PROT_ALL,
                         ram().host(kFrames + i * kPage, kPage)) != UC_ERR_OK)
        __builtin_trap();
    return e;
  }();
  return uc;
}

// The reference CPU as uc_open made it: every input starts from it (segment registers, x87/SSE
// state and the like that an input's code changed must not reach the next one).
void reset(uc_engine* uc) {
  static uc_context* pristine = [uc] {
    uc_context* c = nullptr;
    if (uc_context_alloc(uc, &c) != UC_ERR_OK || uc_context_save(uc, c) != UC_ERR_OK)
      __builtin_trap();
    return c;
  }();
  uc_context_restore(uc, pristine);
}

// Instructions that end an episode before they run: they enter the kernel on purpose, or KVM
// completes them itself, or the reference CPU (at CPL 0) would run them as no user code can.
bool ends_episode(std::span<const uint8_t> bytes) {
  ZydisDecodedInstruction insn;
  if (!ZYAN_SUCCESS(
          ZydisDecoderDecodeInstruction(&decoder(), nullptr, bytes.data(), bytes.size(), &insn)))
    return false;  // the CPU raises #UD (or a fetch fault): a departure like any fault
  if (insn.attributes & ZYDIS_ATTRIB_IS_PRIVILEGED) return true;
  switch (insn.mnemonic) {
    case ZYDIS_MNEMONIC_SYSCALL:
    case ZYDIS_MNEMONIC_SYSENTER:
    case ZYDIS_MNEMONIC_SYSEXIT:
    case ZYDIS_MNEMONIC_SYSRET:
    case ZYDIS_MNEMONIC_INT:
    case ZYDIS_MNEMONIC_INT1:
    case ZYDIS_MNEMONIC_INT3:
    case ZYDIS_MNEMONIC_INTO:
    case ZYDIS_MNEMONIC_IRET:
    case ZYDIS_MNEMONIC_IRETD:
    case ZYDIS_MNEMONIC_IRETQ:
    case ZYDIS_MNEMONIC_CPUID:
    case ZYDIS_MNEMONIC_IN:
    case ZYDIS_MNEMONIC_OUT:
    case ZYDIS_MNEMONIC_INSB:
    case ZYDIS_MNEMONIC_INSW:
    case ZYDIS_MNEMONIC_INSD:
    case ZYDIS_MNEMONIC_OUTSB:
    case ZYDIS_MNEMONIC_OUTSW:
    case ZYDIS_MNEMONIC_OUTSD:
    case ZYDIS_MNEMONIC_RDPMC:
    case ZYDIS_MNEMONIC_RDTSC:
    case ZYDIS_MNEMONIC_RDTSCP:
    case ZYDIS_MNEMONIC_RDRAND:
    case ZYDIS_MNEMONIC_RDSEED:
    case ZYDIS_MNEMONIC_PUSHF:
    case ZYDIS_MNEMONIC_PUSHFQ:
    case ZYDIS_MNEMONIC_POPF:
    case ZYDIS_MNEMONIC_POPFQ: return true;  // the guest's TF, which the reference CPU ignores
    default:
      // Far transfers load CS: nothing the flat reference CPU models.
      return insn.meta.branch_type == ZYDIS_BRANCH_TYPE_FAR;
  }
}

void to_cpu(uc_engine* uc, const GuestRegisters& r) {
  GuestRegisters copy = r;
  for (int i = 0; i < 16; ++i) uc_reg_write(uc, kUcRegs[i], &vmm::general_register(copy, i));
  uc_reg_write(uc, UC_X86_REG_RIP, &copy.rip);
  uc_reg_write(uc, UC_X86_REG_RFLAGS, &copy.rflags);
  uc_reg_write(uc, UC_X86_REG_FS_BASE, &copy.fs_base);
  uc_reg_write(uc, UC_X86_REG_GS_BASE, &copy.gs_base);
}

GuestRegisters from_cpu(uc_engine* uc, uint64_t cr3) {
  GuestRegisters r;
  for (int i = 0; i < 16; ++i) uc_reg_read(uc, kUcRegs[i], &vmm::general_register(r, i));
  uc_reg_read(uc, UC_X86_REG_RIP, &r.rip);
  uc_reg_read(uc, UC_X86_REG_RFLAGS, &r.rflags);
  uc_reg_read(uc, UC_X86_REG_FS_BASE, &r.fs_base);
  uc_reg_read(uc, UC_X86_REG_GS_BASE, &r.gs_base);
  r.cr3 = cr3;
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in({data, size});
  vmm::GuestRam& g = ram();
  uc_engine* uc = cpu();
  reset(uc);
  // The user pages: their entries, their bytes (int3 where the input writes none).
  std::array<uint64_t, kPages> flags{};
  for (uint64_t& f : flags) {
    const uint8_t b = in.u8();
    f = ((b & 7) != 0 ? P : 0) | (b & 0x08 ? 0 : W) | (b & 0x10 ? 0 : U) | (b & 0x20 ? XD : 0);
  }
  std::vector<uint8_t> bytes(kPages * kPage, 0xCC);
  const uint64_t start_page = in.u8() % (kPages - 1);
  const uint8_t where = in.u8();
  const uint64_t start = kUser + start_page * kPage +
                         (where < 160 ? kPage - 1 - where % 24 : (uint64_t{where} << 4) % kPage);
  const std::span<const uint8_t> code = in.take(768);
  std::memcpy(bytes.data() + (start - kUser), code.data(),
              std::min<size_t>(code.size(), bytes.size() - (start - kUser)));
  FuzzVcpu vcpu;
  for (int i = 0; i < 16; ++i) {
    const uint64_t v = in.u64();
    vmm::general_register(vcpu.regs, i) = (v & 1) ? v : kUser + (v >> 1) % (kPages * kPage);
  }
  vcpu.regs.rflags = (in.u64() & 0xCD5) | 0x202;  // arithmetic flags, DF, IF
  vcpu.regs.fs_base = kUser + (in.u8() % kPages) * kPage;
  vcpu.regs.cr3 = kCr3;
  vcpu.regs.rip = start;
  const uint64_t limit = 2 + in.u8() % 40;
  // Slots the guest holds: write watchpoints on kernel data nothing here touches.
  const uint8_t held_byte = in.u8();
  const uint8_t held = held_byte & 0xF;
  const bool found_at_return = held_byte & 0x10;  // a departure is first seen at Linux's return
  for (int i = 0; i < 4; ++i)
    if (held & (1u << i)) {
      vcpu.guest.db[i] = kKernel + 0x10000 + 8 * i;
      vcpu.guest.dr7 |= (1u << (2 * i)) | (1ull << (16 + 4 * i));
    }

  // Memory for both: guest RAM's frames, which the reference CPU maps too.
  for (int i = 0; i < kPages; ++i) {
    page_flags[i] = flags[i];
    g.write_u64(0x4000 + 8 * i, (kFrames + i * kPage) | flags[i]);
    g.write(kFrames + i * kPage, std::as_bytes(std::span(bytes).subspan(i * kPage, kPage)));
  }
  // The code changed under the same addresses: everything Unicorn translated goes (removing
  // the cache of these addresses only left stale translations behind: false findings).
  uc_ctl_flush_tlb(uc);
  std::array<uint64_t, 5> no_frame{};
  g.write(kEntryStack - 40, std::as_bytes(std::span(no_frame)));

  pmu::cache::Geometry geometry;
  geometry.l1d = {1024, 2, 4};
  geometry.l2 = {4096, 4, 12};
  geometry.dram_latency_cycles = 100;
  StepController ctl(g, geometry);
  ctl.set_scope(StepScope::kUserCode, vcpu);
  uint64_t counted = 0, completed = 0;
  bool resume_flag = false;
  for (int exit = 0; exit < 48; ++exit) {
    resume_flag |= ctl.extend_block(limit, vcpu);
    if (ctl.mode() != StepController::Mode::kUser) break;
    const DebugConfig applied = ctl.desired(vcpu.guest);
    // The CPU runs: one instruction where a single step is asked for, else up to a breakpoint of
    // ours (the first instruction passes one at its own address with RF).
    to_cpu(uc, vcpu.regs);
    const uint64_t run_from = vcpu.regs.rip;
    Run run{&applied, resume_flag};
    current = &run;
    const uc_err err = uc_emu_start(uc, vcpu.regs.rip, 0, 0, 0);
    uint64_t rip = 0;
    uc_reg_read(uc, UC_X86_REG_RIP, &rip);
    // A fault: the instruction at RIP did not complete (a fetch fault begins none).
    bool departed = err != UC_ERR_OK || run.faulted;
    if (run.faulted) rip = run.fault_rip;
    // A code breakpoint fires before the fetch of its instruction can fault (SDM vol. 3A,
    // table 6-2): the reference CPU's fetch fault at one of ours is that breakpoint.
    if (departed && run.dr6 == 0 && !(run.started == 0 && resume_flag) && !applied.single_step)
      for (int i = 0; i < 4; ++i)
        if ((applied.ours & (1u << i)) && applied.address[i] == rip) run.dr6 |= 1u << i;
    if (run.dr6) departed = false;
    completed += run.started - (departed && run.started && run.last == rip ? 1 : 0);
    if (departed) uc_reg_write(uc, UC_X86_REG_RIP, &rip);
    if (run.dr6 && err != UC_ERR_OK && run.started && run.last == rip) --completed;
    const uint64_t dr6 = run.dr6;
    const bool ended = run.ended;
    vcpu.regs = from_cpu(uc, kCr3);
    resume_flag = false;
    vmm::StepOutcome out;
    if (departed) {
      const uint64_t frame[5] = {vcpu.regs.rip, 0x33, vcpu.regs.rflags, vcpu.regs.rsp, 0x2b};
      for (int i = 0; i < 5; ++i) g.write_u64(kEntryStack - 40 + 8 * i, frame[i]);
      int return_slot = -1;  // the IRET site's breakpoint, where the controller armed one
      for (int i = 0; i < 4; ++i)
        if ((applied.ours & (1u << i)) && applied.address[i] == kIretSite) return_slot = i;
      vcpu.ring = 0;
      if (found_at_return && return_slot >= 0) {
        // The kernel mapped the page and returns to the faulting instruction; the frame at RSP0
        // is now the return's own (the same words here), and RSP points at it.
        vcpu.regs.rip = kIretSite;
        vcpu.regs.rsp = kEntryStack - 40;
        out = ctl.on_debug_exit(vcpu, (1u << return_slot) | 0xFFFF0FF0, applied);
      } else {
        vcpu.regs.rip = kHandler;
        out = ctl.on_other_exit(vcpu);
      }
    } else if (dr6 != 0) {
      out = ctl.on_debug_exit(vcpu, dr6 | 0xFFFF0FF0, applied);
      resume_flag = out.resume_flag;
    }
    counted += out.retired.size();
    if (getenv("BLOCK_EXACTNESS_DEBUG"))
      fprintf(stderr,
              "exit %d: from %#lx to %#lx, err %d, single %d, ours %x [%#lx %#lx %#lx %#lx], "
              "started %lu, dr6 %#lx, ended %d, retired %zu, counted %lu, completed %lu\n",
              exit, (unsigned long)run_from, (unsigned long)rip, err, applied.single_step,
              applied.ours, (unsigned long)applied.address[0], (unsigned long)applied.address[1],
              (unsigned long)applied.address[2], (unsigned long)applied.address[3],
              (unsigned long)run.started, (unsigned long)dr6, ended, out.retired.size(),
              (unsigned long)counted, (unsigned long)completed);
    // Every instruction the CPU completed, and no other, was reported retired.
    if (counted != completed) __builtin_trap();
    if (departed || ended || dr6 == 0) break;  // (dr6 0: 4096 instructions without a stop)
  }
  return 0;
}
