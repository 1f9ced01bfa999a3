// Helpers shared by every test executable.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "verify/verify.h"

namespace flashattn::testing {

// True when FLASHATTN_TEST_TIER=full: the whole grid instead of the quick one.
bool full_tier();
// True when a CUDA device is usable here.
bool have_cuda();
// A base seed for the run: FLASHATTN_TEST_SEED if set, else a fixed default; every failure logs it.
std::uint64_t base_seed();

// For InputKind::kHugeScores (a no-op for other kinds): there the verifier's float32 score-noise
// term exceeds max|O_ref| (verify/compare.h), so the max clause without it is checked too:
// max|O - O_ref| <= 2 * max|O_base - O_ref| + (atol - score_noise). Rows are one-hot at scores
// near 1e10, and every correct kernel returns the row of V at the largest score.
void expect_huge_scores_tight(InputKind kind, const VerifyReport& report);

}  // namespace flashattn::testing

// Reports the test as skipped (never passed) on a machine with no GPU.
#define FA_SKIP_WITHOUT_CUDA()                                           \
  do {                                                                   \
    if (!::flashattn::testing::have_cuda()) GTEST_SKIP() << "skipped: no CUDA device"; \
  } while (0)
