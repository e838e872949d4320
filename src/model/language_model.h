// model/language_model.h — the one interface the engine, `generate` and `serve` drive: a
// model that runs a Batch of several sequences over their KV (and, for hybrid models, their
// recurrent state) and returns the logit rows.
//
// Implemented by Decoder (llama, gemma3, qwen2: every layer has KV) and HybridDecoder (qwen35:
// Gated-DeltaNet layers with a recurrent state slot per sequence, KV only on the full-attention
// layers). The engine never asks which one it has: it reads kv_geometry() for the KvCache,
// states() for the recurrent-state pool (null: none; then every sequence is its KV alone) and
// calls forward(). Sparse attention and the key observer (fit-sketch, eval) live here too, in one
// place for both: they act on the KV layers (kv_geometry()'s n_layer: every layer of a Decoder,
// the full-attention layers of a HybridDecoder), which the backend indexes by KV layer.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/model_config.h"

namespace hs {

class HotChunks;
class RecurrentPool;
class SparseRuntime;

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const gguf::File& file() const = 0;
  virtual Backend& backend() const = 0;
  Device device() const { return backend().device(); }
  // Bytes of every tensor in the file: what one decode step streams from memory for weights.
  virtual int64_t weight_bytes() const = 0;
  // The KvCache geometry this model needs (hybrid: only its full-attention layers).
  virtual KvGeometry kv_geometry(int page_tokens = 16, KvDtype dtype = kDefaultKvDtype) const = 0;
  // Size the workspace for steps of up to max_tokens tokens.
  virtual Status reserve(int64_t max_tokens) = 0;
  // Ranks the model is split over (model/tensor_parallel.h). Above 1 each rank keeps the pages of
  // its own kv heads, so the engine's KvCache needs block tables only.
  virtual int tensor_parallel_size() const { return 1; }

  // Runs the batch: K/V appended to each sequence (pages reserved), recurrent state advanced in
  // its slot; returns the logit rows of the tokens with want_logits, [rows][n_vocab] host memory
  // the model owns, valid until the next forward (callers may change them in place).
  virtual Result<std::span<float>> forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv,
                                           ThreadPool& pool) = 0;
  // The same, copied into `logits`.
  Status forward_copy(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, ThreadPool& pool,
                      std::vector<float>& logits) {
    HS_ASSIGN_OR_RETURN(std::span<float> rows, forward(batch, seqs, kv, pool));
    logits.assign(rows.begin(), rows.end());
    return Status::ok();
  }

  // Which KV layers sparse attention may select on ([kv_geometry().n_layer]; false: a sliding-
  // window layer, always dense).
  virtual std::vector<bool> sparse_kv_layers() const = 0;

  // Sparse attention (null: dense everywhere). Not owned; must outlive the model's use. Handed
  // to the backend once, here; a backend that cannot run it refuses, and forward() returns that
  // refusal.
  void set_sparse(SparseRuntime* rt) {
    sparse_ = rt;
    sparse_status_ = bind_sparse();
  }
  SparseRuntime* sparse() const { return sparse_; }
  // The device tier of the sparse path (null: sparse attention reads the KV pages directly). Not
  // owned. Used for the layers it has slots for, when its chunk size is the sparse runtime's
  // (docs/sparse-attention.md). CPU only.
  void set_hot_chunks(HotChunks* h) {
    hot_ = h;
    sparse_status_ = bind_sparse();
  }
  HotChunks* hot_chunks() const { return hot_; }
  // The sparse metadata of keys [0, n_tokens) of `seq` recomputed from the KV pages (a synthetic
  // context: Backend::rebuild_sparse_metadata on every rank's pages).
  virtual Status rebuild_sparse_metadata(KvCache& kv, const SeqKv& seq, int32_t n_tokens) {
    return backend().rebuild_sparse_metadata(kv, seq, n_tokens);
  }
  // Where the KV pages live (Backend::set_kv_tier), on every rank.
  virtual Status set_kv_tier(const Backend::KvTier& t) { return backend().set_kv_tier(t); }

  // Called once per KV layer per forward with the step's keys before and after RoPE and its
  // queries after RoPE (`hindsight fit-sketch`, `eval needle`): k_pre, k_post, v [n][kv_dim],
  // q_post [n][q_dim]. CPU only (the pointers are host memory): forward() refuses it elsewhere.
  using KeyObserver = std::function<void(int kv_layer, const float* k_pre, const float* k_post, const float* q_post,
                                         const float* v, int64_t n)>;
  void set_key_observer(KeyObserver fn) { key_observer_ = std::move(fn); }

  // The pool of recurrent-state slots (and prefix-cache checkpoints) the sequences' state comes
  // from; null for models without recurrent state. The engine admits at most its n_slots()
  // sequences at once.
  virtual RecurrentPool* states() const { return nullptr; }

 protected:
  // What forward() checks before a step: the backend's answer to the last set_sparse /
  // set_hot_chunks, and the key observer's device.
  Status sparse_ready() const {
    if (key_observer_ && device() != Device::kCpu)
      return make_error(StatusCode::kUnsupported, "the key observer (fit-sketch, eval recall) needs --device cpu");
    return sparse_status_;
  }

  // Hands sparse_ and hot_ to the backend(s); the answer is what forward() reports.
  virtual Status bind_sparse() { return backend().set_sparse(sparse_, hot_); }

  SparseRuntime* sparse_ = nullptr;
  HotChunks* hot_ = nullptr;
  Status sparse_status_;
  KeyObserver key_observer_;
};

}  // namespace hs
