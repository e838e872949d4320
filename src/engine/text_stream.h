// engine/text_stream.h — incremental detokenization for streaming output.
//
// Byte-level BPE tokens can split a UTF-8 character, and SentencePiece pieces depend on
// their neighbours, so text is produced by decoding the whole generated sequence and
// emitting only the new suffix, holding back an incomplete UTF-8 tail. Cost O(generated)
// per token; generations are short relative to the cost of a forward pass. A trailing
// U+FFFD (how the tokenizer renders a cut UTF-8 sequence) is held back too.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hs {

class TextStream {
 public:
  explicit TextStream(const Tokenizer& tok) : tok_(tok) {}
  // Adds a token; returns the newly complete text (possibly empty).
  std::string push(int32_t token);
  // Remaining held-back text (call at the end).
  std::string flush();
  const std::string& text() const { return text_; }  // everything emitted so far

 private:
  const Tokenizer& tok_;
  std::vector<int32_t> ids_;
  std::string text_;
};

// Length of the longest prefix of s that does not end inside a UTF-8 sequence.
size_t complete_utf8_prefix(const std::string& s);

}  // namespace hs
