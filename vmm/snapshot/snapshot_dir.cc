#include "vmm/snapshot/snapshot_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace vmm {
namespace {

namespace fs = std::filesystem;

std::string errno_text() { return std::strerror(errno); }

// Writes all of [p, p + n) to fd, retrying short writes.
bool write_all(int fd, const std::byte* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::optional<std::string> write_file(const fs::path& path, const std::byte* p, size_t n,
                                      bool sync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create " + path.string() + ": " + errno_text();
  bool ok = write_all(fd, p, n);
  const std::string why = ok ? "" : errno_text();
  if (ok && sync) ok = ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return "cannot write " + path.string() + ": " + (why.empty() ? errno_text() : why);
  return std::nullopt;
}

}  // namespace

std::optional<std::string> file_url_path(const std::string& url) {
  constexpr std::string_view kScheme = "file://";
  if (url.rfind(kScheme, 0) != 0 || url.size() <= kScheme.size() || url[kScheme.size()] != '/')
    return std::nullopt;
  return url.substr(kScheme.size());
}

std::optional<std::string> write_snapshot_dir(const std::string& dir_name, MigratableVm& vm) {
  const fs::path dir(dir_name);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec))
    return "snapshot directory " + dir_name + " exists and is not empty";
  fs::create_directories(dir, ec);
  if (ec) return "cannot create snapshot directory " + dir_name + ": " + ec.message();
  auto fail = [&](std::string why) {
    fs::remove(dir / "memory.bin", ec);
    fs::remove(dir / "state.bin", ec);
    return std::optional<std::string>(std::move(why));
  };

  SnapshotManifest manifest = vm.manifest();
  uint32_t crc = 0;
  GuestRam& ram = vm.guest_ram();
  {
    const fs::path path = dir / "memory.bin";
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return fail("cannot create " + path.string() + ": " + errno_text());
    bool ok = true;
    for (const GuestRam::Region& r : ram.regions()) {
      crc = crc32_of({r.host, r.size}, crc);
      ok = ok && write_all(fd, r.host, r.size);
    }
    const std::string why = ok ? "" : errno_text();
    ::close(fd);
    if (!ok) return fail("cannot write " + path.string() + ": " + why);
  }
  manifest.files["memory.bin"] = {ram.size(), crc};
  const std::vector<std::byte> state = vm.capture_state().serialize();
  if (auto error = write_file(dir / "state.bin", state.data(), state.size(), false)) return fail(*error);
  manifest.files["state.bin"] = {state.size(), crc32_of(state)};
  const std::string text = to_json_text(manifest);
  if (auto error = write_file(dir / "manifest.json", reinterpret_cast<const std::byte*>(text.data()),
                              text.size(), false))
    return fail(*error);
  return std::nullopt;
}

std::variant<SnapshotOnDisk, std::string> read_snapshot_dir(const std::string& dir_name) {
  const fs::path dir(dir_name);
  std::ifstream manifest_file(dir / "manifest.json", std::ios::binary);
  if (!manifest_file)
    return dir_name + " is not a pmuvm snapshot: cannot read its manifest.json (" + errno_text() +
           ")";
  const std::string text((std::istreambuf_iterator<char>(manifest_file)),
                         std::istreambuf_iterator<char>());
  auto parsed = parse_manifest(text);
  if (auto* error = std::get_if<std::string>(&parsed)) return dir_name + "/manifest.json: " + *error;
  SnapshotOnDisk out;
  out.manifest = std::move(std::get<SnapshotManifest>(parsed));
  for (const char* name : {"memory.bin", "state.bin"})
    if (!out.manifest.files.count(name))
      return dir_name + "/manifest.json does not list " + name;
  const SnapshotManifest::File memory = out.manifest.files.at("memory.bin");
  if (memory.bytes != out.manifest.mem_mib << 20)
    return dir_name + "/manifest.json: memory.bin size does not match the machine's memory";

  std::ifstream state_file(dir / "state.bin", std::ios::binary);
  if (!state_file) return dir_name + "/state.bin: cannot read it (" + errno_text() + ")";
  std::vector<char> chars((std::istreambuf_iterator<char>(state_file)),
                          std::istreambuf_iterator<char>());
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(chars.data()), chars.size());
  const SnapshotManifest::File state = out.manifest.files.at("state.bin");
  if (bytes.size() != state.bytes)
    return dir_name + "/state.bin is " + std::to_string(bytes.size()) + " bytes, the manifest says " +
           std::to_string(state.bytes) + " (truncated or replaced)";
  if (crc32_of(bytes) != state.crc32) return dir_name + "/state.bin fails its CRC-32 check (corrupted)";
  auto sections = StateSections::parse(bytes);
  if (auto* error = std::get_if<std::string>(&sections)) return dir_name + "/state.bin: " + *error;
  out.state = std::move(std::get<StateSections>(sections));

  out.memory_path = (dir / "memory.bin").string();
  struct stat st{};
  if (::stat(out.memory_path.c_str(), &st) != 0)
    return dir_name + "/memory.bin: cannot read it (" + errno_text() + ")";
  if (static_cast<uint64_t>(st.st_size) != memory.bytes)
    return dir_name + "/memory.bin is " + std::to_string(st.st_size) + " bytes, the manifest says " +
           std::to_string(memory.bytes) + " (truncated or replaced)";
  return out;
}

std::optional<std::string> load_snapshot_memory(const SnapshotOnDisk& snapshot, GuestRam& ram) {
  const int fd = ::open(snapshot.memory_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return snapshot.memory_path + ": " + errno_text();
  uint32_t crc = 0;
  for (const GuestRam::Region& r : ram.regions()) {
    std::byte* p = r.host;
    size_t left = r.size;
    while (left > 0) {
      const ssize_t n = ::read(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        return snapshot.memory_path + " is shorter than the guest's RAM (truncated)";
      }
      crc = crc32_of({p, static_cast<size_t>(n)}, crc);
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  ::close(fd);
  if (crc != snapshot.manifest.files.at("memory.bin").crc32)
    return snapshot.memory_path + " fails its CRC-32 check (corrupted)";
  return std::nullopt;
}

}  // namespace vmm
