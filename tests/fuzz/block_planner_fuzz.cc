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

#include "tests/fuzz/stepper_fuzz_guest.h"
#include "vmm/precise/step_controller.h"

namespace {

using stepper_fuzz::FuzzVcpu;
using stepper_fuzz::Input;
using stepper_fuzz::kCr3;
using stepper_fuzz::kHandler;
using stepper_fuzz::kKernel;
using vmm::DebugConfig;
using vmm::StepController;
using vmm::StepScope;

using stepper_fuzz::kUser;
using stepper_fuzz::kUserData;
using stepper_fuzz::ram;

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
  for (size_t i = 0; i < gate_count; ++i)
    stepper_fuzz::write_gate(g, gates[i].first, gates[i].second);
  struct PutBack {
    std::function<void()> fn;
    ~PutBack() { fn(); }
  } put_back{[&] {
    for (size_t i = 0; i < gate_count; ++i) stepper_fuzz::write_gate(g, gates[i].first, kHandler);
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
