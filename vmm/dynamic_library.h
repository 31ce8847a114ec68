// A shared library loaded with dlopen by the one subcommand or feature that needs it, and not
// linked into every pmuvm process (libvirt for `profiles --baseline`, elfutils' libdw for a
// report's code places): its functions resolved by name into typed pointers.
#pragma once

#include <dlfcn.h>

#include <string>
#include <type_traits>

namespace vmm {

class DynamicLibrary {
 public:
  // Loads `name` ("libdw.so.1"); on failure loaded() is false and why() says why.
  explicit DynamicLibrary(const char* name) : name_(name) {
    handle_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      const char* e = dlerror();
      why_ = std::string("cannot load ") + name + ": " + (e ? e : "unknown error");
    }
  }
  // The library stays loaded: its functions are used until the process ends.
  bool loaded() const { return handle_ != nullptr; }
  // Why not loaded, or the first symbol resolve() did not find; empty when all is well.
  const std::string& why() const { return why_; }

  // `fn` = the library's function `symbol` (null, and why() naming it, when it has none).
  template <typename Fn>
  void resolve(Fn& fn, const char* symbol) {
    static_assert(std::is_pointer_v<Fn>);
    fn = handle_ ? reinterpret_cast<Fn>(dlsym(handle_, symbol)) : nullptr;
    if (!fn && why_.empty()) why_ = std::string(name_) + " has no " + symbol;
  }

 private:
  const char* name_;
  void* handle_ = nullptr;
  std::string why_;
};

}  // namespace vmm
