// tests/unit/model/test_dummy_model.cpp — random-weight models from a config.json
// (model/dummy_model.h): the shape read, every weight type, a forward pass with finite logits,
// the same weights for any thread count, a copied vocabulary, and clear errors for bad configs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <cstring>
#include <fstream>

#include "model/decoder.h"
#include "model/dummy_model.h"
#include "tokenizer/tokenizer.h"

namespace hs {
namespace {

std::string write_config(const std::string& name, const std::string& json) {
  const auto path = std::filesystem::temp_directory_path() / ("hs_dummy_" + name + ".json");
  std::ofstream(path) << json;
  return path.string();
}

const char* kTiny = R"({"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "rms_norm_eps": 1e-5,
  "rope_theta": 500000.0, "max_position_embeddings": 2048, "tie_word_embeddings": false})";

Result<std::unique_ptr<gguf::File>> make(const std::string& config, DType type, int threads = 2,
                                         const std::string& vocab = "") {
  ThreadPool pool(threads);
  DummyModelSpec spec;
  spec.config_path = config;
  spec.weight_type = type;
  spec.vocab_path = vocab;
  return make_dummy_model(spec, pool);
}

TEST(DummyModel, ReadsTheShapeAndRunsEveryWeightType) {
  const std::string cfg = write_config("tiny", kTiny);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    auto file = make(cfg, t);
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    EXPECT_EQ((*file)->find_tensor("blk.1.ffn_down.weight")->type, t);
    EXPECT_EQ((*file)->find_tensor("blk.0.attn_norm.weight")->type, DType::F32);
    auto dec = Decoder::create(std::move(*file));
    ASSERT_TRUE(dec.is_ok()) << dec.status().message();
    const ModelConfig& c = (*dec)->config();
    EXPECT_EQ(c.n_layer, 2);
    EXPECT_EQ(c.n_embd, 128);
    EXPECT_EQ(c.n_head_kv, 2);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_EQ(c.n_vocab, 512);
    EXPECT_FALSE(c.tied_output);
    EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);

    KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, KvDtype::kF16}, 8);
    ThreadPool pool(2);
    SeqKv seq;
    SeqKv* seqs[] = {&seq};
    Batch b;
    for (int i = 0; i < 20; ++i) b.add((i * 37) % 512, i, 0, i == 19);
    std::vector<float> logits;
    ASSERT_TRUE((*dec)->forward(b, seqs, kv, pool, logits).is_ok());
    ASSERT_EQ(logits.size(), 512u);
    float spread = 0;
    for (float v : logits) {
      ASSERT_TRUE(std::isfinite(v)) << dtype_name(t);
      spread = std::max(spread, std::fabs(v - logits[0]));
    }
    EXPECT_GT(spread, 1e-3f) << dtype_name(t) << ": the logits do not depend on the token";
    kv.release(seq);
  }
}

TEST(DummyModel, SameWeightsForAnyThreadCountAndQ4K) {
  const std::string cfg = write_config("q4k", R"({"model_type": "qwen2", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 300, "tie_word_embeddings": true})");
  auto a = make(cfg, DType::Q4_K, 1), b = make(cfg, DType::Q4_K, 3);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  ASSERT_EQ((*a)->file_size(), (*b)->file_size());
  const auto* ta = (*a)->find_tensor("blk.0.ffn_up.weight");
  const auto* tb = (*b)->find_tensor("blk.0.ffn_up.weight");
  ASSERT_TRUE(ta && tb);
  EXPECT_EQ(0, std::memcmp(ta->data, tb->data, ta->n_bytes));
  EXPECT_EQ((*a)->find_tensor("output.weight"), nullptr);          // tied
  EXPECT_NE((*a)->find_tensor("blk.0.attn_q.bias"), nullptr);      // qwen2 biases
  auto dec = Decoder::create(std::move(*a));
  ASSERT_TRUE(dec.is_ok()) << dec.status().message();
  EXPECT_EQ((*dec)->config().arch, Arch::kQwen2);
  auto tok = make_tokenizer((*dec)->file());
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  auto ids = (*tok)->encode("def f(x): return x", false, false);
  EXPECT_EQ(ids.size(), 18u);  // the synthetic vocabulary: one token per byte
  EXPECT_EQ((*tok)->decode(ids, false), "def f(x): return x");
}

TEST(DummyModel, CopiesAVocabularyFromAGguf) {
  const char* model = "models/smollm2-135m-instruct-q4_1.gguf";
  const auto path = std::filesystem::path(HS_SOURCE_DIR) / model;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << model << " is absent (make setup fetches it)";
  auto src = gguf::File::open(path.string());
  ASSERT_TRUE(src.is_ok());
  auto n = (*src)->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(n.is_ok());
  const std::string cfg = write_config(
      "vocab", fmt::format(R"({{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": {}}})", n->size()));
  auto file = make(cfg, DType::F16, 2, path.string());
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  auto ours = make_tokenizer(**file), theirs = make_tokenizer(**src);
  ASSERT_TRUE(ours.is_ok() && theirs.is_ok());
  EXPECT_EQ((*ours)->encode("Hello, world!", true, false), (*theirs)->encode("Hello, world!", true, false));
  // A vocabulary of another size is refused, naming both.
  const std::string small = write_config("vocab_small", R"({"model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 1000})");
  auto bad = make(small, DType::F16, 2, path.string());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("vocab_size is 1000"), std::string::npos) << bad.status().message();
}

TEST(DummyModel, BadConfigsAreClearErrors) {
  struct Case {
    const char* json;
    const char* message;
  } cases[] = {
      {"not json", "not a JSON object"},
      {R"({"model_type": "mamba"})", "model_type 'mamba'"},
      {R"({"model_type": "llama", "hidden_size": 128})", "'num_hidden_layers' is missing"},
      {R"({"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 1, "num_attention_heads": 3,
          "num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 300})", "not a multiple"},
      {R"({"model_type": "llama", "hidden_size": "big", "num_hidden_layers": 1})", "'hidden_size' must be an integer"},
      {R"({"model_type": "llama", "hidden_size": 100, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 64, "vocab_size": 300})", "not whole"},
      {R"({"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 64, "vocab_size": 100})", "vocab_size 100"},
  };
  int i = 0;
  for (const Case& c : cases) {
    auto r = make(write_config("bad" + std::to_string(i++), c.json), DType::Q4_0);
    ASSERT_FALSE(r.is_ok()) << c.json;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status().message();
  }
  auto missing = make("/nonexistent/config.json", DType::BF16);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos);
  EXPECT_FALSE(parse_dummy_dtype("q5_k").is_ok());
}

}  // namespace
}  // namespace hs
