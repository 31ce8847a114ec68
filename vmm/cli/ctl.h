// `pmuvm ctl --api-socket PATH VERB [JSON]` (DESIGN §4.10): one API call, printed. Kept out of
// main.cc so its output and exit statuses are tested without a process.
#pragma once

#include <optional>
#include <ostream>
#include <string>

namespace vmm::api {

// Sends VERB with the optional JSON body to the API socket at `socket_path`. Prints the answer's
// body as indented JSON on `out` (error answers too: they may carry more than the reason).
// Returns the exit status: 0 for a 2xx answer; 1 for an error status, with
// "pmuvm: VERB: STATUS REASON" on `err`; 2 for a usage error; 3 when there is no answer
// ("pmuvm: cannot connect to PATH: reason", a broken connection, a reply that is not JSON).
int run_ctl(const std::string& socket_path, const std::string& verb,
            const std::optional<std::string>& body, std::ostream& out, std::ostream& err);

}  // namespace vmm::api
