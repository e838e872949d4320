// model/batch.h — one forward step's tokens: several sequences at different positions.
//
// Token i belongs to seqs[seq_index[i]] at position positions[i]; tokens of one sequence
// appear in increasing position order and continue where its KV ends. Rows with
// want_logits[i] != 0 produce a logits row, in batch order.
#pragma once

#include <cstdint>
#include <vector>

namespace hs {

struct Batch {
  std::vector<int32_t> tokens;       // [n]
  std::vector<int32_t> positions;    // [n]
  std::vector<int32_t> seq_index;    // [n]
  std::vector<uint8_t> want_logits;  // [n]

  void add(int32_t token, int32_t pos, int32_t seq, bool logits) {
    tokens.push_back(token);
    positions.push_back(pos);
    seq_index.push_back(seq);
    want_logits.push_back(logits ? 1 : 0);
  }
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  void clear() { tokens.clear(); positions.clear(); seq_index.clear(); want_logits.clear(); }
};

}  // namespace hs
