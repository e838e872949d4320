// tests/unit/tokenizer/test_hf_tokenizer_json.cpp — Hugging Face tokenizer directories
// (tokenizer.json + tokenizer_config.json) through tokenizer/hf_tokenizer_json.h: the tiny
// Qwen2-style and Qwen3.5-style tokenizers of tools/reference/gen_hf_tokenizer_fixtures.py give
// HF's ids on the whole committed corpus, their special tokens and chat template arrive, the
// vocabulary is padded to the model's size, a qwen35 checkpoint directory with a tokenizer loads
// without --vocab, and malformed or unsupported files are errors naming what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/gguf.h"
#include "formats/gguf_builder.h"
#include "hf_expected.h"
#include "model/hf_model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"

namespace hs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFix = fs::path(HS_FIXTURES_DIR) / "tokenizer";

// The tokenizer keys of `dir` as a GGUF file of their own.
Result<std::unique_ptr<gguf::File>> tokenizer_file(const fs::path& dir, int64_t n_vocab) {
  gguf::GgufBuilder b;
  b.kv_str("general.architecture", "qwen2");
  HS_ASSIGN_OR_RETURN(bool found, tok::write_hf_tokenizer(dir.string(), n_vocab, b));
  if (!found) return make_error(StatusCode::kNotFound, "no tokenizer.json in {}", dir.string());
  std::vector<uint8_t>& bytes = b.bytes();
  std::unique_ptr<uint8_t[]> buf(new uint8_t[bytes.size()]);
  std::memcpy(buf.get(), bytes.data(), bytes.size());
  return gguf::File::from_buffer(std::move(buf), bytes.size(), dir.string());
}

std::unique_ptr<Tokenizer> load(const fs::path& dir, int64_t n_vocab = 1024) {
  auto f = tokenizer_file(dir, n_vocab);
  EXPECT_TRUE(f.is_ok()) << f.status().to_string();
  if (!f.is_ok()) return nullptr;
  auto t = make_tokenizer(**f);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return t.is_ok() ? std::move(*t) : nullptr;
}

// A scratch copy of a fixture directory whose files a test may break.
struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const fs::path& from) {
    path = fs::temp_directory_path() / ("hs_hf_tok_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                        "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
    for (const auto& e : fs::directory_iterator(from)) fs::copy_file(e.path(), path / e.path().filename());
  }
  ~ScratchDir() { fs::remove_all(path); }
  json read(const char* name) const { return json::parse(test::read_file(path / name)); }
  void write(const char* name, const std::string& text) const { std::ofstream(path / name, std::ios::binary) << text; }
};

TEST(HfTokenizerJson, Qwen2StyleMatchesHuggingFace) {
  auto tok = load(kFix / "hf_qwen2_tiny");
  ASSERT_TRUE(tok);
  test::check_against_hf(*tok, kFix / "hf_qwen2_tiny" / "expected.json", "hf_qwen2_tiny");
  test::check_round_trip(*tok, /*spm=*/false, /*nfc=*/true);
}

TEST(HfTokenizerJson, Qwen35StyleMatchesHuggingFace) {
  auto tok = load(kFix / "hf_qwen35_tiny");
  ASSERT_TRUE(tok);
  test::check_against_hf(*tok, kFix / "hf_qwen35_tiny" / "expected.json", "hf_qwen35_tiny");
  test::check_round_trip(*tok, /*spm=*/false, /*nfc=*/true);
}

TEST(HfTokenizerJson, SpecialTokensTypesAndPadding) {
  auto f = tokenizer_file(kFix / "hf_qwen35_tiny", 1100);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(*(*f)->get_string("tokenizer.ggml.pre"), "qwen35");
  auto tok = make_tokenizer(**f);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const Tokenizer& t = **tok;
  EXPECT_EQ(t.n_vocab(), 1100);  // padded to the model's rows
  ASSERT_TRUE(t.find_token("<|im_start|>") && t.find_token("<|im_end|>") && t.find_token("<|endoftext|>") &&
              t.find_token("<tool_call>"));
  const int32_t im_start = *t.find_token("<|im_start|>"), im_end = *t.find_token("<|im_end|>");
  const int32_t eot = *t.find_token("<|endoftext|>"), call = *t.find_token("<tool_call>");
  EXPECT_EQ(t.eos_id(), im_end);  // tokenizer_config.json's eos_token
  EXPECT_FALSE(t.add_bos());
  EXPECT_TRUE(t.is_eog(im_end));
  EXPECT_TRUE(t.is_eog(eot));
  EXPECT_FALSE(t.is_eog(im_start));
  // Control tokens are matched only when special text is parsed; user-defined ones always.
  EXPECT_EQ(t.encode("<|im_start|>", false, true), std::vector<int32_t>{im_start});
  EXPECT_GT(t.encode("<|im_start|>", false, false).size(), 1u);
  for (bool parse : {false, true}) EXPECT_EQ(t.encode("<tool_call>", false, parse), std::vector<int32_t>{call});
  EXPECT_EQ(t.find_token("[PAD1050]"), std::optional<int32_t>(1050));
  // The chat template arrives from tokenizer_config.json.
  std::string origin;
  auto tpl = chat_template_for_model(**f, &origin);
  ASSERT_TRUE(tpl.is_ok()) << tpl.status().to_string();
  EXPECT_EQ(origin, "tokenizer.chat_template");
  const json cfg = json::parse(test::read_file(kFix / "hf_qwen35_tiny" / "tokenizer_config.json"));
  EXPECT_EQ(tpl->source(), cfg.at("chat_template").get<std::string>());
}

