// LVTPC decoding for NetBurst PMIs: masked -> held, NMI mode, fixed mode with its vector, and the
// modes a PMI cannot use. The values are what the bundled kernel and Linux's P4 driver write.
#include "vmm/devices/lvt_performance_counter.h"

#include <gtest/gtest.h>

namespace vmm {
namespace {

using Route = PmiDelivery::Route;

TEST(LvtPerformanceCounter, MaskedHoldsThePmiWhateverTheMode) {
  EXPECT_EQ(route_pmi(0x10400).route, Route::kHeld);  // the kernel's reset value: masked NMI
  EXPECT_EQ(route_pmi(0x100EF).route, Route::kHeld);  // masked fixed vector 0xEF
}

TEST(LvtPerformanceCounter, NmiModeIsAnNmi) {
  EXPECT_EQ(route_pmi(0x400).route, Route::kNmi);  // APIC_DM_NMI, as Linux's P4 driver writes it
  EXPECT_EQ(route_pmi(0x4FF).route, Route::kNmi);  // the vector field is ignored for NMIs
}

TEST(LvtPerformanceCounter, FixedModeDeliversItsVector) {
  const PmiDelivery d = route_pmi(0xEF);
  EXPECT_EQ(d.route, Route::kFixed);
  EXPECT_EQ(d.vector, 0xEF);
  EXPECT_EQ(route_pmi(0x1000 | 0x30).vector, 0x30);  // delivery-status bit: not part of the mode
}

TEST(LvtPerformanceCounter, OtherDeliveryModesAreUnsupported) {
  for (uint32_t mode : {1u, 2u, 3u, 5u, 6u, 7u}) {
    const PmiDelivery d = route_pmi(mode << 8);
    EXPECT_EQ(d.route, Route::kUnsupported) << mode;
    EXPECT_EQ(d.delivery_mode, mode);
  }
}

}  // namespace
}  // namespace vmm
