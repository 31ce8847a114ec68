// Names for guest code addresses, from an ELF file's symbol table and DWARF line table: the
// function, the offset into it, and the source file and line where the ELF has them. The report
// shows them beside each hot address.
//
// elfutils' libdwfl reads the file (Debian's libdw1). It is loaded with dlopen when the first
// file is opened, so only a run that names addresses in a report loads it; without it (or
// without symbols) addresses stay bare hex, and the reason is said once.
//
// Addresses are the ELF's own, as linked: a static, non-PIE program (what the bundled kernel
// runs, and the static Linux programs pmuvm is used with).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace vmm {

class CodePlaces {
 public:
  // The ELF at `path`; nullopt (with `why` saying so) when libdw cannot be loaded or the file
  // cannot be read as an ELF.
  static std::unique_ptr<CodePlaces> open(const std::string& path, std::string& why);
  ~CodePlaces();
  CodePlaces(const CodePlaces&) = delete;
  CodePlaces& operator=(const CodePlaces&) = delete;

  // "function+0x1c file.c:42" (file without its directory), "function+0x1c" without line
  // information, "function" at its first byte; nullopt where no symbol covers `address`.
  std::optional<std::string> describe(uint64_t address) const;

 private:
  struct Session;
  explicit CodePlaces(std::unique_ptr<Session> session);
  std::unique_ptr<Session> session_;
};

// The places of every task's addresses (LwpReport::PlaceOf): a task's own ELF where it has one
// (the bundled kernel's programs), else the first of the `shared` files (--symbols) that knows
// the address. Files are opened when first needed; one that cannot be is said once (a warning
// naming it and why) and its addresses stay hex.
class TaskCodePlaces {
 public:
  TaskCodePlaces(std::map<uint32_t, std::string> own, std::vector<std::string> shared);
  std::optional<std::string> operator()(uint32_t task, uint64_t address);

 private:
  const CodePlaces* file(const std::string& path);

  std::map<uint32_t, std::string> own_;
  std::vector<std::string> shared_;
  std::map<std::string, std::unique_ptr<CodePlaces>> opened_;  // null: could not be opened
};

}  // namespace vmm
