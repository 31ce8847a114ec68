#include "vmm/report/perf_data.h"

#include <linux/perf_event.h>

#include <array>
#include <cstring>
#include <utility>

#include "pmu/lwp/architecture.h"
#include "vmm/vmm_error.h"

namespace vmm {
namespace {

// The file header (perf.data-file-format.txt, "perf_file_header").
constexpr uint64_t kMagic = 0x32454c4946524550ull;  // "PERFILE2", little-endian
constexpr uint64_t kHeaderSize = 104;  // 3 u64 + 3 sections of 16 + a 256-bit feature bitmap
constexpr uint64_t kPage = 4096;

// The three LWP events as perf events: sample IDs 1..3 = LWP EventIds 1..3; NetBurst PMIs: 4.
constexpr uint64_t kPmiId = 4;
constexpr uint64_t kCommon = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
                             PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR | PERF_SAMPLE_CPU |
                             PERF_SAMPLE_PERIOD | PERF_SAMPLE_WEIGHT;

perf_event_attr attr_of(uint8_t event_id) {
  perf_event_attr a{};
  a.size = sizeof a;
  a.sample_period = 1;
  a.sample_type = kCommon;
  a.exclude_kernel = 1;  // LWP counts CPL 3 only
  a.exclude_hv = 1;
  switch (event_id) {
    case pmu::lwp::kEventInstructionsRetired:
      a.type = PERF_TYPE_HARDWARE;
      a.config = PERF_COUNT_HW_INSTRUCTIONS;
      break;
    case pmu::lwp::kEventBranchesRetired:
      a.type = PERF_TYPE_HARDWARE;
      a.config = PERF_COUNT_HW_BRANCH_INSTRUCTIONS;
      a.sample_type |= PERF_SAMPLE_BRANCH_STACK;
      a.branch_sample_type = PERF_SAMPLE_BRANCH_ANY | PERF_SAMPLE_BRANCH_USER;
      break;
    case kPmiId:  // NetBurst PMIs: raw, config the counter
      a.type = PERF_TYPE_RAW;
      a.exclude_kernel = 0;
      break;
    default:  // DCache misses: L1D read misses
      a.type = PERF_TYPE_HW_CACHE;
      a.config = PERF_COUNT_HW_CACHE_L1D | (PERF_COUNT_HW_CACHE_OP_READ << 8) |
                 (PERF_COUNT_HW_CACHE_RESULT_MISS << 16);
      break;
  }
  return a;
}

class Record {
 public:
  Record(uint32_t type, uint16_t misc) {
    u32(type);
    u16(misc);
    u16(0);  // the size, set by done()
  }
  Record& u16(uint16_t v) { return raw(&v, 2); }
  Record& u32(uint32_t v) { return raw(&v, 4); }
  Record& u64(uint64_t v) { return raw(&v, 8); }
  // NUL-terminated, padded with NULs to a multiple of 8 bytes (as the kernel writes names).
  Record& name(const std::string& s) {
    raw(s.data(), s.size());
    const size_t pad = 8 - s.size() % 8;
    for (size_t i = 0; i < pad; ++i) bytes_.push_back(std::byte{0});
    return *this;
  }
  std::vector<std::byte> done() {
    const uint16_t size = static_cast<uint16_t>(bytes_.size());
    std::memcpy(&bytes_[6], &size, 2);
    return std::move(bytes_);
  }

