// The KVM stepper of the precise backend (DESIGN §4.7): exact counting that the guest cannot
// see. One per vCPU; the run loop tells it about every exit and asks it, before every KVM_RUN,
// what KVM must do (desired()), which it applies only when that changes.
//
// How it counts without a visible TF. Before each counted user instruction runs, its successor
// is computed from the decoded instruction and the registers (the fall-through, the taken or
// not-taken branch, the value a RET or an indirect jump will load, LSTAR for SYSCALL, the IDT
// gate for INT n) and an execution breakpoint goes there. The instruction runs and the
// breakpoint stops the vCPU before the next one: one instruction retired, with its pre-state and
// next RIP for the PMU models. A REP string instruction runs all its iterations in between and
// retires once. Nothing of this is architecturally visible to the guest: exception and interrupt
// frames, SIGTRAP frames, R11 after SYSCALL and ptrace's registers are the guest's own, and every
// #DB pmuvm causes is intercepted.
//
// Register instructions by TF (Options::trap_flag_steps). Moving the breakpoint costs a
// KVM_SET_GUEST_DEBUG per instruction. An instruction that only computes in general registers
// (DecodedInstruction::trap_flag_safe: no memory, no stack, nothing that can fault, read TF or
// hold the trap back) is single-stepped instead, with interrupts held: nothing can show the TF
// while it runs, and a run of them keeps one configuration. TF is only set at a user boundary
// (a return loads RFLAGS: the first instruction after one stops at a breakpoint), never while
// the guest's own TF is set, and it is cleared before anything enters the kernel (a window, the
// guest's #DB, LWP's #PF trap: on_exception_injected).
//
// Interrupts. While user code runs to a successor breakpoint, KVM holds interrupts and NMIs
// (KVM_GUESTDBG_BLOCKIRQ): one delivered at the boundary right after the instruction would take
// the vCPU into the kernel before the breakpoint fired, and the return would not tell whether the
// instruction had run. They go in through windows instead (open_interrupt_window): the vCPU is
// resumed at the boundary before the next instruction with interrupts allowed and a breakpoint
// on that very instruction, so a pending interrupt is taken there (and comes back through a
// return site), or the breakpoint stops the vCPU at once. The run loop opens one right after the
// PMU models raised an interrupt (so a PMI or threshold interrupt arrives after exactly the
// instruction that caused it, as before), at every return from the kernel to counted user code
// (an interrupt that became pending in the kernel is taken before the first user instruction,
// as on hardware), and at least every kInterruptWindowNs otherwise.
//
// Leaving user mode. An instruction that faults (#PF, #UD: LLWPCB's emulation, ...), an interrupt
// or an NMI at a boundary takes the vCPU into the kernel before the successor breakpoint is
// reached: the pending instruction did not retire. Breakpoints on the kernel's return
// instructions (KernelEntryPoints: IRETQ, SYSRETQ, found by decoding from LSTAR and the IDT)
// are armed at the same time, so the kernel runs free and the vCPU stops when it is about to
// return; the stepper reads where it returns to (the IRETQ frame, SYSRET's RCX/R11) and, if that
// is user mode of a counted context, counting resumes there: signal handlers, the signal
// restorer, a faulting instruction's restart, code after a context switch or a move between
// vCPUs. SYSCALL retires at the LSTAR breakpoint, INT3/INT n at their gate's handler.
//
// The guest's own debugging (it must keep working: ptrace single-step and breakpoints, int3,
// `popf` with TF): its enabled DR0-3 breakpoints keep their slots (DebugSlots); pmuvm uses the
// free ones. A #DB whose DR6 names a guest slot, or the BS of the guest's own TF, is delivered
// back to the guest with exactly that DR6 (the instruction it trapped after counted first). A
// single-step trap the guest did not ask for is KVM's own (SVM opens an NMI window by setting TF
// for one instruction): it is an instruction that retired, never delivered. KVM completes some
// instructions itself (CPUID, port I/O) and then queues the guest's single-step #DB without an
// exit: with the guest's TF set, the #DB handler's entry is their successor.
//
// Not enough slots (the guest holds them, or the successor cannot be computed: far transfers,
// IRET in user mode, unreadable code): that instruction is stepped with KVM's single-step and
// interrupts held (KVM_GUESTDBG_BLOCKIRQ); only a fault of that very instruction shows TF then.
// KVM hides TF while it steps: a POPF's new TF is read from what it popped.
// Block stepping (Options::block_steps; DESIGN §4.7). Where the PMU models let several
// instructions retire with nothing visible before the last (extend_block's `limit`), the pending
// instruction is extended to a block: it (any instruction with a computable successor), then
// the instructions from that successor on in its page that cannot fault, through direct JMPs
// and CALLs within the page, up to and including the next other branch. The vCPU runs the whole
// block to a breakpoint on its successors (both sides of a conditional branch) with interrupts
// held, and the stop retires every instruction of it from the decode. What a block may contain
// is decided from what can fault, trap or change its decode:
//   * fetch permission per page: code is read as the CPU fetches it (present, user, not XD;
//     PagedGuestMemory::fetch), so a block never runs into a page it cannot execute, an
//     instruction whose fetch can fault is never single-stepped by TF (its #PF frame would
//     carry the TF), and it gets no successor: its fault is caught at the kernel's return;
//   * what the later instructions do: register computations and relative jumps
//     (DecodedInstruction::trap_flag_safe) and memory computations whose accesses are proven:
//     addressed by registers no earlier instruction of the block wrote (so the decode's
//     addresses, from the block's first registers, are theirs) on present user pages, writable
//     for stores (not with RFLAGS.AC or CR4.PKE, whose faults the walk cannot see);
//   * segment state: a first instruction that loads a segment register or an FS/GS base ends
//     the block (the later accesses' base would be another);
//   * the physical pages of its code: a store into a frame the block's code lies in, through
//     any mapping, ends the block before it (self-modifying code);
//   * the guest's debug state: its TF, POPF, its execution breakpoints inside the block, and
//     enough free slots for the successors and a return site.
// Any early end of a block retires exactly the prefix hardware retired: a trap inside it (a
// guest data breakpoint, SVM's NMI-window step) retires what comes before its RIP; a fault (the
// first instruction's, or a later one's where another vCPU changed the page tables under the
// block) takes the vCPU into the kernel, and at the first exit there the frame the CPU pushed at
// RSP0 (or the fault gate's IST stack; read through the TSS) names the faulting instruction:
// those before it retired (retire_departed_prefix). Where that exit is the return (Linux's return
// copies its IRET frame over the CPU's), a return into the block names it: a fault restarts
// its instruction. The cache model sees every access with its
// real address, in order, as when stepping. Not extended besides: REP strings, instructions KVM
// completes (RDPMC reads the counters), a page end inside the block, a branch target inside it.
// NetBurst T0_OS (kEveryCpl): kernel code entered by SYSCALL or running when counting starts is
// single-stepped (TF in kernel frames only); interrupt and exception handlers entered from user
// mode run unstepped, as before.
//
// No KVM dependency: it reads the vCPU through StepTarget and is unit-tested against a fake.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pmu/cache/cache_model.h"
#include "pmu/retired_instruction.h"
#include "pmu/state_archive.h"
#include "vmm/memory/guest_ram.h"
#include "vmm/memory/page_walker.h"
#include "vmm/precise/debug_slots.h"
#include "vmm/precise/instruction_decoder.h"
#include "vmm/precise/kernel_entry_points.h"
#include "vmm/precise/step_accountant.h"

