// Well-formed HTTP requests to the API socket with any method, path and body, through
// httplib's client (the tests check the server, not a hand-written client).
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace vmm::api {

struct HttpReply {
  int status = 0;  // 0: no reply
  std::string raw_body;
  nlohmann::json body;  // raw_body parsed; "discarded" when it is not JSON
  std::string allow;    // the Allow header
  std::string content_type;
};

inline HttpReply http_request(const std::string& socket_path, const std::string& method,
                              const std::string& path,
                              const std::optional<std::string>& body = std::nullopt) {
  httplib::Client client(socket_path, 1);
  client.set_address_family(AF_UNIX);
  client.set_read_timeout(10);
  httplib::Request req;
  req.method = method;
  req.path = path;
  if (body) {
    req.body = *body;
    req.set_header("Content-Type", "application/json");
  }
  HttpReply reply;
  httplib::Result r = client.send(req);
  if (!r) return reply;
  reply.status = r->status;
  reply.raw_body = r->body;
  reply.body = nlohmann::json::parse(r->body, nullptr, false);
  reply.allow = r->get_header_value("Allow");
  reply.content_type = r->get_header_value("Content-Type");
  return reply;
}

}  // namespace vmm::api
