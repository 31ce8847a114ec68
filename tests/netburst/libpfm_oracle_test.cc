// libpfm4 as an independent oracle. With LIBPFM_FORCE_PMU=netburst, libpfm4 encodes NetBurst
// events into raw (ESCR, CCCR) values. For every event and mask the model supports (and a set of
// modifiers) this suite checks that
//   1. the model decodes libpfm4's ESCR to the same event and mask, and routes libpfm4's CCCR
//      ESCR-select to the ESCR that the references name for each counter (Linux's
//      perf_event_p4.h lists, per ESCR, the counters that can use it; libpfm4's public API names
//      no counter, see README.md);
//   2. writing that ESCR/CCCR pair to each such counter makes the model count exactly what an
//      independent per-cycle simulation in this file expects for a mixed instruction stream;
// and that the model's 45-event table agrees with libpfm4's on event and ESCR select codes.
#include <perfmon/pfmlib.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "pmu/netburst/cccr.h"
#include "pmu/netburst/escr.h"
#include "pmu/netburst/events.h"
#include "tests/netburst/netburst_fixture.h"

namespace pmu::netburst::testing {
namespace {

void InitPfm() {
  static const int kResult = [] {
    setenv("LIBPFM_FORCE_PMU", "netburst", 1);
    return pfm_initialize();
  }();
  ASSERT_EQ(kResult, PFM_SUCCESS) << pfm_strerror(kResult);
}

struct Encoding {
  uint64_t escr = 0;
  uint64_t cccr = 0;
};

bool Encode(const std::string& spec, Encoding* out, std::string* error) {
  uint64_t codes[4] = {};
  char* fstr = nullptr;
  pfm_pmu_encode_arg_t arg{};
  arg.size = sizeof arg;
  arg.codes = codes;
  arg.count = 4;
  arg.fstr = &fstr;
  const int r = pfm_get_os_event_encoding(spec.c_str(), PFM_PLM0 | PFM_PLM3, PFM_OS_NONE, &arg);
  free(fstr);
  if (r != PFM_SUCCESS) {
    *error = pfm_strerror(r);
    return false;
  }
  if (arg.count < 2) {
    *error = "fewer than 2 codes";
    return false;
  }
  out->escr = codes[0];
  out->cccr = codes[1];
  return true;
}

// Where the references put each modelled event: ESCR MSR and the counters that use it (Linux
// perf_event_p4.h comments, e.g. "MSR_P4_CRU_ESCR0: 12, 13, 16").
struct Placement {
  uint32_t escr_msr;
  std::vector<int> counters;
};
const std::map<std::string, std::vector<Placement>>& Placements() {
  static const std::map<std::string, std::vector<Placement>> kMap = {
      {"instr_retired", {{0x3B8, {12, 13, 16}}, {0x3B9, {14, 15, 17}}}},
      {"mispred_branch_retired", {{0x3B8, {12, 13, 16}}, {0x3B9, {14, 15, 17}}}},
      {"branch_retired", {{0x3CC, {12, 13, 16}}, {0x3CD, {14, 15, 17}}}},
      {"global_power_events", {{0x3A2, {0, 1}}, {0x3A3, {2, 3}}}},
      {"BSQ_cache_reference", {{0x3A0, {0, 1}}, {0x3A1, {2, 3}}}},
  };
  return kMap;
}

// libpfm4 spells mispred_branch_retired's only mask "BOGUS" although its description (and the
// SDM, and Linux) say bit 0 means "not bogus"; the model calls it NBOGUS.
std::string ModelMaskName(const std::string& event, const std::string& pfm_mask) {
  if (event == "mispred_branch_retired" && pfm_mask == "BOGUS") return "NBOGUS";
  return pfm_mask;
}

// ---- Independent expectation: a cycle-by-cycle simulation of the documented semantics. ----

struct Modifiers {
  bool os = true, usr = true;  // default privilege levels: PLM0 | PLM3
  bool compare = false, complement = false, edge = false;
  unsigned threshold = 0;
};

Modifiers ParseModifiers(const std::string& m) {
  Modifiers r;
  if (m.find(":u") != std::string::npos && m.find(":k") == std::string::npos) r.os = false;
  if (m.find(":k") != std::string::npos && m.find(":u") == std::string::npos) r.usr = false;
  if (m.find(":cmpl") != std::string::npos) r.compare = r.complement = true;
  if (m.find(":e") != std::string::npos) r.compare = r.edge = true;
  const size_t t = m.find(":thr=");
  if (t != std::string::npos) {
    r.threshold = static_cast<unsigned>(std::stoul(m.substr(t + 5)));
    if (r.threshold) r.compare = true;
  }
  return r;
}

bool Mispredicted(const RetiredInstruction& i) {
  return i.branch.prediction_valid && !i.branch.predicted_correctly;
}

// Occurrences of event/mask in one cycle of `i` (last = its retirement cycle).
uint32_t Occurrences(const std::string& event, const std::string& mask, const RetiredInstruction& i,
                     bool last) {
  if (event == "global_power_events") return mask == "RUNNING" ? 1 : 0;
  if (!last) return 0;
  if (event == "instr_retired") return mask == "NBOGUSNTAG" ? 1 : 0;
  if (event == "mispred_branch_retired")
    return i.branch.kind != BranchKind::kNone && Mispredicted(i) ? 1 : 0;
  if (event == "branch_retired") {
    if (i.branch.kind == BranchKind::kNone) return 0;
    const char* kind =
        i.branch.taken ? (Mispredicted(i) ? "MMTM" : "MMTP") : (Mispredicted(i) ? "MMNM" : "MMNP");
    return mask == kind ? 1 : 0;
  }
  if (event == "BSQ_cache_reference") {  // default profile: no 3rd-level cache
    uint32_t n = 0;
    for (int k = 0; k < i.cache_miss_count; ++k) {
      const DataSource s = i.cache_misses[k].source;
      if (mask == "RD_2ndL_HITE" && s == DataSource::kL2) ++n;
      if (mask == "RD_2ndL_MISS" &&
          (s == DataSource::kLocalL3 || s == DataSource::kDram || s == DataSource::kRemoteCache))
        ++n;
    }
    return n;
  }
  return 0;
}

uint64_t Expected(const std::string& event, const std::string& mask, const Modifiers& m,
                  const std::vector<RetiredInstruction>& stream) {
  uint64_t count = 0;
  bool previous = false;
  for (const RetiredInstruction& i : stream) {
    const bool qualified = i.cpl == 0 ? m.os : m.usr;
    const uint32_t cycles = i.cycles ? i.cycles : 1;
    for (uint32_t c = 0; c < cycles; ++c) {
      const uint32_t e = qualified ? Occurrences(event, mask, i, c + 1 == cycles) : 0;
      if (!m.compare) {
        count += e;
        continue;
      }
      const bool pass = m.complement ? e <= m.threshold : e > m.threshold;
      if (m.edge) {
        if (pass && !previous) ++count;
      } else if (pass) {
        ++count;
      }
      previous = pass;
    }
  }
  return count;
}

std::vector<RetiredInstruction> Stream() {
  std::vector<RetiredInstruction> s;
  const BranchKind kinds[] = {BranchKind::kConditional, BranchKind::kCall, BranchKind::kReturn,
                              BranchKind::kIndirectJump, BranchKind::kDirectJump};
  for (int n = 0; n < 60; ++n) {
    const uint8_t cpl = (n % 7 == 0 || n % 11 == 0) ? 0 : 3;
    RetiredInstruction i;
    switch (n % 5) {
      case 0: i = Plain(cpl, 1 + n % 4); break;
      case 1: i = Branch(n % 3 != 0, n % 4 == 1, cpl, kinds[n % 5]); break;
      case 2: i = Load({DataSource::kL2}, cpl, 1 + n % 3); break;
      case 3:
        i = Load({DataSource::kDram, n % 2 ? DataSource::kL2 : DataSource::kLocalL3}, cpl, 5);
        break;
      default: i = Branch(n % 2 == 0, n % 3 == 0, cpl, BranchKind::kConditional); break;
    }
    if (n % 13 == 0) i.cycles = 0;
    s.push_back(i);
  }
  return s;
}

struct PfmEvent {
  int idx;
  std::string name;
  unsigned event_select;
  unsigned escr_select;
  std::vector<std::pair<std::string, unsigned>> masks;  // name, bit
};

std::vector<PfmEvent> PfmNetburstEvents() {
  std::vector<PfmEvent> out;
  pfm_pmu_info_t pinfo{};
  pinfo.size = sizeof pinfo;
  if (pfm_get_pmu_info(PFM_PMU_INTEL_NETBURST, &pinfo) != PFM_SUCCESS) return out;
  for (int i = pinfo.first_event; i != -1; i = pfm_get_event_next(i)) {
    pfm_event_info_t info{};
    info.size = sizeof info;
    if (pfm_get_event_info(i, PFM_OS_NONE, &info) != PFM_SUCCESS) continue;
    PfmEvent e{i,
               info.name,
               static_cast<unsigned>(info.code & 0xFF),
               static_cast<unsigned>(info.code >> 8),
               {}};
    for (int a = 0; a < info.nattrs; ++a) {
      pfm_event_attr_info_t ai{};
      ai.size = sizeof ai;
      if (pfm_get_event_attr_info(i, a, PFM_OS_NONE, &ai) != PFM_SUCCESS) continue;
      if (ai.type == PFM_ATTR_UMASK) e.masks.emplace_back(ai.name, static_cast<unsigned>(ai.code));
    }
    out.push_back(std::move(e));
  }
  return out;
}

TEST(NetburstLibpfmOracle, LibpfmSeesTheNetburstPmu) {
  InitPfm();
  pfm_pmu_info_t pinfo{};
  pinfo.size = sizeof pinfo;
  ASSERT_EQ(pfm_get_pmu_info(PFM_PMU_INTEL_NETBURST, &pinfo), PFM_SUCCESS);
  EXPECT_TRUE(pinfo.is_present);
  EXPECT_EQ(pinfo.nevents, 45);
  EXPECT_EQ(pinfo.num_cntrs, 18);
}

TEST(NetburstLibpfmOracle, EventTableAgreesWithLibpfmOnEventAndEscrSelects) {
  InitPfm();
  const std::vector<PfmEvent> events = PfmNetburstEvents();
  ASSERT_EQ(events.size(), 45u);
  for (const PfmEvent& p : events) {
    SCOPED_TRACE(p.name);
    const EventInfo* e = find_event(p.name);
    ASSERT_NE(e, nullptr) << "libpfm4 event missing from the model's table";
    EXPECT_EQ(e->event_select, p.event_select);
    EXPECT_EQ(e->escr_select, p.escr_select);
    if (!e->modelled()) continue;
    ASSERT_EQ(e->masks.size(), p.masks.size());
    for (const auto& [name, bit] : p.masks)
      EXPECT_EQ(e->mask_bit(ModelMaskName(p.name, name)), 1u << bit) << name;
  }
}

TEST(NetburstLibpfmOracle, EveryModelledEventMaskAndModifierDecodesAndCountsAlike) {
  InitPfm();
  const std::vector<RetiredInstruction> stream = Stream();
  const char* const kModifiers[] = {"",       ":u", ":k",   ":cmpl",
                                    ":thr=1", ":e", ":u:e", ":k:cmpl:thr=2"};
  int checked = 0, nonzero = 0;
  for (const PfmEvent& p : PfmNetburstEvents()) {
    const auto placement = Placements().find(p.name);
    const EventInfo* model_event = find_event(p.name);
    ASSERT_NE(model_event, nullptr) << p.name;
    if (!model_event->modelled()) continue;
    ASSERT_NE(placement, Placements().end()) << p.name;
    for (const auto& [mask_name, bit] : p.masks) {
      for (const char* mod : kModifiers) {
        const std::string spec = "netburst::" + p.name + ":" + mask_name + mod;
        SCOPED_TRACE(spec);
        Encoding enc;
        std::string error;
        ASSERT_TRUE(Encode(spec, &enc, &error)) << error;
        // 1. Decoding: event, mask, CPL bits, filter fields.
        EXPECT_EQ(enc.escr & escr::kReserved, 0u);
        EXPECT_EQ(enc.cccr & cccr::kReserved, 0u);
        EXPECT_EQ(escr::event_mask(enc.escr),
                  model_event->mask_bit(ModelMaskName(p.name, mask_name)));
        const Modifiers m = ParseModifiers(mod);
        EXPECT_EQ((enc.escr & escr::kT0Os) != 0, m.os);
        EXPECT_EQ((enc.escr & escr::kT0Usr) != 0, m.usr);
        EXPECT_EQ((enc.cccr & cccr::kCompare) != 0, m.compare);
        EXPECT_EQ((enc.cccr & cccr::kComplement) != 0, m.complement);
        EXPECT_EQ((enc.cccr & cccr::kEdge) != 0, m.edge);
        EXPECT_EQ(cccr::threshold(enc.cccr), m.threshold);
        EXPECT_NE(enc.cccr & cccr::kEnable, 0u);
        const uint64_t expected = Expected(p.name, mask_name, m, stream);
        for (const Placement& place : placement->second) {
          const std::optional<Escr> escr = escr_at(place.escr_msr);
          ASSERT_TRUE(escr.has_value());
          const EventInfo* decoded = find_event(*escr, escr::event_select(enc.escr));
          ASSERT_NE(decoded, nullptr);
          EXPECT_EQ(decoded->name, p.name);
          for (int counter : place.counters) {
            SCOPED_TRACE(::testing::Message() << "counter " << counter);
            EXPECT_EQ(escr_for(counter, cccr::escr_select(enc.cccr)), escr)
                << "libpfm4's ESCR select does not reach the documented ESCR";
            // 2. Counting with exactly libpfm4's register values.
            RecordingInterruptSink sink;
            NetburstPmu pmu(Config{}, sink);
            ASSERT_EQ(pmu.wrmsr(place.escr_msr, enc.escr), MsrResult::kOk);
            ASSERT_EQ(pmu.wrmsr(0x360 + counter, enc.cccr), MsrResult::kOk);
            EXPECT_TRUE(pmu.counter_view(counter).counts_events);
            for (const auto& i : stream) pmu.retire(i);
            uint64_t v = 0;
            ASSERT_EQ(pmu.rdmsr(0x300 + counter, v), MsrResult::kOk);
            EXPECT_EQ(v, expected);
            ++checked;
            if (expected != 0) ++nonzero;
          }
        }
      }
    }
  }
  // 4 + 1 + 4 + 1 + 9 masks, 8 modifiers, 6/6/6/4/4 counters.
  EXPECT_EQ(checked, (4 * 6 + 1 * 6 + 4 * 6 + 1 * 4 + 9 * 4) * 8);
  EXPECT_GT(nonzero, checked / 2) << "the stream must exercise most encodings";
}

TEST(NetburstLibpfmOracle, LibpfmExampleFromTheNotesMatches) {
  // spec/netburst-escr-cccr-notes-ja.txt: CRU_ESCR0 = 0x04000204 (instr_retired, NBOGUSNTAG,
  // T0_USR), IQ_CCCR0 = 0x00039000 (enable, select 4, active thread 11).
  InitPfm();
  Encoding enc;
  std::string error;
  ASSERT_TRUE(Encode("netburst::instr_retired:NBOGUSNTAG:u", &enc, &error)) << error;
  EXPECT_EQ(enc.escr & ~uint64_t{escr::kT1Usr}, 0x04000204u);
  EXPECT_EQ(enc.cccr, 0x00039000u);
  RecordingInterruptSink sink;
  NetburstPmu pmu(Config{}, sink);
  ASSERT_EQ(pmu.wrmsr(0x3B8, 0x04000204), MsrResult::kOk);
  ASSERT_EQ(pmu.wrmsr(0x36C, 0x00039000), MsrResult::kOk);
  for (const auto& i : Stream()) pmu.retire(i);
  uint64_t v = 0;
  ASSERT_EQ(pmu.rdmsr(0x30C, v), MsrResult::kOk);
  EXPECT_EQ(v, Expected("instr_retired", "NBOGUSNTAG", ParseModifiers(":u"), Stream()));
}

}  // namespace
}  // namespace pmu::netburst::testing
