#include "vmm/migration/migration_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <span>

#include "vmm/printable.h"
#include "vmm/snapshot/little_endian.h"
#include "vmm/snapshot/state_sections.h"
#include "vmm/unix_connect.h"

namespace vmm {
namespace {

constexpr uint32_t kFrameMagic = 0x47494D50;  // "PMIG"

// 10000 -> "10 s", 200 -> "0.2 s".
std::string seconds_text(int ms) {
  std::string text = std::to_string(ms / 1000);
  if (ms % 1000) {
    char fraction[8];
    std::snprintf(fraction, sizeof fraction, ".%03d", ms % 1000);
    text += fraction;
    while (text.back() == '0') text.pop_back();
  }
  return text + " s";
}

const char* name_of(MigrationMessage m) {
  switch (m) {
    case MigrationMessage::kHello: return "hello";
    case MigrationMessage::kAccept: return "accept";
    case MigrationMessage::kRefuse: return "refuse";
    case MigrationMessage::kPages: return "pages";
    case MigrationMessage::kState: return "state";
    case MigrationMessage::kReady: return "ready";
    case MigrationMessage::kCommit: return "commit";
    case MigrationMessage::kRunning: return "running";
  }
  return "?";
}

}  // namespace

MigrationChannel::~MigrationChannel() {
  if (fd_ >= 0) ::close(fd_);
}

MigrationChannel MigrationChannel::connect_to(const std::string& path, int timeout_ms) {
  // Sends themselves are bounded by poll (send, below), not by the connect's send timeout.
  const UnixConnection c = connect_unix(path, timeout_ms);
  if (c.error == ENAMETOOLONG) throw MigrationError("socket path too long: " + path);
  if (c.fd < 0)
    throw MigrationError(
        "cannot connect to the destination at " + path + ": " +
        (c.error == EAGAIN   ? "it accepted no connection within " + seconds_text(timeout_ms)
         : c.error == EACCES ? "it runs as uid " + std::to_string(c.peer_uid) +
                                   ", neither this user nor root (nothing of the VM was sent)"
                             : std::string(std::strerror(c.error))));
  return MigrationChannel(c.fd);
}

void MigrationChannel::send(MigrationMessage type, const void* data, size_t size) {
  if (size > kMaxFrame) throw MigrationError("migration message too large");
  std::vector<std::byte> header;
  append_le(header, kFrameMagic, 4);
  append_le(header, static_cast<uint32_t>(type), 4);
  append_le(header, size, 8);
  const auto* bytes = static_cast<const std::byte*>(data);
  std::vector<std::byte> trailer;
  append_le(trailer, crc32_of({bytes, size}), 4);
  const Clock::time_point deadline = deadline_in(send_deadline_ms_);
  using Piece = std::pair<const std::byte*, size_t>;
  for (const auto& [p, n] : {Piece{header.data(), header.size()}, Piece{bytes, size},
                             Piece{trailer.data(), trailer.size()}}) {
    const std::byte* at = p;
    size_t left = n;
    while (left > 0) {
      // MSG_NOSIGNAL: a destination that went away is an error here, not a SIGPIPE.
      // MSG_DONTWAIT: a full socket buffer is waited for below, with a deadline.
      const ssize_t w = ::send(fd_, at, left, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!wait_for(POLLOUT, deadline))
          throw MigrationError(std::string("the migration peer did not take ") + name_of(type) +
                               (deadline == deadline_cap_
                                    ? std::string(" before the migration's deadline")
                                    : " within " + seconds_text(send_deadline_ms_)));
        continue;  // writable, hung up (the next send says so) or interrupted
      }
      if (w <= 0)
        throw MigrationError(std::string("the migration connection broke while sending ") +
                             name_of(type) + ": " + std::strerror(errno));
      at += w;
      left -= static_cast<size_t>(w);
    }
  }
}

MigrationChannel::Clock::time_point MigrationChannel::deadline_in(int ms) const {
  if (ms < 0) return deadline_cap_;
  return std::min(deadline_cap_, Clock::now() + std::chrono::milliseconds(ms));
}

