// The self-describing half of a snapshot (and the first message of a migration): what machine
// this is, which CPU it presents, and which files hold the rest. JSON, so a person (or another
// tool) can read what a snapshot is without pmuvm. manifest.json in a snapshot directory.
//
//   {"format": "pmuvm-snapshot", "version": 2,
//    "machine": {"vcpus", "mem_mib", "seed", "timer_hz", "stepper": "kvm"|"guest"|"none",
//                "guest": "bundled"|"linux", "kernel", "max_interrupt_rate"},
//    "cpu": {"profile": <the profile's JSON, vmm/profiles/README.md>,
//            "cpuid": [[function, index, flags, eax, ebx, ecx, edx], ...]},   // what the guest saw
//    "files": {"memory.bin": {"bytes", "xxh64"}, "state.bin": {"bytes", "xxh64"}}}
//   (xxh64: 16 hex digits, file_checksum.h)
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "vmm/cpu/cpu_profile.h"
#include "vmm/cpu/cpuid_table.h"
#include "vmm/machine_shape.h"
#include "vmm/result.h"

namespace vmm {

struct SnapshotManifest : MachineShape {
  std::string stepper;  // "kvm", "guest" or "none"
  bool linux_guest = false;
  std::string kernel;
  CpuProfile profile;             // the source's profile: the PMU models' parameters
  std::vector<CpuidEntry> cpuid;  // the CPUID table the guest saw (before per-vCPU APIC IDs)
  struct File {
    uint64_t bytes = 0;
    uint64_t checksum = 0;  // XXH64 (file_checksum.h)
  };
  std::map<std::string, File> files;  // empty in a migration's hello
};

// Longest manifest.json (or migration hello) read: a real one is a few kilobytes.
inline constexpr uint64_t kMaxManifestBytes = 1 << 20;

std::string to_json_text(const SnapshotManifest& manifest);
// The manifest, or a one-line reason (not JSON, another format or version, a field missing or
// of the wrong type, named by its path and line:column, a profile that does not parse).
Result<SnapshotManifest> parse_manifest(const std::string& text);

}  // namespace vmm
