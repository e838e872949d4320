// tokenizer/bpe_tokenizer.h — byte-level BPE (GPT-2 family; tokenizer.ggml.model = 'gpt2').
//
// Pipeline, as HF `tokenizers` runs a GPT-2-style tokenizer.json: NFC first where the model's
// tokenizer has that normalizer (qwen2; tokenizer/unicode_nfc.h), then the regex pre-tokenizer of
// tokenizer.ggml.pre splits a fragment into words; each word's UTF-8 bytes become symbols (one
// per byte, spelled with GPT-2's byte map); merges apply in rank order (their order in the file)
// with HF's merge loop; results are cached per word. Decoding maps the byte alphabet back.
// Cost: merges live in one hash map keyed by the id pair (48,900 entries for SmolLM2); a cached
// word costs a hash probe, an uncached one O(b log b) for b bytes.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_merge.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/word_cache.h"

namespace hs {

class BpeTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<BpeTokenizer>> create(Vocab vocab);

 protected:
  void encode_fragment(std::string_view text, bool at_text_start,
                       std::vector<int32_t>& out) const override;
  std::string make_piece(int32_t id) const override;

 private:
  explicit BpeTokenizer(Vocab vocab) : Tokenizer(std::move(vocab)) {}
  Status init();
  void encode_word(std::string_view word, tok::BpeScratch& scratch, std::vector<int32_t>& ids,
                   std::vector<int32_t>& out) const;

  // Byte-level spelling of every token, as HF's GGUF converter keys its vocabulary: the stored
  // text when it is all in the byte alphabet, otherwise its UTF-8 bytes spelled in it.
  std::vector<std::string> spelled_;  // [n_vocab]
  std::unordered_map<std::string_view, int32_t> spelled_to_id_;
  std::array<int32_t, 256> byte_token_{};  // token of each single byte, -1 if none
  std::unordered_map<uint64_t, tok::MergeRank> merges_;  // (left << 32 | right) -> rank, result
  std::unique_ptr<tok::RegexSplitter> pre_;
  bool nfc_ = false;  // normalize each fragment to NFC before pre-tokenizing (qwen2)
  tok::WordCache cache_;
};

}  // namespace hs
