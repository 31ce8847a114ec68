#include "vmm/migration/migration_destination.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "vmm/api/unix_socket_probe.h"
#include "vmm/memory/guest_ram.h"
#include "vmm/snapshot/little_endian.h"
#include "vmm/unix_connect.h"

namespace vmm {
namespace {

constexpr uint64_t kPage = 4096;
constexpr int kHelloTimeoutMs = 60'000;
constexpr int kStreamTimeoutMs = 60'000;

// Listens at `path`, which appears only once it accepts connections: the socket is bound and
// listening under a staging name first and then renamed into place, so a source (or a script)
// that sees the file can connect at once (bind-then-listen left a window where the file existed
// and connect was refused).
int listen_at(const std::string& path) {
  sockaddr_un addr{};
  const std::string staging = path + ".new";
  if (staging.size() >= sizeof addr.sun_path)
    throw MigrationError("socket path too long: " + path + " (at most " +
                         std::to_string(sizeof addr.sun_path - 1 - 4) + " bytes)");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, staging.c_str(), staging.size() + 1);
  struct stat st {};
  for (const std::string& p : {path, staging}) {
    if (::lstat(p.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) throw MigrationError(p + " exists and is not a socket");
      // A socket someone listens on is another process's (a VMM waiting for its own migration):
      // it is left alone. Only a stale one, of a run that ended, is replaced.
      if (api::probe_unix_socket(p).state == api::SocketProbe::State::kListening)
        throw MigrationError(p + " is a socket another process listens on: not replacing it");
      ::unlink(p.c_str());
    }
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw MigrationError(std::string("socket: ") + std::strerror(errno));
  // Whoever connects first hands this VMM a whole VM: the socket is its owner's only. The file is
  // born with the socket inode's mode less the umask (as the API socket's, api_server.cc), and
  // the chmod before listen makes sure of 0600 whatever the umask was.
  if (::fchmod(fd, 0600) != 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::chmod(staging.c_str(), 0600) != 0 || ::listen(fd, 1) != 0 ||
      ::rename(staging.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    ::unlink(staging.c_str());
    throw MigrationError("cannot listen at " + path + ": " + why);
  }
  return fd;
}

// Whoever connects hands this VMM a whole VM (and learns whether it was taken): only this
// process's user, or root, may (vmm/unix_connect.h).
bool peer_may_migrate(int fd) {
  uid_t uid = 0;
  if (peer_is_trusted(fd, &uid)) return true;
  spdlog::warn("migration: refused a connection from uid {}: this VMM runs as uid {}", uid,
               ::geteuid());
  return false;
}

}  // namespace

IncomingMigration IncomingMigration::accept_at(const std::string& path) {
  const int listener = listen_at(path);
  spdlog::info("waiting for a migration at unix:{}", path);
  int fd = -1;
  for (;;) {
    fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0 && errno == EINTR) continue;
    if (fd < 0 || peer_may_migrate(fd)) break;
    ::close(fd);  // not this user's: closed unread, and the wait goes on
  }
  const std::string why = fd < 0 ? std::strerror(errno) : "";
  ::close(listener);
  ::unlink(path.c_str());  // one migration per listener
  if (fd < 0) throw MigrationError("accept at " + path + ": " + why);
  return over_connection(fd);
}

IncomingMigration IncomingMigration::over_connection(int fd) {
  auto ch = std::make_unique<MigrationChannel>(fd);
  const std::vector<std::byte> hello = ch->expect(MigrationMessage::kHello, kHelloTimeoutMs);
  auto manifest = parse_manifest(to_text(hello));
  if (auto* error = manifest.error_message()) {
    ch->send(MigrationMessage::kRefuse, "unreadable hello: " + *error);
    throw MigrationError("the source's hello: " + *error);
  }
  return IncomingMigration(std::move(ch), std::move(manifest.value()));
}

void IncomingMigration::refuse(const std::vector<std::string>& reasons) {
  if (!channel_) return;
  std::string text;
  for (const std::string& r : reasons) text += r + "\n";
  channel_->send(MigrationMessage::kRefuse, text);
  channel_.reset();
}

void IncomingMigration::accept() { channel_->send(MigrationMessage::kAccept, nullptr, 0); }

StateSections IncomingMigration::receive(GuestRam& ram) {
  std::vector<std::byte> payload;
  uint64_t pages = 0;
  for (;;) {
    const MigrationMessage type = channel_->receive(payload, kStreamTimeoutMs);
    if (type == MigrationMessage::kState) {
      auto sections = StateSections::parse(payload);
      if (auto* error = sections.error_message())
        throw MigrationError("the source's state: " + *error);
      spdlog::info("migration: received {} pages and {} bytes of state", pages, payload.size());
      return std::move(sections.value());
    }
    if (type != MigrationMessage::kPages)
      throw MigrationError("unexpected migration message while receiving memory");
    if (payload.size() < 4) throw MigrationError("truncated pages message");
    const uint64_t n = read_le(payload.data(), 4);
    if (n > kPagesPerMessage || payload.size() != 4 + n * (8 + kPage))
      throw MigrationError("malformed pages message");
    for (uint64_t i = 0; i < n; ++i) {
      const std::byte* entry = payload.data() + 4 + i * (8 + kPage);
      const uint64_t gpa = read_le(entry, 8);
      if (gpa % kPage != 0 || !ram.write(gpa, {entry + 8, kPage}))
        throw MigrationError("the source sent a page outside the guest's RAM");
    }
    pages += n;
  }
}

void IncomingMigration::commit(const std::function<std::optional<std::string>()>& stop_check) {
  channel_->set_stop_check(stop_check);
  channel_->send(MigrationMessage::kReady, nullptr, 0);
  channel_->expect(MigrationMessage::kCommit, kStreamTimeoutMs);
  // Said before the vCPUs run: a source that cannot hear it (it gave up at its deadline and
  // resumed) makes this send fail, and the VM does not run here as well.
  channel_->send(MigrationMessage::kRunning, nullptr, 0);
  channel_.reset();
}

void IncomingMigration::fail(const std::string& reason) {
  if (!channel_) return;
  try {
    channel_->set_send_deadline(1000);
    channel_->send(MigrationMessage::kRefuse,
                   "the destination failed before it could run the VM: " + reason + "\n");
  } catch (const MigrationError&) {
    // the source is gone or stalled; it keeps (or lost) the VM either way
  }
  channel_.reset();
}

}  // namespace vmm
