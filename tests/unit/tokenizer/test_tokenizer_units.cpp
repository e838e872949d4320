// tests/unit/tokenizer/test_tokenizer_units.cpp — tokenizers on tiny hand-made vocabularies,
// and vocabulary errors, with no model files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "formats/gguf_builder.h"
#include "formats/gguf.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unicode_nfc.h"

namespace hs {
namespace {

using test::GgufBuilder;

// ---- byte-level BPE --------------------------------------------------------------------------

// 0 <|endoftext|> (control), 1..256 the byte alphabet (byte b is id 1 + b), then merged tokens.
Vocab tiny_bpe_vocab(const std::string& pre) {
  Vocab v;
  v.model = VocabModel::kBytePairBpe;
  v.model_name = "gpt2";
  v.pre = pre;
  v.tokens.push_back("<|endoftext|>");
  v.types.push_back(TokenType::kControl);
  const auto& bm = tok::ByteMap::get();
  for (int b = 0; b < 256; ++b) {
    v.tokens.emplace_back(bm.byte_to_utf8(static_cast<uint8_t>(b)));
    v.types.push_back(TokenType::kNormal);
  }
  for (const char* t : {"he", "ll", "llo", "hello", "Ġw", "or", "Ġwor", "ld", "Ġworld", "12"}) {
    v.tokens.push_back(t);  // ids 257..266
    v.types.push_back(TokenType::kNormal);
  }
  v.tokens.push_back("<think>");  // 267
  v.types.push_back(TokenType::kUserDefined);
  v.merges = {{"h", "e"},  {"l", "l"},   {"ll", "o"},   {"he", "llo"}, {"Ġ", "w"},
              {"o", "r"},  {"Ġw", "or"}, {"l", "d"},    {"Ġwor", "ld"}, {"1", "2"}};
  v.eos_id = 0;
  return v;
}

int32_t byte_id(char c) { return 1 + static_cast<uint8_t>(c); }

std::unique_ptr<Tokenizer> make_or_die(Vocab v) {
  auto t = make_tokenizer(std::move(v));
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return t.is_ok() ? std::move(t).value() : nullptr;
}

TEST(BpeTokenizer, MergesInRankOrder) {
  auto t = make_or_die(tiny_bpe_vocab("gpt2"));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("hello world", true, true), (std::vector<int32_t>{260, 265}));
  EXPECT_EQ(t->encode("hello", false, false), (std::vector<int32_t>{260}));
  // "hellow" is one word: hello + w; " world" is another.
  EXPECT_EQ(t->encode("hellow", false, false), (std::vector<int32_t>{260, byte_id('w')}));
  EXPECT_EQ(t->decode(t->encode("hello world", false, false), false), "hello world");
  EXPECT_TRUE(t->is_eog(0));
}

TEST(BpeTokenizer, ControlTokensOnlyWhenParsingSpecial) {
  auto t = make_or_die(tiny_bpe_vocab("gpt2"));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("hello<|endoftext|>", false, true), (std::vector<int32_t>{260, 0}));
  const auto plain = t->encode("hello<|endoftext|>", false, false);
  EXPECT_EQ(plain.size(), 1u + 13u);  // "hello" + 13 single bytes, nothing merges
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 0), 0);
  EXPECT_EQ(t->decode(plain, true), "hello<|endoftext|>");
  // skip_special drops control tokens only.
  EXPECT_EQ(t->decode(std::vector<int32_t>{260, 0, 265}, true), "hello world");
  EXPECT_EQ(t->decode(std::vector<int32_t>{260, 0, 265}, false), "hello<|endoftext|> world");
  // User-defined tokens are matched either way.
  for (bool parse : {false, true})
    EXPECT_EQ(t->encode("a<think>b", false, parse),
              (std::vector<int32_t>{byte_id('a'), 267, byte_id('b')}));
}

