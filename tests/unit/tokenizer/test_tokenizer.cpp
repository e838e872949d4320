// tests/unit/tokenizer/test_tokenizer.cpp — the real models' tokenizers against HF `tokenizers`.
//
// Expected ids come from tools/reference/gen_tokenizer_fixtures.py (tests/fixtures/tokenizer/).
// Models are git-ignored: each test skips with a message when its GGUF is absent. The speed
// test prints a measurement and asserts nothing about it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_nfc.h"
#include "hf_expected.h"

namespace hs {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::check_against_hf;
using test::check_round_trip;
using test::corpus;
using test::escape;
using test::read_file;
using test::show_ids;

struct ModelCase {
  const char* name;  // fixture prefix
  const char* file;  // under models/
};
constexpr ModelCase kSmollm2{"smollm2", "smollm2-135m-instruct-q4_1.gguf"};
constexpr ModelCase kGemma3{"gemma3", "gemma-3-270m-q4_k_m.gguf"};
constexpr ModelCase kQwen2{"qwen2", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"};

// Loaded once per test binary run (Gemma 3's vocabulary takes a moment to build).
const Tokenizer* load_model(const ModelCase& m) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(m.name);
  if (it != cache.end()) return it->second.get();
  const fs::path path = fs::path(HS_SOURCE_DIR) / "models" / m.file;
  if (!fs::exists(path)) return nullptr;
  auto file = gguf::File::open(path.string());
  EXPECT_TRUE(file.is_ok()) << file.status().to_string();
  if (!file.is_ok()) return nullptr;
  auto tok = make_tokenizer(**file);
  EXPECT_TRUE(tok.is_ok()) << tok.status().to_string();
  if (!tok.is_ok()) return nullptr;
  return (cache[m.name] = std::move(tok).value()).get();
}

#define LOAD_OR_SKIP(var, model)                                                    \
  const Tokenizer* var = load_model(model);                                         \
  if (!var) GTEST_SKIP() << "model file models/" << (model).file << " is absent "   \
                         << "(the setup script fetches it); skipping";

TEST(TokenizerModels, Smollm2MatchesHuggingFace) {
  LOAD_OR_SKIP(tok, kSmollm2);
  check_against_hf(*tok, fs::path(HS_FIXTURES_DIR) / "tokenizer" / (std::string(kSmollm2.name) + "_expected.json"), kSmollm2.name);
}

TEST(TokenizerModels, Gemma3MatchesHuggingFace) {
  LOAD_OR_SKIP(tok, kGemma3);
  check_against_hf(*tok, fs::path(HS_FIXTURES_DIR) / "tokenizer" / (std::string(kGemma3.name) + "_expected.json"), kGemma3.name);
}

TEST(TokenizerModels, Qwen2MatchesHuggingFace) {
  LOAD_OR_SKIP(tok, kQwen2);
  check_against_hf(*tok, fs::path(HS_FIXTURES_DIR) / "tokenizer" / (std::string(kQwen2.name) + "_expected.json"), kQwen2.name);
}

TEST(TokenizerModels, Smollm2RoundTrips) {
  LOAD_OR_SKIP(tok, kSmollm2);
  check_round_trip(*tok, /*spm=*/false);
}

TEST(TokenizerModels, Gemma3RoundTrips) {
  LOAD_OR_SKIP(tok, kGemma3);
  check_round_trip(*tok, /*spm=*/true);
}

TEST(TokenizerModels, Qwen2RoundTrips) {
  LOAD_OR_SKIP(tok, kQwen2);
  check_round_trip(*tok, /*spm=*/false, /*nfc=*/true);
}

TEST(TokenizerModels, Qwen2SpecialIds) {
  LOAD_OR_SKIP(tok, kQwen2);
  EXPECT_EQ(tok->n_vocab(), 151936);
  EXPECT_EQ(tok->bos_id(), 151643);  // <|endoftext|>, never added (add_bos_token = false)
  EXPECT_EQ(tok->eos_id(), 151645);  // <|im_end|>
  EXPECT_EQ(tok->eot_id(), 151645);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_TRUE(tok->is_eog(151645));  // <|im_end|> ends a chat turn
  EXPECT_TRUE(tok->is_eog(151643));  // <|endoftext|> ends a completion
  EXPECT_FALSE(tok->is_eog(151644));  // <|im_start|>
  EXPECT_EQ(tok->find_token("<|im_start|>"), 151644);
  EXPECT_EQ(tok->encode("<|im_start|>user\n", false, true), (std::vector<int32_t>{151644, 872, 198}));
  // <tool_call> is user-defined: matched whole even when control text is not parsed.
  EXPECT_EQ(tok->find_token("<tool_call>"), 151657);
  for (bool parse : {false, true}) EXPECT_EQ(tok->encode("<tool_call>", false, parse), std::vector<int32_t>{151657});
  EXPECT_EQ(tok->encode("", true, true).size(), 0u);
}

TEST(TokenizerModels, Smollm2SpecialIds) {
  LOAD_OR_SKIP(tok, kSmollm2);
  EXPECT_EQ(tok->n_vocab(), 49152);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->eot_id(), 2);  // <|im_end|>
  EXPECT_FALSE(tok->add_bos());
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_TRUE(tok->is_eog(0));  // <|endoftext|>
  EXPECT_FALSE(tok->is_eog(1));
  EXPECT_EQ(tok->find_token("<|im_start|>"), 1);
  EXPECT_EQ(tok->token_text(1), "<|im_start|>");
  EXPECT_TRUE(tok->is_control(1));
  // Byte-level pieces come back as raw bytes.
  const auto ids = tok->encode(" héllo", false, false);
  std::string joined;
  for (int32_t id : ids) joined += tok->token_to_piece(id);
  EXPECT_EQ(joined, " héllo");
  EXPECT_EQ(tok->encode("", true, true).size(), 0u);
}

