/* block_fuzz SEED SNIPPETS: a generated program, for the block-stepping property test
 * (tests/e2e/guest_counting_test: every stepper must store the same LWP records, byte for byte).
 * From SEED it writes SNIPPETS (1..400) random snippets of x86-64 code into a writable and
 * executable buffer and runs the result twice while LWP counts instructions retired (a record
 * every 7 for odd seeds, every 61 for even ones) and branches retired (every 5). The snippets are what blocks must get right:
 *   register arithmetic (ALU, IMUL, shifts, CMOV, LEA), loads and stores through RDI (never
 *   written) and through a register written just before, read-modify-write of memory,
 *   conditional branches forward over code, counted loops (dec/jnz back), CALL/RET, indirect
 *   JMP through a register and through memory, REP STOSB, a first touch of a demand-zero page
 *   (a #PF the kernel resolves: the load runs again), a store into a later instruction's
 *   immediate (self-modifying code: the second run sees the new byte), CPUID (completed by KVM),
 *   pushes and pops, a stack frame written and read through a moved RSP, a yield system
 *   call, and SSE integer code (XMM0-7: aligned and unaligned 16-byte loads and stores through
 *   RDI, page-crossing ones too, byte compares, adds, shuffles, and moves to and from general
 *   registers, which carry the XMM results into the checksum).
 * The code crosses page boundaries wherever it happens to. Prints the checksum of the data the
 * program wrote and of the registers it returned, and the number of records.
 * Linked with guest/lib/user_wx.ld: its text segment is writable. */
#include "guest/lib/lwp.h"
#include "guest/lib/pmuvm.h"

#define CODE_BYTES (64 * 1024)
/* In the text segment (user_wx.ld puts .wxcode there), writable and executable: the flags are
 * given to the assembler here (the '#' comments out the "aw" GCC appends for data). */
static uint8_t code[CODE_BYTES]
    __attribute__((section(".wxcode,\"awx\",@progbits#"), aligned(4096)));
static uint8_t data[8192] __attribute__((aligned(4096)));
static struct lwpcb cb;
static uint8_t ring[8192 * LWP_RECORD_SIZE] __attribute__((aligned(4096)));

static uint64_t state;
static uint32_t next(void) { /* xorshift64* */
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return (uint32_t)((state * 0x2545F4914F6CDD1Dull) >> 32);
}
static uint32_t below(uint32_t n) { return next() % n; }

static uint8_t *at;
static void b(uint8_t x) { *at++ = x; }
static void d32(uint32_t x) {
  for (int i = 0; i < 4; ++i) b((uint8_t)(x >> (8 * i)));
}
static void d64(uint64_t x) {
  for (int i = 0; i < 8; ++i) b((uint8_t)(x >> (8 * i)));
}

/* Scratch registers (never RCX, RDI, RSP, RBP, R12, R13: loops, data, stack, saved values). */
static const uint8_t scratch[] = {0, 2, 3, 6, 8, 9, 10, 11}; /* rax rdx rbx rsi r8-r11 */
static uint8_t reg(void) { return scratch[below(sizeof scratch)]; }
static void rex(uint8_t r, uint8_t rm) { b((uint8_t)(0x48 | (r >> 3) << 2 | (rm >> 3))); }
static void modrm_rr(uint8_t r, uint8_t rm) { b((uint8_t)(0xC0 | (r & 7) << 3 | (rm & 7))); }

