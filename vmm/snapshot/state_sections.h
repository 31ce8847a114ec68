// The binary half of a snapshot: named blobs (vCPU state, devices, PMU models, stepper, report),
// each with its own CRC-32, in one self-describing container. A snapshot directory's state.bin
// and a migration's final state message are this container.
//
// Format (little-endian): "PMUVMST\0" | u32 format version | u32 section count
//   | count x (u16 name length | name | u64 size | u32 crc32 of name and bytes | size bytes)
// parse() checks everything before anything is used: magic, version, every length against the
// bytes left, every CRC, no duplicate names, nothing after the last section.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "vmm/result.h"

namespace vmm {

// 2: the KVM stepper's state is the step controller's (vmm/precise/step_controller.h), not the
// single-step stepper's flags: a version-1 snapshot is refused with a clear reason.
// 3: the LWP report counts the records it keeps no address for (LwpReport::kMaxPlacedAddresses).
// 4: the step controller keeps a planned block (block stepping) and counts blocks.
// 5: the manifest's files carry an XXH64 ("xxh64", file_checksum.h) instead of a CRC-32.
// 6: one section per component, each with its own version (add_component): vcpuN.counts,
//    .interrupt_limit, .kvm_stepper / .guest_stepper instead of vcpuN.vmm; devices.serial,
//    .cmos, .console instead of devices; report.lwp, report.linux_tasks instead of report.
inline constexpr uint32_t kSnapshotFormatVersion = 6;

// Versions of the sections whose value is a plain type (every other component section carries
// its class's kStateVersion): bump with any change to what is saved.
inline constexpr uint16_t kConsoleLineStateVersion = 1;  // devices.console: std::string
inline constexpr uint16_t kLinuxTasksStateVersion = 1;   // report.linux_tasks: CR3 -> task number

// zlib's CRC-32 of `bytes`, continuing from `crc` (0 to start).
uint32_t crc32_of(std::span<const std::byte> bytes, uint32_t crc = 0);

class StateSections {
 public:
  void add(const std::string& name, std::vector<std::byte> bytes);
  // A component's section: the version of that component's archive (u16), then the archive. A
  // component that changes what it saves bumps its version (kStateVersion beside its archive()),
  // and a pmuvm that reads another version refuses the section by name instead of misreading it;
  // tests/snapshot/golden_state_test.cc catches a change made without a bump.
  void add_component(const std::string& name, uint16_t version, std::vector<std::byte> archive);
  // The archive in component section `name`, or a one-line reason: the section is missing, or
  // holds another version than `version`.
  Result<std::span<const std::byte>> component(const std::string& name, uint16_t version) const;
  // The section's bytes, or nullptr when the snapshot has none of that name.
  const std::vector<std::byte>* find(const std::string& name) const;
  const std::map<std::string, std::vector<std::byte>>& all() const { return sections_; }

  std::vector<std::byte> serialize() const;
  // The container, or a one-line reason it is not a valid one.
  static Result<StateSections> parse(std::span<const std::byte> bytes);

 private:
  std::map<std::string, std::vector<std::byte>> sections_;
};

}  // namespace vmm
