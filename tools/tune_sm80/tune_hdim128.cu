#include "candidate_def.cuh"

namespace flashattn::tune {
using cuda::Sm80Config;
void add_hdim128(std::vector<Candidate>* out) {
  //                                      d    M    N   W  qreg   B
  out->push_back(make_candidate<Sm80Config<128, 128, 32, 4, false, 2>>());
  out->push_back(make_candidate<Sm80Config<128, 128, 48, 4, false, 2, 1, 3>>());
  out->push_back(make_candidate<Sm80Config<128, 128, 64, 4, false, 2>>());
  out->push_back(make_candidate<Sm80Config<128, 128, 64, 4, false, 2, 1>>());
  out->push_back(make_candidate<Sm80Config<128, 64, 64, 4, false, 2>>());
}
}  // namespace flashattn::tune
