// Last branch records as Skylake has them (SDM vol. 3B 18.x "Last Branch Recording", LBR format 5,
// "LBR_INFO"): 32 entries of MSR_LASTBRANCH_x_FROM_IP (0x680+x), _TO_IP (0x6C0+x) and
// MSR_LBR_INFO_x (0xDC0+x), the top-of-stack MSR_LASTBRANCH_TOS (0x1C9) and the filter
// MSR_LBR_SELECT (0x1C8). Part of the architectural PMU (arch_pmu.h), which decides when it
// records: IA32_DEBUGCTL.LBR set and GLOBAL_STATUS.LBR_Frz clear.
//
// What is recorded: a retired near branch that was taken (RetiredInstruction::branch; far
// transfers, interrupts and exceptions are not reported by the backends and so never recorded),
// unless LBR_SELECT suppresses it: by the privilege level it ends in (bit 0: ring 0, bit 1: the
// others), or by its kind (2 Jcc/JrCXZ/LOOP, 3 near relative call, 4 near indirect call, 5 near
// return, 6 near indirect jump, 7 near relative jump; 8 far branches: nothing to suppress). An
// entry is TOS + 1 (mod 32): FROM = the branch's address, TO = its target, INFO = bit 63 MISPRED
// (the branch predictor's verdict, 0 where it gave none) and bits 15:0 the core cycles since the
// previous entry (the instructions' modelled cycles, saturating at 0xFFFF).
// Call-stack mode (LBR_SELECT bit 9): a recorded call pushes an entry as above, a recorded return
// pops one (TOS - 1, the entry left as it was), so the entries from TOS down are the calls not yet
// returned from, the newest first, as Linux's `perf record --call-graph lbr` reads them.
//
// MSR rules: FROM and TO take and read back any value (Linux writes them back on a context switch,
// with its TSX-less sign-extension quirk, and probes them with a write and a read); INFO keeps
// bits 63:61 and 15:0 (others #GP); TOS bits 4:0 (others #GP); LBR_SELECT bits 9:0 (others #GP).
#pragma once

#include <array>
#include <cstdint>

#include "pmu/retired_instruction.h"

namespace pmu::arch_perfmon {

inline constexpr uint32_t kLbrEntries = 32;
inline constexpr uint32_t kMsrLbrSelect = 0x1C8;
inline constexpr uint32_t kMsrLbrTos = 0x1C9;
inline constexpr uint32_t kMsrLbrFrom0 = 0x680;
inline constexpr uint32_t kMsrLbrTo0 = 0x6C0;
inline constexpr uint32_t kMsrLbrInfo0 = 0xDC0;
inline constexpr uint64_t kLbrFormatInfo = 5;  // IA32_PERF_CAPABILITIES[5:0]

namespace lbr_select {
inline constexpr uint64_t kCplEq0 = 1ull << 0;  // suppress branches ending in ring 0
inline constexpr uint64_t kCplNeq0 = 1ull << 1;
inline constexpr uint64_t kJcc = 1ull << 2;
inline constexpr uint64_t kNearRelCall = 1ull << 3;
inline constexpr uint64_t kNearIndCall = 1ull << 4;
inline constexpr uint64_t kNearRet = 1ull << 5;
inline constexpr uint64_t kNearIndJmp = 1ull << 6;
inline constexpr uint64_t kNearRelJmp = 1ull << 7;
inline constexpr uint64_t kFarBranch = 1ull << 8;
inline constexpr uint64_t kCallStack = 1ull << 9;
inline constexpr uint64_t kWritable = (1ull << 10) - 1;
}  // namespace lbr_select

namespace lbr_info {
inline constexpr uint64_t kMispredicted = 1ull << 63;
inline constexpr uint64_t kInTx = 1ull << 62;
inline constexpr uint64_t kTsxAbort = 1ull << 61;
inline constexpr uint64_t kCycleCount = 0xFFFF;
inline constexpr uint64_t kWritable = kMispredicted | kInTx | kTsxAbort | kCycleCount;
}  // namespace lbr_info

struct LbrState {
  std::array<uint64_t, kLbrEntries> from{}, to{}, info{};
  uint64_t select = 0;
  uint32_t tos = 0;
  uint32_t cycles = 0;  // since the last entry, saturating
  bool operator==(const LbrState&) const = default;
  template <class Archive>
  void archive(Archive& a) {
    a(from, to, info, select, tos, cycles);
  }
};

// Works on state it is given (the architectural PMU's, so that one state holds everything).
class LastBranchRecords {
 public:
  explicit LastBranchRecords(LbrState& state) : state_(state) {}
  LastBranchRecords(const LastBranchRecords&) = delete;
  LastBranchRecords& operator=(const LastBranchRecords&) = delete;

  static bool owns_msr(uint32_t msr);
  // False: #GP (a reserved bit), nothing changed. `msr` must be owns_msr().
  bool wrmsr(uint32_t msr, uint64_t value);
  uint64_t rdmsr(uint32_t msr) const;

  // One retired instruction while recording.
  void retire(const RetiredInstruction& insn);
  // Whether instructions at CPL 3 / CPL 0 can add entries (LBR_SELECT's privilege filters).
  bool records_user() const { return !(state_.select & lbr_select::kCplNeq0); }
  bool records_kernel() const { return !(state_.select & lbr_select::kCplEq0); }

  // False when `s` has bits the MSRs would refuse.
  static bool valid(const LbrState& s);

 private:
  bool suppressed(const RetiredInstruction& insn) const;
  void push(const RetiredInstruction& insn);

  LbrState& state_;
};

}  // namespace pmu::arch_perfmon
