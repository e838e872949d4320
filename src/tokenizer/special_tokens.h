// tokenizer/special_tokens.h — cutting added tokens (control and user-defined) out of text.
//
// HF `tokenizers` matches its added tokens with an Aho-Corasick automaton in leftmost-longest
// mode on the raw text, before normalization; with split_special_tokens (our
// parse_special = false) matches of special tokens are dropped and their text stays ordinary
// text. We do the same with a byte trie: at each position, walk the trie as far as the text
// allows and keep the longest complete token. A 256-entry table for the first byte makes the
// common case (no token starts here) one load. Cost: O(text * depth of the walk); ~60k trie
// nodes for Gemma 3's 6.4k added tokens.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hs::tok {

// A piece of the input: [begin, end) bytes; token >= 0 when it is an added token.
struct Fragment {
  size_t begin = 0, end = 0;
  int32_t token = -1;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() { first_.fill(-1); }
  // Register `text` as token `id`; `special` tokens are only matched when parse_special.
  // Empty texts are ignored; a text registered twice keeps its first id.
  void add(std::string_view text, int32_t id, bool special);
  size_t size() const { return n_tokens_; }

  // Append fragments covering all of `text`, in order. Consecutive plain text is one fragment.
  void split(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;

 private:
  struct Node {
    int32_t token = -1;  // token id ending here, or -1
    bool special = false;
  };
  int32_t child(int32_t node, uint8_t byte) const;

  std::vector<Node> nodes_;                     // [n_nodes]; node 0 is the root
  std::array<int32_t, 256> first_{};            // root's children by first byte
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child, below the root
  size_t n_tokens_ = 0;
};

}  // namespace hs::tok
