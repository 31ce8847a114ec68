#include "guest/kernel/entry_stack.h"

bool build_entry_stack(uint8_t *kview, uint64_t bottom, uint64_t top, const char *args,
                       uint64_t size, uint64_t argc, uint64_t *rsp_out) {
  if (argc == 0 || size == 0 || args[size - 1] != '\0' || top <= bottom) return false;
  uint64_t strings = 0;
  for (uint64_t i = 0; i < size; ++i) strings += args[i] == '\0';
  if (strings != argc) return false;
  const uint64_t block = 8 * (argc + 5); /* argc, argv[argc], NULL, envp NULL, AT_NULL pair */
  if (size + block + 32 > top - bottom) return false;

  const uint64_t strings_va = (top - size) & ~15ull;
  const uint64_t rsp = (strings_va - block) & ~15ull;
  uint8_t *s = kview + (strings_va - bottom);
  for (uint64_t i = 0; i < size; ++i) s[i] = (uint8_t)args[i];
  uint64_t *q = (uint64_t *)(void *)(kview + (rsp - bottom));
  q[0] = argc;
  uint64_t at = 0;
  for (uint64_t i = 0; i < argc; ++i) {
    q[1 + i] = strings_va + at;
    while (args[at] != '\0') ++at;
    ++at;
  }
  q[1 + argc] = 0;
  q[2 + argc] = 0;
  q[3 + argc] = 0;
  q[4 + argc] = 0;
  *rsp_out = rsp;
  return true;
}
