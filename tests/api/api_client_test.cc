// `pmuvm ctl`'s side of the API socket: call_api maps each verb to its method and path against a
// real server on a fake VM, refuses what it must not send, and says why it got no answer;
// run_ctl prints the answer and turns it into the exit status (0, 1, 2, 3).
#include "vmm/api/api_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <sstream>

#include "tests/api/api_test_support.h"
#include "vmm/cli/ctl.h"

namespace vmm::api {
namespace {

using ::testing::HasSubstr;
using Outcome = ApiCallResult::Outcome;

using ApiClientTest = ApiServerTest;

TEST_F(ApiClientTest, EveryVerbReachesItsRoute) {
  struct Case {
    std::string verb;
    std::optional<std::string> body;
    std::string call;
  };
  const std::vector<Case> cases = {
      {"vmm.ping", std::nullopt, "vmm.ping"},
      {"vm.info", std::nullopt, "vm.info"},
      {"vm.pause", std::nullopt, "vm.pause"},
      {"vm.resume", "{}", "vm.resume"},
      {"vm.snapshot", R"({"destination_url":"file:///srv/snap"})", "vm.snapshot file:///srv/snap"},
      {"vm.send-migration", R"({"destination_url":"unix:/run/in.sock"})",
       "vm.send-migration unix:/run/in.sock"},
      {"vm.shutdown", std::nullopt, "vm.shutdown"},
      {"vm.pmu", std::nullopt, "vm.pmu"},
  };
  std::vector<std::string> expected;
  for (const Case& c : cases) {
    ApiCallResult r = call_api(socket_, c.verb, c.body);
    ASSERT_EQ(r.outcome, Outcome::kResponse) << c.verb << ": " << r.error;
    EXPECT_EQ(r.status, 200) << c.verb;
    EXPECT_EQ(r.error, "");
    expected.push_back(c.call);
  }
  EXPECT_EQ(vm_.calls(), expected);
  EXPECT_EQ(call_api(socket_, "vmm.ping").body, (nlohmann::json{{"version", "fake"}}));
}

TEST_F(ApiClientTest, UsageErrorsSendNothing) {
  ApiCallResult unknown = call_api(socket_, "vm.boot");
  EXPECT_EQ(unknown.outcome, Outcome::kUsageError);
  EXPECT_EQ(unknown.error,
            "unknown verb \"vm.boot\" (verbs: vmm.ping, vm.info, vm.pause, vm.resume, vm.snapshot, "
            "vm.send-migration, vm.shutdown, vm.pmu)");
  EXPECT_EQ(call_api(socket_, "/api/v1/vm.pause").outcome, Outcome::kUsageError);
  ApiCallResult not_json = call_api(socket_, "vm.snapshot", "{destination_url: file:///x}");
  EXPECT_EQ(not_json.outcome, Outcome::kUsageError);
  EXPECT_THAT(not_json.error, HasSubstr("body at 1:2: JSON syntax error"));
  ApiCallResult get_body = call_api(socket_, "vm.info", "{}");
  EXPECT_EQ(get_body.outcome, Outcome::kUsageError);
  EXPECT_EQ(get_body.error, "vm.info takes no body");
  EXPECT_TRUE(vm_.calls().empty());
}

TEST_F(ApiClientTest, ErrorStatusCarriesTheReason) {
  vm_.respond = [](const std::string&, const std::string&) {
    return error_response(409, "the VM is not running");
  };
  ApiCallResult r = call_api(socket_, "vm.pause");
  EXPECT_EQ(r.outcome, Outcome::kResponse);
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.error, "the VM is not running");
  // The server's own checks come back the same way.
  ApiCallResult bad = call_api(socket_, "vm.snapshot", R"({"destination_url":"unix:/x"})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.error, HasSubstr("must be \"file:///DIR\""));
}

TEST(ApiClientConnectTest, NoServerSaysWhy) {
  ShortTempDir dir;
  const std::string absent = dir.path() + "/absent.sock";
  ApiCallResult r = call_api(absent, "vmm.ping");
  EXPECT_EQ(r.outcome, Outcome::kNoResponse);
  EXPECT_EQ(r.error, "cannot connect to " + absent + ": No such file or directory");

  const std::string stale = dir.path() + "/stale.sock";
  ASSERT_TRUE(make_stale_socket(stale));
  EXPECT_EQ(call_api(stale, "vmm.ping").error,
            "cannot connect to " + stale + ": Connection refused");

  const std::string file = dir.path() + "/file";
  std::ofstream(file) << "x";
  EXPECT_EQ(call_api(file, "vmm.ping").error, "cannot connect to " + file + ": not a socket");

  const std::string too_long = "/tmp/" + std::string(110, 'y');
  EXPECT_EQ(call_api(too_long, "vmm.ping").error,
            "cannot connect to " + too_long + ": path longer than 107 bytes");
}

// A socket whose server is not a pmuvm: an answer that is not JSON is no answer.
TEST(ApiClientConnectTest, AnswerThatIsNotJson) {
  ShortTempDir dir;
  const std::string path = dir.path() + "/other.sock";
  httplib::Server other;
  other.set_address_family(AF_UNIX);
  other.Get(".*", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("hello", "text/plain");
  });
  ASSERT_TRUE(other.bind_to_port(path, 1));
  std::thread thread([&] { other.listen_after_bind(); });
  while (!other.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ApiCallResult r = call_api(path, "vm.info");
  other.stop();
  thread.join();
  EXPECT_EQ(r.outcome, Outcome::kNoResponse);
  EXPECT_EQ(r.error, path + ": the answer to vm.info is not JSON (HTTP 200)");
}

// A server that takes the request and closes, or answers half: no answer, said so.
TEST(ApiClientConnectTest, AServerThatHangsUpIsNoAnswer) {
  ShortTempDir dir;
  const std::string path = dir.path() + "/rude.sock";
  for (const std::string& answer :
       {std::string(), std::string("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}"),
        std::string("SSH-2.0-OpenSSH_9.2\r\n")}) {
    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr = unix_address(path);
    unlink(path.c_str());
    ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(listen(listener, 1), 0);
    std::thread server([&] {
      int fd = accept(listener, nullptr, nullptr);
      char buf[4096];
      recv(fd, buf, sizeof buf, 0);
      send_all(fd, answer);
      close(fd);
    });
    ApiCallResult r = call_api(path, "vm.info");
    server.join();
    close(listener);
    EXPECT_EQ(r.outcome, Outcome::kNoResponse) << answer;
    EXPECT_THAT(r.error, HasSubstr(path + ": no answer to vm.info: ")) << answer;
  }
}

// ---- run_ctl: what `pmuvm ctl` prints and returns.

struct CtlRun {
  int status;
  std::string out, err;
};

CtlRun ctl(const std::string& socket, const std::string& verb,
           const std::optional<std::string>& body = std::nullopt) {
  std::ostringstream out, err;
  int status = run_ctl(socket, verb, body, out, err);
  return {status, out.str(), err.str()};
}

TEST_F(ApiClientTest, CtlPrintsTheBodyIndentedAndExits0) {
  CtlRun r = ctl(socket_, "vm.snapshot", R"({"destination_url":"file:///srv/s"})");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out,
            "{\n  \"call\": \"vm.snapshot\",\n  \"destination_url\": \"file:///srv/s\"\n}\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(ApiClientTest, CtlErrorStatusExits1) {
  vm_.respond = [](const std::string&, const std::string&) {
    return error_response(409, "the VM is already paused");
  };
  CtlRun r = ctl(socket_, "vm.pause");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "pmuvm: vm.pause: 409 the VM is already paused\n");
  EXPECT_EQ(r.out, "{\n  \"error\": \"the VM is already paused\"\n}\n");
  EXPECT_EQ(ctl(socket_, "vm.send-migration", "{}").err,
            "pmuvm: vm.send-migration: 400 vm.send-migration needs \"destination_url\": "
            "\"unix:/PATH\"\n");
}

TEST_F(ApiClientTest, CtlUsageErrorExits2) {
  CtlRun r = ctl(socket_, "vm.reboot");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("pmuvm: unknown verb \"vm.reboot\""));
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(ctl(socket_, "vm.pause", "{oops").status, 2);
  EXPECT_EQ(ctl(socket_, "vm.pmu", "{}").status, 2);
  EXPECT_TRUE(vm_.calls().empty());
}

TEST(ApiClientConnectTest, CtlWithoutServerExits3) {
  ShortTempDir dir;
  const std::string absent = dir.path() + "/none.sock";
  CtlRun r = ctl(absent, "vmm.ping");
  EXPECT_EQ(r.status, 3);
  EXPECT_EQ(r.err, "pmuvm: cannot connect to " + absent + ": No such file or directory\n");
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace vmm::api
