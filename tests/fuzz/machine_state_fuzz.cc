// libFuzzer target for a whole machine state (a snapshot's state.bin, a migration's state
// message; DESIGN §4.12: anyone can recompute the CRCs), loaded as a restore loads it
// (vmm/machine/machine_sections.h: every section, with each component's element budget, checked
// against the guest kind and the CPU profile) into the objects a machine is built from: the
// devices, the console, the LWP report and Linux task map, and per vCPU its KVM state, PMU models
// (VcpuPmu), counts, rate limiter and counting backend. Only handing the KVM state to KVM is left
// out (it needs /dev/kvm; KVM checks what it is given itself).
// Input: byte 0 is the machine the state is restored into, bits 0-1 the profile (amd-lwp,
// intel-netburst, amd-lwp-lite, amd-lwp-baseline), bits 2-3 the stepper (kvm, kvm-single, guest,
// none), bit 4 a Linux guest (a PIT), bit 5 two vCPUs; the rest is the container, whose section
// CRCs the target recomputes (with_valid_crcs).
// Checked: no crash, no sanitizer report, no allocation past libFuzzer's limits (run_fuzzer.sh);
// a state that loads is saved (within the budgets: pmuvm never writes what it would refuse to
// read) to the bytes it came from (the LWP unit's: same_sections), loads again into a fresh machine
// and saves the same again; and the loaded machine then works: the step controller runs
// (stepper_fuzz_guest.h), the PMU models retire instructions and answer their MSRs, the report
// renders and takes records. Seeds (corpus_machine_state/, make_seeds.py): the golden snapshots'
// states (tests/snapshot/golden) with their machines, and small states of the VMM's own sections.
#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pmu/interrupt_sink.h"
#include "pmu/lwp/event_record.h"
#include "pmu/rate_limited_interrupt_sink.h"
#include "tests/fuzz/stepper_fuzz_guest.h"
#include "vmm/counting/kvm_stepping_backend.h"
#include "vmm/counting/make_counting_backend.h"
#include "vmm/cpu/cpu_profile.h"
#include "vmm/cpu/guest_cpu.h"
#include "vmm/devices/guest_console.h"
#include "vmm/devices/port_devices.h"
#include "vmm/machine/machine_sections.h"
#include "vmm/memory/guest_ram.h"
#include "vmm/progress_pauses.h"
#include "vmm/report/lwp_report.h"
#include "vmm/snapshot/state_sections.h"
#include "vmm/vmm_error.h"

namespace {

using stepper_fuzz::P;
using stepper_fuzz::PS;
using stepper_fuzz::U;
using stepper_fuzz::W;

// The machine byte 0 describes.
struct Shape {
  const vmm::CpuProfile* profile;
  vmm::StepperKind stepper;
  bool linux_guest;
  uint32_t vcpus;
};

const vmm::CpuProfile& profile(int i) {
  static const std::vector<vmm::CpuProfile> profiles = [] {
    std::vector<vmm::CpuProfile> out;
    for (const char* name : {"amd-lwp", "intel-netburst", "amd-lwp-lite", "amd-lwp-baseline"})
      out.push_back(*vmm::builtin_profile(name));
    return out;
  }();
  return profiles[i];
}

Shape shape(uint8_t b) {
  static constexpr vmm::StepperKind kSteppers[4] = {
      vmm::StepperKind::kKvm, vmm::StepperKind::kKvmSingle, vmm::StepperKind::kGuest,
      vmm::StepperKind::kNone};
  return Shape{&profile(b & 3), kSteppers[(b >> 2) & 3], ((b >> 4) & 1) != 0, 1u + ((b >> 5) & 1)};
}

class Sinks : public pmu::InterruptSink, public pmu::Clock {
 public:
  void deliver_vector(uint8_t) override {}
  void deliver_nmi() override {}
  void raise_performance_interrupt() override {}
  uint64_t now_ns() override { return now_ += 1000; }

