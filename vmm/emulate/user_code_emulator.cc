#include "vmm/emulate/user_code_emulator.h"

#include <algorithm>
#include <array>
#include <string>

#include "vmm/memory/page_walker.h"
#include "vmm/vmm_error.h"

namespace vmm {
namespace {

constexpr uint64_t kPage = 4096;

// GuestRegisters' fields and Unicorn's names for them, in one table.
struct RegisterSlot {
  uint64_t GuestRegisters::*field;
  int uc;
};
constexpr std::array<RegisterSlot, 20> kRegisters = {{
    {&GuestRegisters::rax, UC_X86_REG_RAX},         {&GuestRegisters::rbx, UC_X86_REG_RBX},
    {&GuestRegisters::rcx, UC_X86_REG_RCX},         {&GuestRegisters::rdx, UC_X86_REG_RDX},
    {&GuestRegisters::rsi, UC_X86_REG_RSI},         {&GuestRegisters::rdi, UC_X86_REG_RDI},
    {&GuestRegisters::rsp, UC_X86_REG_RSP},         {&GuestRegisters::rbp, UC_X86_REG_RBP},
    {&GuestRegisters::r8, UC_X86_REG_R8},           {&GuestRegisters::r9, UC_X86_REG_R9},
    {&GuestRegisters::r10, UC_X86_REG_R10},         {&GuestRegisters::r11, UC_X86_REG_R11},
    {&GuestRegisters::r12, UC_X86_REG_R12},         {&GuestRegisters::r13, UC_X86_REG_R13},
    {&GuestRegisters::r14, UC_X86_REG_R14},         {&GuestRegisters::r15, UC_X86_REG_R15},
    {&GuestRegisters::rip, UC_X86_REG_RIP},         {&GuestRegisters::rflags, UC_X86_REG_RFLAGS},
    {&GuestRegisters::fs_base, UC_X86_REG_FS_BASE}, {&GuestRegisters::gs_base, UC_X86_REG_GS_BASE},
}};

void check(uc_err e, const char* what) {
  if (e != UC_ERR_OK) throw VmmError(std::string("emulator: ") + what + ": " + uc_strerror(e));
}

// Unicorn 2.0.1 aborts the process translating FF /3 or FF /5 with a register operand (an
// invalid far CALL/JMP; `ff ee` found by user_code_emulator_fuzz: tcg_gen_code's fatal
// error), and it translates code before anyone can look at it. A page holding such a byte pair
// anywhere, or ending in FF (the pair may straddle the boundary), is never run by the emulator:
// its fetch goes to KVM, which raises the #UD a CPU would.
bool may_crash_the_translator(const std::byte* page) {
  const auto* b = reinterpret_cast<const uint8_t*>(page);
  for (uint64_t i = 0; i + 1 < kPage; ++i)
    if (b[i] == 0xFF && ((b[i + 1] & 0xF8) == 0xD8 || (b[i + 1] & 0xF8) == 0xE8)) return true;
  return b[kPage - 1] == 0xFF;
}

bool data_fault(uc_err e) {
  return e == UC_ERR_READ_UNMAPPED || e == UC_ERR_WRITE_UNMAPPED || e == UC_ERR_READ_PROT ||
         e == UC_ERR_WRITE_PROT || e == UC_ERR_READ_UNALIGNED || e == UC_ERR_WRITE_UNALIGNED ||
         e == UC_ERR_EXCEPTION;
}

bool fetch_fault(uc_err e) {
  return e == UC_ERR_FETCH_UNMAPPED || e == UC_ERR_FETCH_PROT || e == UC_ERR_FETCH_UNALIGNED;
}

}  // namespace

UserCodeEmulator::UserCodeEmulator(GuestRam& ram, bool multiple_vcpus)
    : ram_(ram), multiple_vcpus_(multiple_vcpus) {
  check(uc_open(UC_ARCH_X86, UC_MODE_64, &uc_), "uc_open");
  uc_hook h;
  check(uc_hook_add(uc_, &h, UC_HOOK_BLOCK, reinterpret_cast<void*>(on_block), this, 1, 0),
        "block hook");
  check(
      uc_hook_add(uc_, &h, UC_HOOK_MEM_UNMAPPED, reinterpret_cast<void*>(on_unmapped), this, 1, 0),
      "unmapped-memory hook");
  check(uc_hook_add(uc_, &h, UC_HOOK_MEM_PROT, reinterpret_cast<void*>(on_protection), this, 1, 0),
        "protection hook");
}

UserCodeEmulator::~UserCodeEmulator() { uc_close(uc_); }

void UserCodeEmulator::flush() {
  // Nothing translated yet: nothing to drop (Unicorn 2.0.1's first TB flush costs seconds: it
  // resets its whole code buffer).
  if (mapped_.empty() && blocks_.empty()) return;
  for (const auto& [page, m] : mapped_) uc_mem_unmap(uc_, page, kPage);
  mapped_.clear();
  blocks_.clear();
  uc_ctl_flush_tlb(uc_);  // (2.0.1's name for UC_CTL_TB_FLUSH: every translated block)
}

const UserCodeEmulator::Block& UserCodeEmulator::block_at(uint64_t address, uint32_t size) {
  const auto key = std::make_pair(address, size);
  if (auto it = blocks_.find(key); it != blocks_.end()) return it->second;
  Block b;
  std::vector<uint8_t> bytes(size);
  // The block was just fetched from mapped pages.
  uc_mem_read(uc_, address, bytes.data(), size);
  GuestRegisters at;  // decoding for classes and lengths: addresses are not needed
  for (uint64_t offset = 0; offset < size;) {
    at.rip = address + offset;
    const std::optional<DecodedInstruction> d = decoder_.decode(
        std::span<const uint8_t>(bytes).subspan(offset, std::min<size_t>(15, size - offset)), at);
    b.starts.push_back(address + offset);
    const KvmOnly why = d ? kvm_only(*d, multiple_vcpus_) : KvmOnly::kNotComputing;
    if (why != KvmOnly::kNo && b.kvm_only_at < 0) {
      b.kvm_only_at = static_cast<int>(b.starts.size() - 1);
      b.why = why;
    }
    if (!d) break;
    offset += d->length;
    if (offset >= size) {
      b.ends_in_branch = d->branch != pmu::BranchKind::kNone;
      b.ends_in_conditional = d->branch == pmu::BranchKind::kConditional;
      b.branch_undoable = b.ends_in_branch && d->branch != pmu::BranchKind::kCall;
      if (d->adjusted_gpr == 4) b.branch_rsp_adjustment = d->adjustment;  // RET's pop
    }
  }
  return blocks_.emplace(key, std::move(b)).first->second;
}

void UserCodeEmulator::block_entered(uint64_t address, uint32_t size) {
  if (stop_) return;
  const Block& b = block_at(address, size);
  // A block runs whole or not at all: one that holds an instruction KVM must run, or would pass
  // the limit, is left to the KVM stepper from its start (a few steps; ending a translated
  // block early in Unicorn 2.0.1 costs a flush of every translated block).
  const bool passes_limit = b.starts.size() > limit_ - retired_;
  if (b.kvm_only_at >= 0 || passes_limit) {
    stop_ = b.kvm_only_at >= 0 ? b.why : KvmOnly::kCount;
    uc_emu_stop(uc_);
    return;
  }
  retired_ += b.starts.size();
  branches_ += b.ends_in_branch ? 1 : 0;
  conditional_branches_ += b.ends_in_conditional ? 1 : 0;
  last_block_ = &b;
}

void UserCodeEmulator::on_block(uc_engine*, uint64_t address, uint32_t size, void* self) {
  static_cast<UserCodeEmulator*>(self)->block_entered(address, size);
}

bool UserCodeEmulator::map_page(uint64_t page, bool write, bool fetch) {
  const std::optional<Translation> t = translate(ram_, cr3_, page);
  if (!t || !t->user || (write && !t->writable) || (fetch && !t->executable)) return false;
  // An XD bit without EFER.NXE is reserved (#PF with RSVD): KVM's to raise.
  if (!nxe_ && !t->executable) return false;
  const uint64_t frame = t->gpa & ~(kPage - 1);
  std::byte* host = ram_.host(frame, kPage);
  if (host == nullptr) return false;  // MMIO or beyond RAM: not the emulator's
  // Executable in the emulator's TLB: where the guest's tables allow it and Unicorn can
  // translate it; also when first read, so that code reading constants from its own page
  // (jump tables, literals) is not sent to KVM at its first fetch.
  const bool executable = t->executable && !may_crash_the_translator(host);
  if (fetch && !executable) return false;
  // Never writable and executable at once (W^X in the emulator's TLB): code is never written
  // under the emulator, so no translated block goes stale by the emulator's own writes. A write
  // to a page code was fetched from, and a fetch from a page that was written, go to KVM
  // (self-modifying code is not emulated; after KVM ran, flush() maps the page afresh).
  auto it = mapped_.find(page);
  if (it != mapped_.end() && (write || fetch)) {
    const uint32_t other = write ? UC_PROT_EXEC : UC_PROT_WRITE;
    if (it->second.prot & other) return false;
  }
  if (!walk_and_mark(ram_, cr3_, page, write)) return false;
  const uint32_t prot =
      UC_PROT_READ | (executable && !write ? UC_PROT_EXEC : 0) | (write ? UC_PROT_WRITE : 0);
  if (it != mapped_.end()) {
    // The tables may map the page elsewhere now: only the same frame keeps its mapping.
    if (it->second.frame != frame || uc_mem_protect(uc_, page, kPage, prot) != UC_ERR_OK)
      return false;
    it->second.prot = prot;
    return true;
  }
  if (uc_mem_map_ptr(uc_, page, kPage, prot, host) != UC_ERR_OK) return false;
  mapped_.emplace(page, Mapping{prot, frame});
  return true;
}

bool UserCodeEmulator::on_unmapped(uc_engine*, uc_mem_type type, uint64_t address, int, int64_t,
                                   void* self) {
  auto* e = static_cast<UserCodeEmulator*>(self);
  const bool fetch = type == UC_MEM_FETCH_UNMAPPED;
  if (e->map_page(address & ~(kPage - 1), type == UC_MEM_WRITE_UNMAPPED, fetch)) return true;
  if (!fetch) e->refused_ = address;
  return false;
}

bool UserCodeEmulator::on_protection(uc_engine*, uc_mem_type type, uint64_t address, int, int64_t,
                                     void* self) {
  // A page mapped for reads meets its first write (the Dirty flag) or its first fetch. A fetch
  // is refused here, where it is precise (a block's first fetch, nothing of it ran): changing a
  // page's protection while a block runs can end the run at an imprecise RIP. Whatever the
  // walk refuses is KVM's to raise.
  if (type != UC_MEM_WRITE_PROT) return false;
  auto* e = static_cast<UserCodeEmulator*>(self);
  const uint64_t page = address & ~(kPage - 1);
  if (e->mapped_.contains(page) && e->map_page(page, /*write=*/true, /*fetch=*/false)) return true;
  e->refused_ = address;
  return false;
}

std::optional<uint64_t> UserCodeEmulator::faulting_instruction(const Block& b, uint64_t address) {
  GuestRegisters now;
  for (const RegisterSlot& r : kRegisters) uc_reg_read(uc_, r.uc, &(now.*r.field));
  std::optional<uint64_t> found;
  for (uint64_t start : b.starts) {
    std::array<uint8_t, 15> bytes{};
    size_t n = 0;  // the block's bytes are mapped; an instruction may end on the next page
    while (n < bytes.size() && uc_mem_read(uc_, start + n, &bytes[n], 1) == UC_ERR_OK) ++n;
    now.rip = start;
    const std::optional<DecodedInstruction> d =
        decoder_.decode(std::span<const uint8_t>(bytes.data(), n), now);
    if (!d) continue;
    auto touches = [&](const std::array<MemoryAccess, DecodedInstruction::kMaxAccesses>& a,
                       uint8_t count) {
      for (uint8_t i = 0; i < count; ++i)
        if (address >= a[i].address && address - a[i].address < std::max<uint32_t>(a[i].size, 1))
          return true;
      return false;
    };
    if (touches(d->loads, d->load_count) || touches(d->stores, d->store_count)) {
      if (found) return std::nullopt;  // two could have: not known which
      found = start;
    }
  }
  return found;
}

void UserCodeEmulator::retire_up_to(const Block& b, uint64_t pc) {
  const auto at = std::find(b.starts.begin(), b.starts.end(), pc);
  retired_ += static_cast<uint64_t>(at - b.starts.begin());
}

EmulationRun UserCodeEmulator::fault_in(const Block* b, uint64_t& pc) {
  // Unicorn's RIP is the block's start; the registers are those before the faulting
  // instruction, which did not retire (its block's instructions before it did).
  EmulationRun out;
  out.end = EmulationRun::End::kFault;
  const std::optional<uint64_t> at =
      b && refused_ ? faulting_instruction(*b, *refused_) : std::nullopt;
  if (!at) {
    out.position_known = false;
    return out;
  }
  retire_up_to(*b, *at);
  pc = *at;
  uc_reg_write(uc_, UC_X86_REG_RIP, &pc);
  return out;
}

EmulationRun UserCodeEmulator::one_run(uint64_t pc, uint64_t timeout_us) {
  last_block_ = nullptr;
  stop_.reset();
  refused_.reset();
  const uc_err err = uc_emu_start(uc_, pc, 0, timeout_us, 0);
  uc_reg_read(uc_, UC_X86_REG_RIP, &pc);
  EmulationRun out;
  if (data_fault(err)) {
    // The last block ran up to the faulting instruction, which did not retire: not its branch
    // (the last instruction) either.
    if (last_block_ != nullptr) {
      retired_ -= last_block_->starts.size();
      branches_ -= last_block_->ends_in_branch ? 1 : 0;
      conditional_branches_ -= last_block_->ends_in_conditional ? 1 : 0;
    }
    return fault_in(last_block_, pc);
  }
  if (fetch_fault(err)) {  // a block's first fetch: the blocks before it ran whole
    out.end = EmulationRun::End::kFault;
    const bool canonical = static_cast<uint64_t>(static_cast<int64_t>(pc << 16) >> 16) == pc;
    if (!canonical) {
      // The last block's branch went there: hardware raises #GP at the branch instead, which
      // does not retire and leaves RSP as it was.
      if (last_block_ == nullptr || !last_block_->ends_in_branch || !last_block_->branch_undoable) {
        out.position_known = false;
        return out;
      }
      --retired_;
      --branches_;
      conditional_branches_ -= last_block_->ends_in_conditional ? 1 : 0;
      pc = last_block_->starts.back();
      uc_reg_write(uc_, UC_X86_REG_RIP, &pc);
      uint64_t rsp = 0;
      uc_reg_read(uc_, UC_X86_REG_RSP, &rsp);
      rsp -= static_cast<uint64_t>(last_block_->branch_rsp_adjustment);
      uc_reg_write(uc_, UC_X86_REG_RSP, &rsp);
    }
    return out;
  }
  if (err != UC_ERR_OK) {  // not expected: the policy lets Unicorn see only what it runs
    out.end = EmulationRun::End::kKvmOnly;
    out.kvm_only = KvmOnly::kNotComputing;
    out.position_known = false;
    return out;
  }
  if (!stop_) {
    out.end = EmulationRun::End::kTimeout;
    return out;
  }
  out.end = *stop_ == KvmOnly::kCount ? EmulationRun::End::kLimit : EmulationRun::End::kKvmOnly;
  out.kvm_only = *stop_ == KvmOnly::kCount ? KvmOnly::kNo : *stop_;
  return out;
}

EmulationRun UserCodeEmulator::run(GuestRegisters& regs, uint64_t cr3, bool nxe, uint64_t limit,
                                   uint64_t timeout_us) {
  if (cr3 != cr3_) flush();  // another address space: another TLB
  cr3_ = cr3;
  nxe_ = nxe;
  limit_ = limit;
  retired_ = branches_ = conditional_branches_ = 0;
  for (const RegisterSlot& r : kRegisters) uc_reg_write(uc_, r.uc, &(regs.*r.field));
  EmulationRun out = one_run(regs.rip, timeout_us);
  out.retired = retired_;
  out.branches = branches_;
  out.conditional_branches = conditional_branches_;
  // Live migration: the emulator's stores bypass KVM's dirty log (GuestRam::note_written).
  for (const auto& [page, m] : mapped_)
    if (m.prot & UC_PROT_WRITE) ram_.note_written(m.frame, kPage);
  for (const RegisterSlot& r : kRegisters) uc_reg_read(uc_, r.uc, &(regs.*r.field));
  return out;
}

}  // namespace vmm
