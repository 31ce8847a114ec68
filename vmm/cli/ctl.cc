#include "vmm/cli/ctl.h"

#include "vmm/api/api_client.h"

namespace vmm::api {

int run_ctl(const std::string& socket_path, const std::string& verb,
            const std::optional<std::string>& body, std::ostream& out, std::ostream& err) {
  const ApiCallResult r = call_api(socket_path, verb, body);
  switch (r.outcome) {
    case ApiCallResult::Outcome::kUsageError:
      err << "pmuvm: " << r.error << " (see pmuvm ctl --help)\n";
      return 2;
    case ApiCallResult::Outcome::kNoResponse: err << "pmuvm: " << r.error << '\n'; return 3;
    case ApiCallResult::Outcome::kResponse: break;
  }
  if (!r.body.is_null())
    out << r.body.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  if (r.status >= 200 && r.status < 300) return 0;
  err << "pmuvm: " << verb << ": " << r.status << ' ' << r.error << '\n';
  return 1;
}

}  // namespace vmm::api
