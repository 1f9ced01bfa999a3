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
// Whether the GPU backend `name` runs on cuda:0. When it does not, *why says why and *must_run
// whether that is a failure rather than a skip: flash-sm90 skips except on a compute capability
// 9.0 device of a build with sm_90a code (FLASHATTN_CUDA_ARCHS lists 90a), where it must run, so
// that an H200 run never passes by skipping it; every other GPU backend must always run.
bool backend_usable_here(const std::string& name, std::string* why, bool* must_run);
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

// Skips the test (or fails it, see backend_usable_here) when the GPU backend `name` cannot run
// on cuda:0.
#define FA_SKIP_UNLESS_BACKEND_USABLE(name)                                                   \
  do {                                                                                      \
    std::string _why;                                                                       \
    bool _must_run = false;                                                                 \
    if (!::flashattn::testing::backend_usable_here((name), &_why, &_must_run)) {            \
      if (_must_run) FAIL() << (name) << " must run on this GPU but is not usable: " << _why; \
      GTEST_SKIP() << "skipped: " << (name) << " is not usable here: " << _why;            \
    }                                                                                       \
  } while (0)
