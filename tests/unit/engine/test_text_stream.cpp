// tests/unit/engine/test_text_stream.cpp — streamed text equals the one-shot decode, and
// no chunk ends inside a UTF-8 character.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/text_stream.h"
#include "formats/gguf.h"

namespace hs {
namespace {

TEST(TextStream, CompleteUtf8Prefix) {
  EXPECT_EQ(complete_utf8_prefix("abc"), 3u);
  EXPECT_EQ(complete_utf8_prefix("a\xE4\xBD"), 1u);        // 3-byte char missing a byte
  EXPECT_EQ(complete_utf8_prefix("a\xE4\xBD\xA0"), 4u);    // complete 你
  EXPECT_EQ(complete_utf8_prefix("\xF0\x9F\x98"), 0u);     // 4-byte emoji cut
  EXPECT_EQ(complete_utf8_prefix(""), 0u);
}

TEST(TextStream, StreamEqualsDecodeOnRealTokenizers) {
  for (const char* file : {"smollm2-135m-instruct-q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"}) {
    const std::string path = std::string(HS_SOURCE_DIR) + "/models/" + file;
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
    auto f = gguf::File::open(path);
    ASSERT_TRUE(f.is_ok());
    auto tok = make_tokenizer(**f);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    const std::string text = "héllo 你好 🙂👍🏽 code: for (int i = 0; i < 10; ++i) {}\n\ttabs  and   spaces";
    auto ids = (*tok)->encode(text, false, false);
    TextStream stream(**tok);
    std::string streamed;
    for (int32_t id : ids) {
      std::string piece = stream.push(id);
      EXPECT_EQ(complete_utf8_prefix(piece), piece.size()) << file;
      streamed += piece;
    }
    streamed += stream.flush();
    EXPECT_EQ(streamed, text) << file;
  }
}

}  // namespace
}  // namespace hs
