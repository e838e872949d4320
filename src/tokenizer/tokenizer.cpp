// tokenizer/tokenizer.cpp — the model-independent half: added-token splitting, BOS/EOS,
// decoding through the piece table, and the factory.
//
// Cost: encode adds one pass over the text (UTF-8 check + added-token scan) to the model's
// work; decode is one pass over the pieces plus a UTF-8 repair pass.
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "formats/gguf.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/unicode.h"

namespace hs {

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
Tokenizer::~Tokenizer() = default;

void Tokenizer::init_pieces() {
  pieces_.resize(vocab_.tokens.size());
  text_to_id_.reserve(vocab_.tokens.size());
  for (int32_t id = 0; id < vocab_.n_tokens(); ++id) {
    pieces_[id] = make_piece(id);
    text_to_id_.emplace(vocab_.tokens[id], id);  // first id wins for duplicate spellings
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  encode(text, add_special, parse_special, out);
  return out;
}

void Tokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                       std::vector<int32_t>& out) const {
  std::string repaired;
  if (!tok::utf8_is_valid(text)) {
    repaired = tok::utf8_repair(text);
    text = repaired;
  }
  if (add_special && vocab_.add_bos) out.push_back(vocab_.bos_id);

  std::vector<tok::Fragment> frags;
  added_.split(text, parse_special, frags);
  for (const tok::Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
    } else {
      encode_fragment(text.substr(f.begin, f.end - f.begin), f.begin == 0, out);
    }
  }
  if (add_special && vocab_.add_eos) out.push_back(vocab_.eos_id);
}

bool Tokenizer::skipped_when_decoding(int32_t id) const {
  const TokenType t = vocab_.types[id];
  return t == TokenType::kControl || t == TokenType::kUnknown;
}

std::string Tokenizer::join_pieces(std::span<const int32_t> ids, bool skip_special) const {
  std::string raw;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) continue;
    if (skip_special && skipped_when_decoding(id)) continue;
    raw += pieces_[id];
  }
  return tok::utf8_is_valid(raw) ? raw : tok::utf8_repair(raw);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  return join_pieces(ids, skip_special);
}

std::string_view Tokenizer::token_to_piece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  return pieces_[id];
}

std::string_view Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  return vocab_.tokens[id];
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  const auto it = text_to_id_.find(text);
  if (it == text_to_id_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(vocab_.eog_ids.begin(), vocab_.eog_ids.end(), id);
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < n_vocab() && vocab_.types[id] == TokenType::kControl;
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return TokenType::kUndefined;
  return vocab_.types[id];
}

Result<std::unique_ptr<Tokenizer>> make_tokenizer(Vocab vocab) {
  HS_RETURN_IF_ERROR(prepare_vocab(vocab));
  switch (vocab.model) {
    case VocabModel::kBytePairBpe: {
      HS_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> t, BpeTokenizer::create(std::move(vocab)));
      return std::unique_ptr<Tokenizer>(std::move(t));
    }
    case VocabModel::kSentencePiece: {
      HS_ASSIGN_OR_RETURN(std::unique_ptr<SpmTokenizer> t, SpmTokenizer::create(std::move(vocab)));
      return std::unique_ptr<Tokenizer>(std::move(t));
    }
  }
  return make_error(StatusCode::kInternal, "unknown vocabulary model");
}

Result<std::unique_ptr<Tokenizer>> make_tokenizer(const gguf::File& file) {
  HS_ASSIGN_OR_RETURN(Vocab vocab, load_vocab(file));
  return make_tokenizer(std::move(vocab));
}

}  // namespace hs