TEST(BpeTokenizer, SmollmSplitsDigitsOneByOne) {
  auto gpt2 = make_or_die(tiny_bpe_vocab("gpt2"));
  auto smollm = make_or_die(tiny_bpe_vocab("smollm"));
  ASSERT_TRUE(gpt2 && smollm);
  EXPECT_EQ(gpt2->encode("a 12", false, false),
            (std::vector<int32_t>{byte_id('a'), byte_id(' '), 266}));  // "a", " 12" -> Ġ 12
  EXPECT_EQ(smollm->encode("a 12", false, false),
            (std::vector<int32_t>{byte_id('a'), byte_id(' '), byte_id('1'), byte_id('2')}));
}

TEST(BpeTokenizer, LongWhitespaceAndInvalidUtf8) {
  auto t = make_or_die(tiny_bpe_vocab("smollm"));
  ASSERT_TRUE(t);
  const std::string spaces(200000, ' ');
  const auto ids = t->encode(spaces + "x", false, false);
  EXPECT_EQ(t->decode(ids, false), spaces + "x");
  // A stray continuation byte and a truncated sequence become U+FFFD each.
  EXPECT_EQ(t->decode(t->encode("a\x80z\xE4\xB8", false, false), false),
            "a\xEF\xBF\xBDz\xEF\xBF\xBD");
}

TEST(BpeTokenizer, RejectsBadMergesAndUnknownPreTokenizer) {
  Vocab bad_merge = tiny_bpe_vocab("gpt2");
  bad_merge.merges.push_back({"x", "yz"});
  auto r1 = make_tokenizer(std::move(bad_merge));
  ASSERT_FALSE(r1.is_ok());
  EXPECT_EQ(r1.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r1.status().message().find("'yz'"), std::string::npos) << r1.status().message();

  auto r2 = make_tokenizer(tiny_bpe_vocab("no-such-pre"));
  ASSERT_FALSE(r2.is_ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r2.status().message().find("no-such-pre"), std::string::npos);
}

// ---- SentencePiece-style BPE -------------------------------------------------------------------

// 0 <pad> 1 <eos> 2 <bos> (control), 3 <unk>, 4..259 <0x00>..<0xFF>, then pieces.
Vocab tiny_spm_vocab(bool with_bytes = true) {
  Vocab v;
  v.model = VocabModel::kSentencePiece;
  v.model_name = "llama";
  v.architecture = "gemma3";
  v.merge_order = MergeOrder::kByPosition;
  v.respell_space_tokens = true;
  const auto add = [&](std::string t, TokenType type) {
    v.tokens.push_back(std::move(t));
    v.types.push_back(type);
  };
  add("<pad>", TokenType::kControl);
  add("<eos>", TokenType::kControl);
  add("<bos>", TokenType::kControl);
  add("<unk>", TokenType::kUnknown);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(with_bytes ? std::string(name) : "<unused" + std::to_string(b) + ">",
        with_bytes ? TokenType::kByte : TokenType::kUnused);
  }
  add("\xE2\x96\x81", TokenType::kNormal);          // 260 ▁
  add("a", TokenType::kNormal);                     // 261
  add("b", TokenType::kNormal);                     // 262
  add("c", TokenType::kNormal);                     // 263
  add("\xE2\x96\x81" "a", TokenType::kNormal);      // 264 ▁a
  add("ab", TokenType::kNormal);                    // 265
  add("\xE2\x96\x81" "ab", TokenType::kNormal);     // 266 ▁ab
  add("\n", TokenType::kUserDefined);               // 267
  add("  ", TokenType::kUserDefined);               // 268, looked up as ▁▁
  add("<start_of_turn>", TokenType::kControl);      // 269
  v.bos_id = 2;
  v.eos_id = 1;
  v.unk_id = 3;
  v.pad_id = 0;
  v.add_bos = true;
  return v;
}

TEST(SpmTokenizer, MergesByPositionLeftmostFirst) {
  auto t = make_or_die(tiny_spm_vocab());
  ASSERT_TRUE(t);
  // a b ▁ a b: "▁a" (264) outranks "ab" (265), then ab, then "▁a"+"b" -> "▁ab".
  EXPECT_EQ(t->encode("ab ab", true, true), (std::vector<int32_t>{2, 265, 266}));
  EXPECT_EQ(t->encode("ab ab", false, true), (std::vector<int32_t>{265, 266}));
  EXPECT_EQ(t->decode(t->encode("ab ab", true, true), true), "ab ab");
  EXPECT_EQ(t->decode(t->encode("ab ab", true, true), false), "<bos>ab ab");
  EXPECT_EQ(t->encode("", true, true), (std::vector<int32_t>{2}));
}

