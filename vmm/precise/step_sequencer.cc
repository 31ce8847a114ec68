#include "vmm/precise/step_sequencer.h"

#include <algorithm>

namespace vmm {

bool StepSequencer::ignored(uint64_t rip) const {
  return std::any_of(ignored_.begin(), ignored_.end(),
                     [rip](const Range& r) { return rip >= r.begin && rip < r.end; });
}

StepSequencer::CodeBytes StepSequencer::fetch(uint64_t rip) {
  // Read what lies in rip's page first, then the rest from the next page if it is readable:
  // an instruction may straddle the boundary, but a short one at a page end must still decode.
  const uint64_t in_page = std::min<uint64_t>(15, 4096 - (rip & 4095));
  CodeBytes bytes;
  auto as_bytes = [&](size_t from, size_t n) {
    return std::span<std::byte>(reinterpret_cast<std::byte*>(bytes.data.data()) + from, n);
  };
  if (!code_.read(rip, as_bytes(0, in_page))) return {};
  bytes.size = 15;
  if (in_page < 15 && !code_.read(rip + in_page, as_bytes(in_page, 15 - in_page)))
    bytes.size = in_page;
  return bytes;
}

std::optional<pmu::RetiredInstruction> StepSequencer::account(const GuestRegisters& before,
                                                              uint64_t next_rip,
                                                              bool syscall_only) {
  if (ignored(before.rip)) return std::nullopt;
  const CodeBytes bytes = fetch(before.rip);
  if (bytes.empty()) {
    ++unreadable_;
    return std::nullopt;
  }
  if (syscall_only) {
    // SYSCALL is 0F 05 (a REX or other prefix before it is possible but not emitted by compilers).
    if (bytes.size < 2 || bytes.data[0] != 0x0F || bytes.data[1] != 0x05) {
      ++dropped_;
      return std::nullopt;
    }
    next_rip = before.rip + 2;  // where SYSRET returns; the kernel entry is not the next RIP
  }
  return accountant_.account(before, bytes.span(), cpl_, next_rip);
}

std::optional<pmu::RetiredInstruction> StepSequencer::enter_user(const GuestRegisters& regs) {
  std::optional<pmu::RetiredInstruction> syscall;
  if (pending_ && pending_->cr3 != regs.cr3) park_pending();  // settled at its own re-entry
  if (!pending_) {
    if (auto it = parked_.find(regs.cr3); it != parked_.end()) {
      pending_ = it->second;
      parked_.erase(it);
    }
  }
  if (pending_) {
    if (regs.rip == pending_->rip + 2)
      syscall = account(*pending_, 0, /*syscall_only=*/true);
    else
      ++dropped_;
  }
  pending_ = regs;
  return syscall;
}

std::optional<pmu::RetiredInstruction> StepSequencer::syscall_entered() {
  std::optional<pmu::RetiredInstruction> syscall;
  if (pending_) syscall = account(*pending_, 0, /*syscall_only=*/true);
  pending_.reset();
  return syscall;
}

void StepSequencer::park_pending() {
  if (parked_.size() < kMaxParked || parked_.count(pending_->cr3))
    parked_[pending_->cr3] = *pending_;
  else
    ++dropped_;  // no room (a guest with more address spaces in flight): counted, not kept
  pending_.reset();
}

void StepSequencer::take_pending(uint64_t cr3) {
  if (pending_ && pending_->cr3 != cr3) park_pending();  // other tasks ran since it left
  if (!pending_)
    if (auto it = parked_.find(cr3); it != parked_.end()) {
      pending_ = it->second;
      parked_.erase(it);
    }
}

std::optional<pmu::RetiredInstruction> StepSequencer::syscall_entered_unreported(
    uint64_t return_rip, uint64_t cr3) {
  take_pending(cr3);
  // Another SYSCALL (user code the kernel ran unstepped, e.g. a signal handler): the pending
  // instruction stays; it retires when the kernel returns to it.
  if (!pending_ || pending_->rip + 2 != return_rip) return std::nullopt;
  return syscall_entered();
}

std::optional<pmu::RetiredInstruction> StepSequencer::retired_unreported(
    const GuestRegisters& after) {
  take_pending(after.cr3);
  if (!pending_ || pending_->rip == after.rip) return std::nullopt;
  const CodeBytes bytes = fetch(pending_->rip);
  const std::optional<DecodedInstruction> d = accountant_.decoder().decode(bytes.span(), *pending_);
  if (!d || d->syscall || d->lwp_instruction) return std::nullopt;
  const bool leads_there = d->fall_through(pending_->rip) == after.rip ||
                           (d->branch != pmu::BranchKind::kNone &&
                            (!d->direct_target || *d->direct_target == after.rip));
  if (!leads_there) return std::nullopt;
  std::optional<pmu::RetiredInstruction> retired = account(*pending_, after.rip, false);
  pending_.reset();
  return retired;
}

std::optional<pmu::RetiredInstruction> StepSequencer::step(const GuestRegisters& after) {
  if (pending_ && pending_->rip == after.rip && pending_->cr3 == after.cr3) {
    // A REP string instruction's iteration trapped (RIP unchanged): it has not retired; it keeps
    // the registers it started with, as it would with no trap in between.
    const CodeBytes bytes = fetch(pending_->rip);
    const std::optional<DecodedInstruction> d =
        accountant_.decoder().decode(bytes.span(), *pending_);
    if (d && d->rep_string) return std::nullopt;
  }
  std::optional<pmu::RetiredInstruction> retired;
  if (pending_) retired = account(*pending_, after.rip, /*syscall_only=*/false);
  pending_ = after;
  return retired;
}

}  // namespace vmm
