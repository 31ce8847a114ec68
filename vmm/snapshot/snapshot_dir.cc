#include "vmm/snapshot/snapshot_dir.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "vmm/regular_file.h"
#include "vmm/snapshot/file_checksum.h"
#include "vmm/result.h"

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

// A new file of the snapshot: never one that exists (O_EXCL), never through a symbolic link put
// in its place after the directory was found empty (O_NOFOLLOW).
int create_new(const fs::path& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

// Writes and fsyncs a new file.
std::optional<std::string> write_file(const fs::path& path, const std::byte* p, size_t n) {
  const int fd = create_new(path);
  if (fd < 0) return "cannot create " + path.string() + ": " + errno_text();
  bool ok = write_all(fd, p, n) && ::fsync(fd) == 0;
  const std::string why = ok ? "" : errno_text();
  ::close(fd);
  if (!ok) return "cannot write " + path.string() + ": " + why;
  return std::nullopt;
}

std::optional<std::string> sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool ok = fd >= 0 && ::fsync(fd) == 0;
  const std::string why = ok ? "" : errno_text();
  if (fd >= 0) ::close(fd);
  if (!ok) return "cannot sync " + dir.string() + ": " + why;
  return std::nullopt;
}

constexpr uint64_t kMaxStateBytes = 1ull << 30;

// A snapshot directory is this user's (or root's) and is not reached through a symbolic link
// (DESIGN §4.12): another user's directory, or a link, could swap what is read or receive what
// is written. Nothing there yet is fine (`may_be_missing`: the writer creates it).
std::optional<std::string> unsafe_directory(const fs::path& dir, bool may_be_missing) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    return errno == ENOENT && may_be_missing
               ? std::nullopt
               : std::optional<std::string>(dir.string() + ": " + errno_text());
  if (S_ISLNK(st.st_mode)) return dir.string() + " is a symbolic link: name the directory itself";
  if (!S_ISDIR(st.st_mode)) return dir.string() + " is not a directory";
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return dir.string() + " belongs to uid " + std::to_string(st.st_uid) +
           ", neither this user nor root";
  return std::nullopt;
}

// Why a file of a snapshot (`name` in messages) cannot be read: it must be a regular file, not
// reached through a symbolic link, of at most `limit` bytes (vmm/regular_file.h);
// `cannot_open` and errno when there is no file to open.
Error snapshot_file_refusal(const RegularFileProblem& problem, const std::string& name,
                            uint64_t limit, const std::string& cannot_open) {
  using Kind = RegularFileProblem::Kind;
  switch (problem.kind) {
    case Kind::kCannotOpen:
      return Error::usage(cannot_open + " (" + std::strerror(problem.error_number) + ")");
    case Kind::kSymbolicLink: return Error::usage(name + " is a symbolic link");
    case Kind::kNotRegular: return Error::usage(name + " is not a regular file");
    case Kind::kTooLarge:
      return Error::usage(name + " is " + std::to_string(problem.size) + " bytes (at most " +
                          std::to_string(limit) + ")");
    case Kind::kReadError:
    case Kind::kChanged: break;
  }
  return Error::usage(name + ": cannot read it (it changed while read)");
}

// Opens a file of a snapshot for reading (snapshot_file_refusal says what it must be). Returns
// the descriptor and its size, or the reason.
Result<std::pair<int, uint64_t>> open_regular(const fs::path& path, const std::string& name,
                                              uint64_t limit, const std::string& cannot_open) {
  auto opened = open_regular_file(path.string(), limit, /*follow_links=*/false);
  if (auto* problem = std::get_if<RegularFileProblem>(&opened))
    return snapshot_file_refusal(*problem, name, limit, cannot_open);
  const OpenRegularFile file = std::get<OpenRegularFile>(opened);
  return std::pair<int, uint64_t>(file.fd, file.size);
}

