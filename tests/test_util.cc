#include "test_util.h"

#include <cstdlib>
#include <string>

#include "api/backend.h"
#include "cuda/common/runtime.h"

namespace flashattn::testing {

bool full_tier() {
  const char* tier = std::getenv("FLASHATTN_TEST_TIER");
  return tier != nullptr && std::string(tier) == "full";
}

bool have_cuda() { return cuda::device_count() > 0; }

bool backend_usable_here(const std::string& name, std::string* why, bool* must_run) {
  *must_run = false;
  const Backend* b = find_backend(name);
  if (b == nullptr) {
    *why = "no backend named " + name;
    *must_run = true;
    return false;
  }
  const Status st = b->usable(Device::cuda(0));
  if (st.ok()) return true;
  *why = st.message();
  // Every other GPU backend runs on every device the tests run on (sm_80 and newer).
  *must_run = name != "flash-sm90";
#if defined(FLASHATTN_TEST_HAVE_SM90A)
  cuda::DeviceProps props;
  if (name == "flash-sm90" && cuda::device_count() > 0 && cuda::device_props(0, &props).ok() &&
      props.major == 9 && props.minor == 0) {
    *must_run = true;
  }
#endif
  return false;
}

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
