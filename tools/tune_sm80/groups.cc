// tune_sm80's candidates: one group per head dim (tune_hdim*.cu, one translation unit each).
#include "candidates.h"

namespace flashattn::tune {

void add_hdim64(std::vector<Candidate>* out);
void add_hdim128(std::vector<Candidate>* out);
void add_hdim256(std::vector<Candidate>* out);

const char* const kToolName = "tune_sm80";

std::vector<std::vector<Candidate>> candidate_groups() {
  std::vector<std::vector<Candidate>> groups(3);
  add_hdim64(&groups[0]);
  add_hdim128(&groups[1]);
  add_hdim256(&groups[2]);
  return groups;
}

}  // namespace flashattn::tune
