// Turns a stream of single-step reports into retired instructions, for both steppers of the
// precise backend (DESIGN §4.7). A step report arrives *after* an instruction retired (KVM's
// single-step exit, or the guest kernel's #DB report), but load addresses must be computed from
// the registers *before* it. So the sequencer keeps the state of the previous report (or of the
// return to user mode) as the next instruction's pre-state, fetches that instruction's bytes from
// guest memory at its RIP, and accounts it with the RIP of the new report as its next RIP.
//
// Rules (DESIGN §4.4): when execution leaves user mode without a step report (interrupt,
// exception, SYSCALL), the pending instruction did not retire — except SYSCALL, which retires as
// one instruction; the sequencer counts it when user mode is re-entered in the same address space
// right after it (RIP = SYSCALL's + 2). The bytes 0F 05 alone are not enough: an interrupt taken
// just before a SYSCALL also re-enters at the SYSCALL's own RIP, and the SYSCALL then runs again.
// A task may be switched out inside its SYSCALL (yield, a blocking wait) and other address spaces
// run first: the pending instruction is parked per address space (CR3) until its own re-entry.
// Steps whose pre-state RIP lies in an ignored range (the guest kernel's user-mode trampolines)
// never count.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "pmu/guest_memory.h"
#include "vmm/precise/step_accountant.h"

namespace vmm {

class StepSequencer {
 public:
  // `cpl`: the privilege level of the steps this sequencer sees (3 for user mode; the KVM stepper
  // also runs one for CPL 0 to count kernel instructions for NetBurst T0_OS).
  StepSequencer(StepAccountant& accountant, pmu::GuestMemory& code, uint8_t cpl = 3)
      : accountant_(accountant), code_(code), cpl_(cpl) {}

  // Instructions at [begin, end) never count (e.g. the kernel's syscall trampoline page).
  void ignore_range(uint64_t begin, uint64_t end) { ignored_.push_back({begin, end}); }

  // User mode is (re-)entered with `regs`. Returns the SYSCALL that led here, if the pending
  // instruction was one and `regs` continues right after it; any other pending instruction is
  // dropped (it did not retire).
  std::optional<pmu::RetiredInstruction> enter_user(const GuestRegisters& regs);

  // One user instruction ran without a report of its own and `after` is the state after it (a
  // kernel path returned to user mode unannounced; its TF trapped after one instruction). If the
  // pending instruction (same address space) is not at after.rip but after.rip is where it leads
  // (its fall-through, its direct target, any target of an indirect branch), it is that
  // instruction: it is counted now and nothing stays pending. The pending instruction of that
  // address space may have been parked while other tasks ran (a Linux guest's scheduler switches
  // tasks on such returns with nothing announced). SYSCALL (settled by enter_user) and
  // LLWPCB/SLWPCB (emulated through #UD: the kernel moves RIP past them, they never retire) are
  // left alone.
  std::optional<pmu::RetiredInstruction> retired_unreported(const GuestRegisters& after);

  // One user-mode instruction retired; `after` is the state after it. (A REP string instruction
  // traps after each iteration with RIP unchanged: that is no retirement; it retires once.)
  std::optional<pmu::RetiredInstruction> step(const GuestRegisters& after);

  // User mode was left without a step report and will be re-entered through enter_user().
  void leave_user() { pending_.reset(); }

  // A step was reported at the kernel's SYSCALL entry point (the single-step trap of SYSCALL is
  // delivered there, at CPL 0): the pending instruction retired if it is a SYSCALL. The caller
  // checks the new RIP is the entry point, so an interrupt taken before a SYSCALL (which also
  // lands in the kernel, elsewhere) never counts it. Either way nothing is pending afterwards.
  std::optional<pmu::RetiredInstruction> syscall_entered();
  // The SYSCALL entry point was reached in address space `cr3` without a step report of user
  // mode since it was re-entered (a kernel path returned to user mode unannounced and the first
  // instruction that ran there was a SYSCALL). SYSCALL leaves its return address in RCX: the
  // pending instruction of that address space retired if it is a SYSCALL at return_rip - 2;
  // otherwise it stays pending (another SYSCALL: user code the kernel ran unstepped).
  std::optional<pmu::RetiredInstruction> syscall_entered_unreported(uint64_t return_rip,
                                                                    uint64_t cr3);

  bool pending() const { return pending_.has_value(); }
  // Address spaces whose pending instruction is parked at once: the guest chooses how many
  // tasks leave user mode (each a CR3), so the map has a budget; beyond it the instruction is
  // dropped (counted in dropped(): its SYSCALL, if it was one, goes uncounted).
  static constexpr size_t kMaxParked = 8192;
  // Pending instructions that did not retire, or found no room to be parked.
  uint64_t dropped() const { return dropped_; }
  uint64_t unreadable() const { return unreadable_; }  // code bytes that could not be fetched

  // Snapshot / migration: the pending and parked pre-states (the ignored ranges are set up
  // by the owner and are not state).
  template <class Archive>
  void archive(Archive& a) {
    a(pending_, parked_, dropped_, unreadable_);
    if constexpr (Archive::kLoading)
      if (parked_.size() > kMaxParked)
        throw pmu::StateFormatError("step sequencer: " + std::to_string(parked_.size()) +
                                    " parked address spaces (at most " +
                                    std::to_string(kMaxParked) + ")");
  }

 private:
  struct Range {
    uint64_t begin, end;
  };
  bool ignored(uint64_t rip) const;
  // Parks the pending instruction under its CR3, within kMaxParked.
  void park_pending();
  // Makes the pending instruction the one of address space `cr3` (parking another's).
  void take_pending(uint64_t cr3);
  // Up to 15 instruction bytes (no heap: this runs at every step).
  struct CodeBytes {
    std::array<uint8_t, 15> data{};
    size_t size = 0;
    bool empty() const { return size == 0; }
    std::span<const uint8_t> span() const { return {data.data(), size}; }
  };
  // Fetches up to 15 bytes at `rip` (fewer when the next page is not readable).
  CodeBytes fetch(uint64_t rip);
  std::optional<pmu::RetiredInstruction> account(const GuestRegisters& before, uint64_t next_rip,
                                                 bool syscall_only);

  StepAccountant& accountant_;
  pmu::GuestMemory& code_;
  const uint8_t cpl_;
  std::vector<Range> ignored_;
  std::optional<GuestRegisters> pending_;
  std::map<uint64_t, GuestRegisters> parked_;  // by CR3: left user mode, other tasks ran since
  uint64_t dropped_ = 0, unreadable_ = 0;
};

}  // namespace vmm
