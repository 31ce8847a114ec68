/* Host unit test of the SysV process-entry block builder (entry_stack.h). */
#include <stdint.h>
#include <string.h>

#include "guest/kernel/entry_stack.h"
#include "guest/kernel/host_test.h"

#define BOTTOM 0x7FFFFFEE0000ull
#define TOP 0x7FFFFFF00000ull
#define SIZE (TOP - BOTTOM)

static uint8_t stack[SIZE] __attribute__((aligned(16)));

static uint64_t load(uint64_t va) {
  uint64_t v;
  memcpy(&v, stack + (va - BOTTOM), 8);
  return v;
}
static const char *str(uint64_t va) { return (const char *)stack + (va - BOTTOM); }

static void check_layout(const char *args, uint64_t size, uint64_t argc, const char *const *want) {
  memset(stack, 0xAA, sizeof stack);
  uint64_t rsp = 0;
  CHECK(build_entry_stack(stack, BOTTOM, TOP, args, size, argc, &rsp));
  CHECK(rsp % 16 == 0);
  CHECK(rsp >= BOTTOM && rsp < TOP);
  CHECK(load(rsp) == argc);
  for (uint64_t i = 0; i < argc; ++i) {
    const uint64_t p = load(rsp + 8 + 8 * i);
    CHECK(p > rsp && p < TOP);
    CHECK(strcmp(str(p), want[i]) == 0);
  }
  CHECK(load(rsp + 8 + 8 * argc) == 0);   /* argv NULL */
  CHECK(load(rsp + 16 + 8 * argc) == 0);  /* envp NULL */
  CHECK(load(rsp + 24 + 8 * argc) == 0);  /* AT_NULL type */
  CHECK(load(rsp + 32 + 8 * argc) == 0);  /* AT_NULL value */
  /* The strings end at or below TOP and do not overlap the block. */
  const uint64_t first = load(rsp + 8);
  CHECK(first >= rsp + 40 + 8 * argc);
  CHECK(first + size <= TOP);
}

int main(void) {
  const char *one[] = {"hello"};
  check_layout("hello", 6, 1, one);
  const char *two[] = {"exit_code", "42"};
  check_layout("exit_code\0" "42", 13, 2, two);
  const char *three[] = {"yield_ping", "3", "A"};
  check_layout("yield_ping\0" "3\0" "A", 15, 3, three);
  const char *empty_arg[] = {"p", ""};
  check_layout("p\0", 3, 2, empty_arg);

  uint64_t rsp = 0;
  CHECK(!build_entry_stack(stack, BOTTOM, TOP, "abc", 3, 1, &rsp));       /* no final NUL */
  CHECK(!build_entry_stack(stack, BOTTOM, TOP, "a\0b", 4, 1, &rsp));      /* 2 strings, argc 1 */
  CHECK(!build_entry_stack(stack, BOTTOM, TOP, "a", 2, 0, &rsp));         /* argc 0 */
  CHECK(!build_entry_stack(stack, BOTTOM, BOTTOM + 32, "abc", 4, 1, &rsp)); /* does not fit */
  return host_test_finish("entry_stack_test");
}
