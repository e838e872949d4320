// engine/text_stream.cpp — see text_stream.h.
#include "engine/text_stream.h"

#include <string_view>

namespace hs {

size_t complete_utf8_prefix(const std::string& s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    return len > back ? n - back : n;
  }
  return n;
}

std::string TextStream::push(int32_t token) {
  ids_.push_back(token);
  std::string all = tok_.decode(ids_, /*skip_special=*/true);
  size_t ready = complete_utf8_prefix(all);
  // The tokenizer repairs a cut UTF-8 sequence into U+FFFD; a trailing one may still become
  // a real character once the next token arrives, so hold it back.
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  while (ready >= kReplacement.size() && std::string_view(all).substr(0, ready).ends_with(kReplacement))
    ready -= kReplacement.size();
  if (ready <= text_.size() || all.compare(0, text_.size(), text_) != 0) return {};
  std::string delta = all.substr(text_.size(), ready - text_.size());
  text_ += delta;
  return delta;
}

std::string TextStream::flush() {
  std::string all = tok_.decode(ids_, true);
  if (all.size() <= text_.size() || all.compare(0, text_.size(), text_) != 0) return {};
  std::string delta = all.substr(text_.size());
  text_ = all;
  return delta;
}

}  // namespace hs
