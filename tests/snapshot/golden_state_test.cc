// state.bin's format kept honest (issue 20): two snapshots taken with snapshot format 6 in the
// nested KVM host are checked in (gzip; tests/snapshot/golden/take.sh takes them again):
//   lwp_kvm         --cpu amd-lwp, KVM stepper, lwp_forever profiling itself with LWP, paused at
//                   20000 counted instructions
//   netburst_guest  --cpu intel-netburst, guest-assisted stepper, netburst_sampler paused at
//                   3000 counted instructions (its cache model in use)
// Every section is one this pmuvm writes, no more and no fewer; each component's section holds
// the component's current kStateVersion, and its archive loads into the component and saves back
// to the same bytes (the LWP unit's and the NetBurst PMU's own formats likewise). A change to what
// a component saves fails here: bump its kStateVersion (and kSnapshotFormatVersion when sections
// come or go) and take the golden snapshots again.
#include <zlib.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "pmu/lwp/save_area.h"
#include "pmu/netburst/save_state.h"
#include "pmu/rate_limited_interrupt_sink.h"
#include "pmu/state_archive.h"
#include "tests/support/recording_interrupt_sink.h"
#include "vmm/cpu/cache_model_geometry.h"
#include "vmm/devices/cmos_rtc.h"
#include "vmm/devices/serial_16550.h"
#include "vmm/kvm/kvm_state.h"
#include "vmm/memory/guest_ram.h"
#include "vmm/precise/guest_assisted_stepper.h"
#include "vmm/precise/step_controller.h"
#include "vmm/report/lwp_report.h"
#include "vmm/snapshot/snapshot_manifest.h"
#include "vmm/snapshot/state_sections.h"
#include "vmm/machine/vcpu_counts.h"