TEST(TokenizerModels, Gemma3SpecialIds) {
  LOAD_OR_SKIP(tok, kGemma3);
  EXPECT_EQ(tok->n_vocab(), 262144);
  EXPECT_EQ(tok->bos_id(), 2);
  EXPECT_EQ(tok->eos_id(), 1);
  EXPECT_EQ(tok->eot_id(), 106);  // <end_of_turn>
  EXPECT_EQ(tok->pad_id(), 0);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_TRUE(tok->is_eog(1));
  EXPECT_TRUE(tok->is_eog(106));
  EXPECT_FALSE(tok->is_eog(105));
  EXPECT_EQ(tok->find_token("<start_of_turn>"), 105);
  EXPECT_EQ(tok->encode("", true, true), std::vector<int32_t>{2});
  EXPECT_EQ(tok->token_to_piece(tok->find_token("<0x0A>").value()), "\n");
  EXPECT_EQ(tok->token_to_piece(138), "  ");  // stored as real spaces, matched as "▁▁"
  // A lone byte of a multi-byte character decodes to U+FFFD, as HF's ByteFallback does.
  const std::vector<int32_t> half = {tok->find_token("<0xE4>").value()};
  EXPECT_EQ(tok->decode(half, true), "\xEF\xBF\xBD");
}

TEST(TokenizerModels, InvalidUtf8IsRepairedNotRejected) {
  LOAD_OR_SKIP(tok, kSmollm2);
  const std::string bad = std::string("ok \xFF\xC3 end");
  const auto ids = tok->encode(bad, false, false);
  EXPECT_EQ(tok->decode(ids, true), "ok \xEF\xBF\xBD\xEF\xBF\xBD end");
}

TEST(TokenizerModels, ConcurrentEncodesAgree) {
  LOAD_OR_SKIP(tok, kGemma3);
  std::vector<std::vector<int32_t>> want;
  for (const auto& s : corpus()) want.push_back(tok->encode(s, true, true));
  std::vector<std::thread> threads;
  std::vector<size_t> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep)
        for (size_t i = 0; i < corpus().size(); ++i)
          bad[t] += tok->encode(corpus()[i], true, true) != want[i];
    });
  }
  for (auto& th : threads) th.join();
  for (size_t b : bad) EXPECT_EQ(b, 0u);
}

// 1 MiB of real source code without repeats (so the word cache gets no free ride): this
// repository's C++/Python files, topped up with the C++ standard library headers; repeated
// only if a machine has neither.
std::string source_megabyte() {
  constexpr size_t kSize = 1u << 20;
  std::string all;
  const auto add_tree = [&](const fs::path& root) {
    if (!fs::exists(root)) return;
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      const auto ext = e.path().extension();
      if (e.is_regular_file() &&
          (ext == ".cpp" || ext == ".h" || ext == ".py" || ext == ".cu" || ext == ".tcc"))
        files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      if (all.size() >= kSize) return;
      all += read_file(f);
    }
  };
  for (const char* dir : {"src", "tests/unit", "tools"}) add_tree(fs::path(HS_SOURCE_DIR) / dir);
  if (fs::exists("/usr/include/c++")) {
    std::vector<fs::path> versions;
    for (const auto& e : fs::directory_iterator("/usr/include/c++")) versions.push_back(e.path());
    std::sort(versions.begin(), versions.end());
    for (const auto& v : versions) add_tree(v / "bits");
  }
  if (all.empty()) all = "int main() { return 0; }\n";
  std::string out;
  while (out.size() < kSize) out += all;
  out.resize(kSize);
  while (!out.empty() && (static_cast<uint8_t>(out.back()) & 0xC0) == 0x80) out.pop_back();
  return out;
}

void time_encode(const ModelCase& m) {
  const Tokenizer* tok = load_model(m);
  if (!tok) {
    std::printf("[ %s ] model absent, no timing\n", m.name);
    return;
  }
  const std::string text = source_megabyte();
  for (int run = 0; run < 2; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok->encode(text, true, true);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ %s ] encode 1 MiB of source code (%s): %.3f s, %zu tokens, %.1f MB/s\n",
                m.name, run == 0 ? "first pass" : "second pass, words cached", s, ids.size(),
                text.size() / 1e6 / s);
  }
}

// Not an assertion: prints the speed (the target is < 1 s per MB in a Release build).
TEST(TokenizerBench, EncodeOneMegabyteOfSourceCode) {
  time_encode(kSmollm2);
  time_encode(kGemma3);
  time_encode(kQwen2);
}

}  // namespace
}  // namespace hs