namespace vmm {

// The vCPU at an exit, as the step controller reads it.
class StepTarget {
 public:
  virtual ~StepTarget() = default;
  // RIP, GPRs, RFLAGS, FS/GS bases and CR3 now.
  virtual GuestRegisters registers() = 0;
  virtual uint8_t cpl() = 0;
  virtual uint64_t lstar() = 0;  // IA32_LSTAR
  virtual uint64_t idt_base() = 0;
  virtual uint16_t idt_limit() = 0;
  // The TSS's linear address (TR's base): RSP0 and the IST pointers say where the CPU pushed
  // the frame of an exception taken in user mode.
  virtual uint64_t tss_base() = 0;
  virtual GuestDebugRegisters guest_debug() = 0;  // the guest's own DR0-3, DR6, DR7
  virtual uint64_t cr4() = 0;
  // An interrupt or NMI waits for the guest (held while user code is counted).
  virtual bool interrupt_pending() = 0;
};

// Up to 15 instruction bytes read at an instruction's RIP; fewer when the next page is not
// readable, none when the first byte is not.
struct CodeBytes {
  std::array<uint8_t, 15> data{};
  size_t size = 0;
  std::span<const uint8_t> span() const { return {data.data(), size}; }
};

// What counts on the vCPU now (from the PMU models).
enum class StepScope : uint8_t { kNothing, kUserCode, kEveryCpl };

// The most instructions one block step runs (its first and the register instructions after it).
inline constexpr size_t kMaxBlockInstructions = 32;

// The instructions one exit retired, in retirement order: at most a block (or a stepped kernel's
// return instruction, then nothing else). Held inline: an exit is a step, and an allocation per
// step showed in the nested host's profile.
class RetiredInstructions {
 public:
  static constexpr size_t kCapacity = kMaxBlockInstructions;
  void push_back(const pmu::RetiredInstruction& r) {
    if (size_ == kCapacity)
      throw std::logic_error("more instructions retired at one exit than a block holds");
    items_[size_++] = r;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const pmu::RetiredInstruction& operator[](size_t i) const { return items_[i]; }
  const pmu::RetiredInstruction* begin() const { return items_.data(); }
  const pmu::RetiredInstruction* end() const { return items_.data() + size_; }

 private:
  std::array<pmu::RetiredInstruction, kCapacity> items_{};
  size_t size_ = 0;
};

// What the run loop does after an exit.
struct StepOutcome {
  RetiredInstructions retired;            // to the PMU models
  std::optional<uint64_t> deliver_debug;  // a #DB for the guest, with these DR6 bits
  bool resume_flag = false;               // set RFLAGS.RF: a breakpoint of ours is at RIP
  bool entered_user = false;              // about to return to user mode (LWP's deferred load)
};

class StepController {
 public:
  enum class Mode : uint8_t {
    kOff,         // nothing counts: KVM leaves the guest alone
    kUser,        // at a user-mode boundary, `pre_` about to run
    kKernel,      // in the kernel (or on its way there): waiting at the return sites
    kKernelStep,  // kEveryCpl in the kernel: single-stepped
  };

