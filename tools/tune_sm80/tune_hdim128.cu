#include "candidate_def.cuh"

namespace flashattn::tune {
using cuda::Sm80Config;
void add_hdim128(std::vector<Candidate>* out) {
  //                                      d    M    N   W  qreg   B
  out->push_back(make_candidate<Sm80Config<128, 128, 64, 4, false, 2>>());
}
}  // namespace flashattn::tune
