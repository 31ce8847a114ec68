// The MSRs of Intel's architectural performance monitoring (SDM vol. 3B ch. 20 "Performance
// Monitoring", vol. 4 "Model-Specific Registers"), versions 2 to 4.
#pragma once

#include <cstdint>

namespace pmu::arch_perfmon {

inline constexpr uint32_t kMaxCounters = 8;       // IA32_PMC0-7 / IA32_PERFEVTSEL0-7
inline constexpr uint32_t kMaxFixedCounters = 3;  // FIXED_CTR0-2 (instructions, cycles, ref)

inline constexpr uint32_t kMsrPmc0 = 0xC1;          // IA32_PMCx: 32-bit writes, sign-extended
inline constexpr uint32_t kMsrPerfEvtSel0 = 0x186;  // IA32_PERFEVTSELx
inline constexpr uint32_t kMsrFixedCtr0 = 0x309;    // IA32_FIXED_CTRx
inline constexpr uint32_t kMsrPerfCapabilities = 0x345;
inline constexpr uint32_t kMsrFixedCtrCtrl = 0x38D;
inline constexpr uint32_t kMsrGlobalStatus = 0x38E;
inline constexpr uint32_t kMsrGlobalCtrl = 0x38F;
// IA32_PERF_GLOBAL_OVF_CTRL, called IA32_PERF_GLOBAL_STATUS_RESET from version 4 on.
inline constexpr uint32_t kMsrGlobalStatusReset = 0x390;
inline constexpr uint32_t kMsrGlobalStatusSet = 0x391;  // version 4
inline constexpr uint32_t kMsrGlobalInuse = 0x392;      // version 4
inline constexpr uint32_t kMsrFullWidthPmc0 = 0x4C1;    // IA32_A_PMCx: PERF_CAPABILITIES[13]
// PEBS (Config::pebs): IA32_PEBS_ENABLE and IA32_DS_AREA (the DS save area's linear address).
inline constexpr uint32_t kMsrPebsEnable = 0x3F1;
inline constexpr uint32_t kMsrDsArea = 0x600;
// MSR_PEBS_LD_LAT_THRESHOLD: MEM_TRANS_RETIRED.LOAD_LATENCY counts loads slower than bits 15:0.
inline constexpr uint32_t kMsrPebsLdLatThreshold = 0x3F6;
inline constexpr uint64_t kLdLatThresholdMask = 0xFFFF;
// PEBS on Skylake: IA32_PMC0-3 only (bits 3:0), and their load-latency enables at 35:32.
inline constexpr uint32_t kMaxPebsCounters = 4;
inline constexpr int kPebsLoadLatencyShift = 32;

// IA32_PERFEVTSELx.
namespace evtsel {
inline constexpr uint64_t kEventSelect = 0xFF;
inline constexpr uint64_t kUnitMask = 0xFF00;
inline constexpr uint64_t kUsr = 1ull << 16;
inline constexpr uint64_t kOs = 1ull << 17;
inline constexpr uint64_t kEdge = 1ull << 18;
inline constexpr uint64_t kPinControl = 1ull << 19;
inline constexpr uint64_t kInt = 1ull << 20;
inline constexpr uint64_t kAnyThread = 1ull << 21;  // version 3 on
inline constexpr uint64_t kEnable = 1ull << 22;
inline constexpr uint64_t kInvert = 1ull << 23;
inline constexpr int kCounterMaskShift = 24;
inline constexpr uint64_t kCounterMask = 0xFFull << kCounterMaskShift;
}  // namespace evtsel

// IA32_FIXED_CTR_CTRL: four bits per fixed counter i, at 4i.
namespace fixed_ctrl {
inline constexpr uint64_t kOs = 1;
inline constexpr uint64_t kUsr = 2;
inline constexpr uint64_t kAnyThread = 4;  // version 3 on
inline constexpr uint64_t kPmi = 8;
inline constexpr int kBitsPerCounter = 4;
}  // namespace fixed_ctrl

// IA32_PERF_GLOBAL_STATUS (and the bits GLOBAL_CTRL, STATUS_RESET and STATUS_SET name).
namespace global {
inline constexpr int kFixedShift = 32;                   // fixed counter i at bit 32 + i
inline constexpr uint64_t kLbrFrozen = 1ull << 58;       // LBR_Frz (version 4)
inline constexpr uint64_t kCountersFrozen = 1ull << 59;  // CTR_Frz (version 4)
inline constexpr uint64_t kOvfBuffer = 1ull << 62;       // OvfBuf: the PEBS buffer's threshold
inline constexpr uint64_t kCondChanged = 1ull << 63;     // CondChgd
inline constexpr uint64_t kInuseAnyPmi = 1ull << 63;     // GLOBAL_INUSE: some PMI is armed
}  // namespace global

// IA32_PERF_CAPABILITIES bits this model reports.
namespace capabilities {
inline constexpr uint64_t kPebsTrap = 1ull << 6;      // records the state after the event
inline constexpr uint64_t kPebsArchRegs = 1ull << 7;  // records hold the registers
inline constexpr int kPebsFormatShift = 8;            // bits 11:8
inline constexpr uint64_t kPebsFormat3 = 3ull << kPebsFormatShift;
inline constexpr uint64_t kFullWidthWrite = 1ull << 13;  // IA32_A_PMCx exist
}  // namespace capabilities

}  // namespace pmu::arch_perfmon
