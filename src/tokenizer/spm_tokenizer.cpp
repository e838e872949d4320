// tokenizer/spm_tokenizer.cpp — SentencePiece-style BPE: vocabulary setup, per-fragment BPE,
// byte-fallback decoding.
//
// Added tokens follow transformers' GGUF converter: control tokens are special added tokens,
// user-defined tokens non-special ones unless respelled (Gemma's space runs, which are reached
// through merges instead). Cost: setup sorts the vocabulary once by priority (n log n).
#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <numeric>

#include "tokenizer/unicode.h"

namespace hs {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁"

// Byte value of a "<0xXX>" token, or -1 (HF's ByteFallback decoder test).
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// Whitespace-only text containing a space (Python: " " in t and not t.strip()).
bool is_space_run(std::string_view t) {
  bool has_space = false;
  for (size_t i = 0; i < t.size();) {
    const size_t len = tok::utf8_valid_len(t, i);
    if (len == 0) return false;
    const uint32_t cp = tok::utf8_decode(t, i, len);
    if (!tok::is_python_space(cp)) return false;
    has_space |= cp == ' ';
    i += len;
  }
  return has_space;
}

// Direct-mapped per-thread cache of pair ranks. A derived rank costs a string concatenation and a
// probe of the 262k-entry vocabulary map (two cache misses); source code repeats pairs so much
// that this cache removes most of them. Tagged with the tokenizer's serial, so several tokenizers
// can share a thread (switching between them on one thread clears it: 384 KiB, ~50 us).
struct PairCache {
  static constexpr size_t kSize = 1u << 14;
  struct Entry {
    uint64_t key = ~0ull;
    tok::MergeRank rank;
  };
  uint64_t owner = 0;
  std::vector<Entry> entries;  // [kSize]

  Entry& slot(uint64_t owner_serial, uint64_t key) {
    if (owner != owner_serial || entries.empty()) {
      entries.assign(kSize, Entry{});
      owner = owner_serial;
    }
    return entries[(key * 0x9E3779B97F4A7C15ull) >> (64 - 14)];
  }
};

std::atomic<uint64_t> g_next_serial{1};

}  // namespace

Result<std::unique_ptr<SpmTokenizer>> SpmTokenizer::create(Vocab vocab) {
  std::unique_ptr<SpmTokenizer> t(new SpmTokenizer(std::move(vocab)));
  HS_RETURN_IF_ERROR(t->init());
  return t;
}

int32_t SpmTokenizer::lookup(std::string_view s) const {
  const auto it = spelled_to_id_.find(s);
  return it == spelled_to_id_.end() ? -1 : it->second;
}

Status SpmTokenizer::init() {
  serial_ = g_next_serial.fetch_add(1);
  const int32_t n = vocab_.n_tokens();
  spelled_.resize(n);
  char_len_.resize(n);
  byte_value_.assign(n, 0);
  spelled_to_id_.reserve(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& t = vocab_.tokens[id];
    const size_t chars = tok::utf8_count(t);
    if (vocab_.respell_space_tokens && is_space_run(t)) {
      spelled_[id].clear();
      for (size_t k = 0; k < chars; ++k) spelled_[id] += kSpace;
    } else {
      spelled_[id] = t;
    }
    char_len_[id] = static_cast<uint16_t>(std::min<size_t>(chars, 1023));
    const int b = parse_byte_token(t);
    if (b >= 0) byte_value_[id] = static_cast<uint8_t>(b + 1);
  }
  for (int32_t id = 0; id < n; ++id) spelled_to_id_[spelled_[id]] = id;  // later duplicates win

  for (int c = 0; c < 128; ++c) ascii_token_[c] = lookup(std::string(1, static_cast<char>(c)));
  for (int b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const std::string name = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
    byte_token_[b] = lookup(name);
  }

  // Merge priority of each token as a merged result: dense rank of its score, best first.
  std::vector<float> key(n);
  for (int32_t id = 0; id < n; ++id) {
    if (vocab_.merge_order == MergeOrder::kByPosition) {
      key[id] = -static_cast<float>(id);
    } else {
      key[id] = vocab_.scores.empty() ? 0.0f : vocab_.scores[id];
    }
  }
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return key[a] > key[b]; });
  bucket_.resize(n);
  uint32_t rank = 0;
  for (int32_t k = 0; k < n; ++k) {
    if (k > 0 && key[order[k]] != key[order[k - 1]]) ++rank;
    bucket_[order[k]] = rank;
  }

  if (!vocab_.merges.empty()) {
    explicit_merges_ = true;
    merges_.reserve(vocab_.merges.size());
    for (size_t r = 0; r < vocab_.merges.size(); ++r) {
      const auto& [a, b] = vocab_.merges[r];
      const int32_t ia = lookup(a), ib = lookup(b), im = lookup(a + b);
      if (ia < 0 || ib < 0 || im < 0)
        return make_error(StatusCode::kCorrupt,
                          "merge {} '{} {}' names a token missing from the vocabulary", r, a, b);
      merges_.insert_or_assign((static_cast<uint64_t>(static_cast<uint32_t>(ia)) << 32) |
                                   static_cast<uint32_t>(ib),
                               tok::MergeRank{r, im});
    }
  }

  for (int32_t id = 0; id < n; ++id) {
    const TokenType type = vocab_.types[id];
    if (type == TokenType::kControl) {
      add_added_token(id, /*special=*/true);
    } else if (type == TokenType::kUserDefined && spelled_[id] == vocab_.tokens[id]) {
      add_added_token(id, /*special=*/false);
    }
  }
  init_pieces();
  return Status::ok();
}