bool MigrationChannel::wait_for(short events, Clock::time_point deadline) {
  for (;;) {
    if (stop_check_)
      if (std::optional<std::string> reason = stop_check_()) throw MigrationError(*reason);
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
    // Sliced so that a stop request is seen within kStopCheckMs.
    const int slice =
        static_cast<int>(std::min<int64_t>(left, stop_check_ ? kStopCheckMs : 1 << 30));
    pollfd pfd{fd_, events, 0};
    const int ready = ::poll(&pfd, 1, slice);
    if (ready > 0) return true;  // ready, or hung up / broken: the read or write says which
    if (ready < 0 && errno != EINTR)
      throw MigrationError(std::string("migration connection: ") + std::strerror(errno));
  }
}

bool MigrationChannel::read_exact(void* out, size_t size, Clock::time_point deadline) {
  auto* p = static_cast<std::byte*>(out);
  while (size > 0) {
    if (!wait_for(POLLIN, deadline)) return false;
    const ssize_t n = ::recv(fd_, p, size, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n == 0) throw MigrationError("the migration peer closed the connection");
    if (n < 0) throw MigrationError(std::string("migration connection: ") + std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

MigrationMessage MigrationChannel::receive(std::vector<std::byte>& payload, int timeout_ms) {
  const Clock::time_point deadline = deadline_in(timeout_ms);
  if (std::optional<MigrationMessage> m = receive_by(payload, deadline)) return *m;
  if (timeout_ms < 0 || deadline == deadline_cap_)
    throw MigrationError("the migration peer did not answer before the migration's deadline");
  throw MigrationError("the migration peer did not answer within " + seconds_text(timeout_ms));
}

std::optional<MigrationMessage> MigrationChannel::receive_by(std::vector<std::byte>& payload,
                                                             Clock::time_point deadline) {
  std::byte header[16];
  if (!read_exact(header, sizeof header, deadline)) return std::nullopt;
  if (read_le(header, 4) != kFrameMagic)
    throw MigrationError("not a pmuvm migration stream (bad frame magic)");
  const uint64_t type = read_le(header + 4, 4);
  const uint64_t size = read_le(header + 8, 8);
  if (type < 1 || type > static_cast<uint32_t>(MigrationMessage::kRunning))
    throw MigrationError("unknown migration message type " + std::to_string(type));
  if (size > kMaxFrame)
    throw MigrationError("migration message of " + std::to_string(size) + " bytes (limit " +
                         std::to_string(kMaxFrame) + ")");
  payload.resize(size);
  std::byte trailer[4];
  if (!read_exact(payload.data(), size, deadline) || !read_exact(trailer, sizeof trailer, deadline))
    return std::nullopt;
  if (read_le(trailer, 4) != crc32_of(payload))
    throw MigrationError(std::string("migration message ") +
                         name_of(static_cast<MigrationMessage>(type)) + " fails its CRC-32 check");
  return static_cast<MigrationMessage>(type);
}

std::vector<std::byte> MigrationChannel::expect(MigrationMessage expected, int timeout_ms) {
  std::vector<std::byte> payload;
  const MigrationMessage got = receive(payload, timeout_ms);
  if (got == MigrationMessage::kRefuse && expected != MigrationMessage::kRefuse)
    throw MigrationError(
        "the destination refused the VM:\n" +
        printable(to_text(payload), {.max_bytes = 16 << 10, .keep_newlines = true}));
  if (got != expected)
    throw MigrationError(std::string("expected a migration ") + name_of(expected) +
                         " message, got " + name_of(got));
  return payload;
}

std::string unix_url_path(const std::string& url) {
  constexpr std::string_view kScheme = "unix:";
  if (url.rfind(kScheme, 0) != 0 || url.size() == kScheme.size()) return "";
  return url.substr(kScheme.size());
}

std::string to_text(const std::vector<std::byte>& bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

}  // namespace vmm
