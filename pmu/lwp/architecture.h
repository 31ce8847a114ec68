// Architectural numbers of virtual AMD Lightweight Profiling, proposal dialect
// (spec/lwp-proposal-2007.txt; numbers the proposal leaves TBD are DESIGN.md §4.1's).
// Every constant the model, the VMM and the tests share lives here, next to its source.
#pragma once

#include <cstdint>

namespace pmu::lwp {

// CPUID 0x80000001 ECX bit 15: LWP present (DESIGN §4.1).
inline constexpr uint32_t kCpuidExtFeaturesLeaf = 0x80000001;
inline constexpr uint32_t kCpuidLwpPresentEcxBit = 15;
// CPUID 0x8000001C: LWP capabilities (proposal §5.1, Table 2).
inline constexpr uint32_t kCpuidLwpLeaf = 0x8000001C;

inline constexpr uint32_t kMsrLwpFeatureEnable = 0xC0000105;  // LWPMSR0, Table 3
inline constexpr uint32_t kMsrLwpControlBlock = 0xC0000106;   // LWPMSR1, §5.2.2

// LWPMSR0 (Table 3 + DESIGN §4.1). The same bit positions form CPUID 0x8000001C EAX.
namespace msr0 {
inline constexpr uint64_t kEnabled = 1ull << 0;
inline constexpr uint64_t kIre = 1ull << 1;
inline constexpr uint64_t kBre = 1ull << 2;
inline constexpr uint64_t kDme = 1ull << 3;
inline constexpr uint64_t kInterrupt = 1ull << 31;
inline constexpr int kVectorShift = 40;
inline constexpr uint64_t kVectorMask = 0xFFull << kVectorShift;  // bits 47:40
inline constexpr uint64_t kWritableMask = kEnabled | kIre | kBre | kDme | kInterrupt | kVectorMask;
}  // namespace msr0

// CPUID 0x8000001C EDX (Table 2): availability. Numbered differently from EAX/LWPMSR0.
namespace edx {
inline constexpr uint32_t kAvailable = 1u << 0;
inline constexpr uint32_t kInterrupt = 1u << 1;
inline constexpr uint32_t kIre = 1u << 2;
inline constexpr uint32_t kBre = 1u << 3;
inline constexpr uint32_t kDme = 1u << 4;
}  // namespace edx

// CPUID 0x8000001C EAX (Table 2): enabled features, taken from LWPMSR0.
namespace eax {
inline constexpr uint32_t kEnabled = 1u << 0;
inline constexpr uint32_t kIre = 1u << 1;
inline constexpr uint32_t kBre = 1u << 2;
inline constexpr uint32_t kDme = 1u << 3;
inline constexpr uint32_t kExtension = 1u << 30;  // leaf 0x8000001D; never set (no EventId > 29)
inline constexpr uint32_t kInterrupt = 1u << 31;
}  // namespace eax

// CPUID 0x8000001C EBX fields (Table 2).
namespace ebx {
inline constexpr int kLwpcbSizeShift = 0;
inline constexpr int kEventSizeShift = 8;
inline constexpr int kMaxEventsShift = 16;
inline constexpr int kVersionShift = 24;
}  // namespace ebx

// CPUID 0x8000001C ECX fields (Table 2).
namespace ecx {
inline constexpr uint32_t kCacheMaxMask = 0x1F;  // bits 4:0
inline constexpr uint32_t kDataAddress = 1u << 5;
inline constexpr uint32_t kCacheLevels = 1u << 30;
inline constexpr uint32_t kCacheLatency = 1u << 31;
}  // namespace ecx

// Event identifiers (Table 1).
enum EventId : uint8_t {
  kEventInvalid = 0,
  kEventInstructionsRetired = 1,
  kEventBranchesRetired = 2,
  kEventDcacheMisses = 3,
};
inline constexpr uint8_t kHighestEventId = kEventDcacheMisses;

inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kEventRecordSize = 32;  // LWPEventSize for version 1
inline constexpr uint32_t kLwpcbHeaderSize = 40;
inline constexpr uint32_t kLwpcbEventSlotSize = 8;
inline constexpr uint32_t kLwpcbAlignment = 16;  // §5.3 LLWPCB
// LWPCBSize is an 8-bit CPUID field: 40 + 8 * MaxEvents <= 255.
inline constexpr uint32_t kMaxEventSlots = (255 - kLwpcbHeaderSize) / kLwpcbEventSlotSize;  // 26

inline constexpr uint32_t lwpcb_size(uint32_t max_events) {
  return kLwpcbHeaderSize + kLwpcbEventSlotSize * max_events;
}

// LWPCB byte layout, proposal dialect (DESIGN §4.2). Little-endian.
namespace lwpcb {
inline constexpr uint32_t kFlags = 0;              // 4, written by LLWPCB
inline constexpr uint32_t kBufferSize = 4;         // 4: size [27:0], Random [31:28]
inline constexpr uint32_t kBufferBase = 8;         // 8: low 5 bits ignored
inline constexpr uint32_t kBufferHeadOffset = 16;  // 4, LWP
inline constexpr uint32_t kBufferTailOffset = 20;  // 4, software
inline constexpr uint32_t kMissedEvents = 24;      // 8, LWP
inline constexpr uint32_t kThreshold = 32;         // 4, bytes; 0 = no interrupts
inline constexpr uint32_t kFilters = 36;           // 4
inline constexpr uint32_t kEventSlots = 40;        // 8 per slot
inline constexpr uint32_t kSlotInterval =
    0;                                       // within a slot: EventInterval [25:0], EventId [31:26]
inline constexpr uint32_t kSlotCounter = 4;  // within a slot: EventCounter [25:0]

inline constexpr uint32_t kBufferSizeMask = 0x0FFFFFFF;
inline constexpr int kRandomShift = 28;
inline constexpr uint64_t kBufferBaseIgnoredMask = 0x1F;
inline constexpr uint32_t kIntervalMask = 0x03FFFFFF;  // 26-bit intervals and counters
inline constexpr int kEventIdShift = 26;

// Filters word.
inline constexpr uint32_t kMinLatencyMask = 0xFF;  // [7:0], units of 16 cycles
inline constexpr uint32_t kFilterClf = 1u << 24;
inline constexpr uint32_t kFilterNbc = 1u << 25;
inline constexpr uint32_t kFilterRdc = 1u << 26;
inline constexpr uint32_t kFilterRam = 1u << 27;
inline constexpr uint32_t kFilterOth = 1u << 28;
inline constexpr uint32_t kFilterNdb = 1u << 31;

// Flags word (Figure 6): bit 0 EN, bit n = EventId n active, bit 31 INT.
inline constexpr uint32_t kFlagEnabled = 1u << 0;
inline constexpr uint32_t kFlagInterrupt = 1u << 31;
inline constexpr uint32_t flag_for_event(uint8_t event_id) { return 1u << event_id; }
}  // namespace lwpcb

// Event record layout (Figures 1–4).
namespace record {
inline constexpr uint32_t kEventId = 0;    // byte
inline constexpr uint32_t kCoreId = 1;     // byte
inline constexpr uint32_t kFlags = 0;      // flags are bits 16:31 of the first dword
inline constexpr uint32_t kData = 4;       // dword: event-specific data (DCache: latency)
inline constexpr uint32_t kRip = 8;        // qword
inline constexpr uint32_t kAddress = 16;   // qword: branch next RIP / DCache data address
inline constexpr uint32_t kReserved = 24;  // qword, zero

// Branch record flags (Figure 3), bits of the first dword.
inline constexpr uint32_t kBranchPredictionValid = 1u << 29;
inline constexpr uint32_t kBranchPredicted = 1u << 30;
inline constexpr uint32_t kBranchTaken = 1u << 31;
// DCache record flags (Figure 4).
inline constexpr uint32_t kDcacheAddressValid = 1u << 28;
inline constexpr int kDcacheSourceShift = 29;  // bits 31:29
}  // namespace record

}  // namespace pmu::lwp