TEST(SpmTokenizer, SpaceRunsAreRespelledAndMerged) {
  auto t = make_or_die(tiny_spm_vocab());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("a  b", false, false), (std::vector<int32_t>{261, 268, 262}));
  EXPECT_EQ(t->decode(std::vector<int32_t>{261, 268, 262}, true), "a  b");
}

TEST(SpmTokenizer, ByteFallbackAndUnknown) {
  auto t = make_or_die(tiny_spm_vocab());
  ASSERT_TRUE(t);
  const std::vector<int32_t> e_acute = {4 + 0xC3, 4 + 0xA9};
  EXPECT_EQ(t->encode("\xC3\xA9", false, false), e_acute);
  EXPECT_EQ(t->decode(e_acute, true), "\xC3\xA9");
  EXPECT_EQ(t->token_to_piece(4 + 0xC3), "\xC3");
  // Half a character decodes to one U+FFFD per byte (HF ByteFallback).
  EXPECT_EQ(t->decode(std::vector<int32_t>{4 + 0xE4, 4 + 0xB8, 261}, true),
            "\xEF\xBF\xBD\xEF\xBF\xBD" "a");

  auto nb = make_or_die(tiny_spm_vocab(/*with_bytes=*/false));
  ASSERT_TRUE(nb);
  // Without byte tokens an unknown character is <unk>; consecutive ones fuse.
  EXPECT_EQ(nb->encode("a\xC3\xA9\xC3\xA9" "b", false, false),
            (std::vector<int32_t>{261, 3, 262}));
}

TEST(SpmTokenizer, AddedTokensSplitBeforeBpe) {
  auto t = make_or_die(tiny_spm_vocab());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("<start_of_turn>a\nb", false, true),
            (std::vector<int32_t>{269, 261, 267, 262}));
  const auto plain = t->encode("<start_of_turn>a\nb", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 269), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 267), 1);  // user-defined still matched
  EXPECT_EQ(t->decode(plain, true), "<start_of_turn>a\nb");
}

TEST(AddedTokenMatcher, LeftmostLongest) {
  tok::AddedTokenMatcher m;
  m.add("<a>", 1, true);
  m.add("<a><b>", 2, true);
  m.add("b>", 3, false);
  std::vector<tok::Fragment> f;
  m.split("x<a><b>y<a>b>", true, f);
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[0].token, -1);
  EXPECT_EQ(f[1].token, 2);  // longest at the leftmost start
  EXPECT_EQ(f[2].token, -1);
  EXPECT_EQ(f[3].token, 1);
  EXPECT_EQ(f[4].token, 3);
  f.clear();
  // Special matches are skipped whole (no rescan inside), non-special ones still split.
  m.split("<a><b>b>", false, f);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].token, -1);
  EXPECT_EQ(f[0].end, 6u);
  EXPECT_EQ(f[1].token, 3);
}

// ---- vocabulary loading and errors --------------------------------------------------------------

struct GgufVocab {
  std::string model = "gpt2";
  std::vector<std::string> tokens = {"<|endoftext|>", "<|im_end|>", "a", "b", "ab"};
  std::vector<int32_t> types = {3, 3, 1, 1, 1};
  std::vector<std::string> merges = {"a b"};
  std::vector<float> scores;
  int64_t bos = 0;
  bool skip_model = false, tokens_as_ints = false;
};

