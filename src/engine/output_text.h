// engine/output_text.h — a request's generated text: incremental detokenization plus stop
// strings.
//
// Each pushed token extends the text (TextStream keeps UTF-8 whole); text that can no
// longer turn into the start of a stop string is released, the rest is held back. When a
// stop string appears the text is cut before it and the output ends. Shared by the CLI
// loop (generate.cpp) and the serving engine so both produce the same bytes.
// Cost per token: O(generated) decode (TextStream) + O(hold * n_stop) search.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/text_stream.h"

namespace hs {

class OutputText {
 public:
  OutputText(const Tokenizer& tok, std::vector<std::string> stop);

  // Adds a generated token; returns the text released by it (may be empty).
  std::string push(int32_t token);
  // True once a stop string was found; the text then ends before it.
  bool stopped() const { return stopped_; }
  // The stop string that was found (the earliest in the text; of those starting there, the
  // first listed); empty while !stopped().
  std::string_view matched_stop() const { return stopped_ ? std::string_view(stop_[matched_]) : std::string_view(); }
  // At the end (length/EOS): releases everything held back.
  std::string finish();
  // All released text so far.
  std::string_view released() const { return std::string_view(stream_.text()).substr(0, emitted_); }

 private:
  TextStream stream_;
  std::vector<std::string> stop_;
  size_t hold_ = 0;     // longest stop string: bytes held back
  size_t emitted_ = 0;  // bytes of stream_.text() released
  bool stopped_ = false;
  size_t matched_ = 0;  // stop_[matched_] was found (when stopped_)
};

}  // namespace hs
