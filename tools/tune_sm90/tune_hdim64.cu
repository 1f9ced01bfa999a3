#include "candidate_def.cuh"

namespace flashattn::tune {
using cuda::Sm90Config;
void add_hdim64(std::vector<Candidate>* out) {
  using cuda::kPingPongFrom;
  //                                     d    N  stages ping-pong from   consumers
  out->push_back(make_candidate<Sm90Config<64, 192, 2, true, kPingPongFrom>>());
  out->push_back(make_candidate<Sm90Config<64, 128, 2, true, kPingPongFrom>>());
  out->push_back(make_candidate<Sm90Config<64, 128, 2, true, kPingPongFrom, 3>>());
  out->push_back(make_candidate<Sm90Config<64, 128, 2, false, 0, 3>>());
  out->push_back(make_candidate<Sm90Config<64, 128, 2, true, 0, 3>>());
  out->push_back(make_candidate<Sm90Config<64, 112, 2, true, kPingPongFrom, 3>>());
  out->push_back(make_candidate<Sm90Config<64, 96, 2, true, kPingPongFrom, 3>>());
  //                                     d    N  stages ping-pong from   consumers Q buffers
  out->push_back(make_candidate<Sm90Config<64, 128, 2, true, kPingPongFrom, 3, 2>>());
  out->push_back(make_candidate<Sm90Config<64, 128, 2, true, kPingPongFrom, 2, 2>>());
}
}  // namespace flashattn::tune
