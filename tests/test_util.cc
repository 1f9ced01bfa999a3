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

}  // namespace flashattn::testing
