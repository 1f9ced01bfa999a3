// The README's C++ example, runnable anywhere: attention on host tensors with the cpu-flash
// backend, one bad call to show the error message, and the backends this build has.
#include <flashattn/flashattn.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using namespace flashattn;
  const std::int64_t b = 1, sq = 5, sk = 7, h = 4, hk = 2, d = 16;
  std::vector<float> q(b * sq * h * d), k(b * sk * hk * d), v(b * sk * hk * d);
  std::vector<float> out(b * sq * h * d), lse(b * h * sq);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.1f * i) + 0.5f;
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.2f * i) + 0.5f;
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.3f * i + 1.0f) + 0.5f;

  ForwardParams p;
  p.q = TensorView::contiguous(q.data(), DType::kFP32, Device::cpu(), {b, sq, h, d});
  p.k = TensorView::contiguous(k.data(), DType::kFP32, Device::cpu(), {b, sk, hk, d});
  p.v = TensorView::contiguous(v.data(), DType::kFP32, Device::cpu(), {b, sk, hk, d});
  p.out = TensorView::contiguous(out.data(), DType::kFP32, Device::cpu(), {b, sq, h, d});
  p.lse = TensorView::contiguous(lse.data(), DType::kFP32, Device::cpu(), {b, h, sq});
  p.causal = true;  // bottom-right aligned: query i sees keys j <= i + (sk - sq)

  Status st = forward(p, "cpu-flash");
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.to_string().c_str());
    return 1;
  }
  std::printf("out[0][0][0][0:4] = %.5f %.5f %.5f %.5f, lse[0][0][0] = %.5f\n", out[0], out[1],
              out[2], out[3], lse[0]);

  ForwardParams bad = p;
  bad.k.shape[2] = bad.v.shape[2] = 3;  // 3 kv heads cannot serve 4 query heads
  st = forward(bad, "auto");
  std::printf("a bad call: %s\n", st.to_string().c_str());
  if (st.ok()) return 1;

  for (const BackendInfo& info : list_backends()) {
    std::printf("backend %-14s %s\n", info.name.c_str(),
                info.usable ? "usable" : ("not usable: " + info.why_not).c_str());
  }
  return 0;
}
