// LWP record exactness end to end in the guest: DCache-miss records as the cache model dictates
// (guest/programs/lwp_dcache.c), a full ring and MissedEvents, one threshold interrupt per
// crossing through lwp_wait, an interrupt storm with and without --max-interrupt-rate
// (guest/programs/lwp_ring.c), and the exact --lwp-report / --lwp-trace output. The expected
// values are derived in the programs' header comments; every case runs under every stepper
// (guest_test.h kSteppers: block-stepping KVM, single-stepping KVM, guest-assisted) and
// asserts byte-identical traces. Runs on a KVM host (tests/kvm_host_test.bzl).
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/guest_test.h"

namespace {

using pmuvm_e2e::run;
using pmuvm_e2e::slurp;

// One pmuvm run of a program under one stepper.
struct StepperRun {
  std::string stepper;
  pmuvm_e2e::Result result;
  std::string lines;   // the program's own console lines ("NAME: ..."), absolute RIPs masked
  std::string trace;   // --lwp-trace
  std::string report;  // --lwp-report without the places of its addresses (without_places)
  std::string places;  // --lwp-report as printed
};

// `report` without the function/file:line after each address's bar: the cases compute the
// addresses, the places come from the ELF (checked in FullRingKeepsHead...).
std::string without_places(const std::string& report) {
  return std::regex_replace(report, std::regex("(%) (#+) +[^\n]+"), "$1 $2");
}

class GuestLwp : public pmuvm_e2e::GuestTest {
 protected:
  // Runs `name args` under every stepper with `options` and checks what must hold for all:
  // exit status 0, byte-identical traces and identical program lines (unless `same_lines` is
  // false: the storm's interrupt total depends on wall-clock throttling).
  static std::vector<StepperRun> every_stepper(const std::string& name,
                                               const std::vector<std::string>& args,
                                               const std::vector<std::string>& options = {},
                                               bool same_lines = true) {
    std::vector<StepperRun> runs;
    for (const char* stepper : pmuvm_e2e::kSteppers) {
      StepperRun s;
      s.stepper = stepper;
      const std::string tag = name + "." + (args.empty() ? "" : args[0]) + "." + stepper;
      const std::string trace = temp(tag + ".jsonl"), report = temp(tag + ".report");
      std::vector<std::string> argv = {"run", "--stepper",    stepper, "--lwp-trace",
                                       trace, "--lwp-report", report};
      argv.insert(argv.end(), options.begin(), options.end());
      argv.push_back("--");
      argv.push_back(program(name));
      argv.insert(argv.end(), args.begin(), args.end());
      s.result = run(argv);
      EXPECT_EQ(s.result.status, 0) << name << " " << stepper << "\n"
                                    << s.result.out << s.result.err;
      s.lines = program_lines(s.result.out, name + ":");
      s.trace = slurp(trace);
      s.places = slurp(report);
      s.report = without_places(s.places);
      runs.push_back(std::move(s));
    }
    for (size_t j = 1; j < runs.size(); ++j) {
      EXPECT_EQ(runs[0].trace, runs[j].trace) << name << ": " << runs[0].stepper << " and "
                                              << runs[j].stepper << " stored different records";
      if (same_lines) {
        EXPECT_EQ(runs[0].lines, runs[j].lines) << name << " " << runs[j].stepper;
      }
    }
    return runs;
  }

  static std::string program_lines(const std::string& out, const std::string& prefix) {
    static const std::regex rip("rip=0x[0-9a-f]+");
    std::istringstream in(out);
    std::string line, kept;
    while (std::getline(in, line))
      if (line.rfind(prefix, 0) == 0) kept += std::regex_replace(line, rip, "rip=X") + "\n";
    return kept;
  }

  // The hex number after `key` in `text` (e.g. "ring=0x0000000000404000"), or 0.
  static uint64_t hex_after(const std::string& text, const std::string& key) {
    const size_t at = text.find(key);
    return at == std::string::npos ? 0 : std::stoull(text.substr(at + key.size()), nullptr, 16);
  }

