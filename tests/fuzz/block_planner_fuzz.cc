// libFuzzer target: the KVM stepper's step controller (vmm/precise/step_controller.h), block
// stepping included, planning over untrusted guest code and registers. The input is a guest:
// optionally its IA32_LSTAR and four IDT gates (anywhere in the address space), the
// registers, the block limit the PMU models would allow, the guest's debug registers, a page of
// user code and a page of user data; then a sequence of exits (a stop at one of the armed
// breakpoints, a single-step trap, a kick, an exit into the kernel) as KVM would report them for
// the configuration the controller asked for. The controller must never crash, read or write out
// of bounds, report more than it can hold (RetiredInstructions throws: a finding), or report a
// kernel instruction as a user one. Built and run by tests/fuzz/run_fuzzer.sh block_planner_fuzz.
#include <array>
#include <cstdint>
#include <functional>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include "vmm/precise/step_controller.h"

namespace {

using vmm::DebugConfig;
using vmm::GuestDebugRegisters;
using vmm::GuestRegisters;
using vmm::StepController;
using vmm::StepScope;

constexpr uint64_t P = 1, W = 2, U = 4, PS = 0x80;
constexpr uint64_t kCr3 = 0x1000;
constexpr uint64_t kKernel = 0x200000, kUser = 0x400000, kUserData = 0x600000;
constexpr uint64_t kIdt = kKernel + 0x1000;

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
  GuestRegisters regs{};
  uint8_t ring = 3;
  GuestDebugRegisters guest;
  bool pending = false;
  uint64_t control4 = 0;
  GuestRegisters registers() override { return regs; }
  uint8_t cpl() override { return ring; }
  uint64_t lstar_value = kKernel + 0x100;
  uint64_t lstar() override { return lstar_value; }
  uint64_t idt_base() override { return kIdt; }
  uint16_t idt_limit() override { return 256 * 16 - 1; }
  uint64_t tss_base() override { return kKernel + 0x2000; }
  GuestDebugRegisters guest_debug() override { return guest; }
  uint64_t cr4() override { return control4; }
  bool interrupt_pending() override { return pending; }
};

// Guest RAM with the layout of tests/precise/step_controller_test.cc: a supervisor 2 MiB page
// for the kernel (entry, return sites, IDT), user code at 0x400000 and user data at 0x600000.
vmm::GuestRam& ram() {
  static vmm::GuestRam* r = [] {
    auto* g = new vmm::GuestRam(16 << 20);
    g->write_u64(kCr3, 0x2000 | P | W | U);
    g->write_u64(0x2000, 0x3000 | P | W | U);
    g->write_u64(0x3000 + 1 * 8, kKernel | P | W | PS);
    g->write_u64(0x3000 + 2 * 8, 0x800000 | P | W | U | PS);
    g->write_u64(0x3000 + 3 * 8, 0xA00000 | P | W | U | PS);
    const std::vector<uint8_t> padding(0x1000, 0xCC);
    g->write(kKernel, std::as_bytes(std::span(padding)));
    const uint8_t swapgs[] = {0x0f, 0x01, 0xf8}, sysret[] = {0x48, 0x0f, 0x07},
                  iret[] = {0x48, 0xcf};
    g->write(kKernel + 0x100, std::as_bytes(std::span(swapgs)));
    g->write(kKernel + 0x110, std::as_bytes(std::span(sysret)));
    g->write(kKernel + 0x200, std::as_bytes(std::span(iret)));
    for (int v = 0; v < 256; ++v) {
      const uint64_t target = kKernel + 0x400;
      uint8_t gate[16] = {};
      gate[0] = target & 0xFF, gate[1] = (target >> 8) & 0xFF, gate[2] = 0x10;
      gate[5] = static_cast<uint8_t>(0x80 | (v == 3 || v == 0x80 ? 3 : 0) << 5 | 0xE);
      gate[6] = (target >> 16) & 0xFF, gate[7] = (target >> 24) & 0xFF;
      g->write(kIdt + 16 * v, std::as_bytes(std::span(gate)));
    }
    const uint8_t nop = 0x90;
    g->write(kKernel + 0x400, std::as_bytes(std::span(&nop, 1)));
    return g;
  }();
  return *r;
}