 private:
  Record& raw(const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
    return *this;
  }
  std::vector<std::byte> bytes_;
};

}  // namespace

PerfDataFile::PerfDataFile(const std::string& path, TaskOf task_of)
    : path_(path), task_of_(std::move(task_of)) {
  out_.open(path, std::ios::binary | std::ios::trunc);
  const std::array<char, kHeaderSize> placeholder{};  // the header, written by finish()
  out_.write(placeholder.data(), placeholder.size());
  if (!out_) throw UsageError("cannot write perf data file " + path);
}

PerfDataFile::~PerfDataFile() {
  try {
    finish();
  } catch (const VmmError&) {
    // already said by the owner's own finish(), or the run failed first
  }
}

void PerfDataFile::write(const std::vector<std::byte>& bytes) {
  out_.write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  data_size_ += bytes.size();
}

void PerfDataFile::announce(uint32_t task) {
  if (!announced_.insert(task).second) return;
  const Task t = task_of_(task);
  const std::string comm = (t.name.empty() ? "task " + std::to_string(task) : t.name).substr(0, 15);
  write(Record(PERF_RECORD_COMM, 0).u32(task).u32(task).name(comm).done());
  if (t.elf_path.empty()) return;
  for (const ElfSegment& s : t.segments) {
    if (!s.executable) continue;
    // As the kernel maps it: whole pages, the file offset of the first.
    const uint64_t start = s.vaddr & ~(kPage - 1);
    const uint64_t end = (s.vaddr + s.memsz + kPage - 1) & ~(kPage - 1);
    write(Record(PERF_RECORD_MMAP, PERF_RECORD_MISC_USER)
              .u32(task)
              .u32(task)
              .u64(start)
              .u64(end - start)
              .u64(s.file_offset & ~(kPage - 1))
              .name(t.elf_path)
              .done());
  }
}

void PerfDataFile::add_record(uint32_t task, uint32_t vcpu, const pmu::lwp::EventRecordBytes& bytes,
                              uint64_t period) {
  if (finished_) return;
  const pmu::lwp::DecodedRecord d = pmu::lwp::decode_record(bytes);
  if (d.event_id < pmu::lwp::kEventInstructionsRetired || d.event_id > pmu::lwp::kEventDcacheMisses)
    return;
  announce(task);
  const uint32_t flags = uint32_t{d.flags} << 16;  // the record's first dword's high bits
  const bool branch = d.event_id == pmu::lwp::kEventBranchesRetired;
  const bool dcache = d.event_id == pmu::lwp::kEventDcacheMisses;
  uint64_t addr = 0;
  if (branch || (dcache && (flags & pmu::lwp::record::kDcacheAddressValid))) addr = d.address;
  Record r(PERF_RECORD_SAMPLE, PERF_RECORD_MISC_USER);
  r.u64(d.event_id)  // IDENTIFIER
      .u64(d.rip)
      .u32(task)
      .u32(task)
      .u64(samples_)  // TIME
      .u64(addr)
      .u32(vcpu)
      .u32(0)
      .u64(period ? period : 1);
  if (branch) {
    // One entry: from, to, and perf_branch_entry's flags (bit 0 mispredicted, bit 1 predicted).
    uint64_t predicted = 0;
    if (flags & pmu::lwp::record::kBranchPredictionValid)
      predicted = (flags & pmu::lwp::record::kBranchPredicted) ? 2 : 1;
    r.u64(1).u64(d.rip).u64(d.address).u64(predicted);
  }
  r.u64(dcache ? d.data : 0);  // WEIGHT: the miss's latency in cycles
  write(r.done());
  ++samples_;
}

void PerfDataFile::add_pmi(uint32_t task, uint32_t vcpu, int counter, uint64_t rip, uint8_t cpl) {
  if (finished_) return;
  announce(task);
  pmis_ = true;
  write(Record(PERF_RECORD_SAMPLE, cpl == 0 ? PERF_RECORD_MISC_KERNEL : PERF_RECORD_MISC_USER)
            .u64(kPmiId)
            .u64(rip)
            .u32(task)
            .u32(task)
            .u64(samples_)                        // TIME
            .u64(static_cast<uint64_t>(counter))  // ADDR: the counter, for perf script -F addr
            .u32(vcpu)
            .u32(0)
            .u64(1)  // PERIOD
            .u64(0)  // WEIGHT
            .done());
  ++samples_;
}

void PerfDataFile::finish() {
  if (finished_) return;
  finished_ = true;
  // The attributes, each with its one sample ID, after the data.
  const uint64_t attrs_at = kHeaderSize + data_size_;
  const uint64_t attr_size = sizeof(perf_event_attr) + 16;
  const uint64_t events = pmis_ ? 4 : 3;
  const uint64_t ids_at = attrs_at + events * attr_size;
  std::vector<std::byte> tail;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    tail.insert(tail.end(), b, b + n);
  };
  for (uint8_t id = 1; id <= events; ++id) {
    const perf_event_attr a = attr_of(id);
    put(&a, sizeof a);
    const uint64_t ids[2] = {ids_at + 8 * (id - 1), 8};
    put(ids, sizeof ids);
  }
  for (uint64_t id = 1; id <= events; ++id) put(&id, 8);
  out_.write(reinterpret_cast<const char*>(tail.data()), static_cast<std::streamsize>(tail.size()));
  const uint64_t header[9] = {kMagic,      kHeaderSize, attr_size, attrs_at, events * attr_size,
                              kHeaderSize, data_size_,  0,         0};
  out_.seekp(0);
  out_.write(reinterpret_cast<const char*>(header), sizeof header);
  const std::array<char, kHeaderSize - sizeof header> features{};  // none
  out_.write(features.data(), features.size());
  out_.close();
  if (!out_) throw VmmError("cannot write perf data file " + path_);
}

}  // namespace vmm