  struct Options {
    // Single-steps an instruction that only computes in general registers
    // (DecodedInstruction::trap_flag_safe) instead of putting a breakpoint on its successor:
    // nothing of the guest can see the TF while it runs, and a run of them keeps one KVM
    // configuration (a breakpoint that moves costs a KVM_SET_GUEST_DEBUG per instruction).
    // Only where the vCPU is the guest's only one (vcpu_runner.cc): an instruction's fetch is
    // proven when it is planned, but another vCPU can unmap the code page before it runs
    // (reclaim, munmap or mprotect by another thread), and the #PF of that fetch would push the
    // TF into the guest's frame.
    bool trap_flag_steps = true;
    // Runs straight-line register code as one block per exit (see the header comment); off for
    // `--stepper kvm-single`, the one-exit-per-instruction cross-check.
    bool block_steps = true;
  };

  StepController(GuestRam& ram, const pmu::cache::Geometry& cache);
  StepController(GuestRam& ram, const pmu::cache::Geometry& cache, Options options);

  // Which models must see the instructions accounted from now on (asked before each one;
  // StepAccountant::set_model_demand). Not set: both, always.
  void set_model_demand(const std::function<StepAccountant::ModelDemand()>& demand) {
    user_accountant_.set_model_demand(demand);
    kernel_accountant_.set_model_demand(demand);
  }

