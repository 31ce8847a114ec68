// Where the guest kernel enters and leaves user mode, learned from the guest itself (DESIGN §4.7:
// "execution breakpoints on the kernel's return-to-user instructions, learned by decoding from
// LSTAR/the IDT"). No guest hook: the KVM stepper reads IA32_LSTAR and the IDT, decodes the
// kernel code around every entry point, and keeps each return instruction it finds (IRETQ,
// SYSRETQ, SYSRETL, SYSEXIT) as a candidate return site. It arms breakpoints on them while a
// counted task is in the kernel; stopped there it reads where the instruction goes (the IRETQ
// frame, SYSRET's RCX) and, when that is user mode, resumes counting exactly at that RIP.
//
// Which candidates are user returns is learned as they are seen going there: an IRETQ may return
// to the kernel too (Linux 6.1 has three in its entry code; only native_irq_return_iret returns
// to user mode, the NMI paths' return to the kernel). Breakpoint slots are few (four, less what
// the guest's own debugging holds), so sites are armed in order: those seen returning to user
// mode first, then SYSRETQ, then IRETQs nearest the SYSCALL entry, then the 32-bit returns;
// where the kernel is entered through the IDT (from user code that faults or is interrupted,
// and after such an entry), the IRETs first: the IDT's handlers return by IRET.
//
// Limits: code between entry points further apart than kWindow is not searched; a kernel that
// returns to user mode some other way (a far RET, a return built at run time) is not caught.
// Both hold for Linux 6.1 (all of .entry.text lies within 8 KiB of LSTAR) and the bundled kernel.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pmu/guest_memory.h"
#include "pmu/state_archive.h"
#include "vmm/precise/instruction_decoder.h"

namespace vmm {

struct ReturnSite {
  enum class Kind : uint8_t { kSysret64, kIret, kReturn32 };
  uint64_t rip = 0;
  Kind kind = Kind::kIret;
  bool seen_returning_to_user = false;
  template <class Archive>
  void archive(Archive& a) {
    a(rip, kind, seen_returning_to_user);
    if constexpr (Archive::kLoading)
      if (kind != Kind::kSysret64 && kind != Kind::kIret && kind != Kind::kReturn32)
        throw pmu::StateFormatError("return site: kind " + std::to_string(static_cast<int>(kind)) +
                                    " (0..2)");
  }
};

class KernelEntryPoints {
 public:
  static constexpr uint64_t kWindow = 8192;  // bytes decoded after each entry point
  static constexpr size_t kMaxSites = 16;

  // (Re)reads the kernel's entry points through `kernel` (linear addresses, supervisor view,
  // the current CR3) unless they are the ones read last time: `lstar` (IA32_LSTAR) and the IDT at
  // `idt_base` (limit `idt_limit`). Return sites already seen keep what was learned of them.
  void refresh(pmu::GuestMemory& kernel, uint64_t lstar, uint64_t idt_base, uint16_t idt_limit);

  // Return sites, in the order breakpoints are armed on them. `exception_first`: the kernel was
  // (or will be) entered through the IDT (a fault, an interrupt: anything that leaves user code
  // but SYSCALL), whose handlers return by IRET, so IRETs come before SYSRETs (with few
  // slots free, the SYSRET first would leave an exception's return to a signal handler
  // unwatched).
  std::vector<ReturnSite> by_priority(bool exception_first = false) const;
  const ReturnSite* site_at(uint64_t rip) const;
  // The site at `rip` returned to user mode.
  void saw_user_return(uint64_t rip);

  uint64_t syscall_entry() const { return lstar_; }
  // Where INT `vector` from CPL 3 enters the kernel: nullopt when the gate is absent or its DPL
  // keeps user mode out (the INT raises #GP instead).
  std::optional<uint64_t> user_interrupt_entry(uint8_t vector) const;
  // The #DB handler's entry (vector 1), however the gate's DPL is set.
  std::optional<uint64_t> debug_handler() const;
  // The gate's IST index (1-7), 0 when it has none (the CPU switches to RSP0 from user mode).
  uint8_t interrupt_stack(uint8_t vector) const;

  // Snapshot / migration.
  template <class Archive>
  void archive(Archive& a) {
    a(lstar_, idt_base_, idt_limit_, known_, sites_, gates_);
    if constexpr (Archive::kLoading)
      if (sites_.size() > kMaxSites || gates_.size() > 256)
        throw pmu::StateFormatError("kernel entry points: " + std::to_string(sites_.size()) +
                                    " return sites (at most " + std::to_string(kMaxSites) + "), " +
                                    std::to_string(gates_.size()) + " gates (at most 256)");
  }

 private:
  struct GateEntry {
    uint64_t target = 0;
    uint8_t dpl = 0;
    bool present = false;
    uint8_t ist = 0;  // 0-7
    template <class Archive>
    void archive(Archive& a) {
      a(target, dpl, present, ist);
      if constexpr (Archive::kLoading)
        if (ist > 7)
          throw pmu::StateFormatError("interrupt gate: IST " + std::to_string(ist) + " (0..7)");
    }
  };
  void read_gates(pmu::GuestMemory& kernel);
  void search(pmu::GuestMemory& kernel, uint64_t begin, uint64_t end);

  InstructionDecoder decoder_;
  uint64_t lstar_ = 0, idt_base_ = 0;
  uint16_t idt_limit_ = 0;
  bool known_ = false;
  std::vector<ReturnSite> sites_;
  std::vector<GateEntry> gates_;  // by vector
};

}  // namespace vmm
