// The LWP report and trace: exact text for a small set of records, JSON lines that round-trip.
#include "vmm/report/lwp_report.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "pmu/state_archive.h"
#include "vmm/report/lwp_trace.h"

namespace vmm {
namespace {

using pmu::lwp::encode_instructions_retired;

TEST(LwpReportTest, RendersTopAddressesWithShareAndBars) {
  LwpReport r;
  r.set_task_name(1, "demo");
  for (int i = 0; i < 3; ++i) r.add_record(1, encode_instructions_retired(0, 0x401000), false);
  r.add_record(1, encode_instructions_retired(0, 0x401010), true);
  r.add_interrupt(1);
  const std::string expected =
      "== task 1 demo: 1 missed events, 1 threshold interrupts\n"
      "   instructions retired: 4 records\n"
      "     0x0000000000401000        3  75.00% ##########\n"
      "     0x0000000000401010        1  25.00% ###\n";
  EXPECT_EQ(r.render(10, 10), expected);
}

TEST(LwpReportTest, PlacesFollowTheBarsInOneColumnWhereKnown) {
  LwpReport r;
  r.set_task_name(1, "demo");
  for (int i = 0; i < 3; ++i) r.add_record(1, encode_instructions_retired(0, 0x401000), false);
  r.add_record(1, encode_instructions_retired(0, 0x401010), false);
  r.add_record(1, encode_instructions_retired(0, 0x401020), false);
  const LwpReport::PlaceOf place_of = [](uint32_t task, uint64_t address) {
    EXPECT_EQ(task, 1u);
    return address == 0x401020
               ? std::nullopt
               : std::optional<std::string>(address == 0x401000 ? "main+0x10 a.c:3" : "f a.c:9");
  };
  const std::string expected =
      "== task 1 demo: 0 missed events, 0 threshold interrupts\n"
      "   instructions retired: 5 records\n"
      "     0x0000000000401000        3  60.00% ##########  main+0x10 a.c:3\n"
      "     0x0000000000401010        1  20.00% ###         f a.c:9\n"
      "     0x0000000000401020        1  20.00% ###\n";
  EXPECT_EQ(r.render(10, 10, place_of), expected);
}

TEST(LwpReportTest, NamesInterruptsTheRateLimitCoalesced) {
  LwpReport r;
  r.set_task_name(1, "storm");
  r.add_record(1, encode_instructions_retired(0, 0x401000), false);
  for (int i = 0; i < 5; ++i) r.add_interrupt(1, /*coalesced=*/i >= 2);
  EXPECT_EQ(r.render(10, 10),
            "== task 1 storm: 0 missed events, 5 threshold interrupts (3 coalesced by "
            "--max-interrupt-rate)\n"
            "   instructions retired: 1 records\n"
            "     0x0000000000401000        1 100.00% ##########\n");
}

TEST(LwpReportTest, TopLimitsAndTiesAreDeterministic) {
  LwpReport r;
  for (uint64_t rip = 0x10; rip > 0; --rip)
    r.add_record(2, encode_instructions_retired(0, rip), false);
  const std::string text = r.render(2, 4);
  EXPECT_NE(text.find("0x0000000000000001"), std::string::npos);
  EXPECT_NE(text.find("0x0000000000000002"), std::string::npos);
  EXPECT_EQ(text.find("0x0000000000000003"), std::string::npos);
}

// The guest picks task numbers and record addresses: the report's memory stays bounded, and what
// it could not place is still counted and said.
TEST(LwpReportTest, AGuestCannotGrowTheReportWithoutBound) {
  LwpReport r;
  for (uint64_t i = 0; i < LwpReport::kMaxPlacedAddresses + 10; ++i)
    r.add_record(1, encode_instructions_retired(0, 0x400000 + i), false);
  r.add_record(1, encode_instructions_retired(0, 0x400000), false);  // a kept address still counts
  for (uint32_t task = 2; task < LwpReport::kMaxTasks + 100; ++task) r.add_interrupt(task);
  const std::string text = r.render(1, 4);
  EXPECT_NE(text.find("instructions retired: 262155 records\n"
                      "     0x0000000000400000        2   0.00% ####\n"
                      "     (10 records at addresses beyond the report's 262144, not placed)\n"),
            std::string::npos)
      << text.substr(0, 400);
  // Tasks 2..4096 fill the table (4096 with task 1); the 99 after them are counted together.
  EXPECT_NE(
      text.find("== task 4294967295 (tasks beyond the first 4096, together): 0 missed events, "
                "99 threshold interrupts\n"),
      std::string::npos);
  EXPECT_EQ(text.find("== task 4097 "), std::string::npos);
}

// The address budget is the whole report's, not each task's: 4096 tasks each at 64 Ki addresses
// made ~805 M entries (~51 GB) before (issue 38).
TEST(LwpReportTest, TheAddressBudgetIsOneForAllTasks) {
  LwpReport r;
  const uint64_t per_task = LwpReport::kMaxPlacedAddresses / 4;
  for (uint32_t task = 1; task <= 8; ++task)
    for (uint64_t i = 0; i < per_task; ++i)
      r.add_record(task, encode_instructions_retired(0, 0x400000 + i), false);
  EXPECT_EQ(r.placed_addresses(), LwpReport::kMaxPlacedAddresses);
  const std::string text = r.render(1, 4);
  EXPECT_NE(text.find("== task 5:"), std::string::npos);
  EXPECT_NE(text.find("(65536 records at addresses beyond the report's 262144, not placed)"),
            std::string::npos)
      << text.substr(0, 600);
  // The full report fits the state the reader accepts, and reads back whole.
  pmu::StateWriter w;
  w.set_element_budget(LwpReport::kMaxArchivedElements);
  w(r);
  LwpReport back;
  pmu::StateReader reader(w.bytes());
  reader.set_element_budget(LwpReport::kMaxArchivedElements);
  reader(back);
  reader.expect_end();
  EXPECT_EQ(back.render(1, 4), text);
  EXPECT_EQ(back.placed_addresses(), LwpReport::kMaxPlacedAddresses);
}

// A crafted state holding more than the budget is refused when its count is read, before the
// entries are allocated (before, a 1 GiB state became gigabytes of map nodes first).
TEST(LwpReportTest, ACraftedStateOverTheBudgetIsRefusedBeforeAllocating) {
  std::vector<std::byte> bytes;  // one task, one event, 4 Mi addresses claimed (8 MiB follow)
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes.push_back(static_cast<std::byte>(v >> (8 * i)));
  };
  put(1, 8);         // tasks
  put(1, 4);         // task 1
  put(0, 8);         // name ""
  put(1, 8);         // events
  put(1, 1);         // event 1
  put(5, 8);         // records
  put(1u << 22, 8);  // by_rip entries
  bytes.resize(bytes.size() + (8 << 20));
  LwpReport r;
  pmu::StateReader reader(bytes);
  reader.set_element_budget(LwpReport::kMaxArchivedElements);
  try {
    reader(r);
    ADD_FAILURE() << "read";
  } catch (const pmu::StateFormatError& e) {
    EXPECT_EQ(std::string(e.what()), "more than " +
                                         std::to_string(LwpReport::kMaxArchivedElements) +
                                         " elements (maps and lists) in one state blob");
  }
}

// A report state of one task and one event with `by_rip` and `untracked` as given and `records`
// records: what a crafted snapshot can hold.
std::vector<std::byte> report_state(uint64_t records,
                                    const std::vector<std::pair<uint64_t, uint64_t>>& by_rip,
                                    uint64_t untracked, uint64_t interrupts = 0,
                                    uint64_t coalesced = 0) {
  std::vector<std::byte> bytes;
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) bytes.push_back(static_cast<std::byte>(v >> (8 * i)));
  };
  put(1, 8), put(1, 4), put(0, 8);  // one task, number 1, no name
  put(1, 8), put(1, 1);             // one event: instructions
  put(records, 8);
  put(by_rip.size(), 8);
  for (const auto& [rip, count] : by_rip) put(rip, 8), put(count, 8);
  put(untracked, 8);
  put(0, 8), put(interrupts, 8), put(coalesced, 8);  // missed, interrupts, coalesced
  return bytes;
}