uint64_t pick_armed(const DebugConfig& applied, uint8_t choice) {
  for (int k = 0; k < 4; ++k) {
    const int i = (choice + k) % 4;
    if (applied.ours & (1u << i)) return applied.address[i];
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in({data, size});
  vmm::GuestRam& g = ram();
  // IA32_LSTAR and IDT gates are the guest's to choose (issue 38: a gate near 2^64 made the
  // return-site search wrap): the first byte says whether LSTAR and four gates come from the
  // input; the gates are put back after the input.
  const uint8_t guest_entries = in.u8();
  FuzzVcpu vcpu;
  if (guest_entries & 1) vcpu.lstar_value = in.u64();
  std::array<std::pair<uint8_t, uint64_t>, 4> gates{};
  const size_t gate_count = guest_entries & 2 ? gates.size() : 0;
  for (size_t i = 0; i < gate_count; ++i) gates[i] = {in.u8(), in.u64()};
  auto write_gate = [&](uint8_t vector, uint64_t target) {
    uint8_t gate[16] = {};
    gate[0] = target & 0xFF, gate[1] = (target >> 8) & 0xFF, gate[2] = 0x10;
    gate[5] = static_cast<uint8_t>(0x80 | (vector == 3 || vector == 0x80 ? 3 : 0) << 5 | 0xE);
    gate[6] = (target >> 16) & 0xFF, gate[7] = (target >> 24) & 0xFF;
    const uint32_t high = static_cast<uint32_t>(target >> 32);
    std::memcpy(&gate[8], &high, 4);
    g.write(kIdt + 16 * vector, std::as_bytes(std::span(gate)));
  };
  for (size_t i = 0; i < gate_count; ++i) write_gate(gates[i].first, gates[i].second);
  struct PutBack {
    std::function<void()> fn;
    ~PutBack() { fn(); }
  } put_back{[&] {
    for (size_t i = 0; i < gate_count; ++i) write_gate(gates[i].first, kKernel + 0x400);
  }};
  uint64_t* gprs[] = {&vcpu.regs.rax, &vcpu.regs.rcx, &vcpu.regs.rdx, &vcpu.regs.rbx,
                      &vcpu.regs.rsp, &vcpu.regs.rbp, &vcpu.regs.rsi, &vcpu.regs.rdi,
                      &vcpu.regs.r8,  &vcpu.regs.r9,  &vcpu.regs.r10, &vcpu.regs.r11,
                      &vcpu.regs.r12, &vcpu.regs.r13, &vcpu.regs.r14, &vcpu.regs.r15};
  // Registers point into the user data page mostly (so loads can be proven), anywhere sometimes.
  for (uint64_t* r : gprs) {
    const uint64_t v = in.u64();
    *r = (v & 1) ? v : kUserData + (v >> 1) % 0x200000;
  }
  vcpu.regs.rflags = (in.u64() & 0x40DD5) | 0x202;
  vcpu.regs.cr3 = kCr3;
  const uint64_t limit = in.u8() % 40;
  const uint8_t dr7 = in.u8();
  vcpu.guest.dr7 = 0x400 | (dr7 & 0x55) | (uint64_t{in.u8()} << 16);
  for (auto& db : vcpu.guest.db) db = kUser + in.u8() * 16;
  vcpu.control4 = (in.u8() & 1) ? (1u << 22) : 0;
  const uint64_t start = kUser + in.u8();
  // One page of code (the rest of it int3), one of data.
  std::vector<uint8_t> code(0x1000, 0xCC);
  const std::span<const uint8_t> c = in.take(512);
  std::memcpy(code.data() + (start - kUser), c.data(),
              std::min<size_t>(c.size(), 0x1000 - (start - kUser)));
  g.write(0x800000, std::as_bytes(std::span(code)));
  std::vector<uint8_t> page(0x1000, 0);
  const std::span<const uint8_t> d = in.take(256);
  std::memcpy(page.data(), d.data(), d.size());
  g.write(0xA00000, std::as_bytes(std::span(page)));

  pmu::cache::Geometry geometry;
  geometry.l1d = {1024, 2, 4};
  geometry.l2 = {4096, 4, 12};
  geometry.dram_latency_cycles = 100;
  StepController ctl(g, geometry);
  vcpu.regs.rip = start;
  ctl.set_scope(StepScope::kUserCode, vcpu);
  for (int exit = 0; exit < 64 && !in.done(); ++exit) {
    ctl.extend_block(limit, vcpu);
    const DebugConfig applied = ctl.desired(vcpu.guest);
    const uint8_t kind = in.u8();
    vmm::StepOutcome out;
    switch (kind % 5) {
      case 0:
      case 1: {  // the vCPU stops at one of pmuvm's breakpoints
        const uint64_t at = pick_armed(applied, in.u8());
        if (at == 0) continue;
        vcpu.ring = at >= kKernel && at < kKernel + 0x200000 ? 0 : 3;
        vcpu.regs.rip = at;
        if (vcpu.ring == 0) vcpu.regs.rsp = kKernel + 0x8000;
        uint64_t bit = 0;
        for (int i = 0; i < 4; ++i)
          if ((applied.ours & (1u << i)) && applied.address[i] == at) bit |= 1u << i;
        out = ctl.on_debug_exit(vcpu, bit | 0xFFFF0FF0, applied);
        break;
      }
      case 2:  // a single-step trap somewhere in the code page
        vcpu.ring = 3;
        vcpu.regs.rip = kUser + in.u8() * 4;
        out = ctl.on_debug_exit(vcpu, 0x4000 | 0xFFFF0FF0, applied);
        break;
      case 3:  // a kick
        vcpu.regs.rip = kUser + in.u8() * 4;
        ctl.on_kick(vcpu);
        break;
      case 4:  // an exit in the kernel (the pending instruction faulted or was interrupted)
        vcpu.ring = 0;
        vcpu.regs.rip = kKernel + 0x400;
        ctl.on_other_exit(vcpu);
        break;
    }
    // Never more than a block (RetiredInstructions would have thrown), never a kernel
    // instruction as a user one.
    for (const pmu::RetiredInstruction& r : out.retired)
      if (r.cpl == 3 && r.rip >= kKernel && r.rip < kKernel + 0x200000) __builtin_trap();
    if (vcpu.ring == 0 && (kind & 0x80)) {  // back to user mode through the IRETQ site
      vcpu.regs.rip = kKernel + 0x200;
      vcpu.regs.rsp = kKernel + 0x8000;
      const uint64_t frame[5] = {kUser + in.u8() * 4, 0x33, 0x202, kUserData + 0x800, 0x2b};
      for (int i = 0; i < 5; ++i) g.write_u64(kKernel + 0x8000 + 8 * i, frame[i]);
    }
  }
  return 0;
}