// Reads all of a file of a snapshot (as open_regular opens it).
Result<std::vector<std::byte>> read_regular(const fs::path& path, const std::string& name,
                                            uint64_t limit, const std::string& cannot_open) {
  std::vector<std::byte> bytes;
  const std::optional<RegularFileProblem> problem =
      read_regular_file(path.string(), limit, /*follow_links=*/false, [&](size_t size) -> void* {
        bytes.resize(size);
        return bytes.data();
      });
  if (problem) return snapshot_file_refusal(*problem, name, limit, cannot_open);
  return bytes;
}

}  // namespace

std::optional<std::string> file_url_path(const std::string& url) {
  constexpr std::string_view kScheme = "file://";
  if (url.rfind(kScheme, 0) != 0 || url.size() <= kScheme.size() || url[kScheme.size()] != '/')
    return std::nullopt;
  return url.substr(kScheme.size());
}

Status write_snapshot_dir(const std::string& dir_name, MigratableVm& vm) {
  const fs::path dir(dir_name);
  if (auto unsafe = unsafe_directory(dir, /*may_be_missing=*/true)) return Error::usage(*unsafe);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec))
    return Error::usage("snapshot directory " + dir_name + " exists and is not empty");
  fs::create_directories(dir, ec);
  if (ec) return Error::vmm("cannot create snapshot directory " + dir_name + ": " + ec.message());
  auto fail = [&](std::string why) {
    for (const char* name : {"memory.bin", "state.bin", "manifest.json.new"})
      fs::remove(dir / name, ec);
    return Error::vmm(std::move(why));
  };

  SnapshotManifest manifest = vm.manifest();
  FileChecksum memory_checksum;
  GuestRam& ram = vm.guest_ram();
  {
    const fs::path path = dir / "memory.bin";
    const int fd = create_new(path);
    if (fd < 0) return fail("cannot create " + path.string() + ": " + errno_text());
    bool ok = true;
    for (const GuestRam::Region& r : ram.regions()) {
      memory_checksum.update({r.host, r.size});
      ok = ok && write_all(fd, r.host, r.size);
    }
    ok = ok && ::fsync(fd) == 0;
    const std::string why = ok ? "" : errno_text();
    ::close(fd);
    if (!ok) return fail("cannot write " + path.string() + ": " + why);
  }
  manifest.files["memory.bin"] = {ram.size(), memory_checksum.digest()};
  const std::vector<std::byte> state = vm.capture_state().serialize();
  // Never a snapshot read_snapshot_dir would refuse (DESIGN §4.12).
  if (state.size() > kMaxStateBytes)
    return fail("the VM's state is " + std::to_string(state.size()) + " bytes; a snapshot holds " +
                "at most " + std::to_string(kMaxStateBytes));
  if (auto error = write_file(dir / "state.bin", state.data(), state.size())) return fail(*error);
  manifest.files["state.bin"] = {state.size(), FileChecksum::of(state)};
  // The manifest makes the directory a snapshot: it appears last and whole (written beside,
  // synced, renamed, the directory synced), so a snapshot cut short is never read as one.
  const std::string text = to_json_text(manifest);
  if (text.size() > kMaxManifestBytes)
    return fail("the manifest is " + std::to_string(text.size()) + " bytes; a snapshot's is at " +
                "most " + std::to_string(kMaxManifestBytes));
  if (auto error = write_file(dir / "manifest.json.new",
                              reinterpret_cast<const std::byte*>(text.data()), text.size()))
    return fail(*error);
  if (::rename((dir / "manifest.json.new").c_str(), (dir / "manifest.json").c_str()) != 0)
    return fail("cannot rename " + (dir / "manifest.json.new").string() + ": " + errno_text());
  if (auto error = sync_directory(dir)) return Error::vmm(*error);
  return {};
}

