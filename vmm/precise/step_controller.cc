#include "vmm/precise/step_controller.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

namespace vmm {
namespace {

constexpr uint64_t kPage = 4096;
// SYSRET loads RFLAGS from R11 with RF and VM cleared and bit 1 set (AMD APM 24594, SYSRET).
constexpr uint64_t kSysretFlagsMask = 0x3C7FD7;
constexpr uint64_t kResumeFlag = 1u << 16;         // RFLAGS.RF
constexpr uint64_t kAlignmentCheck = 1u << 18;     // RFLAGS.AC
constexpr uint64_t kCr4ProtectionKeys = 1u << 22;  // CR4.PKE

// An instruction's bytes as the CPU fetches them: from pages that are present, executable and
// (for user code) user pages; fewer when the next page cannot be fetched, none when the first
// byte cannot (the instruction faults on its fetch: no successor, no TF step, no block).
CodeBytes fetch(PagedGuestMemory& memory, uint64_t rip) {
  const uint64_t in_page = std::min<uint64_t>(15, kPage - (rip & (kPage - 1)));
  CodeBytes bytes;
  auto as_bytes = [&](size_t from, size_t n) {
    return std::span<std::byte>(reinterpret_cast<std::byte*>(bytes.data.data()) + from, n);
  };
  if (!memory.fetch(rip, as_bytes(0, in_page))) return {};
  bytes.size = 15;
  if (in_page < 15 && !memory.fetch(rip + in_page, as_bytes(in_page, 15 - in_page)))
    bytes.size = in_page;
  return bytes;
}

// The guest's enabled execution breakpoints (DR7 R/W 00), which a block never runs into.
class GuestExecutionBreakpoints {
 public:
  explicit GuestExecutionBreakpoints(const GuestDebugRegisters& guest)
      : guest_(guest), held_(guest.held_slots()) {}
  bool at(uint64_t rip) const {
    for (int i = 0; i < 4; ++i)
      if ((held_ & (1u << i)) && ((guest_.dr7 >> (16 + 4 * i)) & 3) == 0 && guest_.db[i] == rip)
        return true;
    return false;
  }
  // Debug slots the guest's breakpoints leave to pmuvm.
  size_t free_slots() const { return 4 - static_cast<size_t>(std::popcount(held_)); }

 private:
  GuestDebugRegisters guest_;
  uint8_t held_;
};

// The physical frames of a block's code (its first instruction's, and the page the rest is in).
// Stores into them would change what runs from what was decoded: compared by frame, so that a
// store through another mapping of a frame counts (a store that cannot be translated faults, and
// then nothing after it runs).
class BlockCodeFrames {
 public:
  BlockCodeFrames(const GuestRam& ram, uint64_t cr3, uint64_t first_rip, uint64_t first_length,
                  uint64_t page)
      : ram_(ram), cr3_(cr3) {
    for (const uint64_t code : {first_rip, first_rip + first_length - 1, page})
      if (const std::optional<Translation> t = translate(ram_, cr3_, code))
        frames_[count_++] = t->gpa & ~(kPage - 1);
  }
  bool written_by(const MemoryAccess& w) const {
    for (const uint64_t linear : {w.address, w.address + (w.size ? w.size - 1 : 0)}) {
      const std::optional<Translation> t = translate(ram_, cr3_, linear);
      if (!t) continue;
      for (size_t i = 0; i < count_; ++i)
        if ((t->gpa & ~(kPage - 1)) == frames_[i]) return true;
    }
    return false;
  }
  bool written_by(const DecodedInstruction& d) const {
    for (uint8_t i = 0; i < d.store_count; ++i)
      if (written_by(d.stores[i])) return true;
    return false;
  }

