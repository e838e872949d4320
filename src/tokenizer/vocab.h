// tokenizer/vocab.h — a tokenizer vocabulary as a GGUF file describes it.
//
// Owns the token strings (copied out of the mapping, so the File may be closed), scores,
// token types, merges, special ids and flags. `load_vocab` reads llama.cpp's `tokenizer.*`
// keys and checks every length and id against the vocabulary size; `prepare_vocab` checks a
// hand-built one the same way and derives the end-of-generation ids. Cost: one copy of the
// vocabulary (262k tokens, ~5 MB for Gemma 3), linear in its size, done once per model.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace hs {

namespace gguf {
class File;
}

// llama.cpp's token types (tokenizer.ggml.token_type), which are SentencePiece's.
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // <bos>, <|im_start|>: special; matched in text only when asked to
  kUserDefined = 4,  // "\n", <table>: always matched whole, never split
  kUnused = 5,
  kByte = 6,         // <0x0A>: byte fallback pieces
};
const char* token_type_name(TokenType t);

// Which algorithm tokenizer.ggml.model names.
enum class VocabModel : uint8_t {
  kBytePairBpe,    // 'gpt2': byte-level BPE with explicit merges
  kSentencePiece,  // 'llama': SentencePiece-style BPE over code points with byte fallback
};

// How merges are ranked when a SentencePiece vocabulary carries none (they are derived from the
// vocabulary: every split of a token into two tokens). Gemma files rank by token position
// (their stored scores put user-defined tokens last); other files rank by score.
enum class MergeOrder : uint8_t { kByScore, kByPosition };

struct Vocab {
  VocabModel model = VocabModel::kBytePairBpe;
  std::string model_name;    // tokenizer.ggml.model
  std::string pre = "default";  // tokenizer.ggml.pre
  std::string architecture;  // general.architecture ("" if absent)

  std::vector<std::string> tokens;  // [n_tokens] as stored (byte-level spelling for 'gpt2')
  std::vector<float> scores;        // [n_tokens], or empty when the file has none
  std::vector<TokenType> types;     // [n_tokens]
  std::vector<std::pair<std::string, std::string>> merges;  // [n_merges], best first
  MergeOrder merge_order = MergeOrder::kByScore;
  // Gemma files store whitespace-only tokens with real spaces ("  "); SentencePiece text has
  // U+2581 there, so such tokens are looked up as "▁▁" (as transformers' converter respells them).
  bool respell_space_tokens = false;

  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  int32_t eot_id = -1;           // end of turn: metadata, else found by text (<|im_end|>, ...)
  int32_t eom_id = -1;           // end of message (tool calls), metadata only
  std::vector<int32_t> eog_ids;  // every id that ends generation, sorted

  bool add_bos = false, add_eos = false, add_space_prefix = false;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
};

// Read the `tokenizer.*` keys. Errors: NotFound for a missing required key, InvalidArgument
// for a wrong type, Corrupt for mismatched array lengths, out-of-range ids, malformed merges
// or unknown token types, Unsupported for a tokenizer.ggml.model other than gpt2/llama.
Result<Vocab> load_vocab(const gguf::File& file);

// Check lengths, types and special ids of a vocabulary built by hand (or loaded), fill `types`
// with kNormal if empty, and derive eot_id / eog_ids. Idempotent.
Status prepare_vocab(Vocab& vocab);

}  // namespace hs
