#include "candidate_def.cuh"

namespace flashattn::tune {
using cuda::Sm90Config;
void add_hdim256(std::vector<Candidate>* out) {
  //                                      d    N  stages ping-pong
  out->push_back(make_candidate<Sm90Config<256, 64, 2, false>>());
  out->push_back(make_candidate<Sm90Config<256, 64, 2, true>>());
  out->push_back(make_candidate<Sm90Config<256, 80, 2, false>>());
  out->push_back(make_candidate<Sm90Config<256, 80, 2, true>>());
}
}  // namespace flashattn::tune
