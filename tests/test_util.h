// Helpers shared by every test executable.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace flashattn::testing {

// True when FLASHATTN_TEST_TIER=full: the whole grid instead of the quick one.
bool full_tier();
// True when a CUDA device is usable here.
bool have_cuda();
// A base seed for the run: FLASHATTN_TEST_SEED if set, else a fixed default; every failure logs it.
std::uint64_t base_seed();

}  // namespace flashattn::testing

// Reports the test as skipped (never passed) on a machine with no GPU.
#define FA_SKIP_WITHOUT_CUDA()                                           \
  do {                                                                   \
    if (!::flashattn::testing::have_cuda()) GTEST_SKIP() << "skipped: no CUDA device"; \
  } while (0)
