// The API socket's server (DESIGN §4.10) against a fake VM: every route reaches the VM with
// what the request said; every bad request is answered with its HTTP status and a JSON reason
// and reaches nothing; a VM that throws, and clients that misbehave at the byte level, leave the
// server answering.
#include "vmm/api/api_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <future>
#include <thread>

#include "tests/api/api_test_support.h"
#include "tests/api/http_test_client.h"

namespace vmm::api {
namespace {

using ::testing::HasSubstr;

// A string literal with its NUL bytes (std::string(const char*) would stop at the first).
template <size_t N>
std::string bytes(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

// An error answer: `status`, JSON content, {"error": a string}.
void expect_error(const HttpReply& r, int status, const std::string& reason_part) {
  EXPECT_EQ(r.status, status) << r.raw_body;
  EXPECT_EQ(r.content_type, "application/json");
  ASSERT_TRUE(r.body.is_object() && r.body.contains("error") && r.body["error"].is_string())
      << r.raw_body;
  EXPECT_THAT(r.body["error"].get<std::string>(), HasSubstr(reason_part));
}

TEST_F(ApiServerTest, EveryRouteCallsTheVmAndReturnsItsAnswer) {
  struct Case {
    std::string method, verb;
    std::optional<std::string> body;
    std::string call;  // what the fake records
    nlohmann::json answer;
  };
  const std::vector<Case> cases = {
      {"GET", "vmm.ping", std::nullopt, "vmm.ping", {{"version", "fake"}}},
      {"GET", "vm.info", std::nullopt, "vm.info", {{"call", "vm.info"}}},
      {"PUT", "vm.pause", std::nullopt, "vm.pause", {{"call", "vm.pause"}}},
      {"PUT", "vm.resume", "{}", "vm.resume", {{"call", "vm.resume"}}},
      {"PUT",
       "vm.snapshot",
       R"({"destination_url": "file:///var/snap"})",
       "vm.snapshot file:///var/snap",
       {{"call", "vm.snapshot"}, {"destination_url", "file:///var/snap"}}},
      {"PUT",
       "vm.send-migration",
       R"({"destination_url":"unix:/run/dst.sock"})",
       "vm.send-migration unix:/run/dst.sock",
       {{"call", "vm.send-migration"}, {"destination_url", "unix:/run/dst.sock"}}},
      {"PUT", "vm.shutdown", std::nullopt, "vm.shutdown", {{"call", "vm.shutdown"}}},
      {"GET", "vm.pmu", std::nullopt, "vm.pmu", {{"call", "vm.pmu"}}},
  };
  std::vector<std::string> expected_calls;
  for (const Case& c : cases) {
    HttpReply r = http_request(socket_, c.method, "/api/v1/" + c.verb, c.body);
    EXPECT_EQ(r.status, 200) << c.verb << ": " << r.raw_body;
    EXPECT_EQ(r.content_type, "application/json") << c.verb;
    EXPECT_EQ(r.body, c.answer) << c.verb;
    expected_calls.push_back(c.call);
  }
  EXPECT_EQ(vm_.calls(), expected_calls);
}

TEST_F(ApiServerTest, NullSuccessBodyIsSentAsEmptyObject) {
  vm_.respond = [](const std::string&, const std::string&) { return ApiResponse{200, nullptr}; };
  HttpReply r = http_request(socket_, "PUT", "/api/v1/vm.pause");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.raw_body, "{}");
}

TEST_F(ApiServerTest, UnknownPathIs404) {
  for (const char* path : {"/", "/api/v1/", "/api/v1/vm.pausex", "/api/v1/vmXpause",
                           "/api/v2/vm.pause", "/api/v1/vm.pause/", "/api/v1/vm.boot"}) {
    HttpReply r = http_request(socket_, "GET", path);
    expect_error(r, 404, std::string("no endpoint ") + path);
    EXPECT_THAT(r.body["error"].get<std::string>(), HasSubstr("vm.send-migration"))
        << "lists the endpoints";
  }
  EXPECT_TRUE(vm_.calls().empty());
}

TEST_F(ApiServerTest, WrongMethodIs405WithAllow) {
  struct Case {
    std::string method, verb, allow;
  };
  for (const Case& c : std::vector<Case>{{"GET", "vm.pause", "PUT"},
                                         {"POST", "vm.snapshot", "PUT"},
                                         {"DELETE", "vm.shutdown", "PUT"},
                                         {"PUT", "vm.info", "GET"},
                                         {"POST", "vmm.ping", "GET"},
                                         {"HEAD", "vm.pmu", "GET"},
                                         {"PATCH", "vm.resume", "PUT"}}) {
    HttpReply r = http_request(socket_, c.method, "/api/v1/" + c.verb);
    EXPECT_EQ(r.status, 405) << c.method << " " << c.verb;
    EXPECT_EQ(r.allow, c.allow) << c.method << " " << c.verb;
    if (c.method != "HEAD")
      expect_error(r, 405, c.verb + " takes " + c.allow + ", not " + c.method);
  }
  EXPECT_TRUE(vm_.calls().empty());
}

TEST_F(ApiServerTest, MalformedJsonIs400) {
  for (const char* body :
       {"{", "{\"destination_url\": }", "nul", "{\"a\":1}}", "\xff\xfe", "{\"a\":1e99999}"}) {
    expect_error(http_request(socket_, "PUT", "/api/v1/vm.snapshot", body), 400, "body at 1:");
    expect_error(http_request(socket_, "PUT", "/api/v1/vm.pause", body), 400, "body at 1:");
  }
  for (const char* body : {"[]", "\"file:///x\"", "1", "null"})
    expect_error(http_request(socket_, "PUT", "/api/v1/vm.snapshot", body), 400,
                 "body must be a JSON object");
  EXPECT_TRUE(vm_.calls().empty());
}

TEST_F(ApiServerTest, UnknownKeysAre400NamingThem) {
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.pause", R"({"force": true})"), 400,
               "unknown key(s) in the body of vm.pause: \"force\"");
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.send-migration",
                            R"({"destination_url": "unix:/x", "local": true, "z": 1})"),
               400, "unknown key(s) in the body of vm.send-migration: \"local\", \"z\"");
  EXPECT_TRUE(vm_.calls().empty());
}

