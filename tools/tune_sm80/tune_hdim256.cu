#include "candidate_def.cuh"

namespace flashattn::tune {
using cuda::Sm80Config;
void add_hdim256(std::vector<Candidate>* out) {
  //                                      d    M    N   W  qreg   B
  out->push_back(make_candidate<Sm80Config<256, 64, 32, 4, false, 2>>());
  out->push_back(make_candidate<Sm80Config<256, 64, 32, 4, true, 2>>());
  out->push_back(make_candidate<Sm80Config<256, 128, 32, 8, true, 1>>());
  out->push_back(make_candidate<Sm80Config<256, 64, 16, 4, true, 2>>());
}
}  // namespace flashattn::tune
