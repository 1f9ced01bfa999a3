#include "candidate_def.cuh"

namespace flashattn::tune {
using cuda::Sm80Config;
void add_hdim256(std::vector<Candidate>* out) {
  //                                      d    M    N   W  qreg   B
  out->push_back(make_candidate<Sm80Config<256, 64, 32, 4, false, 2, 1>>());
  out->push_back(make_candidate<Sm80Config<256, 64, 32, 4, false, 2>>());
  out->push_back(make_candidate<Sm80Config<256, 128, 64, 8, false, 1, 1>>());
  out->push_back(make_candidate<Sm80Config<256, 128, 32, 8, false, 1, 1, 3>>());
}
}  // namespace flashattn::tune