TEST_F(ApiServerTest, MissingOrWrongDestinationUrlIs400) {
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.snapshot"), 400,
               "vm.snapshot needs \"destination_url\": \"file:///DIR\"");
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.snapshot", "{}"), 400,
               "vm.snapshot needs \"destination_url\"");
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.send-migration", "{}"), 400,
               "vm.send-migration needs \"destination_url\": \"unix:/PATH\"");
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.snapshot", R"({"destination_url": 7})"),
               400, "destination_url must be a string");
  for (const char* url :
       {"unix:/run/x.sock", "file://relative/dir", "file://", "http://host/x", "/var/snap", ""})
    expect_error(http_request(socket_, "PUT", "/api/v1/vm.snapshot",
                              nlohmann::json{{"destination_url", url}}.dump()),
                 400,
                 "destination_url of vm.snapshot must be \"file:///DIR\" (an absolute path), not ");
  for (const char* url : {"file:///var/snap", "unix:relative.sock", "unix:", "unix", "tcp:host:1"})
    expect_error(http_request(socket_, "PUT", "/api/v1/vm.send-migration",
                              nlohmann::json{{"destination_url", url}}.dump()),
                 400, "destination_url of vm.send-migration must be \"unix:/PATH\"");
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.snapshot",
                            R"({"destination_url": "file:///a\u0000b"})"),
               400, "(an absolute path)");
  EXPECT_TRUE(vm_.calls().empty());
}