  // What counts changed (or not): called before every KVM_RUN with the vCPU at an exit.
  void set_scope(StepScope scope, StepTarget& at);
  // A KVM_EXIT_DEBUG with `dr6`; `applied` is the configuration the vCPU ran with.
  StepOutcome on_debug_exit(StepTarget& at, uint64_t dr6, const DebugConfig& applied);
  // Any other exit (I/O, MSR, HLT, MMIO, an interrupt): nothing retired; where the vCPU is may
  // say that user mode was left or entered unseen.
  // What retired is a block's prefix, when the exit is the first since a fault inside the block
  // took the vCPU into the kernel (found_departure).
  StepOutcome on_other_exit(StepTarget& at);

  // Right before a KVM_RUN (after the PMU models have counted everything that retired): lets the
  // pending user instruction run as a block of at most `limit` instructions, where it can be one
  // (once per planned instruction; a window before it waits). `limit` is how many instructions
  // may retire with nothing visible (a record, a PMI, an overflow) before the last of them.
  // True: the vCPU must resume with RF set (the block loops back to its first instruction, whose
  // breakpoint would otherwise fire before it runs).
  bool extend_block(uint64_t limit, StepTarget& at);
  // A planned instruction extend_block has not looked at yet (the run loop asks the PMU models
  // for the limit only then).
  bool block_pending() const { return block_open_; }

  // What KVM must do for the next KVM_RUN (the guest's own debug registers merged in).
  DebugConfig desired(const GuestDebugRegisters& guest) const;

  // Lets held interrupts in at the boundary the vCPU stopped at, if it is the one before the
  // pending user instruction (true), for the next KVM_RUN only.
  bool open_interrupt_window(StepTarget& at);
  // KVM_RUN returned without an exit (a kick): the vCPU stopped between two instructions.
  StepOutcome on_kick(StepTarget& at);
  // The VMM injected an exception at the boundary the vCPU stopped at (LWP's #PF trap): the vCPU
  // enters the kernel's handler before the pending user instruction runs.
  void on_exception_injected();
  // The next KVM_RUN single-steps a register instruction by TF, and the TF is not known to be
  // set: KVM sets it only when KVM_SET_GUEST_DEBUG asks for single-steps, and a return or an
  // interrupt since then took it away. The run loop applies the configuration again then, even
  // when it did not change.
  bool must_rearm() const { return trap_flag_stepping() && !trap_flag_live_; }
  bool holds_interrupts() const {
    return mode_ == Mode::kUser && !plan_.window && plan_.stop != Plan::Stop::kSingleStep;
  }
  // The guest's own TF at the pending user instruction. KVM drops a guest TF when its single-step
  // ends (KVM_SET_GUEST_DEBUG reads RFLAGS without TF while stepping): the run loop sets it
  // again then.
  bool guest_trap_flag() const {
    return mode_ == Mode::kUser && have_pre_ && (pre_.rflags & kTrapFlag) != 0;
  }

  // --stepper emulate (vmm/counting/emulating_backend.h). The pending user instruction's
  // registers, where user code may run from it in an emulator before the next KVM_RUN: the
  // vCPU stopped at it in counted user mode, with nothing planned there that must come first
  // (an interrupt window, a return being stepped, a block already made) and no TF of the
  // guest's. nullptr otherwise.
  const GuestRegisters* emulation_start() const {
    const bool free = mode_ == Mode::kUser && have_pre_ && !plan_.window && !plan_.step_return &&
                      plan_.block.empty() && !(pre_.rflags & kTrapFlag);
    return free ? &pre_ : nullptr;
  }
  // The user code from there ran unseen up to `now` (CPL 3, the same address space; what
  // retired went to the PMU models as one batch): the instruction at now.rip is planned.
  void ran_unseen(const GuestRegisters& now);

  Mode mode() const { return mode_; }
  StepScope scope() const { return scope_; }
  const KernelEntryPoints& entry_points() const { return entries_; }