std::string load_error(const std::vector<std::byte>& bytes) {
  LwpReport r;
  pmu::StateReader reader(bytes);
  try {
    reader(r);
    reader.expect_end();
  } catch (const pmu::StateFormatError& e) {
    return e.what();
  }
  return "";
}

// Found by machine_state_fuzz: a crafted report whose hottest address has 0 records divided by
// zero when rendered. A report loads only as pmuvm writes one: every placed address with a
// record, the records adding up, coalesced interrupts among those raised.
TEST(LwpReportTest, ACraftedStateLoadsOnlyWhenItsCountsAddUp) {
  EXPECT_EQ(load_error(report_state(3, {{0x401000, 2}, {0x401010, 1}}, 0)), "");
  EXPECT_EQ(load_error(report_state(5, {{0x401000, 2}}, 3, 4, 4)), "");
  EXPECT_EQ(load_error(report_state(0, {{0x401000, 0}}, 0)),
            "LWP report: task 1 event 1: an address with no records");
  EXPECT_EQ(load_error(report_state(4, {{0x401000, 2}}, 1)),
            "LWP report: task 1 event 1: 4 records, but 2 placed and 1 not placed");
  EXPECT_EQ(load_error(report_state(~0ull, {{0x401000, ~0ull}, {0x401010, 1}}, 0)),
            "LWP report: task 1 event 1: 18446744073709551615 records, but more placed");
  EXPECT_EQ(load_error(report_state(1, {{0x401000, 1}}, 0, 2, 3)),
            "LWP report: task 1: 3 coalesced of 2 threshold interrupts");
}

