#include "pmu/arch_perfmon/lbr.h"

#include <algorithm>

namespace pmu::arch_perfmon {
namespace {

bool in_bank(uint32_t msr, uint32_t first) { return msr >= first && msr < first + kLbrEntries; }

}  // namespace

bool LastBranchRecords::owns_msr(uint32_t msr) {
  return msr == kMsrLbrSelect || msr == kMsrLbrTos || in_bank(msr, kMsrLbrFrom0) ||
         in_bank(msr, kMsrLbrTo0) || in_bank(msr, kMsrLbrInfo0);
}

bool LastBranchRecords::wrmsr(uint32_t msr, uint64_t value) {
  if (msr == kMsrLbrSelect) {
    if (value & ~lbr_select::kWritable) return false;
    state_.select = value;
  } else if (msr == kMsrLbrTos) {
    if (value >= kLbrEntries) return false;
    state_.tos = static_cast<uint32_t>(value);
  } else if (in_bank(msr, kMsrLbrFrom0)) {
    state_.from[msr - kMsrLbrFrom0] = value;
  } else if (in_bank(msr, kMsrLbrTo0)) {
    state_.to[msr - kMsrLbrTo0] = value;
  } else if (in_bank(msr, kMsrLbrInfo0)) {
    if (value & ~lbr_info::kWritable) return false;
    state_.info[msr - kMsrLbrInfo0] = value;
  }
  return true;
}

uint64_t LastBranchRecords::rdmsr(uint32_t msr) const {
  if (msr == kMsrLbrSelect) return state_.select;
  if (msr == kMsrLbrTos) return state_.tos;
  if (in_bank(msr, kMsrLbrFrom0)) return state_.from[msr - kMsrLbrFrom0];
  if (in_bank(msr, kMsrLbrTo0)) return state_.to[msr - kMsrLbrTo0];
  if (in_bank(msr, kMsrLbrInfo0)) return state_.info[msr - kMsrLbrInfo0];
  return 0;
}

bool LastBranchRecords::suppressed(const RetiredInstruction& insn) const {
  namespace s = lbr_select;
  const uint64_t select = state_.select;
  // A near branch ends at the privilege level it ran at.
  if (select & (insn.cpl == 0 ? s::kCplEq0 : s::kCplNeq0)) return true;
  switch (insn.branch.kind) {
    case BranchKind::kConditional: return select & s::kJcc;
    case BranchKind::kDirectJump: return select & s::kNearRelJmp;
    case BranchKind::kIndirectJump: return select & s::kNearIndJmp;
    case BranchKind::kCall:
      return select & (insn.branch.indirect ? s::kNearIndCall : s::kNearRelCall);
    case BranchKind::kReturn: return select & s::kNearRet;
    case BranchKind::kNone: return true;
  }
  return true;
}

void LastBranchRecords::push(const RetiredInstruction& insn) {
  state_.tos = (state_.tos + 1) % kLbrEntries;
  const BranchInfo& b = insn.branch;
  const bool mispredicted = b.prediction_valid && !b.predicted_correctly;
  state_.from[state_.tos] = insn.rip;
  state_.to[state_.tos] = b.next_rip;
  state_.info[state_.tos] =
      (mispredicted ? lbr_info::kMispredicted : 0) | std::min<uint64_t>(state_.cycles, 0xFFFF);
  state_.cycles = 0;
}

void LastBranchRecords::retire(const RetiredInstruction& insn) {
  state_.cycles = static_cast<uint32_t>(
      std::min<uint64_t>(uint64_t{state_.cycles} + std::max<uint32_t>(insn.cycles, 1), 0xFFFF));
  if (!insn.is_branch() || !insn.branch.taken || suppressed(insn)) return;
  if (!(state_.select & lbr_select::kCallStack)) {
    push(insn);
    return;
  }
  // Call-stack mode: calls push, returns pop; the other kinds are recorded as usual.
  if (insn.branch.kind == BranchKind::kReturn)
    state_.tos = (state_.tos + kLbrEntries - 1) % kLbrEntries;
  else
    push(insn);
}

bool LastBranchRecords::valid(const LbrState& s) {
  if ((s.select & ~lbr_select::kWritable) || s.tos >= kLbrEntries || s.cycles > 0xFFFF)
    return false;
  return std::all_of(s.info.begin(), s.info.end(),
                     [](uint64_t i) { return (i & ~lbr_info::kWritable) == 0; });
}

}  // namespace pmu::arch_perfmon
