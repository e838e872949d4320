// tokenizer/tokenizer.h — text <-> token ids, identical to Hugging Face `tokenizers`.
//
// A Tokenizer is built once per model from its GGUF vocabulary and is then immutable and safe
// to call from many threads at once (HTTP threads tokenize concurrently; the only shared
// mutable state is an internal word cache behind sharded locks).
//
// encode(): (1) added tokens -- control tokens such as <|im_start|> (only when parse_special)
// and user-defined tokens such as "\n" in Gemma -- are cut out of the text, leftmost-longest,
// as HF's AddedVocabulary does; (2) each remaining fragment goes through the model's
// pre-tokenizer and BPE (bpe_tokenizer.h: byte-level, spm_tokenizer.h: SentencePiece-style);
// (3) BOS/EOS are added when add_special and the vocabulary asks for them.
// Invalid UTF-8 input is repaired (each bad sequence becomes U+FFFD) before anything else.
//
// Cost model: encode is linear in the text apart from BPE merging, which is O(n log n) in the
// characters of one pre-token (a word for byte-level BPE; a run of text between added tokens
// for SentencePiece). Words are cached. 1 MB of source code encodes in well under a second
// (docs/tokenizers.md has measurements). decode is linear, through precomputed byte pieces.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/vocab.h"

namespace hs {

namespace gguf {
class File;
}

class Tokenizer {
 public:
  virtual ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special: add BOS/EOS as the vocabulary's add_bos/add_eos say.
  // parse_special: recognise the text of control tokens (<|im_start|>, <start_of_turn>, <bos>)
  // as those tokens; when false that text is tokenized as ordinary text. User-defined tokens
  // are matched either way (HF's split_special_tokens semantics).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  void encode(std::string_view text, bool add_special, bool parse_special,
              std::vector<int32_t>& out) const;  // appends to out

  // skip_special drops control (and unknown-type) tokens. Out-of-range ids are skipped.
  // Bytes that do not form valid UTF-8 come out as U+FFFD, as HF's decoders do.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  // The raw bytes one token stands for (may be part of a UTF-8 sequence, e.g. <0xE4>); empty
  // for an out-of-range id. For streaming detokenizers that glue pieces themselves.
  std::string_view token_to_piece(int32_t id) const;
  // The token as the vocabulary spells it ("Ġthe", "▁the", "<0x0A>"); empty if out of range.
  std::string_view token_text(int32_t id) const;
  // Id of the token the vocabulary spells exactly `text` (e.g. "<|im_end|>").
  std::optional<int32_t> find_token(std::string_view text) const;

  int32_t n_vocab() const { return vocab_.n_tokens(); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  int32_t eot_id() const { return vocab_.eot_id; }
  int32_t pad_id() const { return vocab_.pad_id; }
  int32_t unk_id() const { return vocab_.unk_id; }
  bool add_bos() const { return vocab_.add_bos; }
  bool add_eos() const { return vocab_.add_eos; }
  bool is_eog(int32_t id) const;
  bool is_control(int32_t id) const;
  TokenType token_type(int32_t id) const;
  const Vocab& vocab() const { return vocab_; }

 protected:
  explicit Tokenizer(Vocab vocab);
  // Build the piece table and the text index; subclasses call it from their factory.
  void init_pieces();
  // Register an added token (matched whole in raw text before BPE).
  void add_added_token(int32_t id, bool special) {
    added_.add(vocab_.tokens[id], id, special);
  }

  // Tokenize one fragment of raw text that holds no added tokens. `at_text_start` is true for
  // a fragment that starts the whole input (SentencePiece's dummy prefix).
  virtual void encode_fragment(std::string_view text, bool at_text_start,
                               std::vector<int32_t>& out) const = 0;
  // The raw bytes of token `id` (called once per token by init_pieces).
  virtual std::string make_piece(int32_t id) const = 0;
  // Join pieces into text; models differ in how they repair invalid UTF-8.
  virtual std::string join_pieces(std::span<const int32_t> ids, bool skip_special) const;

  bool skipped_when_decoding(int32_t id) const;

  Vocab vocab_;
  std::vector<std::string> pieces_;  // [n_vocab] raw bytes per token
  std::unordered_map<std::string_view, int32_t> text_to_id_;  // GGUF spelling -> id
  tok::AddedTokenMatcher added_;
};

// Build the tokenizer a GGUF file describes (tokenizer.ggml.model 'gpt2' or 'llama').
Result<std::unique_ptr<Tokenizer>> make_tokenizer(const gguf::File& file);
// Build one from a vocabulary made by hand or loaded earlier.
Result<std::unique_ptr<Tokenizer>> make_tokenizer(Vocab vocab);

}  // namespace hs