Result<Vocab> load(const GgufVocab& g) {
  GgufBuilder b;
  b.kv_str("general.architecture", "llama");
  if (!g.skip_model) b.kv_str("tokenizer.ggml.model", g.model);
  b.kv_str("tokenizer.ggml.pre", "smollm");
  if (g.tokens_as_ints) {
    b.kv_i32_array("tokenizer.ggml.tokens", {1, 2, 3});
  } else {
    b.kv_str_array("tokenizer.ggml.tokens", g.tokens);
  }
  b.kv_i32_array("tokenizer.ggml.token_type", g.types);
  if (!g.merges.empty()) b.kv_str_array("tokenizer.ggml.merges", g.merges);
  if (!g.scores.empty()) b.kv_f32_array("tokenizer.ggml.scores", g.scores);
  b.kv_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(g.bos));
  b.kv_u32("tokenizer.ggml.eos_token_id", 0);
  b.kv_bool("tokenizer.ggml.add_bos_token", false);
  auto f = gguf::File::from_bytes(b.bytes());
  if (!f.is_ok()) return f.status();
  return load_vocab(**f);
}

TEST(TokenizerVocab, LoadsAndDerivesEndOfTurn) {
  auto v = load(GgufVocab{});
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(v->model, VocabModel::kBytePairBpe);
  EXPECT_EQ(v->pre, "smollm");
  EXPECT_EQ(v->n_tokens(), 5);
  EXPECT_EQ(v->merges.size(), 1u);
  EXPECT_EQ(v->eot_id, 1);  // <|im_end|> found by text
  EXPECT_EQ(v->eog_ids, (std::vector<int32_t>{0, 1}));
  EXPECT_FALSE(v->add_bos);
  auto t = make_tokenizer(std::move(v).value());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("ab", false, false), (std::vector<int32_t>{4}));
}

TEST(TokenizerVocab, UnsetIdIsMinusOne) {
  GgufVocab g;
  g.bos = 0xFFFFFFFFll;
  auto v = load(g);
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(v->bos_id, -1);
}

void expect_error(const GgufVocab& g, StatusCode code, const std::string& needle) {
  auto v = load(g);
  ASSERT_FALSE(v.is_ok());
  EXPECT_EQ(v.status().code(), code) << v.status().to_string();
  EXPECT_NE(v.status().message().find(needle), std::string::npos) << v.status().message();
}

TEST(TokenizerVocab, ClearErrors) {
  GgufVocab g;
  g.skip_model = true;
  expect_error(g, StatusCode::kNotFound, "tokenizer.ggml.model");
  g = {};
  g.model = "bert";
  expect_error(g, StatusCode::kUnsupported, "'bert'");
  g = {};
  g.tokens_as_ints = true;
  expect_error(g, StatusCode::kInvalidArgument, "tokenizer.ggml.tokens");
  g = {};
  g.types = {1, 1};
  expect_error(g, StatusCode::kCorrupt, "token_type has 2 entries");
  g = {};
  g.types = {3, 3, 1, 1, 9};
  expect_error(g, StatusCode::kCorrupt, "token_type[4] = 9");
  g = {};
  g.scores = {0.0f, 1.0f};
  expect_error(g, StatusCode::kCorrupt, "scores has 2 entries");
  g = {};
  g.bos = 5;
  expect_error(g, StatusCode::kCorrupt, "bos_token_id = 5");
  g = {};
  g.merges = {"ab"};
  expect_error(g, StatusCode::kCorrupt, "merges[0] = 'ab'");
  g = {};
  g.merges = {};
  expect_error(g, StatusCode::kNotFound, "merges is missing");
}

TEST(TokenizerVocab, PrepareRejectsInconsistentHandMadeVocab) {
  Vocab v = tiny_spm_vocab();
  v.add_bos = true;
  v.bos_id = -1;
  EXPECT_EQ(prepare_vocab(v).code(), StatusCode::kCorrupt);
  v = tiny_spm_vocab();
  v.types.pop_back();
  EXPECT_EQ(prepare_vocab(v).code(), StatusCode::kCorrupt);
  v = tiny_spm_vocab();
  v.eos_id = 100000;
  EXPECT_EQ(prepare_vocab(v).code(), StatusCode::kCorrupt);
}

