// The migration wire protocol (vmm/migration/migration_channel.h) over a socket pair: frames
// round-trip, and every malformed frame or vanished peer is a MigrationError with its reason.
#include "vmm/migration/migration_channel.h"
#include "vmm/migration/migration_destination.h"

#include "tests/support/unix_sockets.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

namespace {

using vmm::MigrationChannel;
using vmm::MigrationError;
using vmm::MigrationMessage;

struct Pair {
  Pair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    a = fds[0];
    b = fds[1];
  }
  int a, b;
};

std::string error_of(MigrationChannel& ch, int timeout_ms = 2000) {
  std::vector<std::byte> payload;
  try {
    ch.receive(payload, timeout_ms);
  } catch (const MigrationError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MigrationChannel, FramesRoundTrip) {
  Pair p;
  MigrationChannel sender(p.a), receiver(p.b);
  sender.send(MigrationMessage::kHello, std::string("{\"format\":\"pmuvm-snapshot\"}"));
  std::vector<std::byte> big(3 << 20, std::byte{0x5A});
  std::thread t([&] { sender.send(MigrationMessage::kPages, big); });
  EXPECT_EQ(vmm::to_text(receiver.expect(MigrationMessage::kHello)),
            "{\"format\":\"pmuvm-snapshot\"}");
  EXPECT_EQ(receiver.expect(MigrationMessage::kPages), big);
  t.join();
}

TEST(MigrationChannel, GarbageIsNotAStream) {
  Pair p;
  MigrationChannel receiver(p.b);
  const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(write(p.a, garbage, sizeof garbage), 0);
  EXPECT_EQ(error_of(receiver), "not a pmuvm migration stream (bad frame magic)");
  close(p.a);
}

TEST(MigrationChannel, CorruptedPayloadFailsItsCrc) {
  Pair p;
  MigrationChannel receiver(p.b);
  // "PMIG", type 5 (state), length 4, "abcd", a wrong CRC.
  const unsigned char frame[] = {'P', 'M', 'I', 'G', 5,   0,   0,   0,   4, 0, 0, 0,
                                 0,   0,   0,   0,   'a', 'b', 'c', 'd', 1, 2, 3, 4};
  ASSERT_EQ(write(p.a, frame, sizeof frame), static_cast<ssize_t>(sizeof frame));
  EXPECT_EQ(error_of(receiver), "migration message state fails its CRC-32 check");
  close(p.a);
}

TEST(MigrationChannel, UnknownTypeAndHugeLengthAreRefusedBeforeReading) {
  {
    Pair p;
    MigrationChannel receiver(p.b);
    const unsigned char frame[16] = {'P', 'M', 'I', 'G', 42};
    ASSERT_EQ(write(p.a, frame, sizeof frame), 16);
    EXPECT_EQ(error_of(receiver), "unknown migration message type 42");
    close(p.a);
  }
  {
    Pair p;
    MigrationChannel receiver(p.b);
    unsigned char frame[16] = {'P', 'M', 'I', 'G', 4};
    frame[15] = 0x10;  // 2^60 bytes
    ASSERT_EQ(write(p.a, frame, sizeof frame), 16);
    EXPECT_NE(error_of(receiver).find("limit"), std::string::npos);
    close(p.a);
  }
}

TEST(MigrationChannel, PeerThatGoesAwayOrStallsIsAnError) {
  {
    Pair p;
    MigrationChannel receiver(p.b);
    const unsigned char half[6] = {'P', 'M', 'I', 'G', 1, 0};
    ASSERT_EQ(write(p.a, half, sizeof half), 6);
    close(p.a);
    EXPECT_EQ(error_of(receiver), "the migration peer closed the connection");
  }
  {
    Pair p;
    MigrationChannel receiver(p.b);
    EXPECT_EQ(error_of(receiver, 100), "the migration peer did not answer within 0.1 s");
    close(p.a);
  }
  {
    Pair p;
    MigrationChannel sender(p.a);
    close(p.b);
    try {
      sender.send(MigrationMessage::kCommit, nullptr, 0);
      FAIL() << "sent to a closed peer";
    } catch (const MigrationError& e) {
      EXPECT_NE(std::string(e.what()).find("broke while sending commit"), std::string::npos);
    }
  }
}

TEST(MigrationChannel, RefusalCarriesTheReasons) {
  Pair p;
  MigrationChannel sender(p.a), receiver(p.b);
  sender.send(MigrationMessage::kRefuse, std::string("vendor AuthenticAMD != GenuineIntel\n"));
  try {
    receiver.expect(MigrationMessage::kAccept);
    FAIL();
  } catch (const MigrationError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the destination refused the VM:\nvendor AuthenticAMD != GenuineIntel\n");
  }
}

TEST(MigrationUrls, UnixAndFile) {
  EXPECT_EQ(vmm::unix_url_path("unix:/run/m.sock"), "/run/m.sock");
  EXPECT_EQ(vmm::unix_url_path("unix:"), "");
  EXPECT_EQ(vmm::unix_url_path("tcp:1.2.3.4:5"), "");
}

}  // namespace

