// model/language_model.h — the one interface the engine, `generate` and `serve` drive: a
// model that runs a Batch of several sequences over their KV (and, for hybrid models, their
// recurrent state) and returns the logit rows.
//
// Implemented by Decoder (llama, gemma3, qwen2: every layer has KV) and HybridDecoder (qwen35:
// Gated-DeltaNet layers with a recurrent state slot per sequence, KV only on the full-attention
// layers). The engine never asks which one it has: it reads kv_geometry() for the KvCache,
// states() for the recurrent-state pool (null: none; then every sequence is its KV alone) and
// calls forward(). Commands that need a Decoder's extras (sparse attention, the key observer of
// fit-sketch) keep the concrete type.
#pragma once

#include <cstdint>
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

  // The device tier of the sparse path (null: none).
  virtual HotChunks* hot_chunks() const { return nullptr; }
  // The pool of recurrent-state slots (and prefix-cache checkpoints) the sequences' state comes
  // from; null for models without recurrent state. The engine admits at most its n_slots()
  // sequences at once.
  virtual RecurrentPool* states() const { return nullptr; }
};

}  // namespace hs