  static std::string trace_line(uint64_t address, bool missed, int event, uint32_t flags,
                                uint32_t data, uint64_t rip, uint64_t addr) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "{\"task\":1,\"vcpu\":0,\"address\":%" PRIu64
                  ",\"missed\":%s,\"event\":%d,"
                  "\"core\":0,\"flags\":%u,\"data\":%u,\"rip\":%" PRIu64 ",\"addr\":%" PRIu64 "}\n",
                  address, missed ? "true" : "false", event, flags, data, rip, addr);
    return buf;
  }
};

// ---- DCache misses (lwp_dcache.c's header comment derives these from the cache model) ----

struct Miss {
  int load;
  uint32_t data;  // data address - area
  uint32_t latency;
  unsigned source;
};
// The 22 misses of the sequence: 17 cold DRAM lines, an L3 hit, an L2 hit, an L3 hit, then two
// loads spanning two lines (both cold: the first address; first line present: the second line).
const Miss kMisses[] = {
    {0, 0x0, 240, 3},       {2, 0x20000, 240, 3},   {3, 0x40000, 240, 3},   {4, 0x60000, 240, 3},
    {5, 0x80000, 240, 3},   {6, 0xa0000, 240, 3},   {7, 0xc0000, 240, 3},   {8, 0xe0000, 240, 3},
    {9, 0x100000, 240, 3},  {10, 0x120000, 240, 3}, {11, 0x140000, 240, 3}, {12, 0x160000, 240, 3},
    {13, 0x180000, 240, 3}, {14, 0x1a0000, 240, 3}, {15, 0x1c0000, 240, 3}, {16, 0x1e0000, 240, 3},
    {17, 0x200000, 240, 3}, {18, 0x0, 64, 1},       {19, 0x180000, 16, 0},  {20, 0x20000, 64, 1},
    {22, 0x107c, 240, 3},   {23, 0x1100, 240, 3},
};

std::vector<Miss> misses_where(bool (*keep)(const Miss&)) {
  std::vector<Miss> out;
  for (const Miss& m : kMisses)
    if (keep(m)) out.push_back(m);
  return out;
}

std::string dcache_lines(const std::string& filters, const std::string& interval,
                         const std::vector<Miss>& records) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "lwp_dcache: filters %s interval %s", filters.c_str(),
                interval.c_str());
  std::string out = buf;
  out += " ring=X area=X\n";  // masked below: addresses depend on the build
  for (size_t i = 0; i < records.size(); ++i) {
    const Miss& m = records[i];
    char data[32];
    if (m.data)
      std::snprintf(data, sizeof data, "%#x", m.data);
    else
      std::snprintf(data, sizeof data, "0");
    std::snprintf(buf, sizeof buf,
                  "lwp_dcache: record %zu: event 3 core 0 load %d rip=X data=area+%s latency %u "
                  "source %u valid 1\n",
                  i, m.load, data, m.latency, m.source);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "lwp_dcache: PASS: %zu DCache records\n", records.size());
  return out + buf;
}

std::string mask_addresses(const std::string& lines) {
  static const std::regex ring("ring=0x[0-9a-f]+ area=0x[0-9a-f]+");
  return std::regex_replace(lines, ring, "ring=X area=X");
}

// lwp_ring's lines with the ring and first-instruction addresses (link-time values) masked.
std::string mask_ring_addresses(const std::string& lines) {
  static const std::regex ring("ring=0x[0-9a-f]+ first insn 0x[0-9a-f]+");
  return std::regex_replace(lines, ring, "ring=X first insn X");
}

TEST_F(GuestLwp, DcacheRecordsCarryRipDataAddressLatencyAndSourceOfTheCacheModel) {
  auto runs = every_stepper("lwp_dcache", {});
  const std::vector<Miss> all(std::begin(kMisses), std::end(kMisses));
  EXPECT_EQ(mask_addresses(runs[0].lines), dcache_lines("0", "1", all)) << runs[0].result.out;

  // The trace, field by field: ring slot i, Figure 4 flags (source in bits 31:29, address valid
  // bit 28, i.e. bits 15:13 and 12 of the flags word), latency, RIP as the program found it at
  // its load label, data address.
  const uint64_t ring = hex_after(runs[0].result.out, "ring=");
  const uint64_t area = hex_after(runs[0].result.out, "area=");
  ASSERT_NE(ring, 0u);
  std::istringstream out(runs[0].result.out);
  std::string line, expected;
  std::vector<uint64_t> rips;
  while (std::getline(out, line))
    if (line.rfind("lwp_dcache: record ", 0) == 0) rips.push_back(hex_after(line, "rip="));
  ASSERT_EQ(rips.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i)
    expected += trace_line(ring + 32 * i, false, 3, all[i].source << 13 | 1u << 12, all[i].latency,
                           rips[i], area + all[i].data);
  EXPECT_EQ(runs[0].trace, expected);
}

