// The live-migration wire protocol (DESIGN §4.10): framed messages over one Unix stream socket.
//
// Frame (little-endian): "PMIG" | u32 type | u64 length | length bytes | u32 CRC-32 of the bytes
//
//   source                                destination
//   kHello   (manifest JSON)          ->
//                                     <-  kAccept, or kRefuse (one reason per line)
//   kPages   (u32 n, n x (u64 gpa, 4 KiB)), repeated: the pre-copy rounds, then the rest
//   kState   (state_sections.h)       ->
//                                     <-  kReady (state loaded into KVM, nothing run yet)
//   kCommit                           ->  the destination runs; the source exits 0
// Anything else, a bad frame (magic, type, CRC, a length over kMaxFrame), or a peer that goes
// away is a MigrationError on the side that sees it. Until kCommit is sent the source keeps its
// VM and resumes it; the destination never runs a VM it has not been given kCommit for.
#pragma once

#include <cstddef>
#include <cstdint>
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
};

inline constexpr size_t kMaxFrame = size_t{64} << 20;
inline constexpr uint32_t kPagesPerMessage = 256;  // 1 MiB of RAM per kPages frame
// How long a connect may wait for a destination that does not accept, and a send for a peer
// that reads nothing: past them the source gives up and its VM goes on (DESIGN §4.12).
inline constexpr int kConnectTimeoutMs = 10'000;
inline constexpr int kSendStallTimeoutMs = 60'000;

class MigrationChannel {
 public:
  explicit MigrationChannel(int fd) : fd_(fd) {}
  ~MigrationChannel();
  MigrationChannel(const MigrationChannel&) = delete;
  MigrationChannel& operator=(const MigrationChannel&) = delete;

  // Connects to the destination listening at `path`, waiting at most `timeout_ms` for it to
  // take the connection; throws MigrationError naming the reason.
  static MigrationChannel connect_to(const std::string& path, int timeout_ms = kConnectTimeoutMs);

  // A send fails (MigrationError) when nothing of its message could be written for this long.
  void set_send_stall_timeout(int ms) { send_stall_timeout_ms_ = ms; }

  void send(MigrationMessage type, const void* data, size_t size);
  void send(MigrationMessage type, const std::string& text) {
    send(type, text.data(), text.size());
  }
  void send(MigrationMessage type, const std::vector<std::byte>& bytes) {
    send(type, bytes.data(), bytes.size());
  }
  // The next message; `timeout_ms` < 0 waits for ever. Throws MigrationError.
  MigrationMessage receive(std::vector<std::byte>& payload, int timeout_ms = -1);
  // The next message, which must be `expected`.
  std::vector<std::byte> expect(MigrationMessage expected, int timeout_ms = -1);

 private:
  void read_exact(void* out, size_t size, int timeout_ms);
  int fd_;
  int send_stall_timeout_ms_ = kSendStallTimeoutMs;
};

// "unix:/PATH" or "unix:PATH" -> PATH; empty for anything else.
std::string unix_url_path(const std::string& url);

std::string to_text(const std::vector<std::byte>& bytes);

}  // namespace vmm
