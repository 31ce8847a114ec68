// Unicorn 2 (libunicorn.so.2, QEMU's TCG as a library), loaded with dlopen by the one stepper
// that runs code in it (--stepper emulate) and by nothing else: a VM that steps with KVM never
// maps it (DESIGN §2, "link only what a process uses"). Its functions, resolved by name once per
// process, with the signatures of <unicorn/unicorn.h>.
#pragma once

#include <unicorn/unicorn.h>

namespace vmm {

struct UnicornLibrary {
  decltype(&::uc_open) open = nullptr;
  decltype(&::uc_close) close = nullptr;
  decltype(&::uc_strerror) strerror = nullptr;
  decltype(&::uc_hook_add) hook_add = nullptr;
  decltype(&::uc_ctl) ctl = nullptr;
  decltype(&::uc_mem_map_ptr) mem_map_ptr = nullptr;
  decltype(&::uc_mem_unmap) mem_unmap = nullptr;
  decltype(&::uc_mem_protect) mem_protect = nullptr;
  decltype(&::uc_mem_read) mem_read = nullptr;
  decltype(&::uc_reg_read) reg_read = nullptr;
  decltype(&::uc_reg_write) reg_write = nullptr;
  decltype(&::uc_emu_start) emu_start = nullptr;
  decltype(&::uc_emu_stop) emu_stop = nullptr;
  decltype(&::uc_context_alloc) context_alloc = nullptr;
  decltype(&::uc_context_save) context_save = nullptr;
  decltype(&::uc_context_restore) context_restore = nullptr;
  decltype(&::uc_context_free) context_free = nullptr;

  // The process's one copy, loaded at the first call; throws VmmError saying why when the
  // library or one of its functions cannot be found (tools/setup.sh installs libunicorn2).
  static const UnicornLibrary& get();
};

}  // namespace vmm
