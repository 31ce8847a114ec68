#include "vmm/snapshot/state_sections.h"

#include <zlib.h>

#include <cstring>

#include "vmm/snapshot/little_endian.h"
#include "vmm/printable.h"
#include "vmm/result.h"

namespace vmm {
namespace {

constexpr char kMagic[8] = {'P', 'M', 'U', 'V', 'M', 'S', 'T', '\0'};

}  // namespace

// Over the name too: a corrupted name must not turn a section into another one.
static uint32_t section_crc(const std::string& name, std::span<const std::byte> bytes) {
  return crc32_of(bytes, crc32_of({reinterpret_cast<const std::byte*>(name.data()), name.size()}));
}

uint32_t crc32_of(std::span<const std::byte> bytes, uint32_t crc) {
  // zlib takes a uInt length: feed large blobs (guest RAM) in pieces.
  const auto* p = reinterpret_cast<const Bytef*>(bytes.data());
  size_t left = bytes.size();
  uLong c = crc;
  while (left > 0) {
    const uInt n = left > (1u << 30) ? (1u << 30) : static_cast<uInt>(left);
    c = crc32(c, p, n);
    p += n;
    left -= n;
  }
  return static_cast<uint32_t>(c);
}

void StateSections::add(const std::string& name, std::vector<std::byte> bytes) {
  sections_[name] = std::move(bytes);
}

void StateSections::add_component(const std::string& name, uint16_t version,
                                  std::vector<std::byte> archive) {
  std::vector<std::byte> bytes;
  bytes.reserve(2 + archive.size());
  append_le(bytes, version, 2);
  bytes.insert(bytes.end(), archive.begin(), archive.end());
  sections_[name] = std::move(bytes);
}

Result<std::span<const std::byte>> StateSections::component(const std::string& name,
                                                            uint16_t version) const {
  const std::vector<std::byte>* bytes = find(name);
  if (!bytes) return Error::usage("the snapshot has no " + name + " state");
  if (bytes->size() < 2) return Error::usage("the snapshot's " + name + " state has no version");
  const uint64_t saved = read_le(bytes->data(), 2);
  if (saved != version)
    return Error::usage("the snapshot's " + name + " state is version " + std::to_string(saved) +
                        " (this pmuvm reads version " + std::to_string(version) + ")");
  return std::span<const std::byte>(*bytes).subspan(2);
}

const std::vector<std::byte>* StateSections::find(const std::string& name) const {
  auto it = sections_.find(name);
  return it == sections_.end() ? nullptr : &it->second;
}

std::vector<std::byte> StateSections::serialize() const {
  std::vector<std::byte> out;
  for (char c : kMagic) out.push_back(static_cast<std::byte>(c));
  append_le(out, kSnapshotFormatVersion, 4);
  append_le(out, sections_.size(), 4);
  for (const auto& [name, bytes] : sections_) {
    append_le(out, name.size(), 2);
    for (char c : name) out.push_back(static_cast<std::byte>(c));
    append_le(out, bytes.size(), 8);
    append_le(out, section_crc(name, bytes), 4);
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  return out;
}

Result<StateSections> StateSections::parse(std::span<const std::byte> in) {
  size_t pos = 0;
  auto get = [&](int n, uint64_t& v) {
    if (static_cast<size_t>(n) > in.size() - pos) return false;
    v = read_le(in.data() + pos, n);
    pos += n;
    return true;
  };
  if (in.size() < sizeof kMagic || std::memcmp(in.data(), kMagic, sizeof kMagic) != 0)
    return Error::usage(std::string("not a pmuvm state container (bad magic)"));
  pos = sizeof kMagic;
  uint64_t version = 0, count = 0;
  if (!get(4, version) || !get(4, count))
    return Error::usage(std::string("state container is truncated"));
  if (version != kSnapshotFormatVersion)
    return Error::usage("state container format version " + std::to_string(version) +
                        " (this pmuvm reads " + std::to_string(kSnapshotFormatVersion) + ")");
  StateSections out;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t name_size = 0, size = 0, crc = 0;
    if (!get(2, name_size) || name_size > in.size() - pos)
      return Error::usage("state container is truncated in section " + std::to_string(i));
    std::string name(reinterpret_cast<const char*>(in.data() + pos), name_size);
    pos += name_size;
    if (!get(8, size) || !get(4, crc) || size > in.size() - pos)
      return Error::usage("state container is truncated in section " + in_quotes(name));
    std::span<const std::byte> bytes = in.subspan(pos, size);
    pos += size;
    if (section_crc(name, bytes) != crc)
      return Error::usage("section " + in_quotes(name) + " fails its CRC-32 check (corrupted)");
    if (out.sections_.count(name))
      return Error::usage("section " + in_quotes(name) + " appears twice");
    out.sections_[name] = std::vector<std::byte>(bytes.begin(), bytes.end());
  }
  if (pos != in.size())
    return Error::usage(std::string("state container has bytes after its last section"));
  return out;
}

}  // namespace vmm