TEST_F(GuestLwp, DcacheMinLatencyKeepsMissesAtOrAboveIt) {
  // MinLatency 4 = 64 cycles: the L2 hit (16) goes, the L3 hits (64) stay (>=).
  auto runs = every_stepper("lwp_dcache", {"4"});
  EXPECT_EQ(mask_addresses(runs[0].lines),
            dcache_lines("0x4", "1", misses_where([](const Miss& m) { return m.latency >= 64; })));
  // MinLatency 5 = 80 cycles: only DRAM.
  runs = every_stepper("lwp_dcache", {"5"});
  EXPECT_EQ(mask_addresses(runs[0].lines),
            dcache_lines("0x5", "1", misses_where([](const Miss& m) { return m.source == 3; })));
}

TEST_F(GuestLwp, DcacheCacheLevelFilterKeepsOnlyTheNamedSources) {
  // CLF|NBC: the two L3 hits.
  auto runs = every_stepper("lwp_dcache", {"3000000"});
  EXPECT_EQ(
      mask_addresses(runs[0].lines),
      dcache_lines("0x3000000", "1", misses_where([](const Miss& m) { return m.source == 1; })));
  // The report of those two records: one line per load address, equal shares, by address.
  std::vector<uint64_t> rips;
  std::istringstream out(runs[0].result.out);
  for (std::string line; std::getline(out, line);)
    if (line.rfind("lwp_dcache: record ", 0) == 0) rips.push_back(hex_after(line, "rip="));
  ASSERT_EQ(rips.size(), 2u);
  char report[512];
  std::snprintf(report, sizeof report,
                "== task 1 lwp_dcache: 0 missed events, 0 threshold interrupts\n"
                "   DCache misses: 2 records\n"
                "     %#018" PRIx64
                "        1  50.00%% %s\n"
                "     %#018" PRIx64 "        1  50.00%% %s\n",
                rips[0], std::string(30, '#').c_str(), rips[1], std::string(30, '#').c_str());
  for (const StepperRun& s : runs) EXPECT_EQ(s.report, report) << s.stepper;
  // CLF|RAM: DRAM only (the L2 hit has no filter bit, so never under CLF).
  runs = every_stepper("lwp_dcache", {"9000000"});
  EXPECT_EQ(
      mask_addresses(runs[0].lines),
      dcache_lines("0x9000000", "1", misses_where([](const Miss& m) { return m.source == 3; })));
  // CLF|RDC|OTH: sources this model never produces: nothing.
  runs = every_stepper("lwp_dcache", {"15000000"});
  EXPECT_EQ(mask_addresses(runs[0].lines), dcache_lines("0x15000000", "1", {}));
  EXPECT_EQ(runs[0].trace, "");
}

TEST_F(GuestLwp, DcacheBothFiltersMustPassAndTheIntervalCountsEligibleMisses) {
  // CLF|NBC|RAM with MinLatency 5 (80): NBC alone would keep the L3 hits, but 64 < 80.
  auto runs = every_stepper("lwp_dcache", {"b000005"});
  EXPECT_EQ(
      mask_addresses(runs[0].lines),
      dcache_lines("0xb000005", "1", misses_where([](const Miss& m) { return m.source == 3; })));
  // Interval 3, no filter: misses 3, 6, ..., 21 of the 22.
  runs = every_stepper("lwp_dcache", {"0", "3"});
  std::vector<Miss> third;
  for (size_t i = 2; i < std::size(kMisses); i += 3) third.push_back(kMisses[i]);
  EXPECT_EQ(mask_addresses(runs[0].lines), dcache_lines("0", "3", third));
}