// The request in one write: the server answers a GET's body without reading it and closes, and
// a Unix socket closed with unread data resets its peer (ECONNRESET), so a client whose body
// arrived in a second write after the headers could lose the answer (httplib's client writes
// them apart: this case failed that way once in CI). The server does no lingering close yet.
TEST_F(ApiServerTest, BodyOnGetIs400) {
  const std::string reply = raw_exchange(
      socket_, "GET /api/v1/vm.info HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 400 "));
  EXPECT_THAT(reply, HasSubstr(R"({"error":"vm.info takes no body"})"));
  EXPECT_TRUE(vm_.calls().empty());
}

TEST_F(ApiServerTest, BodyOver64KiBIs413AndExactly64KiBIsRead) {
  const std::string request = R"({"destination_url": "file:///d"})";
  std::string exact = request + std::string(ApiServer::kMaxBodyBytes - request.size(), ' ');
  ASSERT_EQ(exact.size(), 65536u);
  EXPECT_EQ(http_request(socket_, "PUT", "/api/v1/vm.snapshot", exact).status, 200);
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.snapshot", exact + " "), 413,
               "request body larger than 65536 bytes");
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.pause", std::string(1 << 20, 'x')), 413,
               "65536");
  EXPECT_EQ(vm_.calls(), std::vector<std::string>{"vm.snapshot file:///d"});
}

TEST_F(ApiServerTest, ChunkedBodyIs411) {
  std::string reply =
      raw_exchange(socket_,
                   "PUT /api/v1/vm.pause HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "2\r\n{}\r\n0\r\n\r\n");
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 411 "));
  EXPECT_THAT(reply, HasSubstr("Content-Length"));
  EXPECT_TRUE(vm_.calls().empty());
}

// A PUT without Content-Length would be read until the client closes, without limit; a
// compressed body would be inflated without limit (httplib decompresses gzip and brotli).
TEST_F(ApiServerTest, PutWithoutContentLengthIs411) {
  std::string reply = raw_exchange(socket_, "PUT /api/v1/vm.pause HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 411 "));
  EXPECT_THAT(reply, HasSubstr("Content-Length: 0 for no body"));
  EXPECT_TRUE(vm_.calls().empty());
}

TEST_F(ApiServerTest, CompressedBodyIs415) {
  std::string reply = raw_exchange(socket_,
                                   "PUT /api/v1/vm.pause HTTP/1.1\r\nHost: x\r\n"
                                   "Content-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 415 "));
  EXPECT_THAT(reply, HasSubstr("Content-Encoding is not accepted"));
  EXPECT_TRUE(vm_.calls().empty());
}

TEST_F(ApiServerTest, VmExceptionIs500AndTheServerGoesOn) {
  vm_.respond = [](const std::string& name, const std::string&) -> ApiResponse {
    if (name == "vm.pause") throw std::runtime_error("vCPU 0 did not stop");
    if (name == "vm.resume") throw 42;
    return ApiResponse{200, {{"version", "fake"}}};
  };
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.pause"), 500,
               "vm.pause failed: vCPU 0 did not stop");
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.resume"), 500,
               "vm.resume failed: unknown exception");
  HttpReply ping = http_request(socket_, "GET", "/api/v1/vmm.ping");
  EXPECT_EQ(ping.status, 200);
  EXPECT_EQ(ping.body, (nlohmann::json{{"version", "fake"}}));
}

TEST_F(ApiServerTest, VmErrorAnswersPassThroughAndAreNormalized) {
  vm_.respond = [](const std::string& name, const std::string&) -> ApiResponse {
    if (name == "vm.pause") return error_response(409, "the VM is already paused");
    if (name == "vm.resume") return ApiResponse{409, nullptr};
    if (name == "vm.shutdown") return ApiResponse{503, "busy"};
    if (name == "vm.info") return ApiResponse{204, nullptr};  // not our convention
    return ApiResponse{302, {}};
  };
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.pause"), 409, "the VM is already paused");
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.resume"), 409, "vm.resume failed");
  expect_error(http_request(socket_, "PUT", "/api/v1/vm.shutdown"), 503, "busy");
  expect_error(http_request(socket_, "GET", "/api/v1/vm.info"), 500,
               "vm.info answered with HTTP status 204");
  expect_error(http_request(socket_, "GET", "/api/v1/vm.pmu"), 500,
               "vm.pmu answered with HTTP status 302");
}

