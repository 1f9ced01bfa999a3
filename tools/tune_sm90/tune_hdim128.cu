#include "candidate_def.cuh"

namespace flashattn::tune {
using cuda::Sm90Config;
void add_hdim128(std::vector<Candidate>* out) {
  //                                      d    N  stages ping-pong
  out->push_back(make_candidate<Sm90Config<128, 128, 2, true>>());
  out->push_back(make_candidate<Sm90Config<128, 176, 2, true>>());
  //                                      d    N  stages ping-pong from consumers Q buffers
  out->push_back(make_candidate<Sm90Config<128, 128, 2, true, 0, 2, 2>>());
}
}  // namespace flashattn::tune
