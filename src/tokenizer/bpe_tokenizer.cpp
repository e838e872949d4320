// tokenizer/bpe_tokenizer.cpp — byte-level BPE: setup from the vocabulary and per-word BPE.
//
// Added tokens follow transformers' GGUF converter: control tokens spelled entirely in the byte
// alphabet are special added tokens; user-defined tokens are (non-special) added tokens when
// their stored text is already their byte-level spelling. Merges must name tokens of the
// vocabulary (HF refuses such a file too). Cost: setup is linear in vocabulary + merges.
#include "tokenizer/bpe_tokenizer.h"

#include "tokenizer/unicode.h"
#include "tokenizer/unicode_nfc.h"

namespace hs {

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(Vocab vocab) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer(std::move(vocab)));
  HS_RETURN_IF_ERROR(t->init());
  return t;
}

Status BpeTokenizer::init() {
  const tok::ByteMap& bm = tok::ByteMap::get();
  const int32_t n = vocab_.n_tokens();
  spelled_.resize(n);
  spelled_to_id_.reserve(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& t = vocab_.tokens[id];
    spelled_[id] = bm.is_spelled(t) ? t : bm.encode(t);
  }
  // Later duplicates win, as in a Python dict built from the token list.
  for (int32_t id = 0; id < n; ++id) spelled_to_id_[spelled_[id]] = id;

  for (int b = 0; b < 256; ++b) {
    const auto it = spelled_to_id_.find(bm.byte_to_utf8(static_cast<uint8_t>(b)));
    byte_token_[b] = it == spelled_to_id_.end() ? -1 : it->second;
  }

  merges_.reserve(vocab_.merges.size());
  std::string joined;
  for (size_t r = 0; r < vocab_.merges.size(); ++r) {
    const auto& [a, b] = vocab_.merges[r];
    const auto ia = spelled_to_id_.find(a), ib = spelled_to_id_.find(b);
    joined = a + b;
    const auto im = spelled_to_id_.find(joined);
    if (ia == spelled_to_id_.end() || ib == spelled_to_id_.end() || im == spelled_to_id_.end())
      return make_error(StatusCode::kCorrupt,
                        "merge {} '{} {}' names a token missing from the vocabulary ('{}')", r, a,
                        b,
                        ia == spelled_to_id_.end()   ? a
                        : ib == spelled_to_id_.end() ? b
                                                     : joined);
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) |
                         static_cast<uint32_t>(ib->second);
    merges_.insert_or_assign(key, tok::MergeRank{r, im->second});  // a repeat wins, as in HF
  }

  HS_ASSIGN_OR_RETURN(pre_, tok::make_pre_tokenizer(vocab_.pre));
  nfc_ = tok::pre_tokenizer_wants_nfc(vocab_.pre);

  for (int32_t id = 0; id < n; ++id) {
    const TokenType type = vocab_.types[id];
    const std::string& t = vocab_.tokens[id];
    if (type == TokenType::kControl && bm.is_spelled(t)) {
      add_added_token(id, /*special=*/true);
    } else if (type == TokenType::kUserDefined && spelled_[id] == t) {
      add_added_token(id, /*special=*/false);
    }
  }
  init_pieces();
  return Status::ok();
}

std::string BpeTokenizer::make_piece(int32_t id) const {
  return tok::ByteMap::get().decode(spelled_[id]);
}

void BpeTokenizer::encode_word(std::string_view word, tok::BpeScratch& scratch,
                               std::vector<int32_t>& ids, std::vector<int32_t>& out) const {
  const bool cacheable = tok::WordCache::cacheable(word);
  if (cacheable && cache_.lookup(word, out)) return;
  ids.clear();
  for (char c : word) {
    const int32_t id = byte_token_[static_cast<uint8_t>(c)];
    if (id >= 0) ids.push_back(id);  // HF BPE without unk_token drops unknown symbols
  }
  const size_t start = out.size();
  tok::bpe_merge(
      ids,
      [this](int32_t a, int32_t b) {
        const auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) |
                                     static_cast<uint32_t>(b));
        return it == merges_.end() ? tok::MergeRank{} : it->second;
      },
      scratch, out);
  if (cacheable) cache_.insert(word, out.data() + start, out.size() - start);
}

void BpeTokenizer::encode_fragment(std::string_view text, bool /*at_text_start*/,
                                   std::vector<int32_t>& out) const {
  std::string normalized;
  if (nfc_ && !tok::nfc_trivially_stable(text)) {
    normalized = tok::nfc(text);
    text = normalized;
  }
  std::vector<std::pair<uint32_t, uint32_t>> words;
  pre_->split(text, words);
  tok::BpeScratch scratch;
  std::vector<int32_t> ids;
  for (const auto& [b, e] : words) encode_word(text.substr(b, e - b), scratch, ids, out);
}

}  // namespace hs
