// The problem-variant cases (window, softcap, ALiBi, sinks, varlen) every backend's variant suite
// runs through verify(): tests/verify/variants_test.cc on cpu-flash and cpu-reference,
// tests/cuda/gpu_variants_test.cc on naive, flash and flash-sm80. Shape builders for them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "verify/verify.h"

namespace flashattn::testing {

// A dense problem (batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim, dtype, causal).
ProblemShape dense(std::int64_t b, std::int64_t h, std::int64_t kv, std::int64_t sq,
                   std::int64_t sk, std::int64_t d, DType dtype, bool causal);
// A packed varlen problem: per-sequence query and key lengths, optional seqused_k.
ProblemShape packed(std::int64_t h, std::int64_t kv, std::vector<std::int64_t> q,
                    std::vector<std::int64_t> k, std::int64_t d, DType dtype, bool causal,
                    std::vector<std::int64_t> used_k = {});

ProblemShape with_window(ProblemShape s, std::int64_t left, std::int64_t right);
ProblemShape with_softcap(ProblemShape s, float cap);
ProblemShape with_alibi(ProblemShape s, AlibiMode mode);
ProblemShape with_sinks(ProblemShape s);

struct VariantCase {
  std::string name;
  ProblemShape shape;
  InputLayout layout = InputLayout::kContiguous;
  InputKind kind = InputKind::kNormal;
  bool keyless = false;  // the case has rows without keys
};

// Every variant alone and all together, dense and packed, with rows without keys and
// zero-length sequences; names are unique.
std::vector<VariantCase> variant_cases();

// The verifier seed of a case: base_seed() mixed with every character of its name, so each case
// has its own inputs and a rerun the same ones.
std::uint64_t variant_seed(const std::string& name);

}  // namespace flashattn::testing