namespace vmm {
namespace {

const std::string kDir = "tests/snapshot/golden/";

std::vector<std::byte> gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  std::vector<std::byte> out;
  if (!f) return out;
  char buf[1 << 16];
  for (int n; (n = gzread(f, buf, sizeof buf)) > 0;)
    for (int i = 0; i < n; ++i) out.push_back(static_cast<std::byte>(buf[i]));
  gzclose(f);
  return out;
}

struct Golden {
  StateSections sections;
  SnapshotManifest manifest;
};

Golden load(const std::string& name) {
  Golden g;
  auto parsed = StateSections::parse(gunzip(kDir + name + ".state.bin.gz"));
  if (auto* error = parsed.error_message()) {
    ADD_FAILURE() << name << ": " << *error;
    return g;
  }
  g.sections = std::move(parsed).value();
  std::ifstream in(kDir + name + ".manifest.json");
  std::stringstream text;
  text << in.rdbuf();
  auto manifest = parse_manifest(text.str());
  if (auto* error = manifest.error_message())
    ADD_FAILURE() << name << " manifest: " << *error;
  else
    g.manifest = std::move(manifest).value();
  return g;
}

std::set<std::string> names(const StateSections& s) {
  std::set<std::string> out;
  for (const auto& [name, bytes] : s.all()) out.insert(name);
  return out;
}

// Component section `name` at `version`: its archive loads into `value` and saves back to the
// same bytes.
template <typename T>
void expect_round_trip(const StateSections& s, const std::string& name, uint16_t version,
                       T& value) {
  SCOPED_TRACE(name);
  auto archive = s.component(name, version);
  ASSERT_TRUE(archive.ok()) << archive.error().message;
  const std::span<const std::byte> bytes = archive.value();
  pmu::StateReader r(bytes);
  r(value);
  r.expect_end();
  pmu::StateWriter w;
  w(value);
  EXPECT_EQ(w.take(), std::vector<std::byte>(bytes.begin(), bytes.end()));
}

// The same at the version of T's class (kStateVersion beside its archive()).
template <typename T>
void expect_round_trip(const StateSections& s, const std::string& name, T& value) {
  expect_round_trip(s, name, T::kStateVersion, value);
}

struct FixedClock : pmu::Clock {
  uint64_t now_ns() override { return 0; }
};

// The sections every machine writes, whatever its stepper and PMU. A round trip alone would not
// notice two fields of one type trading places, so the counts are also checked against what the
// run had done when it was saved.
void expect_common_sections(const Golden& g, uint64_t counted) {
  const StateSections& s = g.sections;
  VmArchState vm;
  expect_round_trip(s, "vm.kvm", vm);
  VcpuArchState arch;
  expect_round_trip(s, "vcpu0.kvm", arch);
  VcpuCounts counts;
  expect_round_trip(s, "vcpu0.counts", counts);
  EXPECT_EQ(counts.counted, counted);
  EXPECT_EQ(counts.task, 1u);  // the one program
  EXPECT_FALSE(counts.pmi_pending);
  EXPECT_EQ(counts.page_faults_delivered + counts.page_faults_dropped, 0u);
  pmu::testing::RecordingInterruptSink sink;
  FixedClock clock;
  pmu::RateLimitedInterruptSink limited(sink, clock, g.manifest.max_interrupt_rate);
  expect_round_trip(s, "vcpu0.interrupt_limit", limited);
  Serial16550 serial([](char) {});
  expect_round_trip(s, "devices.serial", serial);
  CmosRtc cmos;
  expect_round_trip(s, "devices.cmos", cmos);
  std::string console;
  expect_round_trip(s, "devices.console", kConsoleLineStateVersion, console);
  LwpReport report;
  expect_round_trip(s, "report.lwp", report);
  std::map<uint64_t, uint32_t> linux_tasks;
  expect_round_trip(s, "report.linux_tasks", kLinuxTasksStateVersion, linux_tasks);
  // The LWP unit's own format (pmu/lwp/save_area.h): magic and version inside.
  ASSERT_NE(s.find("vcpu0.lwp"), nullptr);
  auto lwp = pmu::lwp::deserialize(*s.find("vcpu0.lwp"));
  ASSERT_TRUE(lwp.ok()) << lwp.reason();
  EXPECT_EQ(pmu::lwp::serialize(lwp.value()), *s.find("vcpu0.lwp"));
}

TEST(GoldenState, LwpProfilingGuestUnderTheKvmStepper) {
  const Golden g = load("lwp_kvm");
  EXPECT_EQ(names(g.sections),
            (std::set<std::string>{"devices.cmos", "devices.console", "devices.serial",
                                   "report.linux_tasks", "report.lwp", "vcpu0.counts",
                                   "vcpu0.interrupt_limit", "vcpu0.kvm", "vcpu0.kvm_stepper",
                                   "vcpu0.lwp", "vm.kvm"}));
  expect_common_sections(g, 20000);  // --pause-at-instructions 20000
  GuestRam ram(4 << 20);
  StepController stepper(ram, cache_model_geometry(g.manifest.profile.cache));
  expect_round_trip(g.sections, "vcpu0.kvm_stepper", stepper);
}

TEST(GoldenState, NetburstSamplingGuestUnderTheGuestStepper) {
  const Golden g = load("netburst_guest");
  EXPECT_EQ(names(g.sections),
            (std::set<std::string>{"devices.cmos", "devices.console", "devices.serial",
                                   "report.linux_tasks", "report.lwp", "vcpu0.counts",
                                   "vcpu0.guest_stepper", "vcpu0.interrupt_limit", "vcpu0.kvm",
                                   "vcpu0.lwp", "vcpu0.netburst", "vm.kvm"}));
  expect_common_sections(g, 3000);  // --pause-at-instructions 3000
  GuestRam ram(4 << 20);
  GuestAssistedStepper stepper(ram, cache_model_geometry(g.manifest.profile.cache));
  expect_round_trip(g.sections, "vcpu0.guest_stepper", stepper);
  // The NetBurst PMU's own format (pmu/netburst/save_state.h).
  ASSERT_NE(g.sections.find("vcpu0.netburst"), nullptr);
  auto nb = pmu::netburst::deserialize(*g.sections.find("vcpu0.netburst"));
  ASSERT_TRUE(nb.ok()) << nb.reason();
  EXPECT_EQ(pmu::netburst::serialize(nb.value()), *g.sections.find("vcpu0.netburst"));
}

}  // namespace
}  // namespace vmm
