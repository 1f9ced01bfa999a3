// The CPU backends' parallel loop: FLASHATTN_NUM_THREADS sets its thread count, a bad value is an
// error naming it (never ignored), and results do not depend on the count.
#include "cpu/host_loop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/owned_tensor.h"
#include "flashattn/flashattn.h"

namespace flashattn {
namespace {

// Sets FLASHATTN_NUM_THREADS (or unsets it for nullopt) for one scope.
class ScopedThreadsEnv {
 public:
  explicit ScopedThreadsEnv(const std::optional<std::string>& value) {
    if (const char* old = std::getenv(cpu::kNumThreadsEnv)) old_ = std::string(old);
    set(value);
  }
  ~ScopedThreadsEnv() { set(old_); }

 private:
  static void set(const std::optional<std::string>& value) {
    if (value.has_value()) {
      ::setenv(cpu::kNumThreadsEnv, value->c_str(), 1);
    } else {
      ::unsetenv(cpu::kNumThreadsEnv);
    }
  }
  std::optional<std::string> old_;
};

std::int64_t hardware_threads() {
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::thread::hardware_concurrency()));
}

TEST(HostLoopTest, ThreadCountFollowsTheEnvironment) {
  std::int64_t threads = 0;
  {
    ScopedThreadsEnv env(std::nullopt);
    ASSERT_TRUE(cpu::thread_count(&threads).ok());
    EXPECT_EQ(threads, hardware_threads());
  }
  for (const auto& [text, want] : {std::pair{"1", 1}, std::pair{"3", 3}, std::pair{"1024", 1024}}) {
    ScopedThreadsEnv env{std::string(text)};
    ASSERT_TRUE(cpu::thread_count(&threads).ok()) << text;
    EXPECT_EQ(threads, want) << text;
  }
}

TEST(HostLoopTest, BadThreadCountIsAnErrorNamingTheVariable) {
  for (const char* text : {"", "0", "-2", "abc", "4x", " 4", "1025", "99999999999999999999"}) {
    ScopedThreadsEnv env{std::string(text)};
    std::int64_t threads = 0;
    const Status st = cpu::thread_count(&threads);
    EXPECT_EQ(st.code(), StatusCode::kBackendUnavailable) << "\"" << text << "\"";
    EXPECT_EQ(st.message().rfind(std::string("FLASHATTN_NUM_THREADS = \"") + text +
                                     "\": expected an integer from 1 to 1024",
                                 0),
              0u)
        << st.message();
    // parallel_for runs nothing.
    int calls = 0;
    EXPECT_EQ(cpu::parallel_for(8, [&] { return [&](std::int64_t) { ++calls; }; }).code(),
              StatusCode::kBackendUnavailable);
    EXPECT_EQ(calls, 0);
  }
}

// make_body() runs once per thread: with N threads set and more items than N, exactly N times, on
// N distinct threads, the calling thread among them.
TEST(HostLoopTest, ParallelForStartsTheConfiguredThreads) {
  for (const auto& [threads, items, expected] :
       {std::tuple{1, 50, 1}, std::tuple{3, 50, 3}, std::tuple{5, 2, 2}}) {
    ScopedThreadsEnv env(std::to_string(threads));
    std::mutex mu;
    std::set<std::thread::id> ids;
    std::vector<int> done(static_cast<std::size_t>(items), 0);
    const Status st = cpu::parallel_for(items, [&] {
      {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      }
      return [&](std::int64_t i) { ++done[static_cast<std::size_t>(i)]; };
    });
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(ids.size(), static_cast<std::size_t>(expected)) << threads << " threads";
    EXPECT_EQ(ids.count(std::this_thread::get_id()), 1u);
    EXPECT_EQ(done, std::vector<int>(static_cast<std::size_t>(items), 1));
  }
}

// The CPU backends through forward(): bit-identical outputs for 1, 2 and 7 threads; a bad value
// makes them unusable with the variable's name in the message.
TEST(HostLoopTest, CpuBackendsAreIdenticalAcrossThreadCounts) {
  const std::vector<std::int64_t> q_shape = {2, 130, 4, 64}, kv_shape = {2, 77, 2, 64};
  OwnedTensor q, k, v;
  ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), q_shape, &q).ok());
  ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), kv_shape, &k).ok());
  ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), kv_shape, &v).ok());
  ASSERT_TRUE(q.fill_normal(7, 0, 0.5f, 1.0f).ok());
  ASSERT_TRUE(k.fill_normal(7, 1, 0.5f, 1.0f).ok());
  ASSERT_TRUE(v.fill_normal(7, 2, 0.5f, 1.0f).ok());
  for (const char* backend : {"cpu-flash", "cpu-reference"}) {
    std::vector<float> first_o, first_lse;
    for (const char* threads : {"1", "2", "7"}) {
      ScopedThreadsEnv env{std::string(threads)};
      OwnedTensor out, lse;
      ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), q_shape, &out).ok());
      ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), {2, 4, 130}, &lse).ok());
      ForwardParams p;
      p.q = q.view();
      p.k = k.view();
      p.v = v.view();
      p.out = out.view();
      p.lse = lse.view();
      p.causal = true;
      const Status st = forward(p, backend);
      ASSERT_TRUE(st.ok()) << backend << " " << threads << ": " << st.to_string();
      std::vector<float> o_values, lse_values;
      ASSERT_TRUE(out.to_host_float(&o_values).ok());
      ASSERT_TRUE(lse.to_host_float(&lse_values).ok());
      if (first_o.empty()) {
        first_o = o_values;
        first_lse = lse_values;
      } else {
        EXPECT_EQ(o_values, first_o) << backend << " with " << threads << " threads";
        EXPECT_EQ(lse_values, first_lse) << backend << " with " << threads << " threads";
      }
    }
    ScopedThreadsEnv env{std::string("many")};
    OwnedTensor out;
    ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), q_shape, &out).ok());
    ForwardParams p;
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    const Status st = forward(p, backend);
    EXPECT_EQ(st.code(), StatusCode::kBackendUnavailable) << st.to_string();
    EXPECT_NE(st.message().find("FLASHATTN_NUM_THREADS = \"many\""), std::string::npos)
        << st.message();
  }
}

}  // namespace
}  // namespace flashattn
