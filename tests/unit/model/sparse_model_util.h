// tests/unit/model/sparse_model_util.h — the sparse runtime and device tier the model-level sparse
// tests attach (test_sparse_decoder.cpp on SmolLM2, test_sparse_hybrid.cpp on the tiny qwen35),
// made over the model's KV layers as app/loaded_model.cpp makes them: 16 sinks, a 32-token
// window, a random sketch basis, one piece per 16-token chunk.
#pragma once

#include <memory>

#include <gtest/gtest.h>

#include "backend/cpu_sparse_kernels.h"
#include "kv/kv_cache.h"
#include "model/language_model.h"
#include "sparse/hot_chunks.h"
#include "sparse/sparse_runtime.h"

namespace hs::test {

inline std::unique_ptr<SparseRuntime> make_sparse_runtime(const LanguageModel& model, const KvCache& kv, SparseMode mode,
                                                          int budget, int min_context = 0, bool group_mass = false,
                                                          bool tail = false, int chunk_tokens = 16, int rerank = 0,
                                                          int sketch_rank = 16) {
  const ModelConfig& c = model.config();
  const int n_kv_layers = kv.geometry().n_layer;
  SparseConfig cfg;
  cfg.rerank_factor = rerank;
  cfg.chunk_mass_scale = group_mass ? c.attn_scale : 0.0f;
  cfg.chunk_tokens = chunk_tokens;
  cfg.tail_estimate = tail;
  cfg.budget_tokens = budget;
  cfg.min_context = min_context;
  cfg.sink_tokens = 16;
  cfg.window_tokens = 32;
  SparseRuntime::Geometry g{n_kv_layers, c.n_head_kv, c.head_dim, kv.geometry().page_tokens, kv.pool().n_blocks(),
                            kv_token_bytes(kv.geometry().dtype, c.head_dim), model.sparse_kv_layers()};
  std::unique_ptr<SketchBasis> basis;
  if (mode == SparseMode::kSketch)
    basis = std::make_unique<SketchBasis>(random_sketch_basis(n_kv_layers, c.n_head_kv, c.head_dim, sketch_rank, 99));
  auto rt = SparseRuntime::create(mode, cfg, g, std::move(basis), &cpu_sparse_kernels(), &kv, c.attn_scale);
  EXPECT_TRUE(rt.is_ok()) << rt.status().to_string();
  return rt.is_ok() ? std::move(*rt) : nullptr;
}

// A device tier of `slots` hot slots per (KV layer, kv head) on `kv` (C = 16), plus resident sinks
// (16 tokens) and a window ring (32 tokens, as make_sparse_runtime) for `resident_seqs`.
inline std::unique_ptr<HotChunks> make_device_tier(const LanguageModel& model, KvCache& kv, int64_t slots,
                                                   int32_t resident_seqs = 0) {
  const ModelConfig& c = model.config();
  HotChunks::Config cfg;
  cfg.chunk_tokens = 16;
  cfg.resident_seqs = resident_seqs;
  cfg.sink_tokens = 16;
  cfg.window_tokens = 32;
  cfg.full_layer = model.sparse_kv_layers();
  const int64_t piece = PieceLayout::make(kv.geometry().dtype, c.head_dim, 16).bytes;
  cfg.budget_bytes = (slots + resident_seqs * (1 + 3)) * kv.geometry().n_layer * c.n_head_kv * piece;
  auto h = HotChunks::create(kv, cfg);
  EXPECT_TRUE(h.is_ok()) << h.status().to_string();
  return h.is_ok() ? std::move(*h) : nullptr;
}

}  // namespace hs::test