TEST(TokenizerUnicode, RepairUsesMaximalSubparts) {
  // F0 9F 98 is a truncated 4-byte sequence: one U+FFFD, then 'x'.
  EXPECT_EQ(tok::utf8_repair("\xF0\x9F\x98x"), "\xEF\xBF\xBDx");
  // ED A0 80 is a surrogate: ED is a valid lead but A0 is out of its range -> 3 replacements.
  EXPECT_EQ(tok::utf8_repair("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(tok::utf8_is_valid("h\xC3\xA9llo \xF0\x9F\x98\x80"));
  EXPECT_FALSE(tok::utf8_is_valid("\xC0\xAF"));  // overlong
  const auto& bm = tok::ByteMap::get();
  EXPECT_EQ(bm.byte_to_utf8(' '), "\xC4\xA0");  // Ġ
  constexpr char kRaw[] = "any \x00\xFF bytes";
  const std::string raw(kRaw, sizeof kRaw - 1);
  EXPECT_EQ(bm.decode(bm.encode(raw)), raw);
}

// NFC as HF's normalizer (tools/reference/gen_unicode_nfc.py checks the tables against it on
// every code point; these pin the algorithm's steps).
TEST(TokenizerUnicode, NfcComposesReordersAndExcludes) {
  EXPECT_TRUE(tok::nfc_trivially_stable("plain ASCII, caf\xC3\xA9 and \xC3\xBF"));  // all below U+0300
  EXPECT_FALSE(tok::nfc_trivially_stable("e\xCC\x81"));                           // U+0301
  EXPECT_EQ(tok::nfc("int main() { return 0; }\n"), "int main() { return 0; }\n");
  EXPECT_EQ(tok::nfc("e\xCC\x81"), "\xC3\xA9");                       // e + acute -> é
  EXPECT_EQ(tok::nfc("\xE2\x84\xAB"), "\xC3\x85");                   // U+212B ANGSTROM SIGN -> Å (singleton)
  EXPECT_EQ(tok::nfc("C\xCC\xA7\xCC\x81"), "\xE1\xB8\x88");         // C + cedilla + acute -> Ḉ (two steps)
  EXPECT_EQ(tok::nfc("C\xCC\x81\xCC\xA7"), "\xE1\xB8\x88");         // marks reordered by class first
  EXPECT_EQ(tok::nfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");  // U+0958 is excluded: stays decomposed
  EXPECT_EQ(tok::nfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB"), "\xED\x95\x9C");  // jamo -> 한
  EXPECT_EQ(tok::nfc("\xED\x95\x9C"), "\xED\x95\x9C");
  EXPECT_EQ(tok::nfc("\xCC\x81" "e"), "\xCC\x81" "e");  // a leading mark has no starter to join
  // A mark of the same class blocks a second one: o + dot below + acute -> ọ́ as U+1ECD U+0301.
  EXPECT_EQ(tok::nfc("o\xCC\x81\xCC\xA3"), "\xE1\xBB\x8D\xCC\x81");
  const std::string mixed = "na\xC3\xAFve \xE2\x84\xAB e\xCC\x81 \xE4\xB8\xAD";
  EXPECT_EQ(tok::nfc(tok::nfc(mixed)), tok::nfc(mixed));
}

TEST(BpeTokenizer, Qwen2NormalizesToNfcBeforeSplitting) {
  Vocab v = tiny_bpe_vocab("qwen2");
  v.tokens.push_back("Ã©");  // 268: "é" (C3 A9) in the byte alphabet
  v.types.push_back(TokenType::kNormal);
  v.merges.emplace_back("Ã", "©");
  auto qwen = make_or_die(v);
  v.pre = "gpt2";
  auto gpt2 = make_or_die(v);
  ASSERT_TRUE(qwen && gpt2);
  EXPECT_EQ(qwen->encode("e\xCC\x81", false, false), (std::vector<int32_t>{268}));
  EXPECT_EQ(qwen->encode("\xC3\xA9", false, false), (std::vector<int32_t>{268}));
  EXPECT_EQ(gpt2->encode("e\xCC\x81", false, false).size(), 3u);  // e, CC, 81: no normalizer
  // Added tokens are cut out of the raw text first (HF: normalized = false).
  EXPECT_EQ(qwen->encode("<think>e\xCC\x81", false, false), (std::vector<int32_t>{267, 268}));
}

}  // namespace
}  // namespace hs