 private:
  uint64_t now_ = 0;
};

// The PMU models' own guest RAM, fresh for each input (their record stores write it): 2 MiB,
// identity-mapped by one user-writable 2 MiB page under CR3 0x1000.
constexpr uint64_t kModelCr3 = 0x1000;
std::unique_ptr<vmm::GuestRam> model_ram() {
  auto ram = std::make_unique<vmm::GuestRam>(2 << 20);
  ram->write_u64(kModelCr3, 0x2000 | P | W | U);
  ram->write_u64(0x2000, 0x3000 | P | W | U);
  ram->write_u64(0x3000, 0 | P | W | U | PS);
  return ram;
}

// One vCPU as a machine builds it (vcpu_runner.cc), without KVM: its counting backend is the one
// a resumed machine builds (make_counting_backend), over the stepper fuzz targets' guest RAM.
class Vcpu : public vmm::CountedVcpu {
 public:
  Vcpu(uint32_t index, const Shape& s, const vmm::GuestCpu& cpu, vmm::GuestRam& ram, Sinks& sinks)
      : index_(index),
        cpu_(cpu),
        sinks_(sinks),
        limit(sinks, sinks, 10000),
        pmu_(index, index, cpu.lwp, 1, ram, limit, cpu.netburst, &page_faults_),
        backend(vmm::make_counting_backend(vmm::CountingChoice::resumed(s.stepper), *this,
                                           stepper_fuzz::ram(), cpu.cache, s.vcpus, SIGUSR1)) {}
  vmm::VcpuParts parts() {
    return vmm::VcpuParts{index_, arch, pmu_, counts, limit, *backend, cpu_};
  }

  uint32_t index() const override { return index_; }
  // Loading and saving state never reach KVM: if they did, that is a finding.
  vmm::KvmVcpu& kvm() override { std::abort(); }
  vmm::VcpuPmu& pmu() override { return pmu_; }
  vmm::LwpPageFaults& page_faults() override { return page_faults_; }
  pmu::Clock& clock() override { return sinks_; }
  void add_counted(uint64_t n) override { counted_ += n; }
  uint64_t counted() const override { return counted_; }
  std::optional<uint64_t> instructions_to_pause() override { return std::nullopt; }

  // In the order they are built.
  uint32_t index_;
  const vmm::GuestCpu& cpu_;
  Sinks& sinks_;
  vmm::LwpPageFaults page_faults_;
  uint64_t counted_ = 0;
  pmu::RateLimitedInterruptSink limit;
  vmm::VcpuPmu pmu_;
  vmm::VcpuArchState arch;
  vmm::VcpuCounts counts;
  std::unique_ptr<vmm::CountingBackend> backend;
};

// The objects of one machine, and its state loaded into them.
class Machine {
 public:
  explicit Machine(const Shape& s)
      : shape_(s),
        cpu_(*s.profile, vmm::CountingChoice::resumed(s.stepper).pv_features()),
        ram_(model_ram()),
        console_(progress_, nullptr, null_output()),
        serial_(console_) {
    for (uint32_t i = 0; i < s.vcpus; ++i)
      vcpus_.push_back(std::make_unique<Vcpu>(i, s, cpu_, *ram_, sinks_));
  }

  // True when every section loaded (restore goes on), false when one was refused.
  bool load(const vmm::StateSections& s) {
    try {
      vmm::load_machine_sections(s, parts());
      for (auto& v : vcpus_) vmm::load_vcpu_sections(s, v->parts());
    } catch (const vmm::UsageError&) {
      return false;
    }
    return true;
  }
  // Throws (and so fails) when it would write what it refuses to read.
  vmm::StateSections save() {
    vmm::StateSections s;
    vmm::save_machine_sections(s, parts());
    for (auto& v : vcpus_) vmm::save_vcpu_sections(s, v->parts());
    return s;
  }