  struct Stats {
    uint64_t user_steps = 0;              // user instructions counted at their successor breakpoint
    uint64_t single_steps = 0;            // instructions counted through a single-step trap
    uint64_t kernel_steps = 0;            // kernel instructions counted (kEveryCpl)
    uint64_t return_stops = 0;            // stops at a kernel return site
    uint64_t user_returns = 0;            // ... of them into counted user mode
    uint64_t guest_debug_exceptions = 0;  // #DBs handed back to the guest
    uint64_t missed_returns = 0;          // user mode found running without a stop at a return site
    uint64_t interrupt_windows = 0;       // windows opened for held interrupts
    uint64_t blocks = 0;                  // stops that retired a block of two or more instructions
    uint64_t block_instructions = 0;      // ... the instructions they retired
    // Blocks not made although the PMU models allowed one, because the guest's breakpoints left
    // too few free slots for the block's successors (block stepping falls back to steps).
    uint64_t blocks_refused_for_slots = 0;
    // Blocks a fault ended after their first instruction (another vCPU changed the page tables
    // under them): the instructions before the faulting one retired.
    uint64_t blocks_left_by_faults = 0;
    template <class Archive>
    void archive(Archive& a) {
      a(user_steps, single_steps, kernel_steps, return_stops, user_returns, guest_debug_exceptions,
        missed_returns, interrupt_windows, blocks, block_instructions, blocks_refused_for_slots,
        blocks_left_by_faults);
    }
  };
  const Stats& stats() const { return stats_; }

  // Snapshot / migration: everything but the guest-memory views (rebuilt over the new RAM). The
  // version covers the accountants' models (cache, predictor) too.
  // The version of what archive() saves: bump it with any change to that (snapshot sections,
  // vmm/snapshot/state_sections.h).
  static constexpr uint16_t kStateVersion = 2;
  template <class Archive>
  void archive(Archive& a) {
    a(user_accountant_, kernel_accountant_, entries_, mode_, scope_, pre_, have_pre_, plan_, stats_,
      block_open_, kernel_entry_);
    // Untrusted when loaded (a snapshot, a migration stream): a block is never longer, and the
    // enums hold one of their values (the archive reads any byte into them).
    if (plan_.block.size() >= kMaxBlockInstructions)
      throw pmu::StateFormatError("step controller state: a block of " +
                                  std::to_string(plan_.block.size() + 1) + " instructions");
    if (mode_ > Mode::kKernelStep || scope_ > StepScope::kEveryCpl ||
        plan_.stop > Plan::Stop::kTrapFlagStep || kernel_entry_ > KernelEntry::kException)
      throw pmu::StateFormatError(
          "step controller state: mode " + std::to_string(static_cast<int>(mode_)) + ", scope " +
          std::to_string(static_cast<int>(scope_)) + ", stop " +
          std::to_string(static_cast<int>(plan_.stop)) + " (no such value)");
    sites_stale_ = true;  // entries_ may be new
    pre_bytes_.size = 0;
    pre_decoded_.reset();
    block_decoded_.clear();   // decoded again from the block's RIPs at its retirement
    trap_flag_live_ = false;  // a restored vCPU's TF is whatever its KVM makes of it
  }

 private:
  // Where the next instruction goes, and how the vCPU gets stopped there.
  struct Plan {
    struct Successor {
      uint64_t rip = 0;
      bool kernel = false;  // a kernel entry (SYSCALL's LSTAR, INT n's gate, the #DB handler)
      template <class Archive>
      void archive(Archive& a) {
        a(rip, kernel);
      }
    };
    std::vector<Successor> successors;  // execution breakpoints that mean "pre_ retired"
    // How the vCPU stops after pre_. (The values 0 and 1 are those of the bool this replaced:
    // snapshots keep their meaning.)
    enum class Stop : uint8_t {
      kBreakpoints,   // at a breakpoint on a successor
      kSingleStep,    // KVM's single-step, interrupts held: no successor can be computed
      kTrapFlagStep,  // KVM's single-step by choice (Options::trap_flag_steps): pre_ only
                      // computes in registers; interrupts held, windows open as before it
    };
    Stop stop = Stop::kBreakpoints;
    bool rep_string = false;  // a REP string instruction: a trap with RIP unchanged is an
                              // iteration, not its retirement
    bool window = false;      // an interrupt window before pre_ (open_interrupt_window)
    // Still at a return site whose frame sets RF (a fault's, a breakpoint handler's): the return
    // instruction is single-stepped with no breakpoint of ours, so that it lands before pre_
    // with the frame's RF intact. (Passing the site with RF instead does not work on QEMU's TCG,
    // the nested KVM host: a block that begins with RF set clears RF at its end, also the RF the
    // IRETQ just loaded; the guest's breakpoint at pre_ then fired again and again.)
    bool step_return = false;
    // Block stepping: the RIPs of the instructions after pre_ that run with it to the
    // successors (extend_block); empty for one instruction.
    std::vector<uint64_t> block;
    template <class Archive>
    void archive(Archive& a) {
      a(successors, stop, rep_string, window, step_return, block);
    }
  };