 private:
  const GuestRam& ram_;
  uint64_t cr3_;
  std::array<uint64_t, 3> frames_{};
  size_t count_ = 0;
};

std::optional<uint64_t> read_u64(pmu::GuestMemory& memory, uint64_t linear) {
  uint64_t value = 0;
  if (!memory.read(linear, std::as_writable_bytes(std::span(&value, 1)))) return std::nullopt;
  return value;
}

}  // namespace

StepController::StepController(GuestRam& ram, const pmu::cache::Geometry& cache)
    : StepController(ram, cache, Options{}) {}

StepController::StepController(GuestRam& ram, const pmu::cache::Geometry& cache, Options options)
    : ram_(ram),
      options_(options),
      user_memory_(ram, PagedGuestMemory::Access::kUser),
      kernel_memory_(ram, PagedGuestMemory::Access::kSupervisor),
      user_accountant_(cache),
      kernel_accountant_(cache) {}

void StepController::set_scope(StepScope scope, StepTarget& at) {
  if (scope == scope_) return;
  const StepScope before = scope_;
  scope_ = scope;
  if (scope == StepScope::kNothing) {
    mode_ = Mode::kOff;
    have_pre_ = false;
    reset_plan();
    return;
  }
  refresh_entry_points(at);
  if (at.cpl() == 3) {
    if (mode_ != Mode::kUser || before == StepScope::kNothing) {
      StepOutcome ignored;
      enter_user(at.registers(), ignored);
    } else {
      plan_user_step();  // kernel successors depend on the scope no more than user ones
    }
    return;
  }
  if (scope == StepScope::kEveryCpl) {
    // Counting at CPL 0 starts here: the instruction the vCPU exited on (the WRMSR that enabled
    // the counter) is not counted; the first step report gives the first pre-state.
    mode_ = Mode::kKernelStep;
    have_pre_ = false;
    reset_plan();
  } else {
    enter_kernel(KernelEntry::kUnknown);
  }
}

void StepController::refresh_entry_points(StepTarget& at) {
  kernel_memory_.set_cr3(at.registers().cr3);
  entries_.refresh(kernel_memory_, at.lstar(), at.idt_base(), at.idt_limit());
  sites_stale_ = true;
}

void StepController::enter_user(const GuestRegisters& at, StepOutcome& out) {
  mode_ = Mode::kUser;
  pre_ = at;
  have_pre_ = true;
  out.entered_user = true;
  plan_user_step();
}

void StepController::ran_unseen(const GuestRegisters& now) {
  if (emulation_start() == nullptr)
    throw std::logic_error("step controller: user code ran unseen from no pending instruction");
  pre_ = now;
  trap_flag_live_ = false;  // KVM_SET_REGS rewrote RFLAGS: re-armed before a TF step
  plan_user_step();
}

void StepController::enter_kernel(KernelEntry how) {
  mode_ = scope_ == StepScope::kNothing ? Mode::kOff : Mode::kKernel;
  kernel_entry_ = how;  // (return_sites() orders the sites by it)
  have_pre_ = false;
  reset_plan();
}

std::optional<DecodedInstruction> StepController::decode(const GuestRegisters& at, uint8_t cpl) {
  PagedGuestMemory& memory = cpl == 3 ? user_memory_ : kernel_memory_;
  memory.set_cr3(at.cr3);
  const CodeBytes bytes = fetch(memory, at.rip);
  if (bytes.size == 0) return std::nullopt;
  return decoder_.decode(bytes.span(), at);
}

void StepController::plan_user_step() {
  reset_plan();
  user_memory_.set_cr3(pre_.cr3);
  pre_bytes_ = fetch(user_memory_, pre_.rip);
  pre_decoded_ = pre_bytes_.size ? decoder_.decode(pre_bytes_.span(), pre_) : std::nullopt;
  const std::optional<DecodedInstruction>& d = pre_decoded_;
  // Unreadable or undecodable code faults (#PF on the fetch, #UD): no successor; the kernel's
  // return is caught at the return sites.
  if (!d) return;
  plan_.rep_string = d->rep_string;
  switch (d->flow.kind) {
    case ControlFlow::Kind::kNext: plan_.successors.push_back({pre_.rip + d->length, false}); break;
    case ControlFlow::Kind::kJump: plan_.successors.push_back({d->flow.target, false}); break;
    case ControlFlow::Kind::kIndirect: {
      user_memory_.set_cr3(pre_.cr3);
      // Unreadable: the instruction faults on it, and the kernel's return is caught.
      if (const std::optional<uint64_t> target = read_u64(user_memory_, d->flow.pointer))
        plan_.successors.push_back({*target, false});
      break;
    }
    case ControlFlow::Kind::kSyscall:
      if (entries_.syscall_entry() != 0)
        plan_.successors.push_back({entries_.syscall_entry(), true});
      else
        plan_.stop = Plan::Stop::kSingleStep;
      break;
    case ControlFlow::Kind::kInterrupt:
      // A gate user mode may not use: the INT raises #GP instead, caught at the return sites.
      if (const std::optional<uint64_t> entry = entries_.user_interrupt_entry(d->flow.vector))
        plan_.successors.push_back({*entry, true});
      break;
    case ControlFlow::Kind::kUnknown: plan_.stop = Plan::Stop::kSingleStep; break;
  }
  // Only computing in registers, and the guest's own TF clear (its trap after the instruction
  // would be delivered through a frame): single-stepped, one configuration for the whole run.
  if (options_.trap_flag_steps && plan_.stop == Plan::Stop::kBreakpoints && d->trap_flag_safe &&
      !(pre_.rflags & kTrapFlag) && !plan_.successors.empty())
    plan_.stop = Plan::Stop::kTrapFlagStep;
  // KVM completes these itself and, with the guest's TF set, queues the guest's #DB without an
  // exit: the #DB handler's entry then comes right after the instruction.
  if (d->completed_by_kvm && (pre_.rflags & kTrapFlag))
    if (const std::optional<uint64_t> handler = entries_.debug_handler())
      plan_.successors.push_back({*handler, true});
  block_open_ = true;
}

void StepController::reset_plan() {
  std::vector<Plan::Successor> successors = std::move(plan_.successors);
  std::vector<uint64_t> block = std::move(plan_.block);
  successors.clear();  // keeps its buffer: a plan is made at every step
  block.clear();
  plan_ = Plan{};
  plan_.successors = std::move(successors);
  plan_.block = std::move(block);
  block_decoded_.clear();
  block_open_ = false;
}

void StepController::clear_block() {
  plan_.block.clear();
  block_decoded_.clear();
}

bool StepController::block_may_follow(const DecodedInstruction& first) const {
  // The first instruction goes to one user successor, computed from its real registers (it may
  // be a taken or untaken branch, a CALL, a RET: the block goes on there), and it is nothing the
  // block must stop right after: no guest TF (its trap comes after each instruction), no POPF (it
  // may set TF), no REP string, nothing KVM completes itself (RDPMC reads the counters the block
  // has not yet counted).
  if (plan_.stop == Plan::Stop::kSingleStep || plan_.successors.size() != 1 ||
      plan_.successors[0].kernel || (pre_.rflags & kTrapFlag) || first.rep_string ||
      first.completed_by_kvm || first.lwp_instruction || first.mnemonic == ZYDIS_MNEMONIC_POPF ||
      first.mnemonic == ZYDIS_MNEMONIC_POPFD || first.mnemonic == ZYDIS_MNEMONIC_POPFQ)
    return false;
  // A segment load changes the FS/GS base the block's later accesses would be proven with (and a
  // MOV SS holds the next instruction's breakpoints back): the next instruction starts a block.
  return !first.segment_written;
}

bool StepController::extend_block(uint64_t limit, StepTarget& at_exit) {
  if (!block_open_ || mode_ != Mode::kUser) return false;
  // A window first lets held interrupts in before pre_; the block is made after it closes. A
  // return being stepped lands before pre_ first.
  if (plan_.window || plan_.step_return) return false;
  block_open_ = false;
  if (!options_.block_steps || limit < 2 || !pre_decoded_ || !plan_.block.empty()) return false;
  const DecodedInstruction& first = *pre_decoded_;
  if (!block_may_follow(first)) return false;
  const GuestExecutionBreakpoints guest_breakpoints(at_exit.guest_debug());
  if (guest_breakpoints.at(pre_.rip)) return false;  // RF would pass it too

  // The rest of the block: from the first instruction's successor on, within that page (the
  // first instruction's fetch reached it; nothing after it can fault, not even a fetch).
  uint64_t rip = plan_.successors[0].rip;
  const uint64_t page_end = (rip & ~(kPage - 1)) + kPage;
  const BlockCodeFrames code(ram_, pre_.cr3, pre_.rip, first.length, page_end - kPage);
  if (code.written_by(first)) return false;
  // Memory computations after the first instruction, where the walk can prove their accesses.
  const bool prove_memory =
      !(pre_.rflags & kAlignmentCheck) && !(at_exit.cr4() & kCr4ProtectionKeys);
  // The registers as each instruction will find them: those the block moved by constants
  // (adjusted_gpr) are followed, so the decode's addresses are the ones that will be used; the
  // others it changed are unknown (`written`) and address nothing.
  GuestRegisters at = pre_;
  uint16_t written = first.gprs_written;
  if (first.adjusted_gpr >= 0) general_register(at, first.adjusted_gpr) += first.adjustment;
  BlockTargets targets;
  user_memory_.set_cr3(pre_.cr3);
  // A successor at an instruction of the block (after its first) would stop the block before
  // that instruction ran: the block ends before it instead, and it starts the next block. (One
  // elsewhere, even inside an instruction, cannot fire while the block runs: breakpoints fire
  // where an instruction starts.)
  auto end_before_block_instruction = [&](uint64_t successor) {
    const auto at_instruction = std::find(plan_.block.begin(), plan_.block.end(), successor);
    if (at_instruction == plan_.block.end()) return false;
    const size_t end = static_cast<size_t>(at_instruction - plan_.block.begin());
    rip = successor;
    plan_.block.resize(end);
    block_decoded_.resize(end);
    return true;
  };
  while (plan_.block.size() + 1 < std::min<uint64_t>(limit, kMaxBlockInstructions)) {
    if (rip >= page_end || guest_breakpoints.at(rip)) break;
    // Back at its own code (after a followed jump): the block ends there.
    if (rip == pre_.rip || end_before_block_instruction(rip)) break;
    const CodeBytes bytes = fetch(user_memory_, rip);
    at.rip = rip;
    const std::optional<DecodedInstruction> d =
        bytes.size ? decoder_.decode(bytes.span(), at) : std::nullopt;
    if (!d || rip + d->length > page_end) break;
    // A direct near CALL: its one store (the return address) proven like a push's.
    const bool direct_call = d->branch == pmu::BranchKind::kCall && d->direct_target &&
                             d->store_count == 1 && d->load_count == 0;
    if (!d->trap_flag_safe) {
      const bool falls_through =
          (d->memory_computation || d->stack_push_pop) && d->flow.kind == ControlFlow::Kind::kNext;
      if (!prove_memory || !(falls_through || direct_call) || (d->gprs_addressing & written) ||
          !accesses_proven(*d) || code.written_by(*d))
        break;
    }
    written |= d->gprs_written;
    if (d->adjusted_gpr >= 0) general_register(at, d->adjusted_gpr) += d->adjustment;
    plan_.block.push_back(rip);
    block_decoded_.push_back(*d);
    if (d->branch == pmu::BranchKind::kNone) {
      rip += d->length;
      continue;
    }
    if (!d->direct_target) {  // (trap_flag_safe jumps are relative)
      plan_.block.pop_back();
      block_decoded_.pop_back();
      break;
    }
    // A JMP or CALL to a fixed place in this page: the block goes on there (not to an instruction
    // it already has: those are successors, below).
    const uint64_t target = *d->direct_target;
    if ((d->branch == pmu::BranchKind::kDirectJump || direct_call) && target >= page_end - kPage &&
        target < page_end && target != pre_.rip &&
        std::find(plan_.block.begin(), plan_.block.end(), target) == plan_.block.end()) {
      rip = target;
      continue;
    }
    targets.add(*d->direct_target);
    if (d->branch == pmu::BranchKind::kConditional && d->fall_through(rip) != *d->direct_target)
      targets.add(d->fall_through(rip));
    // The earliest block instruction a target names ends the block (its fall-through then).
    size_t end = plan_.block.size();
    for (size_t t = 0; t < targets.count; ++t)
      for (size_t k = 0; k < end; ++k)
        if (plan_.block[k] == targets.rips[t]) end = k;
    if (end < plan_.block.size()) {
      end_before_block_instruction(plan_.block[end]);
      targets.count = 0;
    }
    break;
  }
  if (targets.count == 0) targets.add(rip);  // ends before `rip`: it falls through
  if (plan_.block.empty()) return false;
  return arm_block(targets, guest_breakpoints.free_slots(), at_exit);
}

bool StepController::arm_block(const BlockTargets& targets, size_t free_slots,
                               StepTarget& at_exit) {
  // Its successors need slots (and a return site one, to catch a fault of the first).
  if (targets.count + (return_sites().empty() ? 0 : 1) > free_slots) {
    ++stats_.blocks_refused_for_slots;
    clear_block();
    return false;
  }
  bool resume_flag = false;
  for (size_t t = 0; t < targets.count; ++t)
    if (targets.rips[t] == pre_.rip) resume_flag = true;
  // A block that comes back to its first instruction starts with RF, which only works where the
  // vCPU is at that instruction: still at the return site that made it pending, the RF would
  // go to the return instruction, and the block's breakpoint would then fire before it ran.
  if (resume_flag && (at_exit.cpl() != 3 || at_exit.registers().rip != pre_.rip)) {
    clear_block();
    return false;
  }
  plan_.successors.clear();
  for (size_t t = 0; t < targets.count; ++t) plan_.successors.push_back({targets.rips[t], false});
  plan_.stop = Plan::Stop::kBreakpoints;
  return resume_flag;
}

bool StepController::accesses_proven(const DecodedInstruction& d) const {
  auto proven = [&](const MemoryAccess& a, bool store) {
    if (a.size == 0 || a.size > kPage) return false;
    // An access touches at most two pages: its first and its last byte's.
    for (const uint64_t linear : {a.address, a.address + a.size - 1}) {
      const std::optional<Translation> t = translate(ram_, pre_.cr3, linear);
      if (!t || !t->user || (store && !t->writable)) return false;
    }
    return true;
  };
  for (uint8_t i = 0; i < d.load_count; ++i)
    if (!proven(d.loads[i], false)) return false;
  for (uint8_t i = 0; i < d.store_count; ++i)
    if (!proven(d.stores[i], true)) return false;
  return true;
}

std::optional<DecodedInstruction> StepController::block_instruction(size_t i) {
  if (block_decoded_.size() != plan_.block.size()) {
    // Restored from a snapshot: read the code again (it ran; it is what is there) and follow
    // the registers as extend_block did.
    block_decoded_.clear();
    user_memory_.set_cr3(pre_.cr3);
    GuestRegisters at = pre_;
    std::optional<DecodedInstruction> d = decode(pre_, 3);
    for (const uint64_t rip : plan_.block) {
      if (!d) return std::nullopt;
      if (d->adjusted_gpr >= 0) general_register(at, d->adjusted_gpr) += d->adjustment;
      at.rip = rip;
      const CodeBytes bytes = fetch(user_memory_, rip);
      d = bytes.size ? decoder_.decode(bytes.span(), at) : std::nullopt;
      if (!d) return std::nullopt;
      block_decoded_.push_back(*d);
    }
  }
  return block_decoded_[i];
}

bool StepController::retire_block(uint64_t stopped_at, StepOutcome& out) {
  size_t after_first = plan_.block.size();  // how many after pre_ retired
  for (size_t i = 0; i < plan_.block.size(); ++i)
    if (plan_.block[i] == stopped_at) {
      after_first = i;
      break;
    }
  retire(pre_, plan_.block[0], 3, out);  // the first falls through to the second
  // Instructions after the first were decoded from the block's first registers, which are
  // theirs for everything the accountant reads: the RIP, and the addresses of their accesses.
  GuestRegisters before = pre_;
  for (size_t i = 0; i < after_first; ++i) {
    const std::optional<DecodedInstruction> d = block_instruction(i);
    if (!d) break;
    before.rip = plan_.block[i];
    const uint64_t next = i + 1 < plan_.block.size() ? plan_.block[i + 1] : stopped_at;
    if (const std::optional<pmu::RetiredInstruction> r =
            user_accountant_.account(before, *d, 3, next))
      out.retired.push_back(*r);
  }
  if (after_first == 0) {
    ++stats_.user_steps;
  } else {
    ++stats_.blocks;
    stats_.block_instructions += after_first + 1;
  }
  return after_first < plan_.block.size();
}

const std::vector<uint64_t>& StepController::return_sites() const {
  // From user code, and after a fault or interrupt, the kernel is entered through the IDT.
  const bool exception_first = mode_ == Mode::kUser || kernel_entry_ == KernelEntry::kException;
  if (sites_stale_ || exception_first != sites_exception_first_) {
    sites_.clear();
    for (const ReturnSite& s : entries_.by_priority(exception_first)) sites_.push_back(s.rip);
    sites_stale_ = false;
    sites_exception_first_ = exception_first;
  }
  return sites_;
}

DebugConfig StepController::desired(const GuestDebugRegisters& guest) const {
  DebugConfig config;
  if (mode_ == Mode::kOff) return config;  // the guest's own DR0-3/DR7 run natively
  config.intercept = true;
  const std::vector<uint64_t>& sites = return_sites();
  // pmuvm's breakpoints, most important first: no more than the four slots can take (this runs
  // at every step: no allocation).
  std::array<uint64_t, 4> ours{};
  size_t n = 0;
  auto add = [&](uint64_t rip) {
    if (n < ours.size()) ours[n++] = rip;
  };
  if ((mode_ == Mode::kUser && plan_.step_return) || trap_flag_stepping()) {
    // Single-stepped with interrupts held and only the guest's own breakpoints: a return being
    // stepped (Plan::step_return), or a register instruction, which cannot leave user mode
    // (nothing of it can fault), so no return site needs watching. (Under QEMU's TCG, the nested
    // KVM host, every armed breakpoint costs at each VM entry and exit: its code pages are
    // retranslated.)
    place_breakpoints(guest, {}, config);
    config.single_step = true;
    config.block_irq = true;
    return config;
  }
  if (mode_ == Mode::kUser && plan_.window) {
    // Interrupts allowed, the pending instruction itself under a breakpoint.
    add(pre_.rip);
    for (uint64_t site : sites) add(site);
    place_breakpoints(guest, std::span(ours.data(), n), config);
    return config;
  }
  const bool by_breakpoint = mode_ == Mode::kUser && plan_.stop == Plan::Stop::kBreakpoints;
  if (by_breakpoint)
    for (const Plan::Successor& s : plan_.successors) add(s.rip);
  for (uint64_t site : sites) add(site);
  const size_t placed = place_breakpoints(guest, std::span(ours.data(), n), config);
  const size_t successors = by_breakpoint ? plan_.successors.size() : 0;
  if (mode_ == Mode::kUser) config.block_irq = true;  // interrupts only through windows
  if (mode_ == Mode::kUser && (!by_breakpoint || placed < successors)) {
    // Single-stepped (by choice, or no breakpoint for the successor), interrupts held so that no
    // handler's frame carries the TF; the slots go to the return sites.
    place_breakpoints(guest, sites, config);
    config.single_step = true;
    config.block_irq = true;
  }
  if (mode_ == Mode::kKernelStep) config.single_step = true;
  return config;
}

uint64_t StepController::guest_trap_flag_after(const GuestRegisters& before) {
  const std::optional<DecodedInstruction> d = decode(before, 3);
  if (d && (d->mnemonic == ZYDIS_MNEMONIC_POPF || d->mnemonic == ZYDIS_MNEMONIC_POPFQ)) {
    // TF is bit 8: in the low word, whatever POPF's operand size. The stack is as POPF found it
    // (interrupts held while KVM steps: nothing ran since).
    user_memory_.set_cr3(before.cr3);
    uint16_t popped = 0;
    if (user_memory_.read(before.rsp, std::as_writable_bytes(std::span(&popped, 1))))
      return popped & kTrapFlag;
  }
  return before.rflags & kTrapFlag;
}

void StepController::retire(const GuestRegisters& before, uint64_t next_rip, uint8_t cpl,
                            StepOutcome& out) {
  PagedGuestMemory& memory = cpl == 3 ? user_memory_ : kernel_memory_;
  memory.set_cr3(before.cr3);
  // The pending user instruction's bytes were read when it was planned (what ran is what was
  // there then); anything else is read now.
  const bool planned = cpl == 3 && &before == &pre_ && pre_bytes_.size != 0;
  StepAccountant& accountant = cpl == 3 ? user_accountant_ : kernel_accountant_;
  std::optional<pmu::RetiredInstruction> r;
  if (planned && pre_decoded_) {
    r = accountant.account(before, *pre_decoded_, cpl, next_rip);
  } else {
    const CodeBytes bytes = planned ? pre_bytes_ : fetch(memory, before.rip);
    if (bytes.size == 0) return;
    r = accountant.account(before, bytes.span(), cpl, next_rip);
  }
  if (r) out.retired.push_back(*r);
}

std::optional<GuestRegisters> StepController::user_return(StepTarget& at, const ReturnSite& site) {
  const GuestRegisters now = at.registers();
  std::optional<GuestRegisters> user;
  switch (site.kind) {
    case ReturnSite::Kind::kIret: {
      // The frame IRETQ pops: RIP, CS, RFLAGS, RSP, SS.
      kernel_memory_.set_cr3(now.cr3);
      std::array<uint64_t, 5> frame{};
      if (!kernel_memory_.read(now.rsp, std::as_writable_bytes(std::span(frame)))) break;
      if ((frame[1] & 3) != 3) break;  // back into the kernel
      user = now;
      user->rip = frame[0];
      user->rflags = frame[2];
      user->rsp = frame[3];
      break;
    }
    case ReturnSite::Kind::kSysret64:
      user = now;
      user->rip = now.rcx;
      user->rflags = (now.r11 & kSysretFlagsMask) | 2;
      break;
    case ReturnSite::Kind::kReturn32:
      break;  // compatibility-mode user code is not counted: wait for the next return
  }
  return user;
}

void StepController::at_return_site(StepTarget& at, const ReturnSite& site, StepOutcome& out) {
  returned_from_site(at, site, user_return(at, site), out);
}

void StepController::returned_from_site(StepTarget& at, const ReturnSite& site,
                                        const std::optional<GuestRegisters>& user,
                                        StepOutcome& out) {
  ++stats_.return_stops;
  const GuestRegisters now = at.registers();
  out.resume_flag = true;  // the site's breakpoint stays armed: let the instruction run
  if (!user) {
    if (mode_ == Mode::kUser) enter_kernel(KernelEntry::kException);
    return;
  }
  if (!site.seen_returning_to_user) {
    entries_.saw_user_return(site.rip);
    sites_stale_ = true;  // it moves to the front
  }
  ++stats_.user_returns;
  // Stepping the kernel (kEveryCpl): the return instruction is the last kernel one.
  if (mode_ == Mode::kKernelStep && have_pre_ && pre_.rip == now.rip)
    retire(now, user->rip, 0, out);
  enter_user(*user, out);
  // The return loads RFLAGS (frame, R11): a TF set now would trap before pre_ and be gone
  // after it. The first user instruction stops at a breakpoint; TF is set at a user boundary.
  if (plan_.stop == Plan::Stop::kTrapFlagStep) plan_.stop = Plan::Stop::kBreakpoints;
  if (user->rflags & kResumeFlag) {
    plan_.step_return = true;  // see Plan::step_return
    out.resume_flag = false;
    return;
  }
  // The return sets IF: an interrupt pending since the kernel (one raised by counting its
  // SYSCALL, say) is taken before the first user instruction, as on hardware, not whenever a
  // later window lets it in.
  if (plan_.stop != Plan::Stop::kSingleStep && at.interrupt_pending()) {
    plan_.window = true;
    ++stats_.interrupt_windows;
  }
}

bool StepController::open_interrupt_window(StepTarget& at) {
  if (mode_ != Mode::kUser || plan_.stop == Plan::Stop::kSingleStep || plan_.window) return false;
  // The window's breakpoint needs a slot: the guest may hold all four (then a single-stepped
  // instruction has no window; its successor's plan may).
  if (plan_.stop == Plan::Stop::kTrapFlagStep && at.guest_debug().held_slots() == 0xF) return false;
  // Only where the vCPU really is at the pending instruction: a kick can stop it between the
  // pending instruction and its successor, whose breakpoint then fires on the next KVM_RUN.
  if (at.cpl() != 3 || at.registers().rip != pre_.rip) return false;
  // RF set (resuming a successor breakpoint at pre_ itself, a one-instruction loop) would pass
  // the window's breakpoint: the instruction would run with no successor armed.
  if (at.registers().rflags & kResumeFlag) return false;
  for (const Plan::Successor& s : plan_.successors)
    if (s.rip == pre_.rip) return false;
  plan_.window = true;
  ++stats_.interrupt_windows;
  return true;
}

StepOutcome StepController::on_kick(StepTarget& at) {
  StepOutcome out;
  trap_flag_live_ = false;  // (a kick leaves it; re-arming costs one ioctl and is always right)
  if (mode_ != Mode::kUser) return out;
  // In the kernel with interrupts held (a fault took it there): a kernel that waits for an
  // interrupt (HLT) must get it. What retired is what came before the faulting instruction.
  if (left_user_mode(at)) {
    retire_departed_prefix(at, at.registers(), out);
    enter_kernel(KernelEntry::kException);
    return out;
  }
  // In user code the plan does not know: neither the pending instruction nor a place the plan
  // stops at or passes (a return that no armed site caught). Interrupts are held for the plan,
  // and a window opens only at the pending instruction, so without starting again here they
  // would wait as long as the user code runs.
  // (A single step whose successor is unknown is no such case: its trap comes next.)
  const GuestRegisters now = at.registers();
  if (at.cpl() == 3 && plan_.stop != Plan::Stop::kSingleStep && !plan_knows(now.rip)) {
    ++stats_.missed_returns;
    enter_user(now, out);
  }
  return out;
}

bool StepController::plan_knows(uint64_t rip) const {
  if (!have_pre_ || rip == pre_.rip) return true;
  for (const Plan::Successor& s : plan_.successors)
    if (!s.kernel && s.rip == rip) return true;
  return std::find(plan_.block.begin(), plan_.block.end(), rip) != plan_.block.end();
}

std::optional<uint64_t> StepController::departure_rip(StepTarget& at, const GuestRegisters& now) {
  // The stacks the CPU may have switched to: RSP0, or the IST of a fault's gate (the faults a
  // block's later instructions can raise when the page tables change under it).
  kernel_memory_.set_cr3(now.cr3);
  const uint64_t tss = at.tss_base();
  std::array<uint64_t, 6> tops{};
  size_t count = 0;
  auto add_top = [&](uint64_t offset) {
    const std::optional<uint64_t> top = read_u64(kernel_memory_, tss + offset);
    if (top && std::find(tops.begin(), tops.begin() + count, *top) == tops.begin() + count)
      tops[count++] = *top;
  };
  add_top(4);                                       // RSP0
  for (const uint8_t vector : {6, 12, 13, 14, 17})  // #UD, #SS, #GP, #PF, #AC
    if (const uint8_t ist = entries_.interrupt_stack(vector); ist != 0) add_top(36 + 8 * (ist - 1));
  for (size_t i = 0; i < count; ++i) {
    // 64-bit mode aligns the new stack to 16 bytes, then pushes SS, RSP, RFLAGS, CS, RIP (and an
    // error code below them).
    const uint64_t frame = (tops[i] & ~uint64_t{15}) - 40;
    // A return under way copies its own frame there (Linux with page-table isolation builds the
    // IRET frame on the entry stack): that frame says where the kernel returns, not where user
    // mode was left.
    if (frame == now.rsp) continue;
    std::array<uint64_t, 5> f{};
    if (!kernel_memory_.read(frame, std::as_writable_bytes(std::span(f)))) continue;
    if ((f[1] & 3) == 3 && (f[4] & 3) == 3) return f[0];
  }
  return std::nullopt;
}

void StepController::retire_departed_prefix(StepTarget& at, const GuestRegisters& now,
                                            StepOutcome& out,
                                            std::optional<uint64_t> returning_to) {
  if (mode_ != Mode::kUser || plan_.block.empty() || plan_.window || plan_.step_return) return;
  // The block ran with interrupts and NMIs held and cannot have called the kernel: only a fault
  // took it there, and the fault's frame says at which instruction. Those before it retired
  // (a fault of the first: none; a successor cannot fault before its breakpoint fires: code
  // breakpoints come before fetch faults). Found first at the return, the frame is gone (Linux
  // builds its IRET frame in its place), but a fault restarts its instruction: a return into the
  // block goes to the one that faulted (a return elsewhere, to a signal handler, says nothing).
  std::optional<uint64_t> left_at = departure_rip(at, now);
  if (!left_at) left_at = returning_to;
  if (!left_at || std::find(plan_.block.begin(), plan_.block.end(), *left_at) == plan_.block.end())
    return;
  retire_block(*left_at, out);
  ++stats_.blocks_left_by_faults;
}

void StepController::on_exception_injected() {
  trap_flag_live_ = false;
  if (mode_ == Mode::kUser) enter_kernel(KernelEntry::kException);  // nothing retired
}

bool StepController::left_user_mode(StepTarget& at) {
  if (at.cpl() != 0) return false;
  // At a return site: still at the return instruction whose stop made pre_ pending
  // (at_return_site; it runs next, with RF), nothing ran since. (Reaching a site anew stops at
  // its breakpoint first, and that stop goes through at_return_site.) Anywhere else at CPL 0,
  // the pending instruction faulted or was interrupted.
  return entries_.site_at(at.registers().rip) == nullptr;
}

void StepController::mark_resume_flag(const GuestRegisters& at, StepOutcome& out) const {
  if (mode_ == Mode::kOff) return;
  if (mode_ == Mode::kUser && plan_.step_return) return;  // no breakpoint to pass: stepped
  if (mode_ == Mode::kUser && plan_.stop == Plan::Stop::kBreakpoints && !plan_.window)
    for (const Plan::Successor& s : plan_.successors)
      if (s.rip == at.rip) out.resume_flag = true;
  if (entries_.site_at(at.rip)) out.resume_flag = true;
}

StepOutcome StepController::on_debug_exit(StepTarget& at, uint64_t dr6,
                                          const DebugConfig& applied) {
  StepOutcome out;
  // Single-stepping a register instruction by TF: TF is still set after its trap.
  const bool trap_flag_step = trap_flag_stepping() && applied.single_step;
  trap_flag_live_ = false;
  const uint8_t cpl = at.cpl();
  const GuestRegisters now = at.registers();
  // Our breakpoints that fired: an execution breakpoint stops the vCPU at its address.
  bool ours_here = false;
  for (int i = 0; i < 4; ++i)
    if ((dr6 & (1u << i)) && (applied.ours & (1u << i)) && applied.address[i] == now.rip)
      ours_here = true;
  const bool step_trap = dr6 & kDr6SingleStep;
  // Whose single-step trap: ours (KVM's single-step), the guest's own TF (TF before the
  // instruction decides), or KVM's (SVM's NMI window: one instruction, nobody's to deliver).
  // In user mode the guest's TF is pre_'s (KVM hides TF while it single-steps: carried over
  // from the instruction before, see user_instruction_ended); the trap after a stepped return is
  // never the guest's (the kernel's TF was clear; the frame's TF applies from the next
  // instruction on).
  const bool guest_tf = mode_ == Mode::kUser
                            ? (pre_.rflags & kTrapFlag) != 0 && !plan_.step_return
                            : (now.rflags & kTrapFlag) != 0 && !applied.single_step;
  const bool guest_step = step_trap && guest_tf && (mode_ == Mode::kUser || !applied.single_step);
  const DebugExit exit{
      .applied = applied,
      .now = now,
      .cpl = cpl,
      .ours_here = ours_here,
      .step_trap = step_trap,
      .trap_flag_step = trap_flag_step,
      .guest_bits = guest_dr6_bits(dr6, applied, guest_step),
      .site = ours_here && cpl == 0 ? entries_.site_at(now.rip) : nullptr,
  };
  switch (mode_) {
    case Mode::kOff: break;
    case Mode::kUser: user_debug_exit(at, exit, out); break;
    case Mode::kKernel: kernel_debug_exit(at, exit, out); break;
    case Mode::kKernelStep: kernel_step_debug_exit(at, exit, out); break;
  }
  if (!out.deliver_debug) mark_resume_flag(now, out);
  return out;
}

bool StepController::deliver_guest_debug(uint64_t bits, StepOutcome& out) {
  if (!bits) return false;
  out.deliver_debug = bits;
  ++stats_.guest_debug_exceptions;
  return true;
}

void StepController::user_debug_exit(StepTarget& at, const DebugExit& e, StepOutcome& out) {
  if (plan_.step_return) {
    if (e.cpl == 3 && e.step_trap && e.now.rip == pre_.rip) {
      // Landed before pre_: counting goes on from there. Nothing for the guest: its TF
      // applies from pre_ on, and a breakpoint of its at pre_ has not fired (RF passes it;
      // QEMU still names it in DR6 at a single-step trap).
      plan_user_step();
    } else {
      // The return faulted (or the guest's #DB came first).
      enter_kernel(KernelEntry::kException);
      deliver_guest_debug(e.guest_bits, out);
    }
    return;
  }
  if (e.cpl == 3 && plan_.window && e.ours_here && e.now.rip == pre_.rip) {
    // The window closed with nothing pending: the instruction has not run yet.
    plan_.window = false;
    if (deliver_guest_debug(e.guest_bits, out)) enter_kernel(KernelEntry::kException);
    return;
  }
  if (e.cpl == 3)
    user_instruction_ended(e, out);
  else
    user_mode_left(at, e, out);
}

void StepController::user_instruction_ended(const DebugExit& e, StepOutcome& out) {
  const GuestRegisters& now = e.now;
  const Plan::Successor* succ = nullptr;
  for (const Plan::Successor& s : plan_.successors)
    if (!s.kernel && s.rip == now.rip) succ = &s;
  // pre_ retired: its successor breakpoint fired, or a trap came after it (an iteration
  // of a REP string instruction traps with RIP unchanged: not yet retired).
  const bool trapped_after =
      (e.step_trap || (e.guest_bits & kDr6SlotBits)) && !(now.rip == pre_.rip && plan_.rep_string);
  const bool faulted_at_it = (e.guest_bits & kDr6SlotBits) && !e.step_trap && now.rip == pre_.rip &&
                             !(e.ours_here && succ);
  if ((e.ours_here && succ) || (trapped_after && !faulted_at_it)) {
    if (!plan_.block.empty()) {
      retire_block(now.rip, out);
    } else {
      retire(pre_, now.rip, 3, out);
      if (e.applied.single_step)
        ++stats_.single_steps;
      else
        ++stats_.user_steps;
    }
  }
  if (deliver_guest_debug(e.guest_bits, out)) {
    enter_kernel(KernelEntry::kException);  // the guest's #DB handler runs next
    return;
  }
  // Single-stepped by KVM: the TF KVM reports is not the guest's; the guest's stays
  // what it was, unless the instruction was a POPF that loaded another one.
  // (Stepped by choice: the guest's TF was clear and the instruction cannot set it.)
  const uint64_t guest_tf = e.applied.single_step && plan_.stop != Plan::Stop::kTrapFlagStep
                                ? guest_trap_flag_after(pre_)
                                : 0;
  mode_ = Mode::kUser;
  pre_ = now;
  if (e.applied.single_step) pre_.rflags = (pre_.rflags & ~kTrapFlag) | guest_tf;
  have_pre_ = true;
  trap_flag_live_ = e.trap_flag_step && e.step_trap;
  plan_user_step();
}

void StepController::user_mode_left(StepTarget& at, const DebugExit& e, StepOutcome& out) {
  // In the kernel: SYSCALL/INT n reached their entry (retired), or user mode was left by an
  // exception, interrupt or NMI (pre_ did not retire) and the kernel is about to return.
  bool retired_into_kernel = false;
  for (const Plan::Successor& s : plan_.successors)
    if (s.kernel && s.rip == e.now.rip && e.ours_here) retired_into_kernel = true;
  if (retired_into_kernel) {
    const std::optional<DecodedInstruction> d = decode(pre_, 3);
    retire(pre_, d ? pre_.rip + d->length : e.now.rip, 3, out);
    ++stats_.user_steps;
    enter_kernel(d && d->syscall ? KernelEntry::kSyscall : KernelEntry::kException);
  } else if (e.site) {
    // A fault returns through IRET; where it goes names the faulting instruction (see
    // retire_departed_prefix). The return is read once, for both.
    const std::optional<GuestRegisters> user = user_return(at, *e.site);
    retire_departed_prefix(at, e.now, out,
                           user && e.site->kind == ReturnSite::Kind::kIret
                               ? std::optional<uint64_t>(user->rip)
                               : std::nullopt);
    returned_from_site(at, *e.site, user, out);
  } else {
    retire_departed_prefix(at, e.now, out);
    enter_kernel(KernelEntry::kException);
  }
  deliver_guest_debug(e.guest_bits, out);
}

void StepController::kernel_debug_exit(StepTarget& at, const DebugExit& e, StepOutcome& out) {
  if (e.cpl == 3) {  // user mode was reached past every armed return site
    ++stats_.missed_returns;
    if (!deliver_guest_debug(e.guest_bits, out)) enter_user(e.now, out);
    return;
  }
  if (e.site) at_return_site(at, *e.site, out);
  deliver_guest_debug(e.guest_bits, out);
}

void StepController::kernel_step_debug_exit(StepTarget& at, const DebugExit& e, StepOutcome& out) {
  const GuestRegisters& now = e.now;
  if (e.cpl == 3) {
    ++stats_.missed_returns;
    enter_user(now, out);
    return;
  }
  if (e.step_trap && e.applied.single_step) {
    if (have_pre_ && now.rip != pre_.rip) {
      retire(pre_, now.rip, 0, out);
      ++stats_.kernel_steps;
    }
    pre_ = now;
    have_pre_ = true;
    // About to run a return instruction: where it goes is read now, not stepped through.
    if (const ReturnSite* next_site = entries_.site_at(now.rip)) {
      at_return_site(at, *next_site, out);
      return;
    }
  } else if (e.site) {
    at_return_site(at, *e.site, out);
    if (mode_ == Mode::kKernelStep) pre_ = now, have_pre_ = true;
  }
  deliver_guest_debug(e.guest_bits, out);
}

StepOutcome StepController::on_other_exit(StepTarget& at) {
  StepOutcome out;
  trap_flag_live_ = false;
  switch (mode_) {
    case Mode::kOff: return out;
    case Mode::kUser:
      // In the kernel now (an MSR access, port I/O, HLT): the pending user instruction was
      // interrupted or faulted.
      if (left_user_mode(at)) {
        retire_departed_prefix(at, at.registers(), out);
        enter_kernel(KernelEntry::kException);
      }
      return out;
    case Mode::kKernel:
    case Mode::kKernelStep:
      if (at.cpl() == 3) {  // user mode was reached past every armed return site
        ++stats_.missed_returns;
        StepOutcome ignored;
        enter_user(at.registers(), ignored);
      }
      return out;
  }
  return out;
}

}  // namespace vmm
