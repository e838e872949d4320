// tests/fuzz/fuzz_tokenizer.cpp — libFuzzer target: encode and decode of a real model's
// tokenizer (tokenizer/tokenizer.h) on arbitrary bytes. The model is HS_FUZZ_MODEL, default the
// Qwen2.5-Coder-0.5B GGUF that scripts/setup fetches (byte-level BPE with the qwen2
// pre-tokenizer, 151K tokens). Checked, not just run: every id is in the vocabulary, and text
// that is valid UTF-8 decodes back to its NFC form when special tokens are not parsed (the qwen2
// pre-tokenizer normalizes to NFC as HF's tokenizer.json does; byte-level BPE loses nothing
// else), and a decoded text encodes and decodes to itself — a mismatch aborts, so the fuzzer
// reports it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_nfc.h"

namespace {
std::unique_ptr<hs::Tokenizer> g_tok;

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n;
    uint32_t cp;
    if ((c >> 5) == 6) {
      n = 1, cp = c & 0x1fu;
    } else if ((c >> 4) == 14) {
      n = 2, cp = c & 0x0fu;
    } else if ((c >> 3) == 30) {
      n = 3, cp = c & 0x07u;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3fu);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("HS_FUZZ_MODEL");
  const std::string path = env ? env : std::string(HS_SOURCE_DIR) + "/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
  auto f = hs::gguf::File::open(path);
  if (!f.is_ok()) {
    std::fprintf(stderr, "fuzz_tokenizer: %s (set HS_FUZZ_MODEL)\n", f.status().to_string().c_str());
    std::exit(2);
  }
  auto t = hs::make_tokenizer(**f);
  if (!t.is_ok()) {
    std::fprintf(stderr, "fuzz_tokenizer: %s\n", t.status().to_string().c_str());
    std::exit(2);
  }
  g_tok = std::move(*t);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const bool special : {false, true}) {
    const std::vector<int32_t> ids = g_tok->encode(text, special, special);
    for (int32_t id : ids)
      if (id < 0 || id >= g_tok->n_vocab()) {
        std::fprintf(stderr, "fuzz_tokenizer: id %d outside the vocabulary\n", id);
        std::abort();
      }
    const std::string back = g_tok->decode(ids, false);
    if (!special && valid_utf8(text)) {
      if (back != hs::tok::nfc(text)) {
        std::fprintf(stderr, "fuzz_tokenizer: decode(encode(x)) != NFC(x) for %zu bytes\n", size);
        std::abort();
      }
      if (g_tok->decode(g_tok->encode(back, false, false), false) != back) {
        std::fprintf(stderr, "fuzz_tokenizer: a decoded text does not round-trip (%zu bytes)\n", size);
        std::abort();
      }
    }
  }
  return 0;
}
