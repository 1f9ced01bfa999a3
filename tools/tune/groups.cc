// A tuner's candidates: one group per head dim, from its tune_hdim*.cu (one translation unit
// each); the tuner's CMakeLists names it (FLASHATTN_TUNE_TOOL_NAME).
#include "candidates.h"

namespace flashattn::tune {

void add_hdim64(std::vector<Candidate>* out);
void add_hdim128(std::vector<Candidate>* out);
void add_hdim256(std::vector<Candidate>* out);

const char* const kToolName = FLASHATTN_TUNE_TOOL_NAME;

std::vector<std::vector<Candidate>> candidate_groups() {
  std::vector<std::vector<Candidate>> groups(3);
  add_hdim64(&groups[0]);
  add_hdim128(&groups[1]);
  add_hdim256(&groups[2]);
  return groups;
}

}  // namespace flashattn::tune
