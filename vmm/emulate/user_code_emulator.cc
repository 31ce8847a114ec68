#include "vmm/emulate/user_code_emulator.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <set>
#include <cstring>
#include <string>

#include "vmm/memory/page_walker.h"
#include "vmm/vmm_error.h"

namespace vmm {
namespace {

constexpr uint64_t kPage = 4096;
// Pages mapped at once (64 MiB); past this many, the data pages are dropped and mapped again as
// they are touched. (Unicorn's regions are 4 MiB windows: it rebuilds its whole address space at
// every map, so a region per page cost O(n^2): ~0.7 ms per map at 1 000 regions, ~10 ms at
// 4 000, natively.)
constexpr size_t kMaxMappedPages = 16384;
constexpr uint32_t kPageFault = 14;
// Faults one run resolves by mapping and going on (an instruction touches at most a few pages;
// each new page its own): past this many, the run ends and KVM executes the instruction.
constexpr uint32_t kMaxRestarts = 4096;
constexpr uint64_t kUserTop = uint64_t{1} << 47;
// The emulator's own linear (and physical) addresses: the shadow tables' window, and a page of
// the next one that flush_tlb maps and unmaps. No guest page is emulated there.
constexpr uint64_t kFlushPage = ShadowPageTables::kBase + (uint64_t{4} << 20);
bool private_window(uint64_t base) { return base == ShadowPageTables::kBase || base == kFlushPage; }
// Code pages mapped at once, each with a copy of its bytes (16 MiB).
constexpr size_t kMaxCodePages = 4096;
// Addresses remembered where runs stop before their first block (UserCodeEmulator::run).
constexpr size_t kMaxKnownStops = 65536;
// Blocks between two looks at the clock for the time slice: a block is a few to a few dozen
// instructions, so a slice ends within some microseconds of its deadline.
constexpr uint32_t kBlocksPerClockRead = 64;

uint64_t steady_now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// GuestRegisters' fields and Unicorn's names for them, in one table.
struct RegisterSlot {
  uint64_t GuestRegisters::*field;
  int uc;
};
constexpr std::array<RegisterSlot, 20> kRegisters = {{
    {&GuestRegisters::rax, UC_X86_REG_RAX},         {&GuestRegisters::rbx, UC_X86_REG_RBX},
    {&GuestRegisters::rcx, UC_X86_REG_RCX},         {&GuestRegisters::rdx, UC_X86_REG_RDX},
    {&GuestRegisters::rsi, UC_X86_REG_RSI},         {&GuestRegisters::rdi, UC_X86_REG_RDI},
    {&GuestRegisters::rsp, UC_X86_REG_RSP},         {&GuestRegisters::rbp, UC_X86_REG_RBP},
    {&GuestRegisters::r8, UC_X86_REG_R8},           {&GuestRegisters::r9, UC_X86_REG_R9},
    {&GuestRegisters::r10, UC_X86_REG_R10},         {&GuestRegisters::r11, UC_X86_REG_R11},
    {&GuestRegisters::r12, UC_X86_REG_R12},         {&GuestRegisters::r13, UC_X86_REG_R13},
    {&GuestRegisters::r14, UC_X86_REG_R14},         {&GuestRegisters::r15, UC_X86_REG_R15},
    {&GuestRegisters::rip, UC_X86_REG_RIP},         {&GuestRegisters::rflags, UC_X86_REG_RFLAGS},
    {&GuestRegisters::fs_base, UC_X86_REG_FS_BASE}, {&GuestRegisters::gs_base, UC_X86_REG_GS_BASE},
}};

void check(const UnicornLibrary& lib, uc_err e, const char* what) {
  if (e != UC_ERR_OK) throw VmmError(std::string("emulator: ") + what + ": " + lib.strerror(e));
}

// Unicorn 2.0.1 aborts the process translating FF /3 or FF /5 with a register operand (an
// invalid far CALL/JMP; `ff ee` found by user_code_emulator_fuzz: tcg_gen_code's fatal error,
// after the block is decoded). Its translator stops before an "exit" address, so every place
// such an instruction could start (the FF, and each run of prefixes just before it) becomes
// one when the translator fetches the ModRM byte after an FF (fetched): the block's
// translation is abandoned and the run starts again, and should the code get to an exit, the
// run ends before it and KVM raises the #UD a CPU would. Elsewhere (the FF inside another
// instruction: an immediate -1 before a CALL is common) an exit is never reached as an
// instruction. (Exits are found as the translator meets them, not by scanning each code page:
// at the end of every run Unicorn invalidates the translated blocks at each exit, which cost
// milliseconds per run with a busybox's ~13 per page.)
bool is_prefix(uint8_t b) {
  return (b & 0xF0) == 0x40 || b == 0x66 || b == 0x67 || b == 0xF0 || b == 0xF2 || b == 0xF3 ||
         b == 0x2E || b == 0x36 || b == 0x3E || b == 0x26 || b == 0x64 || b == 0x65;
}
bool far_transfer_through_a_register(uint8_t modrm) {
  return (modrm & 0xF8) == 0xD8 || (modrm & 0xF8) == 0xE8;
}

}  // namespace

UserCodeEmulator::UserCodeEmulator(GuestRam& ram, bool multiple_vcpus, SimdSupport simd)
    : lib_(UnicornLibrary::get()), ram_(ram), multiple_vcpus_(multiple_vcpus), simd_(simd) {
  if (ram.fd() < 0) throw VmmError("emulator: guest RAM is not shareable (GuestRam::Backing)");
  check(lib_, lib_.open(UC_ARCH_X86, UC_MODE_64, &uc_), "uc_open");
  // A CPU with SSSE3, SSE4.1 and SSE4.2 (Unicorn's default, qemu64, has SSE3 at most: its
  // translator raises #UD for the others). Before anything else uses the CPU.
  check(lib_, lib_.ctl(uc_, UC_CTL_WRITE(UC_CTL_CPU_MODEL, 1), UC_CPU_X86_NEHALEM), "CPU model");
  // Exits (fetched) instead of uc_emu_start's `until`.
  check(lib_, lib_.ctl(uc_, UC_CTL_WRITE(UC_CTL_UC_USE_EXITS, 1), 1), "exits");
  // Paging on, through the shadow tables: every access is checked against them, and one they
  // refuse raises a precise #PF (on_interrupt). CR0: PE, MP, ET, NE, WP (read-only entries bind
  // at CPL 0 too: the emulator runs at Unicorn's default CPL 0), PG.
  check(lib_,
        lib_.mem_map_ptr(uc_, ShadowPageTables::kBase, ShadowPageTables::size(),
                         UC_PROT_READ | UC_PROT_WRITE, shadow_.bytes()),
        "shadow page tables");
  const uint64_t cr4 = (1u << 5) | (1u << 20);  // PAE, SMEP (code is supervisor: the tables)
  const uc_x86_msr efer{0xC0000080, (1u << 8) | (1u << 10) | (1u << 11)};  // LME, LMA, NXE
  const uint64_t cr3 = ShadowPageTables::cr3();
  const uint64_t cr0 = 0x80010033;
  check(lib_, lib_.reg_write(uc_, UC_X86_REG_CR4, &cr4), "CR4");
  check(lib_, lib_.reg_write(uc_, UC_X86_REG_MSR, &efer), "EFER");
  check(lib_, lib_.reg_write(uc_, UC_X86_REG_CR3, &cr3), "CR3");
  check(lib_, lib_.reg_write(uc_, UC_X86_REG_CR0, &cr0), "CR0");
  // Unicorn hands a #PF to its interrupt hook without delivering it, so the CPU keeps it as
  // the exception in flight: the next one would become a double fault. Each run starts from
  // this context instead (the registers written after it).
  check(lib_, lib_.context_alloc(uc_, &clean_), "context");
  check(lib_, lib_.context_save(uc_, clean_), "context");
  uc_hook h;
  check(lib_, lib_.hook_add(uc_, &h, UC_HOOK_BLOCK, reinterpret_cast<void*>(on_block), this, 1, 0),
        "block hook");
  check(lib_,
        lib_.hook_add(uc_, &h, UC_HOOK_MEM_UNMAPPED, reinterpret_cast<void*>(on_unmapped), this, 1,
                      0),
        "unmapped-memory hook");
  check(lib_,
        lib_.hook_add(uc_, &h, UC_HOOK_INTR, reinterpret_cast<void*>(on_interrupt), this, 1, 0),
        "interrupt hook");
  check(
      lib_,
      lib_.hook_add(uc_, &h, UC_HOOK_MEM_FETCH_PROT, reinterpret_cast<void*>(on_fetch), this, 1, 0),
      "fetch hook");
}

UserCodeEmulator::~UserCodeEmulator() {
  if (clean_) lib_.context_free(clean_);
  lib_.close(uc_);
  for (const auto& [base, host] : windows_) munmap(host, kWindowBytes);
}

std::byte* UserCodeEmulator::window(uint64_t page) {
  const uint64_t base = page & ~(kWindowBytes - 1);
  if (auto it = windows_.find(base); it != windows_.end()) return it->second;
  // The shadow tables' own window, and what a region cannot be.
  if (private_window(base) || base + kWindowBytes > kUserTop) return nullptr;
  void* host =
      mmap(nullptr, kWindowBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (host == MAP_FAILED) return nullptr;
  // Not executable for Unicorn: each code byte its translator fetches goes through on_fetch (the
  // shadow tables say what the guest may fetch).
  if (lib_.mem_map_ptr(uc_, base, kWindowBytes, UC_PROT_READ | UC_PROT_WRITE, host) != UC_ERR_OK) {
    munmap(host, kWindowBytes);
    return nullptr;
  }
  return windows_.emplace(base, static_cast<std::byte*>(host)).first->second;
}

bool UserCodeEmulator::alias(uint64_t page, uint64_t frame) {
  std::byte* w = window(page);
  if (w == nullptr) return false;
  if (auto it = aliased_.find(page); it != aliased_.end() && it->second == frame) return true;
  // The guest frame, mapped a second time at the page's place in its window (the host pages of
  // a window are inaccessible until then; Unicorn reaches them only where the shadow tables
  // let it).
  const off_t offset = ram_.host(frame, kPage) - ram_.host_base();
  if (mmap(w + (page & (kWindowBytes - 1)), kPage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
           ram_.fd(), offset) == MAP_FAILED)
    return false;
  aliased_[page] = frame;
  return true;
}

void UserCodeEmulator::flush() {
  while (!mapped_.empty()) unmap(mapped_.begin()->first);
}

void UserCodeEmulator::unmap(uint64_t page) {
  // Code's blocks go first, while the page is mapped as code: Unicorn finds them through the
  // mapping (uc_ctl_remove_cache of a page it cannot fetch from removes nothing), and a page
  // mapped there later would run them.
  if (code_copies_.contains(page)) forget_code(page);
  forget_exits(page);  // (code's, and a page's fetched from before it was mapped as code)
  if (const auto m = mapped_.find(page); m != mapped_.end()) {
    const auto [first, last] = pages_of_frame_.equal_range(m->second.frame);
    for (auto p = first; p != last; ++p)
      if (p->second == page) {
        pages_of_frame_.erase(p);
        break;
      }
    mapped_.erase(m);
  }
  shadow_.clear(page);  // (its alias stays: nothing reaches it)
  tlb_stale_ = true;
}

void UserCodeEmulator::flush_tlb() {
  // Unicorn 2.0.1 has no call for it (a CR3 write only stores the value), but mapping a region
  // flushes its whole TLB (not its translated blocks): a page of the private window, mapped and
  // unmapped again.
  alignas(4096) static std::byte dummy[4096];
  if (lib_.mem_map_ptr(uc_, kFlushPage, kPage, UC_PROT_READ, dummy) == UC_ERR_OK)
    lib_.mem_unmap(uc_, kFlushPage, kPage);
  tlb_stale_ = false;
}

void UserCodeEmulator::unmap_data_pages() {
  std::vector<uint64_t> data;
  for (const auto& [page, m] : mapped_)
    if (!(m.prot & UC_PROT_EXEC)) data.push_back(page);
  for (const uint64_t page : data) unmap(page);
}

void UserCodeEmulator::forget_code(uint64_t page) {
  // Unicorn never sees guest RAM change under its translated blocks, nor does an unmap drop
  // them: the page's are removed here (it is mapped), also those that begin on the page before
  // and run into it.
  lib_.ctl(uc_, UC_CTL_WRITE(UC_CTL_TB_REMOVE_CACHE, 2), page, page + kPage);
  stops_at_start_.erase(stops_at_start_.lower_bound(page >= kPage ? page - kPage : 0),
                        stops_at_start_.lower_bound(page + kPage));
  for (auto it = blocks_.lower_bound({page >= kPage ? page - kPage : 0, 0});
       it != blocks_.end() && it->first.first < page + kPage;) {
    const uint64_t start = it->first.first, end = start + it->first.second;
    it = end > page ? blocks_.erase(it) : std::next(it);
  }
  code_copies_.erase(page);
}

void UserCodeEmulator::forget_exits(uint64_t page) {
  if (auto e = exits_by_page_.find(page); e != exits_by_page_.end()) {
    for (const uint64_t a : e->second) exits_.erase(a);
    exits_by_page_.erase(e);
    set_exits();
  }
}

std::optional<uint8_t> UserCodeEmulator::code_byte(uint64_t address) const {
  const auto it = aliased_.find(address & ~(kPage - 1));
  if (it == aliased_.end()) return std::nullopt;
  const std::byte* host = ram_.host(it->second, kPage);
  if (host == nullptr) return std::nullopt;
  return static_cast<uint8_t>(host[address & (kPage - 1)]);
}

bool UserCodeEmulator::fetched(uint64_t address, int size) {
  // The translator fetches a ModRM byte alone; one of FF /3|/5 with a register after an FF may
  // be such an instruction's (or an immediate's and the next opcode: then its exits are never
  // reached as instructions and this finds them known).
  if (size != 1) return true;
  const std::optional<uint8_t> modrm = code_byte(address), ff = code_byte(address - 1);
  if (!modrm || !ff || *ff != 0xFF || !far_transfer_through_a_register(*modrm)) return true;
  bool added = false;
  uint64_t start = address - 1;
  for (int prefixes = 0;; ++prefixes) {
    if (exits_.insert(start).second) {
      exits_by_page_[start & ~(kPage - 1)].push_back(start);
      added = true;
    }
    const std::optional<uint8_t> before = code_byte(start - 1);
    if (prefixes == 14 || !before || !is_prefix(*before)) break;
    --start;
  }
  if (!added) return true;  // the instruction being decoded starts elsewhere
  set_exits();
  // Abandons this block's translation (Unicorn's "fetch from non-executable memory" error);
  // the run goes on from the block's start, which the CPU has not left.
  restart_ = true;
  return false;
}

bool UserCodeEmulator::on_fetch(uc_engine*, uc_mem_type, uint64_t address, int size, int64_t,
                                void* self) {
  return static_cast<UserCodeEmulator*>(self)->fetched(address, size);
}

void UserCodeEmulator::set_exits() {
  // Also from a fetch hook while a block is being translated: the translator looks at the
  // exits before each instruction it decodes.
  const std::vector<uint64_t> all(exits_.begin(), exits_.end());
  lib_.ctl(uc_, UC_CTL_WRITE(UC_CTL_UC_EXITS, 2), all.data(), all.size());
}

bool UserCodeEmulator::still_valid(uint64_t page, const Mapping& m) {
  // What a CPU's TLB entry for the page would still allow: the same frame, every permission the
  // mapping gives, and the Accessed flag (and Dirty, for a writable mapping) the fill set. The
  // kernel clears them for reclaim and writeback, flushing the TLB: the next access walks and
  // sets them again, so a mapping without them must go.
  const std::optional<Translation> t = translate(ram_, cr3_, page);
  if (!t || !t->user || !t->accessed || (t->gpa & ~(kPage - 1)) != m.frame) return false;
  if ((m.prot & UC_PROT_WRITE) && !(t->writable && t->dirty)) return false;
  if ((m.prot & UC_PROT_EXEC) && !(t->executable && nxe_)) return false;
  if (!(m.prot & UC_PROT_EXEC)) return true;
  // Code: the bytes its blocks were translated from (KVM, another vCPU or a device may have
  // written them since).
  const auto copy = code_copies_.find(page);
  const std::byte* host = ram_.host(m.frame, kPage);
  return copy != code_copies_.end() && host != nullptr &&
         std::memcmp(copy->second.data(), host, kPage) == 0;
}

void UserCodeEmulator::revalidate() {
  std::vector<uint64_t> stale;
  for (const auto& [page, m] : mapped_)
    if (!still_valid(page, m)) stale.push_back(page);
  for (const uint64_t page : stale) unmap(page);
  work_.pages_checked += mapped_.size() + stale.size();
  work_.pages_dropped += stale.size();
}

void UserCodeEmulator::keep_code_copy(uint64_t page, const std::byte* host) {
  // (A page is mapped as code with no blocks of its own: unmap() removed any.)
  code_copies_[page].assign(host, host + kPage);
}

const UserCodeEmulator::Block& UserCodeEmulator::block_at(uint64_t address, uint32_t size) {
  const auto key = std::make_pair(address, size);
  if (auto it = blocks_.find(key); it != blocks_.end()) return it->second;
  Block b;
  ++work_.blocks_decoded;
  std::vector<uint8_t> bytes(size);
  // The block was just fetched from mapped pages.
  lib_.mem_read(uc_, address, bytes.data(), size);
  GuestRegisters at;  // decoding for classes and lengths: addresses are not needed
  // Through the block: general registers written (other than by a constant) and what was added
  // to each (Block::checks).
  uint16_t written = 0;
  std::array<int64_t, 16> adjustment{};
  for (uint64_t offset = 0; offset < size;) {
    at.rip = address + offset;
    const std::optional<DecodedInstruction> d = decoder_.decode(
        std::span<const uint8_t>(bytes).subspan(offset, std::min<size_t>(15, size - offset)), at);
    b.starts.push_back(address + offset);
    KvmOnly why = d ? kvm_only(*d, multiple_vcpus_, simd_) : KvmOnly::kNotComputing;
    if (why == KvmOnly::kNo && d->simd_computation) {
      b.simd = true;
      const bool wide = (d->load_count > 0 && d->loads[0].size == 16) ||
                        (d->store_count > 0 && d->stores[0].size == 16);
      if (wide && (d->gprs_addressing & written)) why = KvmOnly::kNotComputing;  // not known
      if (wide && why == KvmOnly::kNo)
        b.checks.push_back({static_cast<uint32_t>(offset), adjustment});
    }
    if (why != KvmOnly::kNo && b.kvm_only_at < 0) {
      b.kvm_only_at = static_cast<int>(b.starts.size() - 1);
      b.why = why;
      b.kvm_only_mnemonic = d ? d->mnemonic : ZYDIS_MNEMONIC_INVALID;
    }
    if (!d) break;
    written |= d->gprs_written;
    if (d->adjusted_gpr >= 0) adjustment[static_cast<size_t>(d->adjusted_gpr)] += d->adjustment;
    offset += d->length;
    if (offset >= size) {
      b.ends_in_branch = d->branch != pmu::BranchKind::kNone;
      b.ends_in_conditional = d->branch == pmu::BranchKind::kConditional;
      // A CALL is undone too: RSP back, the return address it pushed left below RSP (where
      // the CALL, had it run, wrote it; hardware checks the target first and writes nothing,
      // so only the stack below RSP differs, which no compiled code keeps anything in across
      // a call).
      b.branch_undoable = b.ends_in_branch;
      if (d->adjusted_gpr == 4) b.branch_rsp_adjustment = d->adjustment;  // RET's pop, CALL's push
    }
  }
  if (!b.checks.empty()) b.bytes = std::move(bytes);
  return blocks_.emplace(key, std::move(b)).first->second;
}

bool UserCodeEmulator::accesses_fit(const Block& b, uint64_t address) {
  if (b.checks.empty()) return true;  // (no register to read: most SIMD blocks)
  const GuestRegisters start = read_registers();
  for (const Block::AccessCheck& c : b.checks) {
    GuestRegisters at = start;
    for (int n = 0; n < 16; ++n)
      general_register(at, n) += static_cast<uint64_t>(c.adjustment[static_cast<size_t>(n)]);
    at.rip = address + c.offset;
    const std::optional<DecodedInstruction> d =
        decoder_.decode(std::span<const uint8_t>(b.bytes).subspan(
                            c.offset, std::min<size_t>(15, b.bytes.size() - c.offset)),
                        at);
    if (!d) return false;
    auto fits = [&](const MemoryAccess& a) {
      if (a.size != 16) return true;
      if (d->simd_aligned) return (a.address & 15) == 0;
      return (a.address & (kPage - 1)) <= kPage - 16;
    };
    for (uint8_t i = 0; i < d->load_count; ++i)
      if (!fits(d->loads[i])) return false;
    for (uint8_t i = 0; i < d->store_count; ++i)
      if (!fits(d->stores[i])) return false;
  }
  return true;
}

XmmRegisters::File UserCodeEmulator::read_xmm() const {
  XmmRegisters::File xmm{};
  for (int i = 0; i < 16; ++i)
    lib_.reg_read(uc_, UC_X86_REG_XMM0 + i, xmm[static_cast<size_t>(i)].data());
  return xmm;
}

void UserCodeEmulator::write_xmm(const XmmRegisters::File& xmm) {
  for (int i = 0; i < 16; ++i)
    lib_.reg_write(uc_, UC_X86_REG_XMM0 + i, xmm[static_cast<size_t>(i)].data());
}

void UserCodeEmulator::block_entered(uint64_t address, uint32_t size) {
  if (stop_) return;
  const Block& b = block_at(address, size);
  // A block runs whole or not at all: one that holds an instruction KVM must run, or would pass
  // the limit, is left to the KVM stepper from its start (a few steps; ending a translated
  // block early in Unicorn 2.0.1 costs a flush of every translated block).
  const bool passes_limit =
      b.starts.size() > limit_.instructions - retired_ ||
      (b.ends_in_branch && branches_ >= limit_.branches) ||
      (b.ends_in_conditional && conditional_branches_ >= limit_.conditional_branches);
  if (b.kvm_only_at >= 0 || passes_limit) {
    stop_ = b.kvm_only_at >= 0 ? b.why : KvmOnly::kCount;
    first_block_kvm_only_ = b.kvm_only_at >= 0 && last_block_ == nullptr && retired_ == 0;
    if (b.kvm_only_at >= 0) ++work_.kvm_only_by_mnemonic[b.kvm_only_mnemonic];
    lib_.emu_stop(uc_);
    return;
  }
  // SIMD: where the guest can run it now, its wide accesses are what a CPU does, and with the
  // vCPU's XMM registers (read once a run).
  if (b.simd && (xmm_ == nullptr || !accesses_fit(b, address))) {
    ++(xmm_ == nullptr ? work_.simd_unusable : work_.simd_accesses_unfit);
    stop_ = KvmOnly::kNotComputing;
    lib_.emu_stop(uc_);
    return;
  }
  if (b.simd && !xmm_loaded_) {
    xmm_loaded_ = xmm_->read();
    write_xmm(*xmm_loaded_);
  }
  // The time slice: the clock is read every kBlocksPerClockRead blocks (Unicorn's own timeout
  // starts a thread per run).
  if (deadline_ns_ != 0 && --blocks_to_clock_ == 0) {
    blocks_to_clock_ = kBlocksPerClockRead;
    if (steady_now_ns() >= deadline_ns_) {
      lib_.emu_stop(uc_);
      return;
    }
  }
  retired_ += b.starts.size();
  branches_ += b.ends_in_branch ? 1 : 0;
  conditional_branches_ += b.ends_in_conditional ? 1 : 0;
  last_block_ = &b;
}

void UserCodeEmulator::on_block(uc_engine*, uint64_t address, uint32_t size, void* self) {
  static_cast<UserCodeEmulator*>(self)->block_entered(address, size);
}

bool UserCodeEmulator::map_page(uint64_t page, bool write, bool fetch) {
  if (private_window(page & ~(kWindowBytes - 1))) return false;  // the emulator's own
  const std::optional<Translation> t = translate(ram_, cr3_, page);
  if (!t || !t->user || (write && !t->writable) || (fetch && !t->executable)) return false;
  // An XD bit without EFER.NXE is reserved (#PF with RSVD): KVM's to raise.
  if (!nxe_ && !t->executable) return false;
  const uint64_t frame = t->gpa & ~(kPage - 1);
  std::byte* host = ram_.host(frame, kPage);
  if (host == nullptr) return false;  // MMIO or beyond RAM: not the emulator's
  // Executable in the emulator's TLB: where the guest's tables allow it and Unicorn can
  // translate it. At a fetch; and at a first read where the tables make the page read-only
  // code, so that code reading constants from its own page (jump tables, literals) is not sent
  // to KVM at its first fetch. (A writable page read first is data: in a guest without NX,
  // every data page is executable, and mapping it as code would send each store to KVM.)
  const bool executable = t->executable;
  if (fetch && !executable) return false;
  const bool as_code = executable && (fetch || (!write && !t->writable));
  // Never writable and executable at once, per frame (W^X in the emulator's TLB): code is never
  // written under the emulator, so no translated block goes stale by the emulator's own writes
  // (Unicorn sees a store through another window as no write to the code). A write to a frame
  // code was fetched from, at any of its pages, goes to KVM (the next run sees the new bytes);
  // a fetch from a page mapped for data ends the run (the next run maps it as code); a frame
  // that becomes code loses its other pages' write permission.
  const bool code_elsewhere = frame_is(frame, UC_PROT_EXEC, page);
  if (write && code_elsewhere) return false;
  // Writable at a read too where the guest's entry is dirty already: its first write then sets
  // nothing a CPU would, and costs no fault.
  const bool writable = !as_code && !code_elsewhere && t->writable && (write || t->dirty);
  auto it = mapped_.find(page);
  if (it != mapped_.end() && (write || fetch)) {
    const uint32_t other = write ? UC_PROT_EXEC : UC_PROT_WRITE;
    if (it->second.prot & other) return false;
  }
  if (!walk_and_mark(ram_, cr3_, page, write)) return false;
  if (as_code) take_write_permission(frame, page);
  const uint32_t prot =
      UC_PROT_READ | (as_code ? UC_PROT_EXEC : 0) | (writable ? UC_PROT_WRITE : 0);
  if (it != mapped_.end()) {
    // The tables may map the page elsewhere now: only the same frame keeps its mapping.
    if (it->second.frame != frame) return false;
    if ((prot & UC_PROT_EXEC) && !(it->second.prot & UC_PROT_EXEC)) keep_code_copy(page, host);
    it->second.prot |= prot;
    return shadow_set(page, it->second.prot);
  }
  if (mapped_.size() >= kMaxMappedPages) unmap_data_pages();
  if (code_copies_.size() >= kMaxCodePages && (prot & UC_PROT_EXEC)) flush();
  if (!alias(page, frame)) return false;
  if (prot & UC_PROT_EXEC) keep_code_copy(page, host);
  add_mapping(page, Mapping{prot, frame});
  return shadow_set(page, prot);
}

void UserCodeEmulator::add_mapping(uint64_t page, const Mapping& m) {
  mapped_.emplace(page, m);
  pages_of_frame_.emplace(m.frame, page);
}

bool UserCodeEmulator::frame_is(uint64_t frame, uint32_t prot, uint64_t except_page) const {
  const auto [first, last] = pages_of_frame_.equal_range(frame);
  for (auto p = first; p != last; ++p)
    if (p->second != except_page && (mapped_.at(p->second).prot & prot)) return true;
  return false;
}

void UserCodeEmulator::take_write_permission(uint64_t frame, uint64_t except_page) {
  const auto [first, last] = pages_of_frame_.equal_range(frame);
  for (auto p = first; p != last; ++p) {
    if (p->second == except_page) continue;
    Mapping& m = mapped_.at(p->second);
    if (!(m.prot & UC_PROT_WRITE)) continue;
    m.prot &= ~UC_PROT_WRITE;
    shadow_.set(p->second, false, (m.prot & UC_PROT_EXEC) != 0);  // (fewer permissions: no page)
    tlb_stale_ = true;
  }
}

bool UserCodeEmulator::shadow_set(uint64_t page, uint32_t prot) {
  if (shadow_.set(page, prot & UC_PROT_WRITE, prot & UC_PROT_EXEC)) return true;
  // The table pages ran out: everything goes, and this page comes back alone.
  const Mapping m = mapped_.at(page);
  flush();
  shadow_.reset();
  flush_tlb();
  std::byte* host = ram_.host(m.frame, kPage);
  if (host == nullptr) return false;
  if (m.prot & UC_PROT_EXEC) keep_code_copy(page, host);
  add_mapping(page, m);
  return shadow_.set(page, m.prot & UC_PROT_WRITE, m.prot & UC_PROT_EXEC);
}

bool UserCodeEmulator::on_unmapped(uc_engine*, uc_mem_type, uint64_t address, int, int64_t,
                                   void* self) {
  // Unicorn looks for the region at the linear address before it walks the shadow tables: the
  // first access to a window comes here. With the window there, the access walks the tables,
  // finds nothing, and raises the #PF exception() maps the page at.
  return static_cast<UserCodeEmulator*>(self)->window(address & ~(kPage - 1)) != nullptr;
}

void UserCodeEmulator::on_interrupt(uc_engine*, uint32_t vector, void* self) {
  static_cast<UserCodeEmulator*>(self)->exception(vector);
}

void UserCodeEmulator::exception(uint32_t vector) {
  uint64_t rip = 0, cr2 = 0;
  lib_.reg_read(uc_, UC_X86_REG_RIP, &rip);
  lib_.reg_read(uc_, UC_X86_REG_CR2, &cr2);
  // The state is the one before the instruction that faulted (QEMU restores it), or before a
  // block whose code could not be fetched.
  if (exits_.contains(rip)) {
    // Unicorn stops at an exit with a block of no instructions, and QEMU then looks up the code
    // page of that block's "last byte", the one before RIP: a #PF there, when RIP starts a page,
    // is no access of the guest's. The instruction at RIP is KVM's (fetched).
    lib_.emu_stop(uc_);
    exit_reached_ = true;
    return;
  }
  // Unicorn tells no #PF error code. A data access faults while a block runs: the block hook
  // has seen it, and RIP is one of its instructions. A fetch faults while a block is being
  // translated (any of its instructions, up to a page away from its start), before the hook:
  // RIP is the block's start, not in the last block entered.
  const bool fetch =
      vector == kPageFault &&
      (last_block_ == nullptr || std::find(last_block_->starts.begin(), last_block_->starts.end(),
                                           rip) == last_block_->starts.end());
  if (!fetch) undo_rest_of_block(rip);
  lib_.emu_stop(uc_);
  if (vector == kPageFault) {
    const uint64_t page = cr2 & ~(kPage - 1);
    // The first access to a page (mapped for a read first: a write faults once more), a write
    // to a page mapped without it, or code on a page mapped for data (read-only data becomes
    // code; written data stays data, W^X: the next run maps it as code): mapped, if the guest's
    // tables allow it, and the instruction runs again.
    const bool mapped = mapped_.contains(page);
    if (map_page(page, /*write=*/mapped && !fetch, fetch)) {
      ++work_.pages_mapped;
      restart_ = true;
      tlb_stale_ = true;  // Unicorn may keep the page's entry as it was
      return;
    }
    if (fetch && mapped) data_fetched_ = page;
  }
  faulted_ = true;
}

void UserCodeEmulator::undo_rest_of_block(uint64_t rip) {
  // The block hook counted the whole block when it was entered: what an exception left
  // unexecuted (the faulting instruction and those after it) did not retire.
  if (last_block_ == nullptr) return;
  const auto at = std::find(last_block_->starts.begin(), last_block_->starts.end(), rip);
  if (at == last_block_->starts.end()) return;
  retired_ -= static_cast<uint64_t>(last_block_->starts.end() - at);
  branches_ -= last_block_->ends_in_branch ? 1 : 0;
  conditional_branches_ -= last_block_->ends_in_conditional ? 1 : 0;
  last_block_ = nullptr;
}

GuestRegisters UserCodeEmulator::read_registers() const {
  GuestRegisters regs;
  for (const RegisterSlot& r : kRegisters) lib_.reg_read(uc_, r.uc, &(regs.*r.field));
  return regs;
}

void UserCodeEmulator::load_registers(const GuestRegisters& regs) {
  lib_.context_restore(uc_, clean_);  // no exception in flight (the constructor)
  for (const RegisterSlot& r : kRegisters) lib_.reg_write(uc_, r.uc, &(regs.*r.field));
  if (tlb_stale_) flush_tlb();
}

EmulationRun UserCodeEmulator::one_run(uint64_t pc) {
  last_block_ = nullptr;
  uc_err err = UC_ERR_OK;
  for (uint32_t restarts = 0;; ++restarts) {
    stop_.reset();
    faulted_ = restart_ = exit_reached_ = false;
    err = lib_.emu_start(uc_, pc, 0, 0, 0);
    lib_.reg_read(uc_, UC_X86_REG_RIP, &pc);
    if (!restart_) break;
    if (restarts == kMaxRestarts) {  // never expected: KVM executes the instruction
      faulted_ = true;
      break;
    }
    // A page gained what the faulting instruction needs: it runs again, from a clean CPU.
    const GuestRegisters now = read_registers();
    const std::optional<XmmRegisters::File> xmm =
        xmm_loaded_ ? std::optional(read_xmm()) : std::nullopt;
    load_registers(now);
    if (xmm) write_xmm(*xmm);
  }
  EmulationRun out;
  if (faulted_) {
    out.end = EmulationRun::End::kFault;
    const bool canonical = static_cast<uint64_t>(static_cast<int64_t>(pc << 16) >> 16) == pc;
    if (!canonical) {
      // The last block's branch went there: hardware raises #GP at the branch instead, which
      // does not retire and leaves RSP as it was.
      if (last_block_ == nullptr || !last_block_->ends_in_branch || !last_block_->branch_undoable) {
        out.position_known = false;
        return out;
      }
      --retired_;
      --branches_;
      conditional_branches_ -= last_block_->ends_in_conditional ? 1 : 0;
      pc = last_block_->starts.back();
      lib_.reg_write(uc_, UC_X86_REG_RIP, &pc);
      uint64_t rsp = 0;
      lib_.reg_read(uc_, UC_X86_REG_RSP, &rsp);
      rsp -= static_cast<uint64_t>(last_block_->branch_rsp_adjustment);
      lib_.reg_write(uc_, UC_X86_REG_RSP, &rsp);
    }
    return out;
  }
  if (err != UC_ERR_OK) {
    // Not expected: every access of the guest's ends in a precise #PF. (A window Unicorn could
    // not map: the host refused the memory.)
    out.end = EmulationRun::End::kFault;
    out.position_known = false;
    return out;
  }
  if (exit_reached_ || (!stop_ && exits_.contains(pc))) {  // one Unicorn cannot translate
    out.end = EmulationRun::End::kKvmOnly;
    out.kvm_only = KvmOnly::kNotComputing;
    return out;
  }
  if (!stop_) {  // the time slice: between two blocks, each whole
    out.end = EmulationRun::End::kTimeout;
    return out;
  }
  out.end = *stop_ == KvmOnly::kCount ? EmulationRun::End::kLimit : EmulationRun::End::kKvmOnly;
  out.kvm_only = *stop_ == KvmOnly::kCount ? KvmOnly::kNo : *stop_;
  return out;
}

EmulationRun UserCodeEmulator::run(GuestRegisters& regs, uint64_t cr3, bool nxe, const Limit& limit,
                                   uint64_t timeout_us, XmmRegisters* xmm) {
  // Where the last run from here stopped before its first block for what that block holds, this
  // one would too: KVM steps it without the run's checks. (Wrong only if the code changed since,
  // which the next run elsewhere finds: KVM then steps it once more than it had to, exactly.)
  if (const auto known = stops_at_start_.find(regs.rip);
      known != stops_at_start_.end() && known->second.cr3 == cr3) {
    ++work_.known_stops;
    EmulationRun out;
    out.end = EmulationRun::End::kKvmOnly;
    out.kvm_only = known->second.why;
    return out;
  }
  cr3_ = cr3;
  nxe_ = nxe;
  xmm_ = xmm;
  xmm_loaded_.reset();
  ++work_.runs;
  const uint64_t start_ns = steady_now_ns();
  // Whatever ran since the last run (the kernel, KVM, other vCPUs, devices) may have changed
  // the tables, their A/D flags or code: the emulator's TLB keeps only what still holds.
  revalidate();
  const uint64_t checked_ns = steady_now_ns();
  work_.checking_ns += checked_ns - start_ns;
  limit_ = limit;
  deadline_ns_ = timeout_us ? steady_now_ns() + timeout_us * 1000 : 0;
  blocks_to_clock_ = kBlocksPerClockRead;
  retired_ = branches_ = conditional_branches_ = 0;
  load_registers(regs);
  data_fetched_.reset();
  first_block_kvm_only_ = false;
  EmulationRun out = one_run(regs.rip);
  work_.running_ns += steady_now_ns() - checked_ns;
  if (first_block_kvm_only_ && out.end == EmulationRun::End::kKvmOnly && retired_ == 0) {
    if (stops_at_start_.size() >= kMaxKnownStops) stops_at_start_.clear();
    stops_at_start_[regs.rip] = {cr3, out.kvm_only};
  }
  if (data_fetched_ && mapped_.contains(*data_fetched_)) unmap(*data_fetched_);
  out.retired = retired_;
  out.branches = branches_;
  out.conditional_branches = conditional_branches_;
  // Live migration: the emulator's stores bypass KVM's dirty log (GuestRam::note_written).
  for (const auto& [page, m] : mapped_)
    if (m.prot & UC_PROT_WRITE) ram_.note_written(m.frame, kPage);
  regs = read_registers();
  if (xmm_loaded_)
    if (const XmmRegisters::File now = read_xmm(); now != *xmm_loaded_) xmm_->write(now);
  return out;
}

}  // namespace vmm
