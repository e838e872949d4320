// tokenizer/special_tokens.cpp — the added-token trie and the leftmost-longest scan.
//
// Scanning left to right and taking, at the first position where any token matches, the
// longest one, then resuming after it, yields exactly the leftmost-longest matches of an
// Aho-Corasick automaton. Dropped special matches (parse_special = false) are skipped over
// without rescanning inside them, as HF does.
#include "tokenizer/special_tokens.h"

namespace hs::tok {

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const {
  if (node == 0) return first_[byte];
  const auto it = edges_.find((static_cast<uint64_t>(node) << 8) | byte);
  return it == edges_.end() ? -1 : it->second;
}

void AddedTokenMatcher::add(std::string_view text, int32_t id, bool special) {
  if (text.empty()) return;
  if (nodes_.empty()) nodes_.emplace_back();
  int32_t node = 0;
  for (char c : text) {
    const auto b = static_cast<uint8_t>(c);
    int32_t next = child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      if (node == 0) {
        first_[b] = next;
      } else {
        edges_.emplace((static_cast<uint64_t>(node) << 8) | b, next);
      }
    }
    node = next;
  }
  if (nodes_[node].token < 0) {
    nodes_[node].token = id;
    nodes_[node].special = special;
    ++n_tokens_;
  }
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special,
                              std::vector<Fragment>& out) const {
  size_t plain_begin = 0;  // start of the pending plain-text fragment
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    int32_t node = n_tokens_ ? first_[static_cast<uint8_t>(text[i])] : -1;
    if (node < 0) {
      ++i;
      continue;
    }
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t j = i + 1;; ++j) {
      if (nodes_[node].token >= 0) {
        best = node;
        best_end = j;
      }
      if (j >= n) break;
      node = child(node, static_cast<uint8_t>(text[j]));
      if (node < 0) break;
    }
    if (best < 0) {
      ++i;
      continue;
    }
    if (nodes_[best].special && !parse_special) {  // stays ordinary text
      i = best_end;
      continue;
    }
    if (plain_begin < i) out.push_back({plain_begin, i, -1});
    out.push_back({i, best_end, nodes_[best].token});
    i = plain_begin = best_end;
  }
  if (plain_begin < n) out.push_back({plain_begin, n, -1});
}

}  // namespace hs::tok