  // What a restored machine goes on doing with its state.
  void run() {
    (void)report_.render(3, 8);
    for (uint64_t i = 0; i < 4; ++i)
      report_.add_record(static_cast<uint32_t>(i), pmu::lwp::encode_instructions_retired(0, i),
                         false);
    if (report_.placed_addresses() > vmm::LwpReport::kMaxPlacedAddresses) std::abort();
    for (auto& v : vcpus_) {
      if (auto* stepping = dynamic_cast<vmm::KvmSteppingBackend*>(v->backend.get()))
        stepper_fuzz::exercise(stepping->controller());
      vmm::VcpuPmu& pmu = v->pmu();
      pmu.enter_user(kModelCr3);
      for (uint64_t i = 0; i < 64; ++i) {
        pmu::RetiredInstruction insn;
        insn.rip = 0x1000 + 4 * i;
        if (i % 5 == 0) insn.branch.kind = pmu::BranchKind::kConditional;
        pmu.retire(insn, kModelCr3);
      }
      for (uint32_t msr : {0xC0000105u, 0xC0000106u, 0x300u, 0x360u, 0x3A0u}) {
        (void)pmu.read_msr(msr, 0, kModelCr3);
        (void)pmu.write_msr(msr, 0, 0, kModelCr3);
      }
      v->limit.poll();
    }
  }

 private:
  static std::FILE* null_output() {
    static std::FILE* f = std::fopen("/dev/null", "w");
    return f;
  }
  vmm::MachineParts parts() {
    return vmm::MachineParts{vm_,          serial_,           cmos_, console_, report_,
                             linux_tasks_, shape_.linux_guest};
  }

  Shape shape_;
  vmm::GuestCpu cpu_;
  std::unique_ptr<vmm::GuestRam> ram_;
  Sinks sinks_;
  vmm::ProgressPauses progress_;
  vmm::GuestConsole console_;
  vmm::SerialPort serial_;
  vmm::CmosPort cmos_;
  vmm::LwpReport report_;
  std::map<uint64_t, uint32_t> linux_tasks_;
  vmm::VmArchState vm_;
  std::vector<std::unique_ptr<Vcpu>> vcpus_;
};

// `container` with every section's CRC-32 made right, as a hostile peer makes it (the CRC is a
// check against corruption, not a signature): mutations inside a section reach its loader. The
// container's layout (state_sections.cc): magic[8] u32 version u32 count, then per section
// u16 name length, name, u64 size, u32 CRC of name and bytes, bytes; all little-endian.
std::vector<std::byte> with_valid_crcs(std::span<const std::byte> container) {
  std::vector<std::byte> out(container.begin(), container.end());
  auto le = [&](size_t at, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= std::to_integer<uint64_t>(out[at + i]) << (8 * i);
    return v;
  };
  size_t at = 16;
  while (at + 2 <= out.size()) {
    const size_t name_at = at + 2, name_size = le(at, 2);
    if (name_size > out.size() - name_at || out.size() - name_at - name_size < 12) break;
    const size_t crc_at = name_at + name_size + 8, bytes_at = crc_at + 4;
    const uint64_t size = le(name_at + name_size, 8);
    if (size > out.size() - bytes_at) break;
    const uint32_t crc = vmm::crc32_of(std::span(out).subspan(bytes_at, size),
                                       vmm::crc32_of(std::span(out).subspan(name_at, name_size)));
    for (int i = 0; i < 4; ++i) out[crc_at + i] = static_cast<std::byte>(crc >> (8 * i));
    at = bytes_at + size;
  }
  return out;
}

// Whether `saved` holds every section with the bytes `original` had. The LWP unit's is the one
// that may differ: a restored unit owes the LWPCB a reading (pending "restore", LWP proposal
// §5.5.2.4) until it next enters ring 3, and says so when saved again.
bool same_sections(const vmm::StateSections& original, const vmm::StateSections& saved) {
  for (const auto& [name, bytes] : saved.all()) {
    const std::vector<std::byte>* was = original.find(name);
    if (!was) return false;
    if (*was != bytes && !name.ends_with(".lwp")) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Shape s = shape(data[0]);
  auto parsed = vmm::StateSections::parse(
      with_valid_crcs({reinterpret_cast<const std::byte*>(data + 1), size - 1}));
  if (!parsed.ok()) return 0;
  Machine first(s);
  if (!first.load(parsed.value())) return 0;
  const vmm::StateSections saved = first.save();
  if (!same_sections(parsed.value(), saved)) std::abort();
  Machine second(s);
  if (!second.load(saved)) std::abort();
  if (second.save().all() != saved.all()) std::abort();
  first.run();
  return 0;
}