static void alu(void) {
  const uint8_t dst = reg(), src = reg();
  static const uint8_t rr[] = {0x01, 0x29, 0x31, 0x21, 0x09, 0x39, 0x11, 0x19, 0x85};
  switch (below(6)) {
    case 0: rex(src, dst), b(rr[below(sizeof rr)]), modrm_rr(src, dst); break;
    case 1: rex(0, dst), b(0x83), modrm_rr((uint8_t)below(8), dst), b((uint8_t)next()); break;
    /* IMUL leaves SF, ZF, AF and PF undefined, a shift by more than one OF: a TEST after them
     * defines every flag a later Jcc, CMOVcc, ADC or SBB reads, so the program's results are
     * the same on every x86 (CPU vendors differ there, and so does an emulator: --stepper
     * emulate must match KVM on defined results only). */
    case 2: /* imul dst, src; test dst, dst */
      rex(dst, src), b(0x0F), b(0xAF), modrm_rr(dst, src);
      rex(dst, dst), b(0x85), modrm_rr(dst, dst);
      break;
    case 3: { /* shl/shr/sar/rol; test dst, dst */
      static const uint8_t digit[] = {4, 5, 7, 0};
      rex(0, dst), b(0xC1), modrm_rr(digit[below(4)], dst), b((uint8_t)(1 + below(63)));
      rex(dst, dst), b(0x85), modrm_rr(dst, dst);
      break;
    }
    case 4: rex(dst, src), b(0x0F), b((uint8_t)(0x40 + below(16))), modrm_rr(dst, src); break;
    case 5: /* lea dst, [src + disp8] */
      /* (no scratch register is RSP/R12 or RBP/R13, whose encodings would need a SIB or mean
       * RIP-relative) */
      rex(dst, src), b(0x8D), b((uint8_t)(0x40 | (dst & 7) << 3 | (src & 7))), b((uint8_t)next());
      break;
  }
}

/* [rdi + disp32] with disp inside the first 4 KiB of data (8-byte aligned). */
static void mem_rdi(uint8_t r) { b((uint8_t)(0x80 | (r & 7) << 3 | 7)), d32(8 * below(512)); }

/* SSE2 integer code on XMM0-7 (what --stepper emulate runs with the vCPU's XMM
 * registers): 66 [REX] 0F op modrm. */
static void sse(uint8_t op, uint8_t r, uint8_t rm, int rex_w) {
  b(0x66);
  if (rex_w || r >= 8 || rm >= 8) b((uint8_t)(0x40 | (rex_w ? 8 : 0) | (r >> 3) << 2 | (rm >> 3)));
  b(0x0F), b(op), modrm_rr(r, rm);
}
static void sse_snippet(void) {
  const uint8_t x = (uint8_t)below(8), y = (uint8_t)below(8), r = reg();
  static const uint8_t ops[] = {0x74, 0xFC, 0xEF, 0xDA, 0xD4, 0x60, 0xEB}; /* pcmpeqb paddb pxor
                                                   pminub paddq punpcklbw por */
  switch (below(8)) {
    case 0: /* movdqu xmm, [rdi + any byte of the first page] (page-crossing near its end) */
      b(0xF3), b(0x0F), b(0x6F), b((uint8_t)(0x87 | x << 3)), d32(below(4096));
      break;
    case 1: /* movdqa xmm, [rdi + 16k] */
      b(0x66), b(0x0F), b(0x6F), b((uint8_t)(0x87 | x << 3)), d32(16 * below(256));
      break;
    case 2: sse(ops[below(sizeof ops)], x, y, 0); break;
    case 3: /* pshufd xmm, xmm, imm8 (SSE2 only: the nested KVM host's qemu64 has no SSSE3) */
      b(0x66), b(0x0F), b(0x70), modrm_rr(x, y), b((uint8_t)next());
      break;
    case 4: /* op xmm, [rdi + 16k] (legacy SSE: aligned) */
      b(0x66), b(0x0F), b(ops[below(sizeof ops)]), b((uint8_t)(0x87 | x << 3)),
          d32(16 * below(256));
      break;
    case 5: /* movdqu [rdi + any byte], xmm */
      b(0xF3), b(0x0F), b(0x7F), b((uint8_t)(0x87 | x << 3)), d32(below(4096));
      break;
    case 6: /* pmovmskb r32, xmm; movq r', xmm; then an ALU that mixes them */
      sse(0xD7, r, x, 0);
      sse(0x7E, y, reg(), 1);
      alu();
      break;
    case 7: /* movq xmm, r */
      sse(0x6E, x, r, 1);
      break;
  }
}

