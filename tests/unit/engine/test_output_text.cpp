// tests/unit/engine/test_output_text.cpp — stop strings: the text ends before the first one
// found, and matched_stop() names it (the Anthropic route reports it as stop_sequence).
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/output_text.h"
#include "formats/gguf.h"

namespace hs {
namespace {

TEST(OutputText, ReportsTheStopStringThatMatched) {
  const std::string path = std::string(HS_SOURCE_DIR) + "/models/smollm2-135m-instruct-q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.is_ok());
  auto tok = make_tokenizer(**f);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  struct Case {
    std::vector<std::string> stop;
    std::string text, want_text, want_stop;
  };
  const std::vector<Case> cases = {
      {{"END", "four"}, "one two three four five END", "one two three ", "four"},  // the earliest in the text
      {{"four", "fo"}, "one two three four", "one two three ", "four"},            // same start: the first listed
      {{"zzz"}, "one two", "one two", ""},                                         // none: nothing matched
  };
  for (const Case& c : cases) {
    OutputText out(**tok, c.stop);
    std::string text;
    for (int32_t id : (*tok)->encode(c.text, false, false)) {
      text += out.push(id);
      if (out.stopped()) break;
    }
    text += out.finish();
    EXPECT_EQ(text, c.want_text) << c.text;
    EXPECT_EQ(out.stopped(), !c.want_stop.empty());
    EXPECT_EQ(out.matched_stop(), c.want_stop) << c.text;
  }
}

}  // namespace
}  // namespace hs