TEST_F(ApiServerTest, ErrorReasonsThatAreNotUtf8AreSent) {
  vm_.respond = [](const std::string&, const std::string&) -> ApiResponse {
    throw std::runtime_error("bad byte \xff here");
  };
  HttpReply r = http_request(socket_, "PUT", "/api/v1/vm.pause");
  expect_error(r, 500, "bad byte ");
}

TEST_F(ApiServerTest, CallsNeverOverlap) {
  vm_.delay = std::chrono::milliseconds(100);
  std::vector<std::thread> clients;
  std::atomic<int> ok = 0;
  for (const char* verb : {"vm.pause", "vm.resume", "vm.info", "vmm.ping"})
    clients.emplace_back([&, verb] {
      const std::string v = verb;
      if (http_request(socket_, v == "vm.info" || v == "vmm.ping" ? "GET" : "PUT", "/api/v1/" + v)
              .status == 200)
        ++ok;
    });
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(vm_.calls().size(), 4u);
  EXPECT_EQ(vm_.most_concurrent_calls(), 1);
}

// A migration takes as long as its peer makes it; the API answers meanwhile (DESIGN §4.12: a
// migration held the one-call lock, so ping hung behind a stalled destination).
TEST_F(ApiServerTest, AMigrationInProgressDoesNotHoldOtherCalls) {
  std::promise<void> migration_may_end;
  std::shared_future<void> may_end = migration_may_end.get_future().share();
  std::promise<void> migration_began;
  vm_.respond = [&](const std::string& name, const std::string&) -> ApiResponse {
    if (name == "vm.send-migration") {
      migration_began.set_value();
      may_end.wait();
    }
    return ApiResponse{200, {{"call", name}}};
  };
  std::thread migration([&] {
    const HttpReply r = http_request(socket_, "PUT", "/api/v1/vm.send-migration",
                                     R"({"destination_url":"unix:/run/x","deadline_ms":1500})");
    EXPECT_EQ(r.status, 200) << r.body;
  });
  migration_began.get_future().wait();
  EXPECT_EQ(http_request(socket_, "GET", "/api/v1/vmm.ping").status, 200);
  EXPECT_EQ(http_request(socket_, "GET", "/api/v1/vm.info").status, 200);
  migration_may_end.set_value();
  migration.join();
  EXPECT_EQ(vm_.calls()[0], "vm.send-migration unix:/run/x deadline_ms=1500");
}

TEST_F(ApiServerTest, TargetOver8KiBIs414AndHeadersOver80KiBAre431) {
  const std::string long_target = "/api/v1/vm.info?" + std::string(8 * 1024, 'q');
  std::string reply = raw_exchange(socket_, "GET " + long_target + " HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 414 "));
  EXPECT_THAT(reply, HasSubstr(R"({"error":"request target too long"})"));
  reply = raw_exchange(socket_, "GET /api/v1/vm.info HTTP/1.1\r\nX-Big: " +
                                    std::string(81 * 1024, 'h') + "\r\n\r\n");
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 431 "));
  EXPECT_THAT(reply, HasSubstr(R"({"error":"request headers too large"})"));
  EXPECT_TRUE(vm_.calls().empty());
  // A query is not part of the path: the route is found.
  EXPECT_EQ(http_request(socket_, "GET", "/api/v1/vm.info?verbose=1").status, 200);
}