TEST(HfTokenizerJson, MissingTokenizerWritesNothing) {
  gguf::GgufBuilder b;
  auto r = tok::write_hf_tokenizer((fs::path(HS_FIXTURES_DIR) / "hybrid" / "qwen35-tiny").string(), 1024, b);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_FALSE(*r);
}

TEST(HfTokenizerJson, BadFilesAreNamedErrors) {
  auto expect_error = [](const ScratchDir& d, const char* needle) {
    auto f = tokenizer_file(d.path, 1024);
    ASSERT_FALSE(f.is_ok()) << "expected an error mentioning '" << needle << "'";
    EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status().to_string();
  };
  {
    ScratchDir d(kFix / "hf_qwen2_tiny");
    d.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", ");  // truncated
    expect_error(d, "not valid JSON");
  }
  {
    ScratchDir d(kFix / "hf_qwen2_tiny");
    json t = d.read("tokenizer.json");
    t["model"]["type"] = "Unigram";
    d.write("tokenizer.json", t.dump());
    expect_error(d, "Unigram");
  }
  {
    ScratchDir d(kFix / "hf_qwen2_tiny");
    json t = d.read("tokenizer.json");
    t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+|\\w+";
    d.write("tokenizer.json", t.dump());
    expect_error(d, "pre_tokenizer");
  }
  {
    ScratchDir d(kFix / "hf_qwen2_tiny");
    json t = d.read("tokenizer.json");
    t["normalizer"] = nullptr;  // qwen2's split without its NFC
    d.write("tokenizer.json", t.dump());
    expect_error(d, "normalizer");
  }
  {
    ScratchDir d(kFix / "hf_qwen2_tiny");
    json t = d.read("tokenizer.json");
    t["model"]["merges"][3] = json::array({"a"});
    d.write("tokenizer.json", t.dump());
    expect_error(d, "merge");
  }
  {
    ScratchDir d(kFix / "hf_qwen2_tiny");
    json c = d.read("tokenizer_config.json");
    c["eos_token"] = "<|no_such_token|>";
    d.write("tokenizer_config.json", c.dump());
    expect_error(d, "eos_token");
  }
  {
    ScratchDir d(kFix / "hf_qwen2_tiny");
    json t = d.read("tokenizer.json");
    t["added_tokens"][0]["id"] = t["model"]["vocab"]["a"];  // an id given two texts
    d.write("tokenizer.json", t.dump());
    expect_error(d, "both");
  }
  {
    ScratchDir d(kFix / "hf_qwen2_tiny");
    json t = d.read("tokenizer.json");
    t["added_tokens"][0]["content"] = "a";  // a text given two ids
    d.write("tokenizer.json", t.dump());
    expect_error(d, "both id");
  }
  {
    ScratchDir d(kFix / "hf_qwen2_tiny");
    json t = d.read("tokenizer.json");
    t["added_tokens"][0]["special"] = "yes";  // a field of the wrong type: an error, not a throw
    d.write("tokenizer.json", t.dump());
    expect_error(d, "tokenizer.json");
  }
  {
    ScratchDir d(kFix / "hf_qwen2_tiny");
    json t = d.read("tokenizer.json");
    t["added_tokens"][0]["id"] = 5000;  // past the model's 1024 rows
    d.write("tokenizer.json", t.dump());
    expect_error(d, "embedding rows");
  }
}

// Added tokens llama.cpp's converter makes control although tokenizer.json does not mark them
// special (Qwen2.5's <|fim_prefix|>): matched only when special text is parsed.
TEST(HfTokenizerJson, SpecialLookingAddedTokensAreControl) {
  ScratchDir d(kFix / "hf_qwen2_tiny");
  json t = d.read("tokenizer.json");
  t["added_tokens"].push_back({{"id", 1024}, {"content", "<|fim_prefix|>"}, {"special", false},
                               {"normalized", false}, {"single_word", false}, {"lstrip", false}, {"rstrip", false}});
  d.write("tokenizer.json", t.dump());
  auto tok = load(d.path, 1025);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->find_token("<|fim_prefix|>"), std::optional<int32_t>(1024));
  EXPECT_EQ(tok->encode("<|fim_prefix|>", false, true), std::vector<int32_t>{1024});
  EXPECT_GT(tok->encode("<|fim_prefix|>", false, false).size(), 1u);
  // <tool_call> does not look special: user-defined, matched whole either way.
  for (bool parse : {false, true}) EXPECT_EQ(tok->encode("<tool_call>", false, parse).size(), 1u);
}

// A Qwen3.5 checkpoint directory with its tokenizer: the weights of the qwen35 fixture and the
// tiny Qwen3.5-style tokenizer (same 1024-token vocabulary) load as one file with both.
TEST(HfTokenizerJson, CheckpointDirectoryCarriesItsTokenizer) {
  ScratchDir d(kFix / "hf_qwen35_tiny");
  const fs::path model = fs::path(HS_FIXTURES_DIR) / "hybrid" / "qwen35-tiny";
  fs::copy_file(model / "config.json", d.path / "config.json");
  fs::create_symlink(fs::absolute(model / "model.safetensors"), d.path / "model.safetensors");
  auto f = load_hf_model(d.path.string());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(*(*f)->get_string("general.architecture"), "qwen35");
  auto tok = make_tokenizer(**f);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->n_vocab(), 1024);
  auto want = load(kFix / "hf_qwen35_tiny");
  ASSERT_TRUE(want);
  for (const std::string& s : test::corpus()) EXPECT_EQ((*tok)->encode(s, true, true), want->encode(s, true, true));
}

}  // namespace
}  // namespace hs