  // How the kernel was entered, which decides the return watched first (KernelEntryPoints::
  // by_priority): SYSCALL returns by SYSRET, the IDT's handlers by IRET.
  enum class KernelEntry : uint8_t { kUnknown, kSyscall, kException };

  // What one debug exit says, read once by on_debug_exit for its mode's handler below.
  struct DebugExit {
    const DebugConfig& applied;
    GuestRegisters now;
    uint8_t cpl = 0;
    bool ours_here = false;            // an execution breakpoint of ours fired at now.rip
    bool step_trap = false;            // DR6.BS
    bool trap_flag_step = false;       // pre_ was single-stepped by TF (trap_flag_stepping())
    uint64_t guest_bits = 0;           // DR6 bits of the guest's own #DB; 0: it gets none
    const ReturnSite* site = nullptr;  // the return site at now.rip, when ours fired there
  };
  void user_debug_exit(StepTarget& at, const DebugExit& e, StepOutcome& out);
  // At CPL 3: pre_ (or the block) retired, or not, and the next user instruction is planned.
  void user_instruction_ended(const DebugExit& e, StepOutcome& out);
  // At CPL 0 in kUser: a SYSCALL/INT n retired into the kernel, or a fault or interrupt left.
  void user_mode_left(StepTarget& at, const DebugExit& e, StepOutcome& out);
  void kernel_debug_exit(StepTarget& at, const DebugExit& e, StepOutcome& out);
  void kernel_step_debug_exit(StepTarget& at, const DebugExit& e, StepOutcome& out);
  // Gives the guest its own #DB with DR6 bits `bits`, if any; true when there is one.
  bool deliver_guest_debug(uint64_t bits, StepOutcome& out);

