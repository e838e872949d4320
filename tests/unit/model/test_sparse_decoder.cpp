// tests/unit/model/test_sparse_decoder.cpp — sparse attention inside the real decoder
// (SmolLM2): with a budget covering the context every decode logit equals dense bit for bit;
// with a small budget only the selected keys are read and the sketch/Quest metadata of every
// stored key is kept. (Real model: excluded under ASan with the other model tests.)
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "model/decoder.h"
#include "sparse/sparse_runtime.h"

namespace hs {
namespace {

std::unique_ptr<Decoder> load() {
  const std::string path = std::string(HS_SOURCE_DIR) + "/models/smollm2-135m-instruct-q4_1.gguf";
  if (!std::filesystem::exists(path)) return nullptr;
  auto d = Decoder::load(path);
  return d.is_ok() ? std::move(*d) : nullptr;
}

std::unique_ptr<SparseRuntime> make_runtime(const Decoder& dec, const KvCache& kv, SparseMode mode, int budget) {
  const ModelConfig& c = dec.config();
  SparseConfig cfg;
  cfg.budget_tokens = budget;
  cfg.min_context = 0;
  cfg.sink_tokens = 16;
  cfg.window_tokens = 32;
  SparseRuntime::Geometry g{c.n_layer, c.n_head_kv, c.head_dim, kv.geometry().page_tokens, kv.pool().n_blocks(),
                            kv_elem_bytes(kv.geometry().dtype), std::vector<bool>(c.n_layer, true)};
  std::unique_ptr<SketchBasis> basis;
  if (mode == SparseMode::kSketch)
    basis = std::make_unique<SketchBasis>(random_sketch_basis(c.n_layer, c.n_head_kv, c.head_dim, 16, 99));
  auto rt = SparseRuntime::create(mode, cfg, g, std::move(basis));
  EXPECT_TRUE(rt.is_ok()) << rt.status().to_string();
  return rt.is_ok() ? std::move(*rt) : nullptr;
}

// Prefill `prompt`, then `steps` greedy decode steps; returns every decode logits row.
std::vector<std::vector<float>> run(Decoder& dec, KvCache& kv, ThreadPool& pool, const std::vector<int32_t>& prompt,
                                    int steps) {
  SeqKv seq;
  SeqKv* seqs[] = {&seq};
  std::vector<float> logits;
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
  EXPECT_TRUE(dec.forward(b, seqs, kv, pool, logits).is_ok());
  std::vector<std::vector<float>> rows;
  const int V = dec.config().n_vocab;
  for (int s = 0; s < steps; ++s) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
    Batch d;
    d.add(next, seq.n_tokens, 0, true);
    EXPECT_TRUE(dec.forward(d, seqs, kv, pool, logits).is_ok());
    rows.emplace_back(logits.begin(), logits.begin() + V);
  }
  kv.release(seq);
  return rows;
}

std::vector<int32_t> random_prompt(int n, int vocab) {
  std::random_device rd;
  std::mt19937 rng(rd());
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> p(n);
  for (auto& t : p) t = d(rng);
  return p;
}

TEST(SparseDecoder, BudgetCoveringContextEqualsDenseBitwise) {
  auto dec = load();
  if (!dec) GTEST_SKIP() << "models/ absent";
  const ModelConfig& c = dec->config();
  KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, kDefaultKvDtype}, 128);
  ThreadPool pool;
  const auto prompt = random_prompt(700, c.n_vocab);
  const auto dense = run(*dec, kv, pool, prompt, 6);
  for (SparseMode mode : {SparseMode::kSketch, SparseMode::kQuest}) {
    auto rt = make_runtime(*dec, kv, mode, 4096);
    dec->set_sparse(rt.get());
    const auto sparse = run(*dec, kv, pool, prompt, 6);
    dec->set_sparse(nullptr);
    ASSERT_EQ(sparse.size(), dense.size());
    for (size_t s = 0; s < dense.size(); ++s) EXPECT_EQ(sparse[s], dense[s]) << sparse_mode_name(mode) << " step " << s;
    const SparseStats st = rt->stats();
    EXPECT_EQ(st.sparse_heads, 6 * c.n_layer * c.n_head_kv);  // every decode (layer, head) went through select
    EXPECT_EQ(st.keys_selected, st.keys_total);
  }
}

TEST(SparseDecoder, SmallBudgetReadsOnlyTheSelectedKeys) {
  auto dec = load();
  if (!dec) GTEST_SKIP() << "models/ absent";
  const ModelConfig& c = dec->config();
  KvCache kv(KvGeometry{c.n_layer, c.n_head_kv, c.head_dim, 16, kDefaultKvDtype}, 128);
  ThreadPool pool;
  const auto prompt = random_prompt(1200, c.n_vocab);
  for (SparseMode mode : {SparseMode::kSketch, SparseMode::kQuest}) {
    auto rt = make_runtime(*dec, kv, mode, 128);
    dec->set_sparse(rt.get());
    const auto rows = run(*dec, kv, pool, prompt, 4);
    dec->set_sparse(nullptr);
    const SparseStats st = rt->stats();
    // 128 budget + 16 sinks + 32 window (+ one partial chunk) of ~1200 keys.
    EXPECT_LE(st.keys_selected, st.sparse_heads * (128 + 16 + 32 + 32));
    EXPECT_GT(st.keys_total, 6 * st.keys_selected);
    for (const auto& r : rows)
      for (float x : r) ASSERT_TRUE(std::isfinite(x));
  }
}

}  // namespace
}  // namespace hs
