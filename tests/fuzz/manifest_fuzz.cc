// libFuzzer target for a snapshot's manifest.json and a migration's hello (DESIGN §4.12: both come
// from outside the process): the bytes go to parse_manifest, which must refuse them with a reason
// or return a manifest; an accepted manifest is written back out and must read again to the same
// text (what `restore` and the migration destination rely on). Its embedded profile is parsed as
// an embedded one: it never opens a file of this machine.
// Seeds (corpus_manifest/): manifests written by to_json_text for the shipped profiles, with and
// without files, and a few damaged ones.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>

#include "vmm/snapshot/snapshot_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto parsed = vmm::parse_manifest(text);
  const auto* manifest = parsed.ok() ? &parsed.value() : nullptr;
  if (!manifest) return 0;
  const std::string written = vmm::to_json_text(*manifest);
  auto again = vmm::parse_manifest(written);
  const auto* second = again.ok() ? &again.value() : nullptr;
  if (!second || vmm::to_json_text(*second) != written) std::abort();  // not a fixed point
  return 0;
}
