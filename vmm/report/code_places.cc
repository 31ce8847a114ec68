#include "vmm/report/code_places.h"

#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cinttypes>
#include <cstdio>
#include <utility>

#include "vmm/dynamic_library.h"
#include "vmm/printable.h"

namespace vmm {
namespace {

// The part of libdwfl used here, resolved once from libdw.so.1 (declarations from its header,
// nothing linked: a run that never names an address never loads it).
struct Libdwfl {
  decltype(&dwfl_begin) begin = nullptr;
  decltype(&dwfl_end) end = nullptr;
  decltype(&dwfl_report_begin) report_begin = nullptr;
  decltype(&dwfl_report_offline) report_offline = nullptr;
  decltype(&dwfl_report_end) report_end = nullptr;
  decltype(&dwfl_addrmodule) addrmodule = nullptr;
  decltype(&dwfl_module_addrinfo) addrinfo = nullptr;
  decltype(&dwfl_module_getsrc) getsrc = nullptr;
  decltype(&dwfl_lineinfo) lineinfo = nullptr;
  decltype(&dwfl_errno) error_number = nullptr;
  decltype(&dwfl_errmsg) error_message = nullptr;
  Dwfl_Callbacks callbacks{};
  std::string missing;  // why it cannot be used; empty when it can
};

const Libdwfl& libdwfl() {
  static const Libdwfl lib = [] {
    Libdwfl l;
    DynamicLibrary so("libdw.so.1");
    so.resolve(l.begin, "dwfl_begin");
    so.resolve(l.end, "dwfl_end");
    so.resolve(l.report_begin, "dwfl_report_begin");
    so.resolve(l.report_offline, "dwfl_report_offline");
    so.resolve(l.report_end, "dwfl_report_end");
    so.resolve(l.addrmodule, "dwfl_addrmodule");
    so.resolve(l.addrinfo, "dwfl_module_addrinfo");
    so.resolve(l.getsrc, "dwfl_module_getsrc");
    so.resolve(l.lineinfo, "dwfl_lineinfo");
    so.resolve(l.error_number, "dwfl_errno");
    so.resolve(l.error_message, "dwfl_errmsg");
    so.resolve(l.callbacks.find_elf, "dwfl_build_id_find_elf");
    so.resolve(l.callbacks.find_debuginfo, "dwfl_standard_find_debuginfo");
    so.resolve(l.callbacks.section_address, "dwfl_offline_section_address");
    if (!so.why().empty()) l.missing = so.why() + " (elfutils' libdw1)";
    return l;
  }();
  return lib;
}

std::string base_name(const char* path) {
  const std::string p(path);
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

struct CodePlaces::Session {
  Dwfl* dwfl = nullptr;
  ~Session() {
    if (dwfl) libdwfl().end(dwfl);
  }
};

CodePlaces::CodePlaces(std::unique_ptr<Session> session) : session_(std::move(session)) {}
CodePlaces::~CodePlaces() = default;

std::unique_ptr<CodePlaces> CodePlaces::open(const std::string& path, std::string& why) {
  const Libdwfl& lib = libdwfl();
  if (!lib.missing.empty()) {
    why = lib.missing;
    return nullptr;
  }
  auto session = std::make_unique<Session>();
  session->dwfl = lib.begin(&lib.callbacks);
  if (!session->dwfl) {
    why = lib.error_message(lib.error_number());
    return nullptr;
  }
  lib.report_begin(session->dwfl);
  // A descriptor of our own (libdwfl closes it): the path is only opened, never followed into a
  // device, and a FIFO is refused at once rather than waited on.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st {};
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    ::close(fd);
    why = "not a regular file";
    return nullptr;
  }
  if (fd < 0 ||
      !lib.report_offline(session->dwfl, base_name(path.c_str()).c_str(), path.c_str(), fd)) {
    why = fd < 0 ? "cannot open it" : lib.error_message(lib.error_number());
    if (fd >= 0) ::close(fd);
    return nullptr;
  }
  lib.report_end(session->dwfl, nullptr, nullptr);
  return std::unique_ptr<CodePlaces>(new CodePlaces(std::move(session)));
}

std::optional<std::string> CodePlaces::describe(uint64_t address) const {
  const Libdwfl& lib = libdwfl();
  Dwfl_Module* module = lib.addrmodule(session_->dwfl, address);
  if (!module) return std::nullopt;
  GElf_Off offset = 0;
  GElf_Sym sym{};
  const char* name = lib.addrinfo(module, address, &offset, &sym, nullptr, nullptr, nullptr);
  if (!name || *name == '\0') return std::nullopt;
  std::string out = name;
  if (offset != 0) {
    char hex[24];
    std::snprintf(hex, sizeof hex, "+%#" PRIx64, static_cast<uint64_t>(offset));
    out += hex;
  }
  if (Dwfl_Line* line = lib.getsrc(module, address)) {
    int number = 0;
    if (const char* file = lib.lineinfo(line, nullptr, &number, nullptr, nullptr, nullptr))
      out += " " + base_name(file) + ":" + std::to_string(number);
  }
  return out;
}

TaskCodePlaces::TaskCodePlaces(std::map<uint32_t, std::string> own, std::vector<std::string> shared)
    : own_(std::move(own)), shared_(std::move(shared)) {}

const CodePlaces* TaskCodePlaces::file(const std::string& path) {
  auto it = opened_.find(path);
  if (it == opened_.end()) {
    std::string why;
    it = opened_.emplace(path, CodePlaces::open(path, why)).first;
    if (!it->second)
      spdlog::warn("LWP report: {}: {}; its addresses stay hex", printable(path), printable(why));
  }
  return it->second.get();
}

std::optional<std::string> TaskCodePlaces::operator()(uint32_t task, uint64_t address) {
  if (auto own = own_.find(task); own != own_.end()) {
    const CodePlaces* places = file(own->second);
    return places ? places->describe(address) : std::nullopt;
  }
  for (const std::string& path : shared_)
    if (const CodePlaces* places = file(path))
      if (std::optional<std::string> place = places->describe(address)) return place;
  return std::nullopt;
}

}  // namespace vmm