// ---- Ring buffer (lwp_ring.c's header comment derives these) ----

TEST_F(GuestLwp, FullRingKeepsHeadCountsMissedEventsAndReportsAndTracesThem) {
  auto runs = every_stepper("lwp_ring", {"full"});
  EXPECT_EQ(mask_ring_addresses(runs[0].lines),
            "lwp_ring: full: ring=X first insn X\n"
            "lwp_ring: full: BufferHeadOffset read while LWP is on: 64\n"
            "lwp_ring: full: flags 0x3 head 64 tail 0 missed 4\n"
            "lwp_ring: full: ring[0]: event 1 core 0 insn 5 rip=X\n"
            "lwp_ring: full: ring[1]: event 1 core 0 insn 10 rip=X\n"
            "lwp_ring: full: ring[2]: event 1 core 0 insn 30 rip=X\n"
            "lwp_ring: full: PASS\n");
  // The sequence starts with 32 one-byte nops: instruction k is at first + k - 1. Records at 5,
  // 10, ..., 30; the third and every later one find the ring full and overwrite slot 2 (missed).
  const uint64_t ring = hex_after(runs[0].result.out, "ring=");
  const uint64_t first = hex_after(runs[0].result.out, "first insn ");
  ASSERT_NE(first, 0u);
  std::string trace, report =
                         "== task 1 lwp_ring: 4 missed events, 0 threshold interrupts\n"
                         "   instructions retired: 6 records\n";
  for (int r = 0; r < 6; ++r) {
    const uint64_t rip = first + 5 * (r + 1) - 1;
    trace += trace_line(ring + 32 * std::min(r, 2), r >= 2, 1, 0, 0, rip, 0);
    char line[128];
    std::snprintf(line, sizeof line, "     %#018" PRIx64 "        1  16.67%% %s\n", rip,
                  std::string(30, '#').c_str());
    report += line;
  }
  EXPECT_EQ(runs[0].trace, trace);
  for (const StepperRun& s : runs) EXPECT_EQ(s.report, report) << s.stepper;
  // Each address is named from the program's ELF: the assembly function that holds the sequence,
  // and the offset (no line: top-level asm has no DWARF lines; symbols and lines themselves are
  // checked against binutils in tests/report).
  std::istringstream lines(runs[0].places);
  int named = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("     0x", 0) == 0) {
      EXPECT_TRUE(std::regex_search(line, std::regex("#  lwp_ring_full\\+0x[0-9a-f]+$"))) << line;
      ++named;
    }
  EXPECT_EQ(named, 6) << runs[0].places;
}

TEST_F(GuestLwp, ThresholdInterruptComesOncePerCrossingThroughLwpWait) {
  auto runs = every_stepper("lwp_ring", {"threshold"});
  EXPECT_EQ(mask_ring_addresses(runs[0].lines),
            "lwp_ring: threshold: ring=X first insn X\n"
            "lwp_ring: threshold: flags 0x80000003 head 160 tail 192 missed 2\n"
            "lwp_ring: threshold: ring[0]: event 1 core 0 insn 36 rip=X\n"
            "lwp_ring: threshold: ring[1]: event 1 core 0 insn 40 rip=X\n"
            "lwp_ring: threshold: ring[2]: event 1 core 0 insn 44 rip=X\n"
            "lwp_ring: threshold: ring[3]: event 1 core 0 insn 48 rip=X\n"
            "lwp_ring: threshold: ring[4]: event 1 core 0 insn 52 rip=X\n"
            "lwp_ring: threshold: ring[5]: event 1 core 0 insn 60 rip=X\n"
            "lwp_ring: threshold: ring[6]: event 1 core 0 insn 28 rip=X\n"
            "lwp_ring: threshold: ring[7]: event 1 core 0 insn 32 rip=X\n"
            "lwp_ring: threshold: lwp_wait results 1 1 1 0\n"
            "lwp_ring: threshold: PASS\n");
  // 15 records: 8 fill the ring (the 8th wraps head to 0), 5 more after the drains, the last 2
  // find it full and overwrite slot 5 (offset 160).
  const uint64_t ring = hex_after(runs[0].result.out, "ring=");
  const uint32_t slots[15] = {0, 32, 64, 96, 128, 160, 192, 224, 0, 32, 64, 96, 128, 160, 160};
  std::istringstream trace(runs[0].trace);
  std::string line;
  int n = 0;
  while (std::getline(trace, line)) {
    ASSERT_LT(n, 15) << runs[0].trace;
    EXPECT_NE(line.find("\"address\":" + std::to_string(ring + slots[n]) +
                        ",\"missed\":" + (n >= 13 ? "true" : "false") + ",\"event\":1,"),
              std::string::npos)
        << "record " << n << ": " << line;
    ++n;
  }
  EXPECT_EQ(n, 15);
  for (const StepperRun& s : runs) {
    EXPECT_EQ(s.report.substr(0, s.report.find("     0x")),
              "== task 1 lwp_ring: 2 missed events, 3 threshold interrupts\n"
              "   instructions retired: 15 records\n")
        << s.stepper;
  }
}

