// tokenizer/pretokenizer.h — regex pre-tokenizers of byte-level BPE vocabularies (PCRE2, JIT).
//
// HF `tokenizers` splits text with Oniguruma regexes; we compile the same patterns with PCRE2
// in UTF + UCP mode and JIT them. Three differences are handled in the pattern text: `\s` is
// spelled as Oniguruma's set (\t\n\v\f\r, U+0085 and \p{Z}; PCRE2's \s would add U+180E);
// \p{L} and \p{N} are widened with the letters/digits of Unicode 15-17 that Oniguruma (and
// Rust, for Digits) know and Debian's PCRE2 10.42 (Unicode 14) does not; and SmolLM2's
// Sequence[Digits(individual_digits), ByteLevel] is folded into one pattern whose whitespace
// lookahead treats a digit like the end of the text (equivalent to splitting out the digits
// first, then running the GPT-2 regex on each remaining piece).
// Every byte of the input lands in exactly one piece: matches and the gaps between them (HF's
// "isolated" split behaviour). Cost: one JIT regex scan over the text; the compiled code is
// shared read-only by all threads, each call makes its own match data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace hs::tok {

class RegexSplitter {
 public:
  // Compile `pattern` (PCRE2 syntax) with UTF, UCP and JIT.
  static Result<std::unique_ptr<RegexSplitter>> compile(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Append [begin, end) byte ranges covering `text` (which must be valid UTF-8).
  void split(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  RegexSplitter() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// The pre-tokenizer named by tokenizer.ggml.pre for a 'gpt2' vocabulary, or Unsupported.
Result<std::unique_ptr<RegexSplitter>> make_pre_tokenizer(std::string_view pre);
// True when the HF tokenizer of that pre-tokenizer normalizes text to NFC before splitting it:
// 'qwen2' and 'qwen35' (transformers' Qwen2Tokenizer and Qwen's tokenizer.json; tokenizer/unicode_nfc.h).
bool pre_tokenizer_wants_nfc(std::string_view pre);

}  // namespace hs::tok