static void snippet(int *demand_page) {
  switch (below(17)) {
    case 16: sse_snippet(); break;
    case 0: case 1: case 2: {  /* straight register code */
      const uint32_t n = 1 + below(8);
      for (uint32_t i = 0; i < n; ++i) alu();
      break;
    }
    case 3: {  /* loads, stores, read-modify-write through rdi */
      const uint8_t r = reg();
      switch (below(3)) {
        case 0: rex(r, 7), b(0x8B), mem_rdi(r); break;
        case 1: rex(r, 7), b(0x89), mem_rdi(r); break;
        case 2: rex(r, 7), b(0x01), mem_rdi(r); break;
      }
      alu();
      break;
    }
    case 4: {  /* a load through a register written just before: lea rsi,[rdi+k]; mov r,[rsi] */
      const uint8_t r = reg();
      b(0x48), b(0x8D), b(0xB7), d32(8 * below(512));
      rex(r, 6), b(0x8B), b((uint8_t)((r & 7) << 3 | 6));
      break;
    }
    case 5: {  /* jcc forward over register code */
      b((uint8_t)(0x70 + below(16)));
      uint8_t *rel = at++;
      const uint32_t n = 1 + below(4);
      for (uint32_t i = 0; i < n; ++i) alu();
      *rel = (uint8_t)(at - rel - 1);
      break;
    }
    case 6: {  /* mov ecx, n; L: alu...; dec ecx; jnz L */
      b(0xB9), d32(1 + below(5));
      uint8_t *loop = at;
      const uint32_t n = 1 + below(3);
      for (uint32_t i = 0; i < n; ++i) alu();
      b(0xFF), b(0xC9);
      b(0x75), b((uint8_t)(loop - (at + 1)));
      break;
    }
    case 7: {  /* call L1; jmp L2; L1: alu...; ret; L2: */
      b(0xE8), d32(2);
      b(0xEB);
      uint8_t *rel = at++;
      const uint32_t n = 1 + below(4);
      for (uint32_t i = 0; i < n; ++i) alu();
      b(0xC3);
      *rel = (uint8_t)(at - rel - 1);
      break;
    }
    case 8:  /* lea rsi,[rip+2]; jmp rsi; */
      b(0x48), b(0x8D), b(0x35), d32(2);
      b(0xFF), b(0xE6);
      break;
    case 9:  /* lea rax,[rip+17]; mov [rdi+0x1000],rax; jmp [rdi+0x1000] */
      b(0x48), b(0x8D), b(0x05), d32(7 + 6);
      b(0x48), b(0x89), b(0x87), d32(0x1000);
      b(0xFF), b(0xA7), d32(0x1000);
      break;
    case 10:  /* mov r12,rdi; lea rdi,[rdi+0x1800]; mov ecx,n; rep stosb; mov rdi,r12 */
      b(0x49), b(0x89), b(0xFC);
      b(0x48), b(0x8D), b(0xBF), d32(0x1800);
      b(0xB9), d32(1 + below(64));
      b(0xF3), b(0xAA);
      b(0x4C), b(0x89), b(0xE7);
      break;
    case 11:  /* first touch of a demand-zero page: mov rax,[r13+page*4096+k] */
      if (*demand_page < 255) {
        b(0x49), b(0x8B), b(0x85), d32((uint32_t)(*demand_page)++ * 4096 + 8 * below(512));
      }
      break;
    case 12: {  /* mov byte [rip+d], imm8 into the immediate of a later add rax, imm8 */
      const uint8_t value = (uint8_t)next();
      b(0xC6), b(0x05);
      uint8_t *disp = at;
      d32(0), b(value);
      const uint32_t n = below(3);
      for (uint32_t i = 0; i < n; ++i) alu();
      b(0x48), b(0x83), b(0xC0);
      const int32_t rel = (int32_t)(at - (disp + 5));
      for (int i = 0; i < 4; ++i) disp[i] = (uint8_t)((uint32_t)rel >> (8 * i));
      b(1);
      break;
    }
    case 14: {  /* push r; alu...; pop r' (stack accesses through a moving RSP) */
      const uint8_t r = reg(), r2 = reg();
      if (r >= 8) b(0x41);
      b((uint8_t)(0x50 + (r & 7)));
      const uint32_t n = below(3);
      for (uint32_t i = 0; i < n; ++i) alu();
      if (r2 >= 8) b(0x41);
      b((uint8_t)(0x58 + (r2 & 7)));
      break;
    }
    case 15: {  /* sub rsp,16; mov [rsp+8],r; mov r',[rsp+8]; add rsp,16 */
      const uint8_t r = reg(), r2 = reg();
      b(0x48), b(0x83), b(0xEC), b(16);
      rex(r, 4), b(0x89), b((uint8_t)(0x44 | (r & 7) << 3)), b(0x24), b(8);
      rex(r2, 4), b(0x8B), b((uint8_t)(0x44 | (r2 & 7) << 3)), b(0x24), b(8);
      b(0x48), b(0x83), b(0xC4), b(16);
      break;
    }
    case 13:
      if (below(2)) {
        b(0x31), b(0xC0), b(0x0F), b(0xA2);  /* xor eax,eax; cpuid */
      } else {
        b(0xB8), d32(PMUVM_SYS_YIELD), b(0x0F), b(0x05);  /* mov eax, yield; syscall */
      }
      break;
  }
}