  void enter_user(const GuestRegisters& at, StepOutcome& out);
  void enter_kernel(KernelEntry how);
  // Does the plan know user code at `rip` (the pending instruction, a successor, a block's)?
  bool plan_knows(uint64_t rip) const;
  // Where user mode was left, from the frame the CPU pushed on the stack it switched to (RSP0,
  // or the IST of a fault's gate; read through the TSS): the faulting instruction's RIP.
  std::optional<uint64_t> departure_rip(StepTarget& at, const GuestRegisters& now);
  // At the first exit in the kernel since a block ran: a fault after the block's first
  // instruction retires the instructions before it (DESIGN §4.7: any early end of a block
  // retires exactly the prefix hardware retired). `returning_to`: at a return site, the user RIP
  // the return goes to, where the CPU's frame is gone.
  void retire_departed_prefix(StepTarget& at, const GuestRegisters& now, StepOutcome& out,
                              std::optional<uint64_t> returning_to = std::nullopt);
  // The user registers the return at `site` goes to (nullopt: into the kernel, or compatibility
  // mode, which is not counted).
  std::optional<GuestRegisters> user_return(StepTarget& at, const ReturnSite& site);
  void plan_user_step();
  void reset_plan();  // Plan{}, keeping the successors' buffer
  // Stopped at return site `site`: where does it go?
  void at_return_site(StepTarget& at, const ReturnSite& site, StepOutcome& out);
  // The same, with user_return(at, site) already read.
  void returned_from_site(StepTarget& at, const ReturnSite& site,
                          const std::optional<GuestRegisters>& user, StepOutcome& out);
  void retire(const GuestRegisters& before, uint64_t next_rip, uint8_t cpl, StepOutcome& out);
  // pre_ and the block's instructions before `stopped_at` retired (all of them when it is none
  // of theirs: a successor); true when the stop is inside the block (after its first).
  bool retire_block(uint64_t stopped_at, StepOutcome& out);
  // The block's instruction i (after pre_), decoded: kept from extend_block, or read again after
  // a restore.
  std::optional<DecodedInstruction> block_instruction(size_t i);
  // Where a block ends: the one or two places its last instruction goes (its successors).
  struct BlockTargets {
    std::array<uint64_t, 2> rips{};
    size_t count = 0;
    void add(uint64_t rip) { rips[count++] = rip; }
  };
  // May a block follow pre_, the first instruction `first` (extend_block)?
  bool block_may_follow(const DecodedInstruction& first) const;
  // Arms the block's successors (false, the block cleared, when the debug slots do not suffice
  // or it cannot start with RF where the vCPU is); true when it starts with RF.
  bool arm_block(const BlockTargets& targets, size_t free_slots, StepTarget& at_exit);
  // Can none of `d`'s data accesses fault (see the header comment)?
  bool accesses_proven(const DecodedInstruction& d) const;
  void clear_block();
  // The guest's own TF after the user instruction at `before` ran under a single step of pmuvm's
  // (KVM hides TF then): the TF a POPF loaded, else the TF it had before.
  uint64_t guest_trap_flag_after(const GuestRegisters& before);
  std::optional<DecodedInstruction> decode(const GuestRegisters& at, uint8_t cpl);
  void refresh_entry_points(StepTarget& at);
  // In kUser, at an exit that is no step report: has the vCPU left user mode (at CPL 0, not
  // merely still at the return site that made pre_ pending)?
  bool left_user_mode(StepTarget& at);
  // The return sites to arm now, most important first (cached: desired() runs at every step).
  const std::vector<uint64_t>& return_sites() const;
  void mark_resume_flag(const GuestRegisters& at, StepOutcome& out) const;

  static constexpr uint64_t kTrapFlag = 1u << 8;

  GuestRam& ram_;
  Options options_;
  PagedGuestMemory user_memory_;
  PagedGuestMemory kernel_memory_;
  InstructionDecoder decoder_;
  // Separate models per CPL: which kernel instructions get stepped can depend on wall time, and
  // user records (DCache misses, prediction bits) must not (the same --seed, the same records).
  StepAccountant user_accountant_;
  StepAccountant kernel_accountant_;
  KernelEntryPoints entries_;
  mutable std::vector<uint64_t> sites_;         // entries_.by_priority()'s addresses, unless stale
  mutable bool sites_stale_ = true;             // set wherever entries_ changes
  mutable bool sites_exception_first_ = false;  // the order sites_ is in
  KernelEntry kernel_entry_ = KernelEntry::kUnknown;
  Mode mode_ = Mode::kOff;
  StepScope scope_ = StepScope::kNothing;
  GuestRegisters pre_;  // kUser / kKernelStep: the state before the next instruction
  bool have_pre_ = false;
  // The last exit was the single-step trap after a register instruction stepped by TF: the TF
  // that KVM set is still in RFLAGS (nothing such an instruction does clears it).
  bool trap_flag_live_ = false;
  // The next KVM_RUN single-steps pre_, a register instruction, by TF (no window before it, no
  // return being stepped): the state desired(), must_rearm() and on_debug_exit() test.
  bool trap_flag_stepping() const {
    return mode_ == Mode::kUser && plan_.stop == Plan::Stop::kTrapFlagStep && !plan_.window &&
           !plan_.step_return;
  }
  // kUser: pre_'s bytes as plan_user_step fetched them, and what they decoded to from pre_'s
  // registers, for its retirement (size 0: fetch again). What ran is what was there before it
  // ran, so the second page walk and the second decode are saved.
  CodeBytes pre_bytes_;
  std::optional<DecodedInstruction> pre_decoded_;
  // plan_user_step made a plan that extend_block has not yet looked at.
  bool block_open_ = false;
  std::vector<DecodedInstruction> block_decoded_;  // plan_.block's decodes, same order
  Plan plan_;
  Stats stats_;
};

}  // namespace vmm
