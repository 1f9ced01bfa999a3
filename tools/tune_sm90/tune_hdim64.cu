#include "candidate_def.cuh"

namespace flashattn::tune {
using cuda::Sm90Config;
void add_hdim64(std::vector<Candidate>* out) {
  //                                     d    N  stages ping-pong
  out->push_back(make_candidate<Sm90Config<64, 128, 2, true>>());
  out->push_back(make_candidate<Sm90Config<64, 128, 2, false>>());
  out->push_back(make_candidate<Sm90Config<64, 192, 2, true>>());
  out->push_back(make_candidate<Sm90Config<64, 192, 2, false>>());
}
}  // namespace flashattn::tune