// curl sends "Expect: 100-continue" with bodies over 1 KiB and waits for the go-ahead.
TEST_F(ApiServerTest, ExpectContinueIsAnsweredBeforeTheBody) {
  const std::string body = R"({"destination_url": "file:///d"})";
  int fd = connect_unix(socket_);
  ASSERT_GE(fd, 0);
  send_all(fd,
           "PUT /api/v1/vm.snapshot HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
           "Content-Length: " +
               std::to_string(body.size()) + "\r\n\r\n");
  const std::string go_ahead = "HTTP/1.1 100 Continue\r\n\r\n";
  std::string got(go_ahead.size(), '\0');
  ASSERT_EQ(recv(fd, got.data(), got.size(), MSG_WAITALL), static_cast<ssize_t>(got.size()));
  EXPECT_EQ(got, go_ahead);
  EXPECT_TRUE(vm_.calls().empty()) << "the VM is called only once the body is there";
  send_all(fd, body);
  EXPECT_THAT(read_until_closed(fd), HasSubstr("HTTP/1.1 200 "));
  close(fd);
  EXPECT_EQ(vm_.calls(), std::vector<std::string>{"vm.snapshot file:///d"});
}

TEST_F(ApiServerTest, AnswerToHeadHasNoBody) {
  const std::string reply =
      raw_exchange(socket_, "HEAD /api/v1/vm.pmu HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 405 "));
  EXPECT_THAT(reply, HasSubstr("Allow: GET\r\n"));
  EXPECT_EQ(reply.substr(reply.size() - 4), "\r\n\r\n") << reply;
}