Result<SnapshotOnDisk> read_snapshot_dir(const std::string& dir_name) {
  const fs::path dir(dir_name);
  // A trailing slash makes lstat follow a link: the directory is looked at without it.
  if (auto unsafe = unsafe_directory(dir.has_filename() ? dir : dir.parent_path(), false))
    return Error::usage(*unsafe);
  auto manifest_bytes =
      read_regular(dir / "manifest.json", dir_name + "/manifest.json", kMaxManifestBytes,
                   dir_name + " is not a pmuvm snapshot: cannot read its manifest.json");
  if (!manifest_bytes.ok()) return manifest_bytes.error();
  const std::vector<std::byte>& raw = manifest_bytes.value();
  const std::string text(reinterpret_cast<const char*>(raw.data()), raw.size());
  auto parsed = parse_manifest(text);
  if (!parsed.ok()) return parsed.error().prefixed(dir_name + "/manifest.json: ");
  SnapshotOnDisk out;
  out.manifest = std::move(parsed.value());
  for (const char* name : {"memory.bin", "state.bin"})
    if (!out.manifest.files.count(name))
      return Error::usage(dir_name + "/manifest.json does not list " + name);
  const SnapshotManifest::File memory = out.manifest.files.at("memory.bin");
  if (memory.bytes != out.manifest.mem_mib << 20)
    return Error::usage(dir_name +
                        "/manifest.json: memory.bin size does not match the machine's memory");

  auto state_bytes = read_regular(dir / "state.bin", dir_name + "/state.bin", kMaxStateBytes,
                                  dir_name + "/state.bin: cannot read it");
  if (!state_bytes.ok()) return state_bytes.error();
  std::span<const std::byte> bytes(state_bytes.value());
  const SnapshotManifest::File state = out.manifest.files.at("state.bin");
  if (bytes.size() != state.bytes)
    return Error::usage(dir_name + "/state.bin is " + std::to_string(bytes.size()) +
                        " bytes, the manifest says " + std::to_string(state.bytes) +
                        " (truncated or replaced)");
  if (FileChecksum::of(bytes) != state.checksum)
    return Error::usage(dir_name + "/state.bin fails its checksum (corrupted)");
  auto sections = StateSections::parse(bytes);
  if (!sections.ok()) return sections.error().prefixed(dir_name + "/state.bin: ");
  out.state = std::move(sections.value());

  out.memory_path = (dir / "memory.bin").string();
  auto opened = open_regular(out.memory_path, dir_name + "/memory.bin", UINT64_MAX,
                             dir_name + "/memory.bin: cannot read it");
  if (!opened.ok()) return opened.error();
  const auto [memory_fd, memory_size] = opened.value();
  ::close(memory_fd);
  if (memory_size != memory.bytes)
    return Error::usage(dir_name + "/memory.bin is " + std::to_string(memory_size) +
                        " bytes, the manifest says " + std::to_string(memory.bytes) +
                        " (truncated or replaced)");
  return out;
}

constexpr size_t kRestoreChunkBytes = size_t{2} << 20;

Status load_snapshot_memory(const SnapshotOnDisk& snapshot, GuestRam& ram) {
  auto opened = open_regular(snapshot.memory_path, snapshot.memory_path, UINT64_MAX,
                             snapshot.memory_path + ": cannot read it");
  if (!opened.ok()) return opened.error();
  const int fd = opened.value().first;
  FileChecksum checksum;
  for (const GuestRam::Region& r : ram.regions()) {
    // Every byte of RAM is about to be written: let the kernel back it with 2 MiB pages (one
    // fault where there would be 512; without, the restore read ran at 0.37x of `cat` in the
    // nested host), where it can (THP "madvise" mode; a failure is only slower).
    ::madvise(r.host, r.size, MADV_HUGEPAGE);
    std::byte* p = r.host;
    size_t left = r.size;
    while (left > 0) {
      // A chunk at a time, checksummed while it is still in the CPU's caches.
      const ssize_t n = ::read(fd, p, std::min(left, kRestoreChunkBytes));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        return Error::usage(snapshot.memory_path + " is shorter than the guest's RAM (truncated)");
      }
      checksum.update({p, static_cast<size_t>(n)});
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  ::close(fd);
  if (checksum.digest() != snapshot.manifest.files.at("memory.bin").checksum)
    return Error::usage(snapshot.memory_path + " fails its checksum (corrupted)");
  return {};
}

}  // namespace vmm
