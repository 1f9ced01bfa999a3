#include "test_util.h"

#include <cstdlib>
#include <string>

#include "cuda/common/runtime.h"

namespace flashattn::testing {

bool full_tier() {
  const char* tier = std::getenv("FLASHATTN_TEST_TIER");
  return tier != nullptr && std::string(tier) == "full";
}

bool have_cuda() { return cuda::device_count() > 0; }

std::uint64_t base_seed() {
  const char* s = std::getenv("FLASHATTN_TEST_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : 20261129ull;
}

void expect_huge_scores_tight(InputKind kind, const VerifyReport& report) {
  if (kind != InputKind::kHugeScores) return;
  const double bound = 2.0 * report.baseline_error.max_abs + (report.atol - report.score_noise);
  EXPECT_LE(report.error.max_abs, bound) << report.to_string();
}

}  // namespace flashattn::testing
