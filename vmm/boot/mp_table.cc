#include "vmm/boot/mp_table.h"

#include <cstring>
#include <vector>

namespace vmm {
namespace {

constexpr size_t kFloatingSize = 16, kHeaderSize = 44, kProcessorSize = 20, kEntrySize = 8;
constexpr unsigned kIsaIrqs = 16;
constexpr uint8_t kEntryProcessor = 0, kEntryBus = 1, kEntryIoApic = 2, kEntryIoInterrupt = 3,
                  kEntryLocalInterrupt = 4;
constexpr uint8_t kIntVectored = 0, kIntNmi = 1, kIntExtInt = 3;
constexpr uint8_t kCpuEnabled = 1, kCpuBootstrap = 2;

// Builds the tables as bytes; positions inside are relative to `base`.
class TableWriter {
 public:
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  template <typename T>
  void le(T v) {
    bytes(&v, sizeof v);
  }
  void zeros(size_t n) { out.insert(out.end(), n, 0); }
  std::vector<uint8_t> out;
};

uint8_t checksum(const uint8_t* p, size_t n) {
  uint8_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum = static_cast<uint8_t>(sum + p[i]);
  return static_cast<uint8_t>(-sum);
}

size_t entry_count(uint32_t vcpus) { return vcpus + 1 /*bus*/ + 1 /*ioapic*/ + kIsaIrqs + 2; }

}  // namespace

uint64_t mp_table_size(uint32_t vcpus) {
  return kFloatingSize + kHeaderSize + vcpus * kProcessorSize +
         (entry_count(vcpus) - vcpus) * kEntrySize;
}

bool write_mp_table(GuestRam& ram, uint64_t gpa, uint64_t room, const MpTableOptions& o) {
  if (o.vcpus == 0 || o.vcpus >= 0xFF || gpa % 16 || mp_table_size(o.vcpus) > room) return false;
  const uint8_t ioapic_id = static_cast<uint8_t>(o.vcpus);  // the first ID after the CPUs'
  const uint64_t config = gpa + kFloatingSize;

  TableWriter t;
  // Floating pointer structure.
  t.bytes("_MP_", 4);
  t.le<uint32_t>(static_cast<uint32_t>(config));
  t.le<uint8_t>(1);  // length in 16-byte units
  t.le<uint8_t>(4);  // spec revision 1.4
  t.le<uint8_t>(0);  // checksum, below
  t.le<uint8_t>(0);  // feature 1: 0 = a configuration table follows (no default configuration)
  t.zeros(4);        // feature 2 (no IMCR: virtual-wire mode) and reserved
  // Configuration table header.
  t.bytes("PCMP", 4);
  t.le<uint16_t>(0);  // base table length, below
  t.le<uint8_t>(4);
  t.le<uint8_t>(0);  // checksum, below
  t.bytes("PMUVM   ", 8);
  t.bytes("PMUVM KVM   ", 12);
  t.le<uint32_t>(0);  // no OEM table
  t.le<uint16_t>(0);
  t.le<uint16_t>(static_cast<uint16_t>(entry_count(o.vcpus)));
  t.le<uint32_t>(static_cast<uint32_t>(kLocalApicAddress));
  t.le<uint16_t>(0);  // no extended table
  t.le<uint8_t>(0);
  t.le<uint8_t>(0);
  for (uint32_t cpu = 0; cpu < o.vcpus; ++cpu) {
    t.le<uint8_t>(kEntryProcessor);
    t.le<uint8_t>(static_cast<uint8_t>(cpu));
    t.le<uint8_t>(kMpLocalApicVersion);
    t.le<uint8_t>(kCpuEnabled | (cpu == 0 ? kCpuBootstrap : 0));
    t.le<uint32_t>(o.cpu_signature);
    t.le<uint32_t>(o.cpu_features);
    t.zeros(8);
  }
  t.le<uint8_t>(kEntryBus);
  t.le<uint8_t>(0);
  t.bytes("ISA   ", 6);
  t.le<uint8_t>(kEntryIoApic);
  t.le<uint8_t>(ioapic_id);
  t.le<uint8_t>(kMpIoApicVersion);
  t.le<uint8_t>(1);  // enabled
  t.le<uint32_t>(static_cast<uint32_t>(kIoApicAddress));
  for (uint8_t irq = 0; irq < kIsaIrqs; ++irq) {
    t.le<uint8_t>(kEntryIoInterrupt);
    t.le<uint8_t>(kIntVectored);
    t.le<uint16_t>(0);  // polarity and trigger conform to the bus (ISA: active high, edge)
    t.le<uint8_t>(0);   // source bus: ISA
    t.le<uint8_t>(irq);
    t.le<uint8_t>(ioapic_id);
    t.le<uint8_t>(irq);  // pin = GSI = IRQ
  }
  for (const auto& [type, lint] : {std::pair<uint8_t, uint8_t>{kIntExtInt, 0}, {kIntNmi, 1}}) {
    t.le<uint8_t>(kEntryLocalInterrupt);
    t.le<uint8_t>(type);
    t.le<uint16_t>(0);
    t.le<uint8_t>(0);
    t.le<uint8_t>(0);
    t.le<uint8_t>(0xFF);  // every local APIC
    t.le<uint8_t>(lint);
  }
  std::vector<uint8_t>& b = t.out;
  const size_t table_length = b.size() - kFloatingSize;
  std::memcpy(&b[kFloatingSize + 4], &table_length, 2);
  b[kFloatingSize + 7] = checksum(&b[kFloatingSize], table_length);
  b[10] = checksum(b.data(), kFloatingSize);
  return ram.write(gpa, std::as_bytes(std::span<const uint8_t>(b)));
}

}  // namespace vmm
