#include "vmm/boot/image_file.h"

#include <cstring>

#include "vmm/regular_file.h"

namespace vmm {

Status read_image_into(const std::string& path, uint64_t limit, const std::string& limit_why,
                       const std::function<void*(size_t size)>& storage) {
  // A user's image may well be a symbolic link (/boot/vmlinuz): it is followed.
  const std::optional<RegularFileProblem> problem =
      read_regular_file(path, limit, /*follow_links=*/true, storage);
  if (!problem) return {};
  using Kind = RegularFileProblem::Kind;
  switch (problem->kind) {
    case Kind::kCannotOpen:
      return Error::usage(path + ": cannot open (" + std::strerror(problem->error_number) + ")");
    case Kind::kReadError:
      return Error::usage(path + ": cannot read (" + std::strerror(problem->error_number) + ")");
    case Kind::kSymbolicLink:  // not asked for: links are followed
    case Kind::kNotRegular: return Error::usage(path + ": not a regular file");
    case Kind::kTooLarge:
      return Error::usage(path + ": " + std::to_string(problem->size) + " bytes, larger than " +
                          limit_why);
    case Kind::kChanged: break;
  }
  return Error::usage(path + ": changed size while it was read");
}

}  // namespace vmm
