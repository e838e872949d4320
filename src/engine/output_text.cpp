// engine/output_text.cpp — see output_text.h.
#include "engine/output_text.h"

#include <algorithm>

namespace hs {

OutputText::OutputText(const Tokenizer& tok, std::vector<std::string> stop)
    : stream_(tok), stop_(std::move(stop)) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
  for (const auto& s : stop_) hold_ = std::max(hold_, s.size());
}

std::string OutputText::push(int32_t token) {
  if (stopped_) return {};
  stream_.push(token);
  const std::string& text = stream_.text();
  size_t cut = text.size();
  for (size_t i = 0; i < stop_.size(); ++i) {
    const std::string& s = stop_[i];
    const size_t from = emitted_ > s.size() ? emitted_ - s.size() : 0;
    const size_t at = text.find(s, from);
    if (at != std::string::npos && at < cut) { cut = at; stopped_ = true; matched_ = i; }
  }
  const size_t safe = stopped_ ? cut : (text.size() > hold_ ? text.size() - hold_ : 0);
  if (safe <= emitted_) return {};
  std::string out = text.substr(emitted_, safe - emitted_);
  emitted_ = safe;
  return out;
}

std::string OutputText::finish() {
  if (stopped_) return {};
  stream_.flush();
  const std::string& text = stream_.text();
  std::string out = text.size() > emitted_ ? text.substr(emitted_) : std::string();
  emitted_ = text.size();
  return out;
}

}  // namespace hs
