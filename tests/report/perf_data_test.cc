// The perf.data file (vmm/report/perf_data.h) byte by byte, as tools/perf/Documentation/
// perf.data-file-format.txt lays it out: the header, a task's COMM and MMAP records, one SAMPLE
// per LWP record with its fields in the order of its sample_type, and the three attributes with
// their IDs. (Debian's perf reads such files in tests/e2e:guest_counting_test.)
#include "vmm/report/perf_data.h"

#include <gtest/gtest.h>
#include <linux/perf_event.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "pmu/lwp/event_record.h"

namespace vmm {
namespace {

class Bytes {
 public:
  explicit Bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    data_.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t u64(size_t at) const { return le(at, 8); }
  uint32_t u32(size_t at) const { return static_cast<uint32_t>(le(at, 4)); }
  uint16_t u16(size_t at) const { return static_cast<uint16_t>(le(at, 2)); }
  std::string text(size_t at) const { return std::string(&data_[at]); }
  size_t size() const { return data_.size(); }
  void copy(size_t at, void* out, size_t n) const {
    std::memcpy(out, &data_.at(at + n - 1) - (n - 1), n);
  }

 private:
  uint64_t le(size_t at, int n) const {
    uint64_t v = 0;
    std::memcpy(&v, &data_.at(at + n - 1) - (n - 1), n);
    return v;
  }
  std::vector<char> data_;
};

TEST(PerfDataTest, HeaderRecordsAndAttributesAreLaidOutAsPerfReadsThem) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/t.perf.data";
  ElfSegment text;
  text.vaddr = 0x400000;
  text.memsz = 0x1800;
  text.file_offset = 0x1000;
  text.executable = true;
  ElfSegment data = text;
  data.vaddr = 0x402000, data.file_offset = 0x3000, data.executable = false;
  {
    PerfDataFile f(path, [&](uint32_t task) {
      EXPECT_EQ(task, 7u);
      return PerfDataFile::Task{"prog", "/bin/prog", {text, data}};
    });
    pmu::BranchInfo b;
    b.taken = true, b.prediction_valid = true, b.predicted_correctly = false;
    b.next_rip = 0x400100;
    pmu::CacheMiss miss;
    miss.data_address = 0x402040, miss.latency_cycles = 250, miss.source = pmu::DataSource::kDram;
    f.add_record(7, 1, pmu::lwp::encode_instructions_retired(1, 0x400010), 10);
    f.add_record(7, 1, pmu::lwp::encode_branch_retired(1, 0x400020, b), 3);
    f.add_record(7, 0, pmu::lwp::encode_dcache_miss(0, 0x400030, miss, true, 1008), 0);
    EXPECT_EQ(f.samples(), 3u);
    f.finish();
  }
  const Bytes file(path);
  // Header: magic, its size, the attribute size, attrs, data, event_types (none), features (none).
  EXPECT_EQ(file.u64(0), 0x32454c4946524550ull);  // "PERFILE2"
  EXPECT_EQ(file.u64(8), 104u);
  const uint64_t attr_size = file.u64(16);
  EXPECT_EQ(attr_size, sizeof(perf_event_attr) + 16);
  const uint64_t attrs = file.u64(24), data_at = file.u64(40), data_size = file.u64(48);
  EXPECT_EQ(file.u64(32), 3 * attr_size);
  EXPECT_EQ(data_at, 104u);
  EXPECT_EQ(attrs, data_at + data_size);
  for (size_t at = 56; at < 104; at += 8) EXPECT_EQ(file.u64(at), 0u) << at;

