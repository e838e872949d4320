// app/loaded_model.h — what the CLI commands share: model, tokenizer, KV cache, threads.
#pragma once

#include <memory>
#include <string>

#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "kv/recurrent_pool.h"
#include "model/decoder.h"
#include "model/hybrid_decoder.h"
#include "tokenizer/tokenizer.h"

namespace CLI { class App; }

namespace hs::app {

struct ModelOptions {
  std::string model;
  // --load-format dummy: random weights of the shape of a Hugging Face config.json
  // (model/dummy_model.h) instead of a GGUF file.
  std::string load_format = "gguf";  // gguf | dummy
  std::string config;                // config.json (dummy)
  std::string dummy_dtype = "bf16";  // f32 | f16 | bf16 | q8_0 | q4_0 | q4_k
  // Tokenizer from this GGUF, or "synthetic" (the byte-level one of model/dummy_model.h): a dummy
  // model ("" = synthetic), or a model file without a tokenizer (the tiny test checkpoints).
  std::string vocab;
  uint64_t dummy_seed = 1;
  std::string device = "cpu";  // cpu | cuda (the backend that runs the forward pass)
  int ctx_size = 4096;  // KV capacity in tokens
  int threads = 0;      // 0: all hardware threads
  std::string kv_cache_dtype = kv_dtype_name(kDefaultKvDtype);
  // Sparse attention (docs/sparse-attention.md).
  std::string sparse = "auto";  // auto (sketch when the sketch file exists) | off | sketch | quest
  std::string sketch;           // basis file (default: MODEL with .sketch.safetensors)
  // Budget, chunk (0 = auto: auto_chunk_tokens for the KV dtype), sinks, window, min context.
  SparseConfig sparse_cfg = [] {
    SparseConfig c;
    c.chunk_tokens = 0;
    return c;
  }();
  int sparse_min_context = -1;  // -1: 4 x budget
  std::string sketch_dtype = "int8";  // how each key's sketch is stored: f16 | int8 (per-token scale)
  // Sketch chunk score: max (token max) | mass (group softmax share) | auto (mass when the
  // rerank is on: the shortlist by the rule the rerank ranks by; else max).
  std::string chunk_score = "auto";
  // Two-stage selection: auto (auto_rerank_factor: on when its key reads are cheap against
  // the weights) | 0 (off) | R in 2..64 (sparse/exact_rerank.h).
  std::string sparse_rerank = "auto";
  // --sparse-page-shortlist: -1 = auto (the GPU: 4 x the budget's chunks, docs/gpu-sparse.md;
  // the CPU: 0), 0 = off, N = that many pages scored token by token.
  int sparse_page_shortlist = -1;
  std::string sparse_tail = "drop";   // unselected chunks: drop | estimate (sparse/tail_estimate.h)
  // Device tier of the sparse path: hot chunk slots (sparse/hot_chunks.h). 0: none, sparse
  // attention reads the KV pages directly.
  int64_t device_kv_budget = 256ll << 20;
  // Where a GPU keeps the KV pages: device (all on the card) | host (mapped pinned host memory,
  // the sparse rows served from a device hot set of --device-kv-budget bytes; docs/gpu-sparse.md).
  std::string kv_tier = "device";
  // --tensor-parallel-size: ranks the model is split over (model/tensor_parallel.h).
  int tensor_parallel = 1;
};
void add_model_options(CLI::App* cmd, ModelOptions& opt);
// --kv-tier on the model's backend (before its first step).
Status apply_kv_tier(const ModelOptions& opt, LanguageModel& model);
// The KV cache `opt` asks for over `dec`: host pages on the CPU backend; on CUDA the pages
// live on the device and the host cache keeps only the block tables.
std::unique_ptr<KvCache> make_kv_cache(const ModelOptions& opt, const LanguageModel& model, KvDtype dtype,
                                       int32_t n_pages);

// Sampling flags shared by `generate` and `chat` (llama.cpp's names and defaults).
struct SamplingOptions {
  SamplingParams params{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f};
  int64_t seed = -1;  // -1: random
  // The params with the seed applied, validated.
  Result<SamplingParams> resolve() const;
};
void add_sampling_options(CLI::App* cmd, SamplingOptions& opt);

// The model a file holds: exactly one of the two is set.
struct ModelPair {
  std::unique_ptr<Decoder> decoder;       // llama, gemma3, qwen2
  std::unique_ptr<HybridDecoder> hybrid;  // qwen35, qwen3next
  LanguageModel& model() const { return decoder ? static_cast<LanguageModel&>(*decoder) : *hybrid; }
};

struct LoadedModel {
  std::unique_ptr<Decoder> decoder;       // null for a hybrid model (commands that need it say so)
  std::unique_ptr<HybridDecoder> hybrid;  // null unless the model is hybrid
  std::unique_ptr<gguf::File> vocab;      // --vocab's tokenizer file (null: the model's own)
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<RecurrentPool> states;  // hybrid: the state slots over kv (declared after kv: dies first)
  LanguageModel& model() const { return decoder ? static_cast<LanguageModel&>(*decoder) : *hybrid; }
  // The file whose tokenizer / chat template are used.
  const gguf::File& vocab_file() const { return vocab ? *vocab : model().file(); }
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<SparseRuntime> sparse;  // null: dense attention everywhere
  std::unique_ptr<HotChunks> device_kv;   // null: no device tier (declared after kv: dies first)
};

// Default sketch file beside a model: foo.gguf → foo.sketch.safetensors.
std::string default_sketch_path(const std::string& model_path);
// opt.sparse_cfg with the chunk size resolved for kv (--sparse-chunk 0: auto_chunk_tokens of
// the KV dtype's token bytes).
SparseConfig resolved_sparse_config(const ModelOptions& opt, const KvCache& kv);
// Builds the sparse runtime `opt` asks for over m's model and KV cache (null for off): over the
// KV layers (a hybrid model's full-attention layers), sparse where model.sparse_kv_layers() says.
Result<std::unique_ptr<SparseRuntime>> make_sparse_runtime(const ModelOptions& opt, const LoadedModel& m);
Result<std::unique_ptr<SparseRuntime>> make_sparse_runtime(const ModelOptions& opt, const LanguageModel& model,
                                                           const KvCache& kv);
// make_sparse_runtime, kept in m.sparse and attached to m.model().
Status attach_sparse(const ModelOptions& opt, LoadedModel& m);
// The device tier: opt.device_kv_budget bytes of hot chunk slots of C = sparse_cfg.chunk_tokens
// tokens, after resident sinks + window rings for `resident_seqs` sequences (null for a zero
// budget). It registers with kv as its lease listener: it must die before kv.
inline constexpr int32_t kDefaultResidentSeqs = 4;  // generate / bench / eval (serve: max_num_seqs)
Result<std::unique_ptr<HotChunks>> make_device_tier(const ModelOptions& opt, const LanguageModel& model, KvCache& kv,
                                                    const SparseConfig& sparse_cfg, int32_t resident_seqs);
// make_device_tier, kept in m.device_kv and attached to m.model().
Status attach_device_tier(const ModelOptions& opt, LoadedModel& m, const SparseConfig& sparse_cfg,
                          int32_t resident_seqs = kDefaultResidentSeqs);

// The decoder opt names: the GGUF file, or (--load-format dummy) random weights of --config's
// shape built on this machine. A hybrid file is refused (load_models takes both kinds).
Result<std::unique_ptr<Decoder>> load_decoder(const ModelOptions& opt, Device device);
// The model opt names, of either kind: a GGUF file (hybrid by its architecture), a Hugging Face
// checkpoint directory (config.json + model.safetensors: qwen35), or a dummy model.
Result<ModelPair> load_models(const ModelOptions& opt, Device device);
// The tokenizer: from --vocab (a GGUF, or "synthetic") when given, else from the model's file.
// *vocab_file receives --vocab's file (keep it: the tokenizer's chat template lives there).
Result<std::unique_ptr<Tokenizer>> make_model_tokenizer(const ModelOptions& opt, const LanguageModel& model,
                                                        std::unique_ptr<gguf::File>* vocab_file);
// A hybrid model's recurrent-state pool over `kv`: n_slots live slots (the sequences that may run
// at once) and n_checkpoints prefix-cache checkpoints, attached to the model (state memory
// (n_slots + n_checkpoints) x state_bytes_per_slot, allocated now).
Result<std::unique_ptr<RecurrentPool>> make_state_pool(HybridDecoder& model, KvCache& kv, int32_t n_slots,
                                                       int32_t n_checkpoints);
// Replaces m's recurrent-state pool (hybrid models; nothing otherwise) by make_state_pool's of
// n_slots live slots and n_checkpoints checkpoints. No sequence may hold a slot of the old one.
Status remake_state_pool(LoadedModel& m, int32_t n_slots, int32_t n_checkpoints);
// What to call the model in logs, JSON and /v1/models: the GGUF's stem, or "dummy-<config stem>-<dtype>".
std::string model_display_name(const ModelOptions& opt);

// Loads everything or returns a Status naming what failed (missing file, unknown
// architecture, unsupported tensor type, ...).
Result<LoadedModel> load_model(const ModelOptions& opt);

}  // namespace hs::app
