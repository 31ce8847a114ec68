/* A minimal check macro for the host-side unit tests of the kernel's pure helpers. */
#ifndef PMUVM_GUEST_KERNEL_HOST_TEST_H_
#define PMUVM_GUEST_KERNEL_HOST_TEST_H_

#include <stdio.h>

static int host_test_passed, host_test_failed;

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (cond) {                                                              \
      ++host_test_passed;                                                    \
    } else {                                                                 \
      ++host_test_failed;                                                    \
      printf("%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);        \
    }                                                                        \
  } while (0)

static int host_test_finish(const char *name) {
  printf("%s: %d passed, %d failed\n", name, host_test_passed, host_test_failed);
  return host_test_failed ? 1 : 0;
}

#endif /* PMUVM_GUEST_KERNEL_HOST_TEST_H_ */
