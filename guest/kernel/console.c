/* Serial console on COM1 (polled 16550) and panic. Every kernel message goes through kprintf;
 * a whole kprintf call is printed under the console lock, so lines from different CPUs do not
 * interleave. A whole call goes out at once where pmuvm offers its block console
 * (PMUVM_PV_CONSOLE: one VM exit per message; the boot of `run -- hello` went from 2 206 exits to
 * ~100); else a FIFO-load at a time, as Linux's 8250 driver does: once the LSR says the
 * transmitter is empty, up to 16 bytes go out with `rep outsb` (KVM still exits once per byte of
 * an OUTS, but the LSR is read once per 16). Keep output short on hot paths. */
#include "guest/kernel/kernel.h"

#define COM1 0x3F8
#define UART_THR 0
#define UART_IER 1
#define UART_FCR 2
#define UART_LCR 3
#define UART_MCR 4
#define UART_LSR 5
#define UART_DLL 0
#define UART_DLM 1
#define LSR_THRE 0x20
#define TX_FIFO_BYTES 16 /* a 16550A's transmit FIFO */

static spinlock_t console_spin;
static volatile int panicking;
/* Bytes waiting to be sent, under the console lock: up to a FIFO load for the 16550, a whole
 * block for the block console. */
static struct pmuvm_console_block tx_block;
static uint64_t tx_limit = TX_FIFO_BYTES;
static int block_console;

void console_use_block_port(void) {
  uint64_t f = console_lock();
  block_console = 1;
  tx_limit = PMUVM_CONSOLE_BLOCK_BYTES;
  console_unlock(f);
}

void serial_init(void) {
  outb(COM1 + UART_IER, 0x00);  /* no interrupts: the console is polled */
  outb(COM1 + UART_LCR, 0x80);  /* DLAB */
  outb(COM1 + UART_DLL, 0x01);  /* 115200 baud */
  outb(COM1 + UART_DLM, 0x00);
  outb(COM1 + UART_LCR, 0x03);  /* 8N1 */
  outb(COM1 + UART_FCR, 0xC7);  /* FIFO on, cleared */
  outb(COM1 + UART_MCR, 0x03);  /* DTR, RTS */
}

/* Sends what is pending as one FIFO load. Waits for THR empty first; bounded so a missing UART
 * (reads 0xFF, which has THRE set anyway) or a stuck one cannot hang the kernel. */
static void serial_flush(void) {
  if (tx_block.length == 0) return;
  if (block_console) {
    outl(PMUVM_PORT_CONSOLE, (uint32_t)kernel_virt_to_phys(&tx_block));
    tx_block.length = 0;
    return;
  }
  for (int i = 0; i < 100000; ++i)
    if (inb(COM1 + UART_LSR) & LSR_THRE) break;
  const uint8_t *p = tx_block.bytes;
  uint64_t n = tx_block.length;
  __asm__ volatile("rep outsb" : "+S"(p), "+c"(n) : "d"((uint16_t)(COM1 + UART_THR)) : "memory");
  tx_block.length = 0;
}

static void serial_putc(char c) {
  tx_block.bytes[tx_block.length++] = (uint8_t)c;
  /* A panicking CPU may be in here beside the lock holder: it sends byte by byte. */
  if (tx_block.length == tx_limit || panicking) serial_flush();
}

uint64_t console_lock(void) {
  uint64_t f = read_rflags();
  cli();
  if (panicking) {
    /* A panicking CPU must get its message out even if another CPU (or this one, in the middle
     * of a kprintf) holds the lock: try for a while, then go ahead. */
    for (int i = 0; i < 100000; ++i) {
      if (__atomic_exchange_n(&console_spin.word, 1u, __ATOMIC_ACQUIRE) == 0) return f;
      pause();
    }
    return f;
  }
  spin_lock(&console_spin);
  return f;
}

void console_unlock(uint64_t flags) {
  serial_flush();
  spin_unlock_irqrestore(&console_spin, flags);
}

void console_putc_locked(char c) { serial_putc(c); }

static void kputc(void *ctx, char c) {
  (void)ctx;
  serial_putc(c);
}

void kprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  uint64_t f = console_lock();
  fmt_vformat(kputc, 0, fmt, ap);
  console_unlock(f);
  va_end(ap);
}

/* Prints "panic: <reason>" (DESIGN/brief contract), reports PMUVM_EXIT_PANIC to the VMM through
 * the exit port and halts this CPU. */
void panic(const char *fmt, ...) {
  cli();
  (void)__atomic_exchange_n(&panicking, 1, __ATOMIC_SEQ_CST); /* xchg: no mfence */
  va_list ap;
  va_start(ap, fmt);
  uint64_t f = console_lock();
  const char *prefix = "panic: ";
  while (*prefix) serial_putc(*prefix++);
  fmt_vformat(kputc, 0, fmt, ap);
  serial_putc('\n');
  console_unlock(f & ~RFLAGS_IF);
  va_end(ap);
  outl(PMUVM_PORT_EXIT, PMUVM_EXIT_PANIC);
  halt_forever();
}