TEST_F(GuestLwp, InterruptOnEveryRecordFinishesAndEveryOneArrives) {
  auto runs = every_stepper("lwp_ring", {"storm"});
  EXPECT_EQ(runs[0].lines,
            "lwp_ring: storm: flags 0x80000003 head 32 tail 0 missed 0\n"
            "lwp_ring: storm: ring[0]: event 1 core 0 insn 84 rip=X\n"
            "lwp_ring: storm: ring[1]: event 1 core 0 insn 72 rip=X\n"
            "lwp_ring: storm: ring[2]: event 1 core 0 insn 76 rip=X\n"
            "lwp_ring: storm: ring[3]: event 1 core 0 insn 80 rip=X\n"
            "lwp_ring: storm: 21 threshold crossings, lwp_wait total 21\n"
            "lwp_ring: storm: PASS\n");
  for (const StepperRun& s : runs) {
    EXPECT_EQ(s.report.substr(0, s.report.find('\n') + 1),
              "== task 1 lwp_ring: 0 missed events, 21 threshold interrupts\n")
        << s.stepper;
    EXPECT_EQ(s.result.err.find("--max-interrupt-rate"), std::string::npos) << s.result.err;
  }
}

TEST_F(GuestLwp, StormUnderALowInterruptRateIsCoalescedCountedAndAddsUp) {
  // 2 interrupts per second: the 21 requests come within milliseconds, so the first two go out,
  // the rest are held and coalesced into one released a second later. Nothing is lost: LWP raised
  // 21 (the report), the guest received 21 - coalesced (lwp_wait), and the VMM's warning says so.
  auto runs =
      every_stepper("lwp_ring", {"storm"}, {"--max-interrupt-rate", "2"}, /*same_lines=*/false);
  for (const StepperRun& s : runs) {
    SCOPED_TRACE(s.stepper);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(s.lines, m,
                                  std::regex("21 threshold crossings, lwp_wait total (\\d+)\n")))
        << s.lines;
    const int received = std::stoi(m[1]);
    ASSERT_TRUE(std::regex_search(
        s.report, m,
        std::regex("^== task 1 lwp_ring: 0 missed events, 21 threshold interrupts \\((\\d+) "
                   "coalesced by --max-interrupt-rate\\)\n")))
        << s.report;
    const int coalesced = std::stoi(m[1]);
    EXPECT_GE(coalesced, 1);
    EXPECT_EQ(received + coalesced, 21);
    ASSERT_TRUE(std::regex_search(
        s.result.err, m,
        std::regex("vCPU 0: --max-interrupt-rate 2/s held back (\\d+) PMU interrupt requests, "
                   "(\\d+) of them coalesced into one already held; (\\d+) delivered\n")))
        << s.result.err;
    EXPECT_EQ(std::stoi(m[2]), coalesced);
    EXPECT_EQ(std::stoi(m[3]), received);
    // Held back = coalesced + those released later (at least one: the guest got it).
    EXPECT_GT(std::stoi(m[1]), coalesced);
    EXPECT_LE(std::stoi(m[1]), 21);
    EXPECT_NE(s.lines.find("lwp_ring: storm: PASS\n"), std::string::npos) << s.lines;
  }
}

}  // namespace
