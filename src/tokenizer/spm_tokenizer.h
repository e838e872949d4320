// tokenizer/spm_tokenizer.h — SentencePiece-style BPE (tokenizer.ggml.model = 'llama'), as HF
// `tokenizers` runs Gemma's tokenizer.json.
//
// Pipeline: added tokens are cut out first (tokenizer.cpp); each remaining fragment is
// normalized (' ' -> U+2581 "▁", plus a leading "▁" when add_space_prefix) and is ONE BPE word
// (Gemma's pre-tokenizer is a no-op after that normalizer). Symbols are code points; a code point
// missing from the vocabulary falls back to its UTF-8 bytes as <0xXX> tokens (then <unk>).
// Merges come from the file when it has them, otherwise they are every split of a vocabulary
// token into two vocabulary tokens, ranked like transformers' `generate_merges`: by the merged
// token's score (Gemma: its position) best first, then longer left piece, then longer right.
// A per-thread direct-mapped cache (16k pairs) skips most repeated rank lookups.
// Decoding turns "▁" back into spaces and byte tokens into bytes (HF's Replace + ByteFallback
// + Fuse decoder). Cost: a rank lookup is one string concatenation and hash probe; a fragment of
// c code points costs O(c log c); fragments up to 128 bytes are cached.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_merge.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/word_cache.h"

namespace hs {

class SpmTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<SpmTokenizer>> create(Vocab vocab);

 protected:
  void encode_fragment(std::string_view text, bool at_text_start,
                       std::vector<int32_t>& out) const override;
  std::string make_piece(int32_t id) const override;
  std::string join_pieces(std::span<const int32_t> ids, bool skip_special) const override;

 private:
  explicit SpmTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)) {}
  Status init();
  tok::MergeRank rank_of(int32_t a, int32_t b, std::string& buf) const;
  tok::MergeRank derive_rank(int32_t a, int32_t b, std::string& buf) const;
  int32_t lookup(std::string_view s) const;

  std::vector<std::string> spelled_;  // [n_vocab] spelling used for lookups ("▁▁" for "  ")
  std::unordered_map<std::string_view, int32_t> spelled_to_id_;
  std::vector<uint32_t> bucket_;     // [n_vocab] dense rank of the token's merge priority
  std::vector<uint16_t> char_len_;   // [n_vocab] code points of spelled_, saturated at 1023
  std::vector<uint8_t> byte_value_;  // [n_vocab] byte of a <0xXX> token + 1, else 0
  std::unordered_map<uint64_t, tok::MergeRank> merges_;  // explicit merges, if the file has them
  bool explicit_merges_ = false;
  uint64_t serial_ = 0;  // tags this tokenizer's entries in the per-thread pair cache
  std::array<int32_t, 256> byte_token_{};  // <0xXX> token per byte, -1 if none
  std::array<int32_t, 128> ascii_token_{};  // token spelled as one ASCII character, -1 if none
  tok::WordCache cache_;
};

}  // namespace hs
