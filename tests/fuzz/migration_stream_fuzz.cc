// libFuzzer target for a migration stream as the destination reads it (`run --incoming`, DESIGN
// §4.10 and §4.12): the hello, the pages and the state come from a peer that may be hostile and
// recomputes every CRC. The input is a list of messages, each [u8 type][u32 length][bytes],
// framed as MigrationChannel::send frames them (valid CRC); when byte 0 is odd the rest of the
// input after the list is sent raw (bad frames, a truncated stream). A writer thread sends them
// on a Unix socket pair and closes; this thread is the destination: over_connection (hello ->
// manifest), accept, receive into 16 MiB of guest RAM. Checked: a MigrationError or a complete
// StateSections, nothing written outside the RAM, no wait (the writer closes).
// Seeds (corpus_migration_stream/): a hello with a shipped profile, pages inside and outside RAM,
// state messages.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "vmm/memory/guest_ram.h"
#include "vmm/migration/migration_channel.h"
#include "vmm/migration/migration_destination.h"

namespace {

void send_messages(int fd, const uint8_t* data, size_t size) {
  vmm::MigrationChannel out(fd);  // closes fd when done
  out.set_send_deadline(5000);
  const bool raw_tail = size > 0 && (data[0] & 1);
  size_t at = size > 0 ? 1 : 0;
  try {
    while (size - at >= 5) {
      uint32_t length;
      std::memcpy(&length, data + at + 1, 4);
      const uint8_t type = data[at];
      if (length > size - at - 5) break;
      out.send(static_cast<vmm::MigrationMessage>(type), data + at + 5, length);
      at += 5 + length;
    }
    if (raw_tail && at < size) {
      const ssize_t w = ::send(fd, data + at, size - at, MSG_NOSIGNAL);
      (void)w;
    }
  } catch (const vmm::MigrationError&) {
    // the destination hung up first
  }
  ::shutdown(fd, SHUT_WR);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  std::thread writer(send_messages, fds[1], data, size);
  try {
    vmm::IncomingMigration in = vmm::IncomingMigration::over_connection(fds[0]);
    vmm::GuestRam ram(16ull << 20);
    in.accept();
    (void)in.receive(ram);
  } catch (const vmm::MigrationError&) {
    // refused: what a hostile stream must get
  }
  writer.join();
  return 0;
}
