// What each KVM exit of a vCPU does (Machine::Impl::dispatch): port I/O reaches the devices and
// the exit port, MSR accesses the vCPU's PMU models and pmuvm's paravirtual MSRs, a single step
// the KVM stepper (machine_stepping.cc), and a fatal exit ends the run with what is known of it.
#include <spdlog/spdlog.h>

#include <array>
#include <cstdio>
#include <span>
#include <cstring>
#include <string>

#include "guest/abi/pmuvm_abi.h"
#include "vmm/machine_impl.h"

namespace vmm {
namespace {

constexpr uint32_t kMsrLwpcbAddress = 0xC0000106;  // LWPMSR1

}  // namespace

uint32_t Machine::Impl::linux_task(uint64_t cr3) {
  std::lock_guard<std::mutex> g(report_lock);
  // Every exec or fork makes an address space: past the report's limit they share one entry
  // (the guest must not grow this map without bound).
  if (linux_tasks.size() >= LwpReport::kMaxTasks && !linux_tasks.count(cr3))
    return LwpReport::kOtherTasks;
  auto [it, added] = linux_tasks.emplace(cr3, static_cast<uint32_t>(linux_tasks.size() + 1));
  if (added) {
    char name[48];
    std::snprintf(name, sizeof name, "CR3 %#llx", static_cast<unsigned long long>(cr3));
    report.set_task_name(it->second, name);
  }
  return it->second;
}

// PMUVM_PORT_CONSOLE (guest/abi/pmuvm_abi.h): console bytes in a block of guest RAM, the same
// output as the 16550's THR. A block outside RAM or longer than allowed is dropped.
void Machine::Impl::write_console_block(uint32_t gpa) {
  uint32_t length = 0;
  std::array<std::byte, PMUVM_CONSOLE_BLOCK_BYTES> bytes;
  if (!ram.read(gpa, std::as_writable_bytes(std::span(&length, 1))) ||
      length > bytes.size() || !ram.read(uint64_t{gpa} + 4, std::span(bytes).first(length))) {
    spdlog::debug("console block at {:#x}: not in RAM or {} bytes long; dropped", gpa, length);
    return;
  }
  std::lock_guard<std::mutex> g(serial_lock);
  for (std::byte b : std::span(bytes).first(length)) console_output(static_cast<char>(b));
}

void Machine::Impl::handle_io(Vcpu& v) {
  kvm_run* run = v.kvm->run_state();
  auto* data = reinterpret_cast<uint8_t*>(run) + run->io.data_offset;
  const uint16_t port = run->io.port;
  if (port == PMUVM_PORT_EXIT && run->io.direction == KVM_EXIT_IO_OUT && run->io.size == 4) {
    uint32_t status = 0;
    std::memcpy(&status, data, 4);
    spdlog::debug("guest reported exit status {}", status);
    finish(static_cast<int>(status & 0xFF));
    return;
  }
  const bool out = run->io.direction == KVM_EXIT_IO_OUT;
  // The block console takes one 4-byte OUT; anything else at its port is a port with no device.
  if (port == PMUVM_PORT_CONSOLE && out && run->io.size == 4 && run->io.count == 1) {
    uint32_t block = 0;
    std::memcpy(&block, data, 4);
    write_console_block(block);
  } else {
    for (uint32_t i = 0; i < run->io.count; ++i, data += run->io.size) {
      std::lock_guard<std::mutex> g(serial_lock);
      if (serial.owns(port)) {
        if (out) serial.write(port, data[0]);
        else data[0] = serial.read(port);
      } else if (rtc.owns(port)) {
        if (out) rtc.write(port, data[0]);
        else data[0] = rtc.read(port);
      } else if (i8042.owns(port)) {
        if (!out) data[0] = i8042.read(port);
        else if (i8042.write(port, data[0])) {
          spdlog::info("vCPU {}: guest reset the machine (i8042 command 0xFE): exit status 0",
                       v.kvm->index());
          finish(0);
          return;
        }
      } else if (!out) {
        std::memset(data, 0xFF, run->io.size);  // no device: reads float high, writes are dropped
      }
    }
  }
  // Outside serial_lock: pausing takes pause_lock, which pause() holds while it takes serial_lock.
  std::optional<std::string> reason;
  {
    std::lock_guard<std::mutex> g(serial_lock);
    reason = std::exchange(output_pause, std::nullopt);
  }
  if (reason) pause_at_progress(*reason);
}

void Machine::Impl::handle_msr(Vcpu& v, bool write) {
  kvm_run* run = v.kvm->run_state();
  const kvm_sregs s = v.kvm->exit_sregs();
  // CPL is SS.DPL (architecturally equal to it; AMD keeps CPL there, and KVM's SVM code reports
  // it so). A selector's RPL is what the guest loaded, not the privilege level.
  const uint8_t cpl = s.ss.dpl;
  const uint32_t msr = run->msr.index;
  run->msr.error = 0;
  if (write) {
    const StepContext ctx{s.cr3, s.fs.base, s.gs.base};
    switch (msr) {
      case PMUVM_MSR_USER_ENTRY:
        // Offered to the bundled kernel without the KVM stepper, which needs no announcement.
        v.control->enter_user(s.cr3);  // completes a deferred LLWPCB before ring 3 (§5.3)
        if (v.guest_stepper)
          if (auto retired = v.guest_stepper->on_user_entry(run->msr.data, ctx)) {
            v.control->retire(*retired, s.cr3);
            // A SYSCALL counted late: its next boundary was in the kernel (pmuvm_abi.h).
            deliver_page_fault(v, [](const VcpuPageFaults::Fault&) { return false; });
          }
        return;
      case PMUVM_MSR_STEP:
        if (!v.guest_stepper) break;  // not offered: #GP, the kernel stops stepping
        if (auto retired = v.guest_stepper->on_step(run->msr.data, ctx)) {
          v.control->retire(*retired, s.cr3);
          count_instruction(v);
          // The #DB handler's frame is the boundary after the instruction: the kernel handles
          // it as a user #PF when the VMM marks it (PMUVM_VECTOR_LWP_PAGE_FAULT).
          const uint64_t frame = run->msr.data;
          deliver_page_fault(v, [&](const VcpuPageFaults::Fault& f) {
            if (!v.guest_stepper->mark_page_fault(frame, f.error_code)) return false;
            v.kvm->set_cr2(f.linear);
            return true;
          });
        }
        return;
      case PMUVM_MSR_TASK: v.task = static_cast<uint32_t>(run->msr.data); return;
      default: break;
    }
    // Linux names no tasks: an LWPCB loaded on a context switch or by LLWPCB belongs to the
    // process whose address space is current, numbered in the order they first profile (a
    // page-table root the kernel reuses for a later process keeps its number).
    if (is_linux() && msr == kMsrLwpcbAddress && run->msr.data != 0) v.task = linux_task(s.cr3);
    const MsrOutcome o = v.control->write_msr(msr, run->msr.data, cpl, s.cr3);
    run->msr.error = (!o.handled || o.general_protection) ? 1 : 0;
  } else {
    if (msr == kMsrMiscEnable && options.profile.misc_enable) {
      run->msr.data = *options.profile.misc_enable;
      return;
    }
    const MsrOutcome o = v.control->read_msr(msr, cpl, s.cr3);
    run->msr.data = o.value;
    run->msr.error = (!o.handled || o.general_protection) ? 1 : 0;
  }
  if (run->msr.error)
    spdlog::debug("vCPU {}: {} MSR {:#x} at CPL {} -> #GP", v.kvm->index(),
                  write ? "WRMSR" : "RDMSR", msr, cpl);
}

std::string Machine::Impl::last_exits(const Vcpu& v) {
  return "\nthe last exits of this vCPU before it (the fatal one last):\n" + v.exits.describe();
}

bool Machine::Impl::dispatch(Vcpu& v) {
  kvm_run* run = v.kvm->run_state();
  switch (run->exit_reason) {
    case KVM_EXIT_IO: handle_io(v); return true;
    case KVM_EXIT_X86_RDMSR: handle_msr(v, false); return true;
    case KVM_EXIT_X86_WRMSR: handle_msr(v, true); return true;
    case KVM_EXIT_INTR: return true;
    case KVM_EXIT_DEBUG: on_step(v); return true;
    case KVM_EXIT_HLT: return true;  // in-kernel LAPIC: not expected, harmless
    case KVM_EXIT_MMIO:
      // The guest decides how many there are: a few are logged, the rest counted (--stats: I/O).
      if (const LogBudget::Verdict said = v.mmio_warnings.take(); said != LogBudget::Verdict::kQuiet)
        spdlog::warn("vCPU {}: MMIO {} at {:#x} with no device{}", v.kvm->index(),
                     run->mmio.is_write ? "write" : "read", run->mmio.phys_addr,
                     LogBudget::suffix(said));
      if (!run->mmio.is_write) std::memset(run->mmio.data, 0xFF, sizeof run->mmio.data);
      return true;
    case KVM_EXIT_SHUTDOWN: {
      if (is_linux()) {  // Linux's last reboot method (BOOT_TRIPLE), as on a PC: a reset
        spdlog::info("vCPU {}: guest triple fault (a Linux reboot): exit status 0",
                     v.kvm->index());
        finish(0);
        return false;
      }
      // On AMD, KVM re-initialises the VMCB after a shutdown intercept (its contents are
      // undefined then), so the registers read back are the reset state, not the crash site.
      const kvm_regs r = v.kvm->regs();
      const bool reset_state = r.rip == 0xFFF0 && v.kvm->sregs().cs.selector == 0xF000;
      fail("guest triple fault on vCPU " + std::to_string(v.kvm->index()) + ": " +
           (reset_state ? "registers lost (KVM on AMD SVM resets the vCPU on a shutdown; "
                          "after the reset: " + describe_registers(*v.kvm) + ")"
                        : describe_registers(*v.kvm)) +
           last_exits(v));
      return false;
    }
    case KVM_EXIT_FAIL_ENTRY:
      fail("KVM could not enter vCPU " + std::to_string(v.kvm->index()) +
           " (hardware reason " +
           std::to_string(run->fail_entry.hardware_entry_failure_reason) + "): " +
           describe_registers(*v.kvm) + last_exits(v));
      return false;
    case KVM_EXIT_INTERNAL_ERROR:
      fail("KVM internal error " + std::to_string(run->internal.suberror) + " on vCPU " +
           std::to_string(v.kvm->index()) + ": " + describe_registers(*v.kvm) + last_exits(v));
      return false;
    default:
      fail("unexpected KVM exit reason " + std::to_string(run->exit_reason) + " on vCPU " +
           std::to_string(v.kvm->index()));
      return false;
  }
}

}  // namespace vmm
