// The route table and the body checks on their own (the server tests go through HTTP).
#include "vmm/api/request_body.h"

#include <gtest/gtest.h>

#include "vmm/api/api_routes.h"

namespace vmm::api {
namespace {

const ApiRoute& route(std::string_view name) {
  const ApiRoute* r = find_route_by_name(name);
  EXPECT_NE(r, nullptr) << name;
  return *r;
}

std::string error_of(std::string_view name, std::string_view body) {
  auto r = check_request_body(route(name), body);
  return !r.ok() ? r.error().message : "";
}

TEST(ApiRoutesTest, TheEndpointsOfDesign410) {
  std::vector<std::string> seen;
  for (const ApiRoute& r : api_routes()) {
    seen.push_back(std::string(r.method) + " " + r.path());
    EXPECT_EQ(find_route_by_path(r.path()), &r);
    EXPECT_EQ(find_route_by_name(r.name), &r);
  }
  EXPECT_EQ(seen,
            (std::vector<std::string>{"GET /api/v1/vmm.ping", "GET /api/v1/vm.info",
                                      "PUT /api/v1/vm.pause", "PUT /api/v1/vm.resume",
                                      "PUT /api/v1/vm.snapshot", "PUT /api/v1/vm.send-migration",
                                      "PUT /api/v1/vm.shutdown", "GET /api/v1/vm.pmu"}));
  EXPECT_EQ(route("vm.snapshot").destination_scheme, "file://");
  EXPECT_EQ(route("vm.send-migration").destination_scheme, "unix:");
  for (const char* path :
       {"", "/", "/api/v1/", "/api/v1", "api/v1/vm.info", "/api/v1/vm.info/", "/API/V1/vm.info"})
    EXPECT_EQ(find_route_by_path(path), nullptr) << path;
  EXPECT_EQ(find_route_by_name(""), nullptr);
}

TEST(RequestBodyTest, DestinationUrls) {
  auto ok = check_request_body(route("vm.snapshot"), R"({"destination_url":"file:///"})");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok.value().destination_url, "file:///");
  auto mig =
      check_request_body(route("vm.send-migration"), R"(  {"destination_url" : "unix:/a b"}  )");
  ASSERT_TRUE(mig.ok());
  EXPECT_EQ(mig.value().destination_url, "unix:/a b");
  EXPECT_EQ(error_of("vm.snapshot", ""), "vm.snapshot needs \"destination_url\": \"file:///DIR\"");
  EXPECT_EQ(error_of("vm.snapshot", R"({"destination_url":"FILE:///x"})"),
            "destination_url of vm.snapshot must be \"file:///DIR\" (an absolute path), not "
            "\"FILE:///x\"");
  EXPECT_EQ(error_of("vm.send-migration", R"({"destination_url":null})"),
            "destination_url must be a string like \"unix:/PATH\"");
}

TEST(RequestBodyTest, BodiesWithoutKeys) {
  for (const char* body : {"", "{}", " { } "}) EXPECT_EQ(error_of("vm.pause", body), "") << body;
  EXPECT_EQ(error_of("vm.pause", " "),
            "body at 1:2: JSON syntax "
            "error while parsing value - unexpected end of input; expected "
            "'[', '{', or a literal");
  EXPECT_EQ(error_of("vm.shutdown", R"({"destination_url":"file:///x"})"),
            "unknown key(s) in the body of vm.shutdown: \"destination_url\"");
  EXPECT_EQ(error_of("vm.info", "{}"), "vm.info takes no body");
  EXPECT_EQ(error_of("vm.info", ""), "");
}

TEST(RequestBodyTest, AMigrationsDeadlineIsAnIntegerInRange) {
  auto mig = check_request_body(route("vm.send-migration"),
                                R"({"destination_url":"unix:/m","deadline_ms":2500})");
  ASSERT_TRUE(mig.ok()) << mig.error().message;
  EXPECT_EQ(mig.value().deadline_ms, 2500);
  EXPECT_EQ(check_request_body(route("vm.send-migration"), R"({"destination_url":"unix:/m"})")
                .value()
                .deadline_ms,
            std::nullopt);
  for (const char* bad : {"99", "3600001", "1.5", "\"9\"", "-1", "1e40"})
    EXPECT_EQ(error_of("vm.send-migration",
                       std::string(R"({"destination_url":"unix:/m","deadline_ms":)") + bad + "}"),
              std::string("deadline_ms must be an integer from 100 to 3600000, not ") +
                  (std::string(bad) == "1e40" ? "1e+40" : bad))
        << bad;
  EXPECT_EQ(error_of("vm.snapshot", R"({"destination_url":"file:///x","deadline_ms":500})"),
            "unknown key(s) in the body of vm.snapshot: \"deadline_ms\"");
}

TEST(RequestBodyTest, ParseJsonBody) {
  EXPECT_EQ((parse_json_body("[1]")).value(), nlohmann::json::array({1}));
  EXPECT_EQ((parse_json_body("{")).error().message.rfind("body at 1:2: JSON syntax error", 0), 0u);
  // No request nests; a crafted deep body is refused while it is parsed (before anything
  // recurses through it).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ((parse_json_body(deep)).error().message,
            "body at 1:17: JSON nests deeper than 16 objects and arrays");
  const std::string ok = std::string(16, '[') + std::string(16, ']');
  EXPECT_TRUE((parse_json_body(ok)).ok());
}

// A number too large for a double is nlohmann's out_of_range (406), not a parse_error: refused
// with its reason like any other bad body (api_body_fuzz found it escaping as an exception).
TEST(RequestBodyTest, NumberOverflowIsARefusalNotAnException) {
  for (const char* body :
       {"1e99999", R"({"destination_url":"file:///x","n":-3e87333})", "[1e400]"}) {
    auto r = parse_json_body(body);
    ASSERT_TRUE(!r.ok()) << body;
    EXPECT_NE(r.error().message.find(": JSON number overflow parsing"), std::string::npos)
        << r.error().message;
  }
  EXPECT_NE(error_of("vm.snapshot", "1e99999"), "");
}

}  // namespace
}  // namespace vmm::api
