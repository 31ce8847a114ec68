// The migration wire protocol (vmm/migration/migration_channel.h) over a socket pair: frames
// round-trip, and every malformed frame or vanished peer is a MigrationError with its reason.
#include "vmm/migration/migration_channel.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
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
  EXPECT_EQ(vmm::to_text(receiver.expect(MigrationMessage::kHello)), "{\"format\":\"pmuvm-snapshot\"}");
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
  const unsigned char frame[] = {'P', 'M', 'I', 'G', 5, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0,
                                 'a', 'b', 'c', 'd', 1, 2, 3, 4};
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
    EXPECT_EQ(error_of(receiver, 100), "the migration peer did not answer in time");
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
