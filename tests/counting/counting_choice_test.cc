// How a run counts (vmm/counting/counting_choice.h, DESIGN §4.7, §4.11): usage errors name what
// is missing, `auto` says why it chose, the host PMU is probed only when the host backend may be
// taken, and the choice is resolved: no `auto` left in it.
#include "vmm/counting/counting_choice.h"

#include <gtest/gtest.h>

#include "guest/abi/pmuvm_abi.h"

namespace vmm {
namespace {

const HostCapabilities kNoPmu{.instructions_missing =
                                  "perf_event_open(type 0, config 1): No "
                                  "such file or directory",
                              .branches_missing =
                                  "perf_event_open(type 0, config 4): No such "
                                  "file or directory",
                              .conditional_branches_missing =
                                  "perf_event_open(type 4, config "
                                  "453): No such file or directory",
                              .perf_event_paranoid = 2};
const HostCapabilities kPmu{};
const HostCapabilities kPmuWithoutBranches{.instructions_missing = std::nullopt,
                                           .branches_missing = "not supported",
                                           .conditional_branches_missing = std::nullopt,
                                           .perf_event_paranoid = 2};
const HostCapabilities kPmuWithoutConditionalBranches{
    .instructions_missing = std::nullopt,
    .branches_missing = std::nullopt,
    .conditional_branches_missing =
        "no conditional-branch event is known for GenuineIntel family "
        "0x6 model 0x1",
    .perf_event_paranoid = std::nullopt};

std::function<HostCapabilities()> probe(const HostCapabilities& host) {
  return [host] { return host; };
}

CountingChoice Chosen(const CountingRequest& request, const HostCapabilities& host) {
  auto r = choose_counting(request, probe(host));
  if (auto* error = r.error_message()) {
    ADD_FAILURE() << *error;
    return {};
  }
  return r.value();
}

std::string Refusal(const CountingRequest& request, const HostCapabilities& host) {
  auto r = choose_counting(request, probe(host));
  if (auto* error = r.error_message()) return *error;
  ADD_FAILURE() << "accepted: " << r.value().why;
  return "";
}

TEST(CountingChoice, PreciseIsPrecise) {
  EXPECT_FALSE(Chosen({.backend = BackendKind::kPrecise}, kPmu).host.has_value());
}

TEST(CountingChoice, HostWithoutAPmuIsAUsageErrorNamingWhatIsMissing) {
  const std::string e = Refusal({.backend = BackendKind::kHost}, kNoPmu);
  EXPECT_NE(e.find("--backend host: the host PMU cannot count guest instructions"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("No such file or directory"), std::string::npos) << e;
  EXPECT_NE(e.find("perf_event_paranoid is 2"), std::string::npos) << e;
  EXPECT_NE(e.find("--host-counters double"), std::string::npos) << "names the way out: " << e;
}

TEST(CountingChoice, AutoTakesTheHostPmuOnlyWhereItCounts) {
  const CountingChoice without = Chosen({}, kNoPmu);
  EXPECT_FALSE(without.host.has_value());
  EXPECT_NE(without.why.find("auto: the host PMU cannot count guest instructions"),
            std::string::npos)
      << without.why;
  const CountingChoice with = Chosen({}, kPmu);
  ASSERT_TRUE(with.host.has_value());
  EXPECT_FALSE(with.host->counter_double);
  EXPECT_TRUE(with.host->free_run.count_branches);
  EXPECT_TRUE(with.host->free_run.count_conditional_branches);
  EXPECT_NE(with.why.find("counts guest instructions, branches, conditional branches"),
            std::string::npos)
      << with.why;
  const CountingChoice partly = Chosen({}, kPmuWithoutBranches);
  ASSERT_TRUE(partly.host.has_value());
  EXPECT_FALSE(partly.host->free_run.count_branches);
  EXPECT_NE(partly.why.find("not branches (not supported): branches events are stepped"),
            std::string::npos)
      << partly.why;
  const CountingChoice no_conditional = Chosen({}, kPmuWithoutConditionalBranches);
  ASSERT_TRUE(no_conditional.host.has_value());
  EXPECT_TRUE(no_conditional.host->free_run.count_branches);
  EXPECT_FALSE(no_conditional.host->free_run.count_conditional_branches);
  EXPECT_NE(no_conditional.why.find("not conditional branches (no conditional-branch event is "
                                    "known for GenuineIntel family 0x6 model 0x1): conditional "
                                    "branches events are stepped"),
            std::string::npos)
      << no_conditional.why;
}

TEST(CountingChoice, TheDoubleNeedsNoPmu) {
  const CountingChoice c = Chosen({.backend = BackendKind::kHost,
                                   .host_counters = HostCountersKind::kDouble,
                                   .host_counters_given = true},
                                  kNoPmu);
  ASSERT_TRUE(c.host.has_value());
  EXPECT_TRUE(c.host->counter_double);
  EXPECT_TRUE(c.host->free_run.count_branches);
  EXPECT_TRUE(c.host->free_run.count_conditional_branches);
}

TEST(CountingChoice, OptionsThatDoNotGoTogether) {
  EXPECT_EQ(Refusal({.backend = BackendKind::kPrecise, .skid_margin_given = true}, kPmu),
            "--host-counters, --double-skid and --skid-margin are options of the host backend "
            "(--backend host), not of --backend precise");
  EXPECT_EQ(Refusal({.backend = BackendKind::kHost, .double_skid_given = true}, kPmu),
            "--double-skid goes with --host-counters double");
  EXPECT_EQ(Refusal({.backend = BackendKind::kAuto,
                     .host_counters = HostCountersKind::kDouble,
                     .host_counters_given = true},
                    kPmu),
            "--host-counters double goes with --backend host");
  EXPECT_NE(Refusal({.backend = BackendKind::kHost, .stepper = StepperKind::kGuest}, kPmu)
                .find("--stepper guest"),
            std::string::npos);
  EXPECT_FALSE(Chosen({.stepper = StepperKind::kGuest}, kPmu).host.has_value())
      << "auto with the guest stepper";
  // The emulator is a stepper of the precise backend too: it runs what the KVM stepper would.
  EXPECT_NE(Refusal({.backend = BackendKind::kHost, .stepper = StepperKind::kEmulate}, kPmu)
                .find("--stepper emulate"),
            std::string::npos);
  const CountingChoice emulated = Chosen({.stepper = StepperKind::kEmulate}, kPmu);
  EXPECT_FALSE(emulated.host.has_value()) << "auto with the emulating stepper";
  EXPECT_EQ(emulated.stepper, StepperKind::kEmulate);
}

TEST(CountingChoice, AutoIsResolvedAndTheHostIsProbedOnlyWhenItMayBeTaken) {
  int probes = 0;
  auto counting_probe = [&] {
    ++probes;
    return kPmu;
  };
  auto chosen = choose_counting({.backend = BackendKind::kPrecise}, counting_probe);
  ASSERT_EQ(chosen.error_message(), nullptr);
  EXPECT_EQ(chosen.value().stepper, StepperKind::kKvm) << "auto is kvm";
  EXPECT_EQ(probes, 0);
  ASSERT_EQ(choose_counting({.stepper = StepperKind::kGuest}, counting_probe).error_message(),
            nullptr);
  EXPECT_EQ(probes, 0) << "the guest stepper counts with the precise backend";
  chosen = choose_counting({.stepper = StepperKind::kKvmSingle}, counting_probe);
  ASSERT_EQ(chosen.error_message(), nullptr);
  EXPECT_EQ(chosen.value().stepper, StepperKind::kKvmSingle);
  EXPECT_EQ(probes, 1);
}

TEST(CountingChoice, ALinuxGuestCannotHelpAStepper) {
  EXPECT_EQ(Refusal({.stepper = StepperKind::kGuest, .linux_guest = true}, kNoPmu),
            "--stepper guest needs the bundled kernel's help; a Linux guest is counted with "
            "--stepper kvm (the default)");
  EXPECT_EQ(Chosen({.linux_guest = true}, kNoPmu).stepper, StepperKind::kKvm);
}

// The precise backend with `stepper`.
CountingChoice Precise(StepperKind stepper) {
  return CountingChoice{.stepper = stepper, .host = std::nullopt, .why = ""};
}

TEST(CountingChoice, EveryStepperOffersTheBundledKernelWhatItNeeds) {
  EXPECT_EQ(Precise(StepperKind::kGuest).pv_features(),
            PMUVM_PV_CONSOLE | PMUVM_PV_USER_ENTRY | PMUVM_PV_GUEST_STEPPER);
  EXPECT_EQ(Precise(StepperKind::kKvm).pv_features(), PMUVM_PV_CONSOLE);
  EXPECT_EQ(Precise(StepperKind::kKvmSingle).pv_features(), PMUVM_PV_CONSOLE);
  EXPECT_EQ(Precise(StepperKind::kEmulate).pv_features(), PMUVM_PV_CONSOLE);
  EXPECT_TRUE(Precise(StepperKind::kEmulate).kvm_stepping());
  EXPECT_EQ(CountingChoice::resumed(StepperKind::kNone).pv_features(),
            PMUVM_PV_CONSOLE | PMUVM_PV_USER_ENTRY);
  EXPECT_TRUE(Precise(StepperKind::kKvmSingle).kvm_stepping());
  EXPECT_FALSE(Precise(StepperKind::kGuest).kvm_stepping());
}

TEST(CountingChoice, EveryNameParsesBackToItsKind) {
  for (const auto& n : kStepperNames) EXPECT_EQ(parse_stepper(n.name), n.kind) << n.name;
  for (const auto& n : kBackendNames) EXPECT_EQ(parse_kind(kBackendNames, n.name), n.kind);
  for (const auto& n : kHostCountersNames)
    EXPECT_EQ(parse_kind(kHostCountersNames, n.name), n.kind);
  EXPECT_EQ(parse_stepper("magic"), std::nullopt);
}

}  // namespace
}  // namespace vmm
