#include "vmm/emulate/unicorn_library.h"

#include <string>

#include "vmm/dynamic_library.h"
#include "vmm/vmm_error.h"

namespace vmm {

const UnicornLibrary& UnicornLibrary::get() {
  // Loaded once (a function-local static: thread-safe; every vCPU's emulator shares it). A
  // failure is kept and reported to each caller.
  static const auto loaded = [] {
    struct Loaded {
      UnicornLibrary functions;
      std::string why;
    } l;
    static DynamicLibrary library("libunicorn.so.2");
    UnicornLibrary& u = l.functions;
    library.resolve(u.open, "uc_open");
    library.resolve(u.close, "uc_close");
    library.resolve(u.strerror, "uc_strerror");
    library.resolve(u.hook_add, "uc_hook_add");
    library.resolve(u.ctl, "uc_ctl");
    library.resolve(u.mem_map_ptr, "uc_mem_map_ptr");
    library.resolve(u.mem_unmap, "uc_mem_unmap");
    library.resolve(u.mem_protect, "uc_mem_protect");
    library.resolve(u.mem_read, "uc_mem_read");
    library.resolve(u.reg_read, "uc_reg_read");
    library.resolve(u.reg_write, "uc_reg_write");
    library.resolve(u.emu_start, "uc_emu_start");
    library.resolve(u.emu_stop, "uc_emu_stop");
    library.resolve(u.context_alloc, "uc_context_alloc");
    library.resolve(u.context_save, "uc_context_save");
    library.resolve(u.context_restore, "uc_context_restore");
    library.resolve(u.context_free, "uc_context_free");
    l.why = library.why();
    return l;
  }();
  if (!loaded.why.empty())
    throw VmmError("--stepper emulate needs Unicorn 2 (Debian's libunicorn2): " + loaded.why);
  return loaded.functions;
}

}  // namespace vmm