// Counts as large as the state can hold still draw bars of at most the bar width.
TEST(LwpReportTest, BarsStayWithinTheirWidthForAnyCount) {
  LwpReport r;
  const std::vector<std::byte> state =
      report_state(~0ull - 1, {{0x401000, ~0ull - 2}, {0x401010, 1}}, 0);
  pmu::StateReader reader(state);
  reader(r);
  const std::string text = r.render(10, 10);
  EXPECT_NE(text.find("% ##########\n"), std::string::npos) << text;
  EXPECT_NE(text.find("% #\n"), std::string::npos) << text;
  EXPECT_LT(text.size(), 400u) << text;
}

TEST(LwpReportTest, EmptyReportSaysSo) {
  EXPECT_EQ(LwpReport{}.render(), "LWP report: no task stored any record\n");
}

TEST(LwpTraceTest, OneJsonObjectPerRecord) {
  pmu::BranchInfo b{pmu::BranchKind::kConditional, true, 0x400100, true, false};
  pmu::lwp::StoredRecord rec{pmu::lwp::encode_branch_retired(3, 0x400010, b), 0x20040, false};
  const std::string line = trace_line(7, 1, rec);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["task"], 7);
  EXPECT_EQ(j["vcpu"], 1);
  EXPECT_EQ(j["event"], 2);
  EXPECT_EQ(j["core"], 3);
  EXPECT_EQ(j["flags"], 0xA000);  // taken (bit 31) + PRD valid (bit 29), mispredicted
  EXPECT_EQ(j["rip"], 0x400010);
  EXPECT_EQ(j["addr"], 0x400100);
  EXPECT_EQ(j["address"], 0x20040);
  EXPECT_EQ(j["missed"], false);
}

}  // namespace
}  // namespace vmm