  size_t at = data_at;
  // COMM: pid, tid, the name padded to 8 bytes.
  EXPECT_EQ(file.u32(at), uint32_t{PERF_RECORD_COMM});
  EXPECT_EQ(file.u16(at + 6), 8 + 8 + 8);
  EXPECT_EQ(file.u32(at + 8), 7u);
  EXPECT_EQ(file.u32(at + 12), 7u);
  EXPECT_EQ(file.text(at + 16), "prog");
  at += file.u16(at + 6);
  // MMAP of the executable segment only: whole pages, the file offset of the first.
  EXPECT_EQ(file.u32(at), uint32_t{PERF_RECORD_MMAP});
  EXPECT_EQ(file.u16(at + 4), PERF_RECORD_MISC_USER);
  EXPECT_EQ(file.u64(at + 16), 0x400000u);
  EXPECT_EQ(file.u64(at + 24), 0x2000u);
  EXPECT_EQ(file.u64(at + 32), 0x1000u);
  EXPECT_EQ(file.text(at + 40), "/bin/prog");
  at += file.u16(at + 6);
  // SAMPLEs: id, ip, pid/tid, time, addr, cpu/res, period, [branch stack], weight.
  struct Expected {
    uint64_t id, ip, time, addr, cpu, period;
  } expected[3] = {{1, 0x400010, 0, 0, 1, 10},
                   {2, 0x400020, 1, 0x400100, 1, 3},
                   {3, 0x400030, 2, 0x402040, 0, 1}};
  for (const Expected& e : expected) {
    SCOPED_TRACE(e.id);
    ASSERT_EQ(file.u32(at), uint32_t{PERF_RECORD_SAMPLE});
    EXPECT_EQ(file.u16(at + 4), PERF_RECORD_MISC_USER);
    const size_t size = file.u16(at + 6);
    EXPECT_EQ(size, e.id == 2 ? 64 + 32 + 8 : 64 + 8);  // header and 7 fields, stack, weight
    EXPECT_EQ(file.u64(at + 8), e.id);
    EXPECT_EQ(file.u64(at + 16), e.ip);
    EXPECT_EQ(file.u32(at + 24), 7u);
    EXPECT_EQ(file.u32(at + 28), 7u);
    EXPECT_EQ(file.u64(at + 32), e.time);
    EXPECT_EQ(file.u64(at + 40), e.addr);
    EXPECT_EQ(file.u32(at + 48), e.cpu);
    EXPECT_EQ(file.u64(at + 56), e.period);
    size_t next = at + 64;
    if (e.id == 2) {  // one entry: from, to, flags (taken, predicted wrong: bit 0 mispred)
      EXPECT_EQ(file.u64(next), 1u);
      EXPECT_EQ(file.u64(next + 8), 0x400020u);
      EXPECT_EQ(file.u64(next + 16), 0x400100u);
      EXPECT_EQ(file.u64(next + 24), 1u);
      next += 32;
    }
    EXPECT_EQ(file.u64(next), e.id == 3 ? 240u : 0u);  // a miss's latency, as LWP reports it
    at += size;
  }
  EXPECT_EQ(at, attrs);
  // Attributes: instructions, branches (with the branch stack), L1D read misses; each with its ID.
  for (uint64_t i = 0; i < 3; ++i) {
    perf_event_attr a;
    file.copy(attrs + i * attr_size, &a, sizeof a);
    EXPECT_EQ(a.size, sizeof a);
    EXPECT_TRUE(a.exclude_kernel);
    EXPECT_EQ((a.sample_type & PERF_SAMPLE_BRANCH_STACK) != 0, i == 1);
    const uint64_t ids = file.u64(attrs + i * attr_size + sizeof a);
    EXPECT_EQ(file.u64(attrs + i * attr_size + sizeof a + 8), 8u);
    EXPECT_EQ(file.u64(ids), i + 1);
  }
  EXPECT_EQ(file.size(), attrs + 3 * attr_size + 24);
}

TEST(PerfDataTest, NetburstPmisAreSamplesOfAFourthEventOnlyWhenThereAreAny) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/pmi.perf.data";
  {
    PerfDataFile f(path, [](uint32_t) { return PerfDataFile::Task{"nb", "", {}}; });
    f.add_pmi(1, 0, 12, 0x400135, 3);
    f.add_pmi(1, 0, 12, 0xffffffff81000000ull, 0);
  }  // finished by the destructor
  const Bytes file(path);
  const uint64_t attr_size = file.u64(16), attrs = file.u64(24);
  EXPECT_EQ(file.u64(32), 4 * attr_size);
  size_t at = file.u64(40);
  at += file.u16(at + 6);  // COMM (no ELF: no MMAP)
  for (uint16_t misc : {PERF_RECORD_MISC_USER, PERF_RECORD_MISC_KERNEL}) {
    ASSERT_EQ(file.u32(at), uint32_t{PERF_RECORD_SAMPLE});
    EXPECT_EQ(file.u16(at + 4), misc);
    EXPECT_EQ(file.u64(at + 8), 4u);    // the fourth event
    EXPECT_EQ(file.u64(at + 40), 12u);  // ADDR: the counter
    at += file.u16(at + 6);
  }
  EXPECT_EQ(at, attrs);
  perf_event_attr a;
  file.copy(attrs + 3 * attr_size, &a, sizeof a);
  EXPECT_EQ(a.type, uint32_t{PERF_TYPE_RAW});
  EXPECT_FALSE(a.exclude_kernel);  // a T0_OS counter's PMIs come from kernel code
}

}  // namespace
}  // namespace vmm
