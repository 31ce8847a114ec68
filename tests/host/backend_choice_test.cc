// Which counting backend a run gets (vmm/host/backend_choice.h, DESIGN §4.11): usage errors
// name what is missing, `auto` says why it chose.
#include "vmm/host/backend_choice.h"

#include <gtest/gtest.h>

namespace vmm {
namespace {

const HostCapabilities kNoPmu{.instructions_missing =
                                  "perf_event_open(type 0, config 1): No "
                                  "such file or directory",
                              .branches_missing =
                                  "perf_event_open(type 0, config 4): No such "
                                  "file or directory",
                              .perf_event_paranoid = 2};
const HostCapabilities kPmu{};
const HostCapabilities kPmuWithoutBranches{.instructions_missing = std::nullopt,
                                           .branches_missing = "not supported",
                                           .perf_event_paranoid = 2};

BackendChoice Chosen(const BackendRequest& request, const HostCapabilities& host) {
  auto r = choose_backend(request, host);
  if (auto* error = r.error_message()) {
    ADD_FAILURE() << *error;
    return {};
  }
  return r.value();
}

std::string Refusal(const BackendRequest& request, const HostCapabilities& host) {
  auto r = choose_backend(request, host);
  if (auto* error = r.error_message()) return *error;
  ADD_FAILURE() << "accepted: " << r.value().why;
  return "";
}

TEST(BackendChoice, PreciseIsPrecise) { EXPECT_FALSE(Chosen({.backend = "precise"}, kPmu).host); }

TEST(BackendChoice, HostWithoutAPmuIsAUsageErrorNamingWhatIsMissing) {
  const std::string e = Refusal({.backend = "host"}, kNoPmu);
  EXPECT_NE(e.find("--backend host: the host PMU cannot count guest instructions"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("No such file or directory"), std::string::npos) << e;
  EXPECT_NE(e.find("perf_event_paranoid is 2"), std::string::npos) << e;
  EXPECT_NE(e.find("--host-counters double"), std::string::npos) << "names the way out: " << e;
}

TEST(BackendChoice, AutoTakesTheHostPmuOnlyWhereItCounts) {
  const BackendChoice without = Chosen({}, kNoPmu);
  EXPECT_FALSE(without.host);
  EXPECT_NE(without.why.find("auto: the host PMU cannot count guest instructions"),
            std::string::npos)
      << without.why;
  const BackendChoice with = Chosen({}, kPmu);
  EXPECT_TRUE(with.host);
  EXPECT_FALSE(with.counter_double);
  EXPECT_TRUE(with.count_branches);
  const BackendChoice partly = Chosen({}, kPmuWithoutBranches);
  EXPECT_TRUE(partly.host);
  EXPECT_FALSE(partly.count_branches);
  EXPECT_NE(partly.why.find("branch events are stepped"), std::string::npos) << partly.why;
}

TEST(BackendChoice, TheDoubleNeedsNoPmu) {
  const BackendChoice c =
      Chosen({.backend = "host", .host_counters = "double", .host_counters_given = true}, kNoPmu);
  EXPECT_TRUE(c.host);
  EXPECT_TRUE(c.counter_double);
  EXPECT_TRUE(c.count_branches);
}

TEST(BackendChoice, OptionsThatDoNotGoTogether) {
  EXPECT_EQ(Refusal({.backend = "precise", .skid_margin_given = true}, kPmu),
            "--host-counters, --double-skid and --skid-margin are options of the host backend "
            "(--backend host), not of --backend precise");
  EXPECT_EQ(Refusal({.backend = "host", .double_skid_given = true}, kPmu),
            "--double-skid goes with --host-counters double");
  EXPECT_EQ(
      Refusal({.backend = "auto", .host_counters = "double", .host_counters_given = true}, kPmu),
      "--host-counters double goes with --backend host");
  EXPECT_NE(Refusal({.backend = "host", .stepper = "guest"}, kPmu).find("--stepper guest"),
            std::string::npos);
  EXPECT_FALSE(Chosen({.stepper = "guest"}, kPmu).host) << "auto with the guest stepper";
}

}  // namespace
}  // namespace vmm
