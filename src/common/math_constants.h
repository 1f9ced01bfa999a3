// Constants of the exp2-domain softmax, shared by the host and the kernels.
#pragma once

namespace flashattn {

constexpr float kLog2e = 1.4426950408889634f;  // scores * scale * kLog2e feed exp2
constexpr float kLn2 = 0.6931471805599453f;    // back from log2 to natural-log LSE

}  // namespace flashattn