TEST_F(ApiServerTest, ARequestInHttp0Point9OrHttp2IsRefused) {
  EXPECT_EQ(raw_exchange(socket_, "GET /api/v1/vmm.ping\r\n\r\n").rfind("HTTP/1.1 400 ", 0), 0u);
  EXPECT_EQ(raw_exchange(socket_, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").rfind("HTTP/1.1 400 ", 0),
            0u);
  EXPECT_TRUE(vm_.calls().empty());
}

// ---- Clients that misbehave below HTTP: after each, the server answers and the VM saw nothing.

void expect_still_serving(const std::string& socket, const FakeVmApi& vm) {
  EXPECT_TRUE(vm.calls().empty());
  HttpReply ping = http_request(socket, "GET", "/api/v1/vmm.ping");
  EXPECT_EQ(ping.status, 200);
  EXPECT_EQ(vm.calls(), std::vector<std::string>{"vmm.ping"});
}

TEST_F(ApiServerTest, GarbageBytesGet400) {
  // A TLS ClientHello's first bytes: someone speaking another protocol.
  std::string reply =
      raw_exchange(socket_, bytes("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n"));
  EXPECT_THAT(reply, HasSubstr("HTTP/1.1 400 "));
  EXPECT_THAT(reply, HasSubstr(R"({"error":"malformed HTTP request"})"));
  EXPECT_EQ(raw_exchange(socket_, bytes("\0\0\0\0\0\0\0\0\n\n\n\n")).rfind("HTTP/1.1 400 ", 0), 0u);
  EXPECT_EQ(raw_exchange(socket_, "GET /api/v1/vmm.ping\r\n\r\n").rfind("HTTP/1.1 400 ", 0), 0u);
  expect_still_serving(socket_, vm_);
}

TEST_F(ApiServerTest, HalfARequestThenHangUp) {
  for (const std::string& part :
       {std::string("PUT /api/v1/vm.pa"),
        std::string("PUT /api/v1/vm.pause HTTP/1.1\r\nHost: x\r\nContent-Le"),
        std::string("PUT /api/v1/vm.snapshot HTTP/1.1\r\nContent-Length: "
                    "40\r\n\r\n{\"destination_url\":")}) {
    int fd = connect_unix(socket_);
    ASSERT_GE(fd, 0);
    send_all(fd, part);
    close(fd);
  }
  expect_still_serving(socket_, vm_);
}

TEST_F(ApiServerTest, HugeContentLengthThenHangUp) {
  int fd = connect_unix(socket_);
  ASSERT_GE(fd, 0);
  send_all(
      fd,
      "PUT /api/v1/vm.snapshot HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n{\"dest");
  close(fd);
  // The same within the limit: a body that never comes.
  fd = connect_unix(socket_);
  send_all(fd, "PUT /api/v1/vm.pause HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n{");
  close(fd);
  expect_still_serving(socket_, vm_);
}

TEST_F(ApiServerTest, AStalledClientDoesNotHoldUpOthers) {
  int idle = connect_unix(socket_);  // connects, sends nothing, keeps the connection
  int half = connect_unix(socket_);
  send_all(half, "PUT /api/v1/vm.pause HTTP/1.1\r\nContent-Length: 2\r\n\r\n");
  const auto before = std::chrono::steady_clock::now();
  expect_still_serving(socket_, vm_);
  EXPECT_LT(std::chrono::steady_clock::now() - before,
            std::chrono::seconds(ApiServer::kIoTimeoutSeconds));
  // The server gives up on the stalled request after its read timeout, without calling the VM.
  std::string reply = read_until_closed(half);
  EXPECT_EQ(vm_.calls(), std::vector<std::string>{"vmm.ping"}) << reply;
  close(idle);
  close(half);
}

// ---- The socket file.

TEST_F(ApiServerTest, SocketIsOwnerOnlyAndRemovedAtStop) {
  struct stat st;
  ASSERT_EQ(lstat(socket_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  server_->stop();
  EXPECT_NE(lstat(socket_.c_str(), &st), 0);
  server_->stop();  // idempotent
  EXPECT_LT(connect_unix(socket_), 0);
}

TEST_F(ApiServerTest, ALiveSocketIsRefusedAndKeepsServing) {
  FakeVmApi other_vm;
  ApiServer other(socket_, other_vm);
  const Status error = other.start();
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.error().message,
            "API socket " + socket_ + ": another process is listening on it");
  other.stop();  // not started: must not remove the first server's socket
  expect_still_serving(socket_, vm_);
  EXPECT_TRUE(other_vm.calls().empty());
}

TEST(ApiServerSocketFileTest, AStaleSocketIsReplaced) {
  ShortTempDir dir;
  const std::string path = dir.path() + "/api.sock";
  ASSERT_TRUE(make_stale_socket(path));
  FakeVmApi vm;
  ApiServer server(path, vm);
  const Status started = server.start();
  ASSERT_TRUE(started.ok()) << started.error().message;
  expect_still_serving(path, vm);
}

TEST(ApiServerSocketFileTest, SomethingElseAtThePathIsLeftAlone) {
  ShortTempDir dir;
  const std::string path = dir.path() + "/api.sock";
  std::ofstream(path) << "not a socket";
  FakeVmApi vm;
  ApiServer server(path, vm);
  EXPECT_EQ(server.start().error().message, "API socket " + path + " exists and is not a socket");
  std::ifstream in(path);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "not a socket");
}

TEST(ApiServerSocketFileTest, BadPathsAreRefused) {
  FakeVmApi vm;
  EXPECT_EQ(ApiServer("", vm).start().error().message, "API socket path is empty");
  const std::string long_path = "/tmp/" + std::string(103, 'x');
  EXPECT_EQ(
      ApiServer(long_path, vm).start().error().message,
      "API socket path " + long_path + " is longer than 107 bytes (the limit of a Unix socket)");
  const Status error = ApiServer("/nonexistent-dir/api.sock", vm).start();
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.error().message,
            "API socket /nonexistent-dir/api.sock: cannot bind: No such file or directory");
}

TEST(ApiServerSocketFileTest, StopRightAfterStartAndDestructorStop) {
  ShortTempDir dir;
  const std::string path = dir.path() + "/api.sock";
  FakeVmApi vm;
  for (int i = 0; i < 20; ++i) {
    ApiServer server(path, vm);
    ASSERT_TRUE(server.start().ok());
    if (i % 2) server.stop();  // else the destructor stops
  }
  struct stat st;
  EXPECT_NE(lstat(path.c_str(), &st), 0);
}

}  // namespace
}  // namespace vmm::api