typedef uint64_t (*generated_fn)(uint8_t *data);

int main(int argc, char **argv) {
  long seed = 0, snippets = 0;
  if (argc != 3 || parse_long(argv[1], &seed) != 0 || parse_long(argv[2], &snippets) != 0 ||
      snippets < 1 || snippets > 400) {
    print("usage: block_fuzz SEED SNIPPETS(1..400)\n");
    return 2;
  }
  state = (uint64_t)seed * 0x9E3779B97F4A7C15ull + 1;
  at = code;
  /* push rbx; push r12; push r13; mov r13, PMUVM_DEMAND_ZERO_VA */
  b(0x53), b(0x41), b(0x54), b(0x41), b(0x55);
  b(0x49), b(0xBD), d64(PMUVM_DEMAND_ZERO_VA);
  int demand_page = 0;
  for (long i = 0; i < snippets; ++i) snippet(&demand_page);
  /* pop r13; pop r12; pop rbx; ret */
  b(0x41), b(0x5D), b(0x41), b(0x5C), b(0x5B), b(0xC3);

  memset(&cb, 0, sizeof cb);
  cb.buffer_size = sizeof ring;
  cb.buffer_base = (uint64_t)(uintptr_t)ring;
  /* Odd seeds: a record every 7 instructions (blocks end at each); even: every 61. */
  cb.events[0].interval_id = lwp_event(LWP_EVENT_INSTRUCTIONS, seed % 2 ? 7 : 61);
  cb.events[1].interval_id = lwp_event(LWP_EVENT_BRANCHES, 5);
  llwpcb(&cb);
  const generated_fn run = (generated_fn)(uintptr_t)code;
  uint64_t registers = run(data);
  registers ^= run(data) * 31;
  llwpcb(0);
  uint64_t sum = 0;
  for (unsigned i = 0; i < sizeof data; ++i) sum = sum * 131 + data[i];
  printf_("block_fuzz: seed %ld: %ld snippets, %ld code bytes, data %#llx, rax %#llx, %u records\n",
          seed, snippets, (long)(at - code), (unsigned long long)sum,
          (unsigned long long)registers, cb.head / LWP_RECORD_SIZE);
  return 0;
}
