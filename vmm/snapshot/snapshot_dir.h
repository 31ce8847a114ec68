// A snapshot on disk (DESIGN §4.10): a directory with
//   manifest.json  the machine, the CPU profile and CPUID, the files' sizes and CRC-32s
//   memory.bin     guest RAM, low region then high region, raw
//   state.bin      everything else (state_sections.h)
// manifest.json is written last, so a directory without one is an unfinished snapshot.
#pragma once

#include <optional>
#include <string>
#include <variant>

#include "vmm/snapshot/migratable_vm.h"
#include "vmm/result.h"

namespace vmm {

// "file:///DIR" -> "/DIR"; nullopt for anything else.
std::optional<std::string> file_url_path(const std::string& url);

// Writes a snapshot of `vm` (which the caller has paused) into `dir` (created; an existing
// non-empty directory is refused). Returns the reason on failure (a partial directory is removed).
Status write_snapshot_dir(const std::string& dir, MigratableVm& vm);

struct SnapshotOnDisk {
  SnapshotManifest manifest;
  StateSections state;
  std::string memory_path;
};

// Reads and checks the manifest and state.bin (CRCs, format, versions) without touching RAM.
Result<SnapshotOnDisk> read_snapshot_dir(const std::string& dir);
// Reads memory.bin into `ram`, checking its size and CRC-32 against the manifest.
Status load_snapshot_memory(const SnapshotOnDisk& snapshot, GuestRam& ram);

}  // namespace vmm
