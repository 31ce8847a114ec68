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

namespace vmm {

// 2: the KVM stepper's state is the step controller's (vmm/precise/step_controller.h), not the
// single-step stepper's flags: a version-1 snapshot is refused with a clear reason.
// 3: the LWP report counts the records it keeps no address for (LwpReport::kMaxAddresses).
// 4: the step controller keeps a planned block (block stepping) and counts blocks.
// 5: the manifest's files carry an XXH64 ("xxh64", file_checksum.h) instead of a CRC-32.
inline constexpr uint32_t kSnapshotFormatVersion = 5;

// zlib's CRC-32 of `bytes`, continuing from `crc` (0 to start).
uint32_t crc32_of(std::span<const std::byte> bytes, uint32_t crc = 0);

class StateSections {
 public:
  void add(const std::string& name, std::vector<std::byte> bytes);
  // The section's bytes, or nullptr when the snapshot has none of that name.
  const std::vector<std::byte>* find(const std::string& name) const;
  const std::map<std::string, std::vector<std::byte>>& all() const { return sections_; }

  std::vector<std::byte> serialize() const;
  // The container, or a one-line reason it is not a valid one.
  static std::variant<StateSections, std::string> parse(std::span<const std::byte> bytes);

 private:
  std::map<std::string, std::vector<std::byte>> sections_;
};

}  // namespace vmm
