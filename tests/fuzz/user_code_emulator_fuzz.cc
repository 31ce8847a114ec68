// libFuzzer target for the emulator core of `--stepper emulate` (vmm/emulate/user_code_emulator.h)
// against a hostile guest: any code, any page-table permissions and aliasing, any registers.
//
// The input: byte 0 the PD entry's flags (P/W/U), byte 1 bit 0 EFER.NXE; then for each of the
// 8 linear pages 0x400000 + 4 KiB x i a PTE flags byte (bit 0 P, 1 W, 2 U, 3 XD; bits 5-7 pick
// which of the 8 frames it maps, so pages may alias); a 16-bit instruction limit; RAX..R15
// (each a pointer into those pages or any value) and RFLAGS' arithmetic bits; then the bytes of
// frame 0 and of frame 1, up to 512 each (page 0 at 0x400000, where the code starts, maps the
// frame its flags byte picks).
//
// XMM registers are given to the run where RFLAGS' OF is set (SSE code then runs).
//
// Checked on every input (__builtin_trap otherwise): no more instructions retired than the
// limit; guest RAM changes only in frames some page maps user-writable at every level, and in
// the paging structures only by Accessed/Dirty flags being set; a known position after a fault
// is an instruction boundary the run reached (RIP canonical). ASan/UBSan watch the rest.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/fuzz/fuzz_input.h"
#include "vmm/emulate/user_code_emulator.h"

namespace {

using pmuvm_fuzz::Input;

constexpr uint64_t kPml4 = 0x1000, kPdpt = 0x2000, kPd = 0x3000, kPt = 0x4000;
constexpr uint64_t kFrames = 0x100000, kPages = 8, kLinear = 0x400000;
constexpr uint64_t kAccessedDirty = 0x60;

bool is_table(uint64_t gpa) { return gpa >= kPml4 && gpa < kPt + 0x1000; }

// The vCPU's XMM registers: SSE code runs on them (written back only where the run changed
// them, and only after they were read).
struct Xmm : vmm::XmmRegisters {
  File read() override {
    ++reads;
    return file;
  }
  void write(const File& xmm) override {
    FUZZ_CHECK(reads > 0 && xmm != file);
    file = xmm;
  }
  File file{};
  int reads = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  vmm::GuestRam ram(2 << 20, vmm::GuestRam::Backing::kShareable);
  const uint64_t pd_flags = in.u8() & 7;
  const bool nxe = in.u8() & 1;
  ram.write_u64(kPml4, kPdpt | 7);
  ram.write_u64(kPdpt, kPd | 7);
  ram.write_u64(kPd + 2 * 8, kPt | pd_flags);
  std::vector<bool> frame_writable(kPages, false);
  for (uint64_t i = 0; i < kPages; ++i) {
    const uint8_t f = in.u8();
    const uint64_t frame = kFrames + ((f >> 5) & 7) * 0x1000;
    const uint64_t pte = frame | (f & 7) | ((f & 8) ? (1ull << 63) : 0);
    ram.write_u64(kPt + i * 8, pte);
    if ((f & 7) == 7 && (pd_flags & 7) == 7) frame_writable[(f >> 5) & 7] = true;
  }
  const uint64_t limit = in.u16();
  vmm::GuestRegisters regs;
  uint64_t* gprs[] = {&regs.rax, &regs.rbx, &regs.rcx, &regs.rdx, &regs.rsi, &regs.rdi,
                      &regs.rsp, &regs.rbp, &regs.r8,  &regs.r9,  &regs.r10, &regs.r11,
                      &regs.r12, &regs.r13, &regs.r14, &regs.r15};
  for (uint64_t* r : gprs) *r = in.u8() < 0x80 ? kLinear + in.u16() % (kPages * 0x1000) : in.u64();
  regs.rflags = 0x202 | (in.u16() & 0x8D5);  // CF PF AF ZF SF OF DF
  regs.rip = kLinear;
  for (uint64_t frame = 0; frame < 2; ++frame) {
    const std::vector<std::byte> bytes = in.bytes(std::min<size_t>(512, size));
    ram.write(kFrames + frame * 0x1000, bytes);
  }
  std::vector<std::byte> before(ram.host_base(), ram.host_base() + ram.size());

  Xmm xmm;
  for (auto& x : xmm.file) x[0] = x[15] = static_cast<uint8_t>(regs.rax);
  vmm::UserCodeEmulator emulator(ram);
  const vmm::EmulationRun r = emulator.run(regs, kPml4, nxe, limit, /*timeout_us=*/20000,
                                           (regs.rflags & 0x800) ? &xmm : nullptr);
  FUZZ_CHECK(r.retired <= limit);
  FUZZ_CHECK(r.branches <= r.retired && r.conditional_branches <= r.branches);
  if (r.position_known)
    FUZZ_CHECK(static_cast<int64_t>(regs.rip << 16) >> 16 == static_cast<int64_t>(regs.rip));

  const std::byte* after = ram.host_base();
  for (uint64_t gpa = 0; gpa < ram.size(); gpa += 8) {
    uint64_t was, now;
    std::memcpy(&was, before.data() + gpa, 8);
    std::memcpy(&now, after + gpa, 8);
    if (was == now) continue;
    if (is_table(gpa)) {
      FUZZ_CHECK((was & ~kAccessedDirty) == (now & ~kAccessedDirty));  // A/D flags only
      FUZZ_CHECK((now & was) == was);                                  // set, never cleared
      continue;
    }
    const uint64_t frame = (gpa - kFrames) / 0x1000;
    FUZZ_CHECK(gpa >= kFrames && frame < kPages && frame_writable[frame]);
  }
  return 0;
}
