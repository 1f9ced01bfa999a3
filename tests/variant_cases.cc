#include "variant_cases.h"

#include <utility>

#include "common/random.h"
#include "test_util.h"
#include "verify/inputs.h"

namespace flashattn::testing {

ProblemShape dense(std::int64_t b, std::int64_t h, std::int64_t kv, std::int64_t sq,
                   std::int64_t sk, std::int64_t d, DType dtype, bool causal) {
  ProblemShape s;
  s.batch = b;
  s.heads = h;
  s.kv_heads = kv;
  s.seqlen_q = sq;
  s.seqlen_k = sk;
  s.head_dim = d;
  s.dtype = dtype;
  s.causal = causal;
  return s;
}

ProblemShape packed(std::int64_t h, std::int64_t kv, std::vector<std::int64_t> q,
                    std::vector<std::int64_t> k, std::int64_t d, DType dtype, bool causal,
                    std::vector<std::int64_t> used_k) {
  ProblemShape s = dense(1, h, kv, 1, 1, d, dtype, causal);
  s.set_varlen(std::move(q), std::move(k), std::move(used_k));
  return s;
}

ProblemShape with_window(ProblemShape s, std::int64_t left, std::int64_t right) {
  s.window_left = left;
  s.window_right = right;
  return s;
}
ProblemShape with_softcap(ProblemShape s, float cap) {
  s.softcap = cap;
  return s;
}
ProblemShape with_alibi(ProblemShape s, AlibiMode mode) {
  s.alibi = mode;
  return s;
}
ProblemShape with_sinks(ProblemShape s) {
  s.sinks = true;
  return s;
}

std::vector<VariantCase> variant_cases() {
  const ProblemShape base = dense(2, 4, 2, 113, 203, 64, DType::kBF16, false);
  const ProblemShape tall = dense(1, 4, 2, 203, 113, 64, DType::kFP16, true);  // 90 keyless rows
  const ProblemShape square = dense(1, 2, 1, 203, 203, 128, DType::kFP32, false);
  constexpr InputLayout kPlain = InputLayout::kContiguous;
  std::vector<VariantCase> c;
  auto add = [&c](const std::string& name, const ProblemShape& shape, bool keyless,
                  InputLayout layout = InputLayout::kContiguous,
                  InputKind kind = InputKind::kNormal) {
    c.push_back({name, shape, layout, kind, keyless});
  };
  // Windows: both sides, one side, the diagonal only, wider than the sequence, with causal, and
  // one that leaves rows without keys.
  add("window_64_0", with_window(base, 64, 0), false);
  add("window_0_64", with_window(base, 0, 64), false);
  add("window_17_3_fp32", with_window(square, 17, 3), false);
  add("window_0_0", with_window(base, 0, 0), false);
  add("window_wide", with_window(base, 5000, 5000), false);
  add("window_32_causal", with_window(tall, 32, -1), true);
  add("window_left_only", with_window(base, 40, -1), false);
  // A right edge only: flash-sm80 runs it in its dense kernel (no left edge), beside causal.
  add("window_right_only", with_window(base, -1, 17), false);
  add("window_keyless_rows", with_window(dense(1, 2, 2, 203, 113, 64, DType::kBF16, false), 8, 0),
      true);
  // Softcap: mild, strong, and on large scores (where it decides everything).
  add("softcap_30", with_softcap(base, 30.0f), false);
  add("softcap_2_causal", with_softcap(tall, 2.0f), true);
  add("softcap_30_largescores", with_softcap(base, 30.0f), false, kPlain, InputKind::kLargeScores);
  // ALiBi: per head, per (batch, head), with causal.
  add("alibi_heads", with_alibi(base, AlibiMode::kHeads), false);
  add("alibi_batchheads_fp32",
      with_alibi(dense(3, 4, 4, 77, 77, 32, DType::kFP32, false), AlibiMode::kBatchHeads), false);
  add("alibi_heads_causal", with_alibi(tall, AlibiMode::kHeads), true);
  // Sinks: alone, on rows without keys (causal, seqlen_k = 0), with very negative rows.
  add("sinks", with_sinks(base), false);
  add("sinks_causal_keyless_rows", with_sinks(tall), true);
  add("sinks_no_keys", with_sinks(dense(1, 4, 2, 17, 0, 64, DType::kBF16, false)), true);
  add("sinks_verynegative", with_sinks(base), false, kPlain, InputKind::kVeryNegative);
  // Varlen: zero-length sequences, sequences without keys, causal with lq > lk, seqused_k,
  // layouts, distortions.
  add("varlen_lists", packed(4, 2, {17, 0, 113, 64}, {33, 5, 0, 64}, 64, DType::kBF16, false),
      true);
  add("varlen_causal", packed(4, 2, {17, 0, 113, 64}, {33, 5, 0, 200}, 64, DType::kFP16, true),
      true);
  add("varlen_seqused_k",
      packed(2, 1, {50, 30, 7}, {80, 30, 9}, 32, DType::kFP32, true, {40, 0, 9}), true);
  add("varlen_bhsd", packed(4, 2, {31, 0, 90}, {45, 12, 90}, 64, DType::kBF16, false), false,
      InputLayout::kStridedBHSD);
  add("varlen_paddedheads_verynegative",
      packed(4, 2, {31, 0, 90}, {45, 12, 0}, 64, DType::kBF16, true), true,
      InputLayout::kPaddedHeads, InputKind::kVeryNegative);
  add("varlen_one_sequence", packed(2, 2, {129}, {257}, 128, DType::kBF16, false), false);
  // Together: every variant at once, dense and packed.
  ProblemShape all = with_sinks(with_alibi(with_softcap(with_window(base, 64, 0), 30.0f),
                                           AlibiMode::kHeads));
  all.causal = true;
  add("all_dense", all, false);
  ProblemShape all_varlen = all;
  all_varlen.set_varlen({100, 0, 150, 60}, {120, 40, 0, 20});
  add("all_varlen", all_varlen, true);
  ProblemShape all_random = with_alibi(all, AlibiMode::kBatchHeads);
  const verifier::VarlenLengths v = verifier::random_varlen(testing::base_seed(), 5, 120, 150);
  all_random.set_varlen(v.q, v.k);
  all_random.dtype = DType::kFP32;
  add("all_varlen_random_fp32", all_random, true);
  return c;
}

std::uint64_t variant_seed(const std::string& name) {
  std::uint64_t seed = base_seed();
  for (char ch : name) seed = splitmix64(seed ^ static_cast<unsigned char>(ch));
  return seed;
}

}  // namespace flashattn::testing
