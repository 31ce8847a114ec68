// The live-migration wire protocol (DESIGN §4.10): framed messages over one Unix stream socket.
//
// Frame (little-endian): "PMIG" | u32 type | u64 length | length bytes | u32 CRC-32 of the bytes
//
//   source                                destination
//   kHello   (manifest JSON)          ->
//                                     <-  kAccept, or kRefuse (one reason per line)
//   kPages   (u32 n, n x (u64 gpa, 4 KiB)), repeated: the pre-copy rounds, then the rest
//   kState   (state_sections.h)       ->
//                                     <-  kReady: everything that can fail is done (state loaded
//                                         into KVM, vCPU threads created, API socket bound);
//                                         nothing has run. Or kRefuse: it could not.
//   kCommit                           ->
//                                     <-  kRunning, sent before the vCPUs are let go (a
//                                         destination that cannot send it does not run)
//   the source lets go of the VM only on kRunning, and exits 0.
// Anything else, a bad frame (magic, type, CRC, a length over kMaxFrame), a peer that goes away,
// or a message that is not whole by its deadline is a MigrationError on the side that sees it.
// Until kRunning arrives the source keeps its VM and resumes it on any error; the destination
// never runs a VM it has not been given kCommit for. Deadlines are per message (the whole frame,
// not the time between two bytes), so a peer cannot hold the other side by dripping bytes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace vmm {

struct MigrationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class MigrationMessage : uint32_t {
  kHello = 1,
  kAccept = 2,
  kRefuse = 3,
  kPages = 4,
  kState = 5,
  kReady = 6,
  kCommit = 7,
  kRunning = 8,
};

inline constexpr size_t kMaxFrame = size_t{64} << 20;
inline constexpr uint32_t kPagesPerMessage = 256;  // 1 MiB of RAM per kPages frame
// How long a connect may wait for a destination that does not accept, and a send for a peer
// that does not take the whole message: past them the source gives up and its VM goes on
// (DESIGN §4.12).
inline constexpr int kConnectTimeoutMs = 10'000;
inline constexpr int kSendDeadlineMs = 60'000;

class MigrationChannel {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kStopCheckMs = 100;

  explicit MigrationChannel(int fd) : fd_(fd) {}
  ~MigrationChannel();
  MigrationChannel(const MigrationChannel&) = delete;
  MigrationChannel& operator=(const MigrationChannel&) = delete;

  // Connects to the destination listening at `path`, waiting at most `timeout_ms` for it to
  // take the connection; throws MigrationError naming the reason.
  static MigrationChannel connect_to(const std::string& path, int timeout_ms = kConnectTimeoutMs);

  // A send fails (MigrationError) when its whole message could not be written within this.
  void set_send_deadline(int ms) { send_deadline_ms_ = ms; }
  // Every wait (send or receive) also ends at `at`: a phase's deadline over all its messages.
  void cap_deadlines_at(Clock::time_point at) { deadline_cap_ = at; }
  // Asked at least every kStopCheckMs while waiting: a reason ends the wait with a
  // MigrationError carrying it (a stop signal, a run that ended).
  void set_stop_check(std::function<std::optional<std::string>()> check) {
    stop_check_ = std::move(check);
  }

  void send(MigrationMessage type, const void* data, size_t size);
  void send(MigrationMessage type, const std::string& text) {
    send(type, text.data(), text.size());
  }
  void send(MigrationMessage type, const std::vector<std::byte>& bytes) {
    send(type, bytes.data(), bytes.size());
  }
  // The next message, whole within `timeout_ms` (< 0: no deadline but the cap). Throws
  // MigrationError.
  MigrationMessage receive(std::vector<std::byte>& payload, int timeout_ms = -1);
  // The next message, which must be `expected`.
  std::vector<std::byte> expect(MigrationMessage expected, int timeout_ms = -1);

 private:
  // False when `deadline` passed first (the message is then not whole: the stream is unusable).
  bool read_exact(void* out, size_t size, Clock::time_point deadline);
  std::optional<MigrationMessage> receive_by(std::vector<std::byte>& payload,
                                             Clock::time_point deadline);
  // Waits until `fd_` has `events`; false at `deadline`. Throws for a stop request.
  bool wait_for(short events, Clock::time_point deadline);
  Clock::time_point deadline_in(int ms) const;
  int fd_;
  int send_deadline_ms_ = kSendDeadlineMs;
  Clock::time_point deadline_cap_ = Clock::time_point::max();
  std::function<std::optional<std::string>()> stop_check_;
};

// "unix:/PATH" or "unix:PATH" -> PATH; empty for anything else.
std::string unix_url_path(const std::string& url);

std::string to_text(const std::vector<std::byte>& bytes);

}  // namespace vmm
