// What the KVM stepper's fuzz targets (block_planner_fuzz, block_exactness_fuzz, and the state
// targets that run a loaded one: stepper_state_fuzz, machine_state_fuzz) share: a reader of the
// input, a vCPU as the step controller sees it, and the kernel half of the guest (the
// layout of tests/precise/step_controller_test.cc: a supervisor 2 MiB page at 0x200000 with the
// SYSCALL entry, a SYSRETQ and an IRETQ to find, an IDT whose gates all go to one handler, a
// TSS whose RSP0 is the entry stack).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <vector>

#include "vmm/memory/guest_ram.h"
#include "vmm/precise/step_controller.h"

namespace stepper_fuzz {

constexpr uint64_t P = 1, W = 2, U = 4, PS = 0x80, XD = 1ull << 63;
constexpr uint64_t kCr3 = 0x1000;  // PML4 at 0x1000, PDPT at 0x2000, PD at 0x3000
constexpr uint64_t kKernel = 0x200000;
constexpr uint64_t kLstar = kKernel + 0x100, kIdt = kKernel + 0x1000, kTss = kKernel + 0x2000;
constexpr uint64_t kHandler = kKernel + 0x400;   // every gate's
constexpr uint64_t kIretSite = kKernel + 0x200;  // the return to user mode after a fault
constexpr uint64_t kEntryStack = kKernel + 0x7000;

class Input {
 public:
  explicit Input(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{u8()} << (8 * i);
    return v;
  }
  uint8_t u8() { return at_ < bytes_.size() ? bytes_[at_++] : 0; }
  std::span<const uint8_t> take(size_t n) {
    const size_t k = std::min(n, bytes_.size() - at_);
    const std::span<const uint8_t> s = bytes_.subspan(at_, k);
    at_ += k;
    return s;
  }
  bool done() const { return at_ >= bytes_.size(); }

 private:
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

class FuzzVcpu : public vmm::StepTarget {
 public:
  vmm::GuestRegisters regs{};
  uint8_t ring = 3;
  vmm::GuestDebugRegisters guest;
  bool pending = false;
  uint64_t control4 = 0;
  uint64_t lstar_value = kLstar;
  vmm::GuestRegisters registers() override { return regs; }
  uint8_t cpl() override { return ring; }
  uint64_t lstar() override { return lstar_value; }
  uint64_t idt_base() override { return kIdt; }
  uint16_t idt_limit() override { return 256 * 16 - 1; }
  uint64_t tss_base() override { return kTss; }
  vmm::GuestDebugRegisters guest_debug() override { return guest; }
  uint64_t cr4() override { return control4; }
  bool interrupt_pending() override { return pending; }
};

// A 64-bit interrupt gate for `vector` to `target` (DPL 3 for INT3 and INT 0x80, else 0).
inline void write_gate(vmm::GuestRam& g, uint8_t vector, uint64_t target) {
  uint8_t gate[16] = {};
  gate[0] = target & 0xFF, gate[1] = (target >> 8) & 0xFF, gate[2] = 0x10;
  gate[5] = static_cast<uint8_t>(0x80 | (vector == 3 || vector == 0x80 ? 3 : 0) << 5 | 0xE);
  gate[6] = (target >> 16) & 0xFF, gate[7] = (target >> 24) & 0xFF;
  const uint32_t high = static_cast<uint32_t>(target >> 32);
  std::memcpy(&gate[8], &high, 4);
  g.write(kIdt + 16 * vector, std::as_bytes(std::span(gate)));
}

// The page-table root and the kernel half; the caller maps its user pages in the PD at 0x3000
// (entries 2 and up).
inline void write_kernel(vmm::GuestRam& g) {
  g.write_u64(kCr3, 0x2000 | P | W | U);
  g.write_u64(0x2000, 0x3000 | P | W | U);
  g.write_u64(0x3000 + 1 * 8, kKernel | P | W | PS);
  const std::vector<uint8_t> padding(0x1000, 0xCC);  // int3, as assemblers pad code
  g.write(kKernel, std::as_bytes(std::span(padding)));
  const uint8_t swapgs[] = {0x0f, 0x01, 0xf8}, sysret[] = {0x48, 0x0f, 0x07}, iret[] = {0x48, 0xcf},
                nop = 0x90;
  g.write(kLstar, std::as_bytes(std::span(swapgs)));
  g.write(kKernel + 0x110, std::as_bytes(std::span(sysret)));
  g.write(kIretSite, std::as_bytes(std::span(iret)));
  g.write(kHandler, std::as_bytes(std::span(&nop, 1)));
  for (int v = 0; v < 256; ++v) write_gate(g, static_cast<uint8_t>(v), kHandler);
  g.write_u64(kTss + 4, kEntryStack);  // RSP0
}

constexpr uint64_t kUser = 0x400000, kUserData = 0x600000;

// Guest RAM of 16 MiB: the kernel half, user code at 0x400000 (frame 0x800000) and user data at
// 0x600000 (frame 0xA00000), 2 MiB pages; made once per process.
inline vmm::GuestRam& ram() {
  static vmm::GuestRam* r = [] {
    auto* g = new vmm::GuestRam(16 << 20);
    write_kernel(*g);
    g->write_u64(0x3000 + 2 * 8, 0x800000 | P | W | U | PS);
    g->write_u64(0x3000 + 3 * 8, 0xA00000 | P | W | U | PS);
    return g;
  }();
  return *r;
}

// A step controller loaded from a crafted state (stepper_state_fuzz, machine_state_fuzz) at work:
// each exit kind once or twice, at user code of the fuzz guest.
inline void exercise(vmm::StepController& ctl) {
  FuzzVcpu vcpu;
  vcpu.regs.cr3 = kCr3;
  vcpu.regs.rsp = kUserData + 0x800;
  vcpu.regs.rflags = 0x202;
  try {
    for (int exit = 0; exit < 8; ++exit) {
      vcpu.ring = 3;
      vcpu.regs.rip = kUser + 4 * exit;
      ctl.extend_block(8, vcpu);
      const vmm::DebugConfig applied = ctl.desired(vcpu.guest);
      switch (exit % 4) {
        case 0: {  // at the first breakpoint armed, if any
          for (int i = 0; i < 4; ++i)
            if (applied.ours & (1u << i)) {
              vcpu.regs.rip = applied.address[i];
              vcpu.ring = vcpu.regs.rip >= kKernel && vcpu.regs.rip < kKernel + 0x200000 ? 0 : 3;
              (void)ctl.on_debug_exit(vcpu, (1u << i) | 0xFFFF0FF0, applied);
              break;
            }
          break;
        }
        case 1: (void)ctl.on_debug_exit(vcpu, 0x4000 | 0xFFFF0FF0, applied); break;
        case 2: (void)ctl.on_kick(vcpu); break;
        case 3:
          vcpu.ring = 0;
          vcpu.regs.rip = kHandler;
          (void)ctl.on_other_exit(vcpu);
          break;
      }
    }
  } catch (const std::exception&) {
    // the vCPU's run fails with the reason (vcpu_runner.cc): an outcome, not a crash
  }
}

}  // namespace stepper_fuzz
