#include "candidate_def.cuh"

namespace flashattn::tune {
using cuda::Sm90Config;
void add_hdim128(std::vector<Candidate>* out) {
  //                                      d    N  stages ping-pong
  out->push_back(make_candidate<Sm90Config<128, 128, 2, true>>());
  out->push_back(make_candidate<Sm90Config<128, 128, 2, false>>());
  out->push_back(make_candidate<Sm90Config<128, 176, 2, true>>());
  out->push_back(make_candidate<Sm90Config<128, 176, 2, false>>());
  // What ships (flash_sm90_config.h): ping-pong from kPingPongFrom key tiles on.
  out->push_back(make_candidate<cuda::Sm90ConfigFor<128>::type>());
  out->push_back(make_candidate<cuda::Sm90ShortConfigFor<128>::type>());
}
}  // namespace flashattn::tune