// A destination that stops reading must not hold the source (paused, its API busy) for ever:
// the send fails at its deadline.
TEST(MigrationChannel, APeerThatStopsReadingFailsTheSendAtItsDeadline) {
  Pair p;
  MigrationChannel sender(p.a);
  sender.set_send_deadline(200);
  const std::vector<std::byte> frame(16 << 20, std::byte{1});  // far more than a socket buffer
  try {
    sender.send(MigrationMessage::kPages, frame);
    ADD_FAILURE() << "the send completed although nobody read";
  } catch (const MigrationError& e) {
    EXPECT_EQ(std::string(e.what()), "the migration peer did not take pages within 0.2 s");
  }
  close(p.b);
}

// A peer that drips its answer, one byte at a time well inside any idle timeout, is held to the
// deadline of the whole message (issue 38: the timeouts were per poll(), so a byte every 50 s
// held the source's paused VM for ever).
TEST(MigrationChannel, AnAnswerDrippedByteByByteFailsAtTheMessagesDeadline) {
  Pair p;
  MigrationChannel receiver(p.b);
  std::atomic<bool> done{false};
  std::thread drip([&] {
    const unsigned char frame[20] = {'P', 'M', 'I', 'G', 6};  // ready, empty
    for (size_t i = 0; i < sizeof frame && !done; ++i) {
      if (write(p.a, frame + i, 1) != 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(error_of(receiver, 300), "the migration peer did not answer within 0.3 s");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(900));
  done = true;
  drip.join();
  close(p.a);
}

// The same for a peer that reads a little at a time: the send of one message has a deadline.
TEST(MigrationChannel, APeerThatReadsByDripsFailsTheSendAtItsDeadline) {
  Pair p;
  MigrationChannel sender(p.a);
  sender.set_send_deadline(300);
  std::atomic<bool> done{false};
  std::thread slow_reader([&] {
    std::vector<char> buf(64 << 10);
    while (!done) {
      if (read(p.b, buf.data(), buf.size()) <= 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const std::vector<std::byte> frame(64 << 20, std::byte{1});
  try {
    sender.send(MigrationMessage::kPages, frame);
    ADD_FAILURE() << "64 MiB went through a reader of 64 KiB per 20 ms within 0.3 s";
  } catch (const MigrationError& e) {
    EXPECT_EQ(std::string(e.what()), "the migration peer did not take pages within 0.3 s");
  }
  done = true;
  shutdown(p.a, SHUT_RDWR);
  slow_reader.join();
}

// Whatever a wait's deadline, a stop request (SIGTERM, the run ended) ends it within a poll slice.
TEST(MigrationChannel, AStopRequestEndsAWaitAtOnce) {
  Pair p;
  MigrationChannel receiver(p.b);
  std::atomic<bool> stop{false};
  receiver.set_stop_check([&]() -> std::optional<std::string> {
    if (stop) return "the run was stopped";
    return std::nullopt;
  });
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop = true;
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(error_of(receiver, 60'000), "the run was stopped");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  stopper.join();
  close(p.a);
}

// A destination that listens but never accepts (its backlog full) fails the connect at its
// deadline instead of blocking it for ever.
TEST(MigrationChannel, AListenerThatNeverAcceptsFailsTheConnectAtItsDeadline) {
  char dir_template[] = "/tmp/migration_channel_test.XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string path = std::string(dir_template) + "/sock";
  const int listener = pmuvm_testing::listen_unix(path, 0);
  ASSERT_GE(listener, 0);
  // A backlog of 0 holds one connection: the next connect waits for an accept.
  const int first = pmuvm_testing::connect_unix(path);
  ASSERT_GE(first, 0);
  try {
    MigrationChannel::connect_to(path, 200);
    ADD_FAILURE() << "connected although the listener accepts nothing";
  } catch (const MigrationError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot connect to the destination at " + path +
                                         ": it accepted no connection within 0.2 s");
  }
  close(first);
  close(listener);
  unlink(path.c_str());
  rmdir(dir_template);
}

// A destination never takes over a socket path another process listens on (issue 38 item 5: it
// unlinked it, and the other process's clients then reached this VMM); a stale one it replaces.
TEST(IncomingMigration, ALiveSocketAtThePathIsLeftAlone) {
  char dir[] = "/tmp/pmuvm-incoming.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/in.sock";
  const int live = pmuvm_testing::listen_unix(path, 1);
  ASSERT_GE(live, 0);
  std::string error;
  try {
    vmm::IncomingMigration::accept_at(path);
  } catch (const MigrationError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("another process listens on"), std::string::npos) << error;
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << "the live socket's file is still there";
  close(live);
  unlink(path.c_str());
  rmdir(dir);
}