tok::MergeRank SpmTokenizer::rank_of(int32_t a, int32_t b, std::string& buf) const {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  if (explicit_merges_) {
    const auto it = merges_.find(key);
    return it == merges_.end() ? tok::MergeRank{} : it->second;
  }
  thread_local PairCache cache;
  PairCache::Entry& e = cache.slot(serial_, key);
  if (e.key == key) return e.rank;
  e.key = key;
  e.rank = derive_rank(a, b, buf);
  return e.rank;
}

tok::MergeRank SpmTokenizer::derive_rank(int32_t a, int32_t b, std::string& buf) const {
  buf.assign(spelled_[a]);
  buf.append(spelled_[b]);
  const int32_t m = lookup(buf);
  if (m < 0) return {};
  // (priority of the result, longer left first, longer right first, result id)
  const uint64_t r = (static_cast<uint64_t>(bucket_[m]) << 40) |
                     (static_cast<uint64_t>(1023 - char_len_[a]) << 30) |
                     (static_cast<uint64_t>(1023 - char_len_[b]) << 20) |
                     (static_cast<uint64_t>(m) & 0xFFFFF);
  return {r, m};
}

void SpmTokenizer::encode_fragment(std::string_view text, bool at_text_start,
                                   std::vector<int32_t>& out) const {
  std::string norm;
  norm.reserve(text.size() + 8);
  if (vocab_.add_space_prefix && at_text_start) norm += kSpace;
  for (char c : text) {
    if (c == ' ') {
      norm += kSpace;
    } else {
      norm += c;
    }
  }
  const bool cacheable = tok::WordCache::cacheable(norm);
  if (cacheable && cache_.lookup(norm, out)) return;

  // Initial symbols: one per code point, or its byte tokens, or <unk> (consecutive ones fused).
  std::vector<int32_t> ids;
  ids.reserve(norm.size());
  bool last_unk = false;
  for (size_t i = 0; i < norm.size();) {
    size_t len = tok::utf8_valid_len(norm, i);
    if (len == 0) len = 1;  // cannot happen: encode() repaired the text
    const auto lead = static_cast<uint8_t>(norm[i]);
    const int32_t id =
        lead < 0x80 ? ascii_token_[lead] : lookup(std::string_view(norm).substr(i, len));
    if (id >= 0) {
      ids.push_back(id);
      last_unk = false;
    } else {
      const auto byte_at = [&](size_t k) { return byte_token_[static_cast<uint8_t>(norm[i + k])]; };
      bool all = true;
      for (size_t k = 0; k < len; ++k) all &= byte_at(k) >= 0;
      if (all) {
        for (size_t k = 0; k < len; ++k) ids.push_back(byte_at(k));
        last_unk = false;
      } else if (vocab_.unk_id >= 0 && !last_unk) {
        ids.push_back(vocab_.unk_id);
        last_unk = true;
      }
    }
    i += len;
  }

  tok::BpeScratch scratch;
  std::string buf;
  const size_t start = out.size();
  tok::bpe_merge(
      ids, [&](int32_t a, int32_t b) { return rank_of(a, b, buf); }, scratch, out);
  if (cacheable) cache_.insert(norm, out.data() + start, out.size() - start);
}

std::string SpmTokenizer::make_piece(int32_t id) const {
  if (byte_value_[id]) return std::string(1, static_cast<char>(byte_value_[id] - 1));
  std::string out;
  const std::string& t = vocab_.tokens[id];
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += t[i++];
    }
  }
  return out;
}

std::string SpmTokenizer::join_pieces(std::span<const int32_t> ids, bool skip_special) const {
  // HF ByteFallback: a run of byte tokens becomes its bytes if they are valid UTF-8, else one
  // U+FFFD per byte; other pieces pass through.
  std::string out, run;
  const auto flush = [&] {
    if (run.empty()) return;
    if (tok::utf8_is_valid(run)) {
      out += run;
    } else {
      for (size_t k = 0; k < run.size(); ++k) tok::utf8_append(out, tok::kReplacementChar);
    }
    run.clear();
  };
  bool first = true;
  for (int32_t id : ids) {
    if (id < 0 || id >= n_vocab()) continue;
    if (skip_special && skipped_when_decoding(id)) continue;
    if (byte_value_[id]) {
      run += pieces_[id];
    } else {
      flush();
      std::string_view p = pieces_[id];
      // SentencePiece drops the dummy-prefix space of the first token.
      if (first && vocab_.add_space_prefix && p.starts_with(' ')) p.remove_prefix(1);
      out += p;
    }
    first = false;
  }
  flush();
  return tok::utf8_is_valid(out) ? out : tok::utf8_repair(out);
}

}  // namespace hs
