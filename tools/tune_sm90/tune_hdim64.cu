#include "candidate_def.cuh"

namespace flashattn::tune {
using cuda::Sm90Config;
void add_hdim64(std::vector<Candidate>* out) {
  using cuda::kPingPongFrom;
  //                                     d    N  stages ping-pong from   consumers
  out->push_back(make_candidate<Sm90Config<64, 128, 2, true, kPingPongFrom>>());
  out->push_back(make_candidate<Sm90Config<64, 128, 2, true, kPingPongFrom, 3>>());
  //                                     d    N  stages ping-pong from   consumers Q buffers
  out->push_back(make_candidate<Sm90Config<64, 128, 2, true, kPingPongFrom, 3, 2>>());
}
}  // namespace flashattn::tune
