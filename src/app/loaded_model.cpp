// app/loaded_model.cpp — see loaded_model.h.
#include "app/loaded_model.h"

#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <optional>

#include "model/dummy_model.h"
#include "model/hf_model.h"
#include "sparse/exact_rerank.h"

namespace hs::app {
namespace {
// A fixed --sparse-rerank value: 0 (off) or 2..64; nullopt for anything else.
std::optional<int> rerank_factor_of(const std::string& v) {
  int r = -1;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), r);
  if (ec == std::errc() && p == v.data() + v.size() && (r == 0 || (r >= 2 && r <= 64))) return r;
  return std::nullopt;
}
}  // namespace

void add_model_options(CLI::App* cmd, ModelOptions& opt) {
  cmd->add_option("-m,--model", opt.model, "GGUF model file (required unless --load-format dummy)");
  cmd->add_option("--load-format", opt.load_format,
                  "gguf (read --model), or dummy: random weights of --config's shape, made on this machine (speed "
                  "tests of shapes too large to ship)")
      ->check(CLI::IsMember({"gguf", "dummy"}))
      ->capture_default_str();
  cmd->add_option("--config", opt.config, "Hugging Face config.json giving the dummy model's shape (e.g. "
                  "configs/llama-3.1-8b.json)");
  cmd->add_option("--dummy-dtype", opt.dummy_dtype, "Weight type of the dummy model's matrices")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k"}))
      ->capture_default_str();
  cmd->add_option("--vocab", opt.vocab, "Tokenizer from this GGUF (e.g. llama.cpp's ggml-vocab-llama-bpe.gguf) or "
                  "'synthetic' (a byte-level vocabulary of the model's size): for a dummy model (default: synthetic) "
                  "or a model file without a tokenizer");
  cmd->add_option("--device", opt.device,
                  "Backend: cpu, or cuda (GPU 0; weights uploaded as f16 or bf16, dense attention, KV pages on the GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("-c,--ctx-size", opt.ctx_size, "KV cache capacity in tokens")->check(CLI::Range(16, 1 << 22));
  cmd->add_option("-t,--threads", opt.threads, "CPU threads (0 = all)")->check(CLI::Range(0, 1024));
  cmd->add_option("--kv-cache-dtype", opt.kv_cache_dtype,
                  "KV cache (host tier) storage: auto (= f16), f32, f16, bf16, or int8, int4, fp8 (e4m3) with "
                  "per-token-per-head scales")
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16", "int8", "int4", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--sparse", opt.sparse,
                  "Sparse attention for long contexts: auto (sketch if the sketch file exists), off, sketch, quest, "
                  "oracle (eval ceiling: the best selection from the exact keys, dense cost)")
      ->check(CLI::IsMember({"auto", "off", "sketch", "quest", "oracle"}))
      ->capture_default_str();
  cmd->add_option("--sketch", opt.sketch, "Sketch basis file (default: MODEL.sketch.safetensors; 'random' or 'random:RANK' for speed tests)");
  cmd->add_option("--sparse-budget", opt.sparse_cfg.budget_tokens, "Tokens of top-scoring chunks per layer and kv head")
      ->check(CLI::Range(16, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--sparse-min-context", opt.sparse_min_context, "Dense attention below this many tokens (-1: 4 x budget; on the GPU with the rerank, 4 x its R x budget shortlist)")
      ->capture_default_str();
  cmd->add_option("--sparse-chunk", opt.sparse_cfg.chunk_tokens,
                  "Chunk size C in tokens (divides the page size 16; 0 = auto: the smallest C whose K|V piece of one "
                  "kv head is >= 4 KiB, e.g. 4 for head_dim 256 in f16, 16 for head_dim 64)")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  cmd->add_option("--sparse-sinks", opt.sparse_cfg.sink_tokens, "First tokens always attended")->capture_default_str();
  cmd->add_option("--sparse-window", opt.sparse_cfg.window_tokens, "Last tokens always attended")->capture_default_str();
  cmd->add_option("--sketch-dtype", opt.sketch_dtype,
                  "Sketch storage: int8 (per-token scale, half the bytes scored per step) or f16")
      ->check(CLI::IsMember({"f16", "int8"}))
      ->capture_default_str();
  cmd->add_option("--sparse-chunk-score", opt.chunk_score,
                  "Sketch chunk score: max (the best token's score, GQA max), mass (the chunk's estimated share of each "
                  "query head's softmax mass, summed over the group) or auto (mass when the exact rerank is on, else max)")
      ->check(CLI::IsMember({"auto", "max", "mass"}))
      ->capture_default_str();
  cmd->add_option("--sparse-tail", opt.sparse_tail,
                  "What sparse attention does with the unselected chunks: drop (exact softmax over the selected "
                  "keys) or estimate (add their attention back from sketch log masses and chunk mean values; "
                  "needs --sparse-chunk-score mass)")
      ->check(CLI::IsMember({"drop", "estimate"}))
      ->capture_default_str();
  cmd->add_option("--sparse-residual", opt.sparse_cfg.residual_z,
                  "Sketch scores as upper confidence bounds: 0 = off; Z > 0 adds Z x the std of the part of q.k the "
                  "rank-r sketch misses (one more sketch dimension: each key's residual norm)")
      ->check(CLI::Range(0.0f, 16.0f))
      ->capture_default_str();
  cmd->add_option("--sparse-page-shortlist", opt.sparse_page_shortlist,
                  "Hierarchical scoring: bound every candidate page by its sketch summary first and score only the N "
                  "best pages token by token (N >= budget / chunk; 0 = off: every candidate scored; -1 = auto: on the "
                  "GPU 4 x the budget's chunks, or R x them with the rerank (which then reranks those pages' tokens "
                  "as they are), off on the CPU, which only emulates it to measure its recall)")
      ->check(CLI::Range(-1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--sparse-rerank", opt.sparse_rerank,
                  "Two-stage selection: the selector shortlists R x budget tokens and the exact keys of the shortlist "
                  "pick the budget (reads R x budget more keys per step; f16/f32 KV). auto = 8 when those reads are at "
                  "most 1/4 of the step's weight bytes (Qwen2.5-Coder, Gemma 3: on; SmolLM2: off), else 0; 0 = off; "
                  "R in 2..64")
      ->check([](const std::string& v) -> std::string {
        return v == "auto" || rerank_factor_of(v) ? std::string() : "must be auto, 0 or 2..64";
      })
      ->capture_default_str();
  cmd->add_option("--device-kv-budget", opt.device_kv_budget,
                  "Bytes of hot chunk slots the sparse path fetches selected chunks into (0 = none: read the KV "
                  "pages directly); on a GPU with --kv-tier host, the device hot set's bytes")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--tensor-parallel-size,--tp", opt.tensor_parallel,
                  "Split the model over N ranks (Megatron-style: heads, FFN columns, vocabulary; an all-reduce after "
                  "the attention and FFN outputs; docs/tensor-parallel.md). CUDA: GPUs 0..N-1 through NCCL; CPU: N "
                  "ranks on the same cores (checks the split). llama / gemma3 / qwen2; dense attention")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--kv-tier", opt.kv_tier,
                  "GPU: where the KV pages live: device (all on the card) | host (pinned host memory; with --sparse the "
                  "selected pieces are fetched into a device hot set of --device-kv-budget bytes, dense steps read "
                  "the host pages over the bus)")
      ->check(CLI::IsMember({"device", "host"}))
      ->capture_default_str();
}

Status apply_kv_tier(const ModelOptions& opt, LanguageModel& model) {
  Backend::KvTier t;
  t.host = opt.kv_tier == "host";
  t.hot_budget_bytes = opt.device_kv_budget;
  return model.set_kv_tier(t);  // every rank's pages, when split
}

std::string default_sketch_path(const std::string& model_path) {
  std::filesystem::path p(model_path);
  p.replace_extension(".sketch.safetensors");
  return p.string();
}

SparseConfig resolved_sparse_config(const ModelOptions& opt, const KvCache& kv) {
  SparseConfig cfg = opt.sparse_cfg;
  if (cfg.chunk_tokens == 0)
    cfg.chunk_tokens = auto_chunk_tokens(kv_token_bytes(kv.geometry().dtype, kv.geometry().head_dim),
                                         kv.geometry().page_tokens);
  return cfg;
}

Result<std::unique_ptr<SparseRuntime>> make_sparse_runtime(const ModelOptions& opt, const LoadedModel& m) {
  return make_sparse_runtime(opt, m.model(), *m.kv);
}

Result<std::unique_ptr<SparseRuntime>> make_sparse_runtime(const ModelOptions& opt, const LanguageModel& dec,
                                                           const KvCache& kv) {
  const std::string path = opt.sketch.empty() ? default_sketch_path(opt.model) : opt.sketch;
  std::string mode_name = opt.sparse;
  if (mode_name == "auto") mode_name = (path == "random" || std::filesystem::exists(path)) ? "sketch" : "off";
  HS_ASSIGN_OR_RETURN(SparseMode mode, parse_sparse_mode(mode_name));
  if (mode == SparseMode::kOff) return std::unique_ptr<SparseRuntime>();
  // The GPU path (docs/gpu-sparse.md): sketch selection by the max rule over whole pages, then
  // the exact rerank where it pays; the CPU's group-mass first stage and estimated tail are not
  // built there.
  const bool gpu = dec.device() != Device::kCpu;
  if (gpu && mode != SparseMode::kSketch)
    return make_error(StatusCode::kUnsupported, "--sparse {} runs on --device cpu only (the GPU selects by sketch)",
                      opt.sparse);
  const ModelConfig& c = dec.config();
  SparseConfig cfg = resolved_sparse_config(opt, kv);
  if (gpu) {
    if (opt.sparse_cfg.chunk_tokens != 0 && opt.sparse_cfg.chunk_tokens != kv.geometry().page_tokens)
      return make_error(StatusCode::kUnsupported, "--sparse-chunk {}: on the GPU a chunk is one KV page ({} tokens)",
                        opt.sparse_cfg.chunk_tokens, kv.geometry().page_tokens);
    cfg.chunk_tokens = kv.geometry().page_tokens;
  }
  cfg.sketch_elem = opt.sketch_dtype == "f16" ? SketchElem::kF16 : SketchElem::kInt8;
  if (opt.sparse_rerank == "auto") {
    const auto full = dec.sparse_kv_layers();
    const int64_t full_heads = std::count(full.begin(), full.end(), true) * int64_t{c.n_head_kv};
    const KvDtype kvt = kv.geometry().dtype;
    // Not with the oracle (exact already) nor the estimated tail (it reads the first stage's masses).
    // On the GPU with any KV dtype (its kernel widens scaled pages too), but not from the host
    // tier: the shortlist's keys would cross PCIe every step (docs/gpu-sparse.md, "Exact rerank").
    const bool on = (mode == SparseMode::kSketch || mode == SparseMode::kQuest) && opt.sparse_tail != "estimate" &&
                    !(gpu && opt.kv_tier == "host");
    cfg.rerank_factor = on ? auto_rerank_factor(dec.weight_bytes(), full_heads, kv_row_bytes(kvt, c.head_dim),
                                                cfg.budget_tokens, gpu || kv_dtype_plain(kvt))
                           : 0;
  } else {
    cfg.rerank_factor = rerank_factor_of(opt.sparse_rerank).value_or(-1);  // -1: refused by validate
  }
  // Dense below 4 x the budget; on the GPU with the rerank, below 4 x its shortlist (R x the
  // budget): the rerank's kernels cost a step about what dense attention over 4 x the shortlist
  // does, so shorter contexts run faster dense, and exactly (8B shape on an H100, budget 2048,
  // batch 1: dense 132.7 / 109.9 t/s, reranked 115.2 / 113.9 at 32K / 64K; session 25,
  // docs/gpu-sparse.md).
  const int32_t auto_min_context =
      gpu && cfg.rerank_factor > 0 ? 4 * cfg.rerank_factor * cfg.budget_tokens : 4 * cfg.budget_tokens;
  cfg.min_context = opt.sparse_min_context >= 0 ? opt.sparse_min_context : auto_min_context;
  // Hierarchical scoring: auto on the GPU = 4 x the budget's chunks without the rerank (measured as
  // good as the flat rule on Qwen2.5-Coder-0.5B at 16K / 32K, docs/benchmarks.md session 20) and
  // R x the budget's chunks with it: the rerank then takes the page bounds' list as it is
  // (SelectArgs::bounds_first; session 24 on an H100: 1.05x / 1.10x the flat rerank at 1 x 128K /
  // 256K, the same correct answers at 32K on the three code haystacks). Off on the CPU, which only
  // emulates it (eval needle's +pagesN).
  const bool gpu_sketch = gpu && mode == SparseMode::kSketch;
  cfg.page_shortlist = opt.sparse_page_shortlist >= 0 ? opt.sparse_page_shortlist
                       : !gpu_sketch                ? 0
                       : cfg.rerank_factor > 0      ? cfg.rerank_factor * cfg.budget_chunks()
                                                    : 4 * cfg.budget_chunks();
  // The group-mass first stage with the rerank on the CPU; the GPU's first stage is the max rule.
  const bool mass = opt.chunk_score == "mass" || (opt.chunk_score == "auto" && cfg.rerank_factor > 0 && !gpu);
  cfg.chunk_mass_scale = mass ? c.attn_scale : 0.0f;
  cfg.tail_estimate = opt.sparse_tail == "estimate";
  // Over the KV layers (a hybrid model's full-attention layers only).
  const int n_kv_layers = kv.geometry().n_layer;
  SparseRuntime::Geometry g{n_kv_layers, c.n_head_kv, c.head_dim, kv.geometry().page_tokens, kv.pool().n_blocks(),
                            kv_token_bytes(kv.geometry().dtype, c.head_dim), dec.sparse_kv_layers()};
  std::unique_ptr<SketchBasis> basis;
  if (mode == SparseMode::kSketch) {
    if (path == "random" || path.starts_with("random:")) {
      // "random:R": a random basis of rank R (speed tests of other sketch sizes).
      int rank = default_sketch_rank(c.head_dim);
      if (path.size() > 7) {
        const std::string r = path.substr(7);
        char* end = nullptr;
        const long v = std::strtol(r.c_str(), &end, 10);
        if (r.empty() || *end != '\0' || v < 1 || v > c.head_dim)
          return make_error(StatusCode::kInvalidArgument, "--sketch {}: the rank must be 1..{} (head_dim)", path,
                            c.head_dim);
        rank = static_cast<int>(v);
      }
      basis = std::make_unique<SketchBasis>(random_sketch_basis(n_kv_layers, c.n_head_kv, c.head_dim, rank, 1234));
    } else {
      auto b = SketchBasis::load(path);
      if (!b.is_ok())
        return make_error(StatusCode::kInvalidArgument, "sparse 'sketch' needs a sketch basis: {} (make one with "
                          "`hindsight fit-sketch`)", b.status().message());
      basis = std::make_unique<SketchBasis>(std::move(*b));
    }
  }
  HS_ASSIGN_OR_RETURN(auto rt, SparseRuntime::create(mode, cfg, g, std::move(basis), dec.backend().host_sparse_kernels(),
                                                     &kv, c.attn_scale));
  spdlog::info("sparse attention: {} (budget {} tokens, chunk {}, sinks {}, window {}, dense below {} tokens{}{}{})",
               sparse_mode_name(mode), cfg.budget_tokens, cfg.chunk_tokens, cfg.sink_tokens, cfg.window_tokens,
               cfg.min_context, mode == SparseMode::kSketch ? ", sketch " + path : std::string(),
               mode == SparseMode::kSketch ? (mass ? ", chunk score mass" : ", chunk score max") : std::string(),
               cfg.rerank_factor ? fmt::format(", exact rerank of a {}x shortlist", cfg.rerank_factor) : std::string());
  return rt;
}

Status attach_sparse(const ModelOptions& opt, LoadedModel& m) {
  HS_ASSIGN_OR_RETURN(m.sparse, make_sparse_runtime(opt, m));
  if (m.sparse) m.model().set_sparse(m.sparse.get());
  return Status::ok();
}

Result<std::unique_ptr<HotChunks>> make_device_tier(const ModelOptions& opt, const LanguageModel& dec, KvCache& kv,
                                                    const SparseConfig& sparse_cfg, int32_t resident_seqs) {
  // The CPU's hot-slot tier; on a GPU every KV page is on the device (docs/gpu-sparse.md). A split
  // model's ranks select over their own pages without it (docs/tensor-parallel.md).
  if (opt.device_kv_budget <= 0 || dec.device() != Device::kCpu || dec.tensor_parallel_size() > 1)
    return std::unique_ptr<HotChunks>();
  HotChunks::Config cfg;
  cfg.budget_bytes = opt.device_kv_budget;
  cfg.chunk_tokens = sparse_cfg.chunk_tokens;
  cfg.full_layer = dec.sparse_kv_layers();
  cfg.resident_seqs = resident_seqs;
  cfg.sink_tokens = sparse_cfg.sink_tokens;
  cfg.window_tokens = sparse_cfg.window_tokens;
  HS_ASSIGN_OR_RETURN(auto hot, HotChunks::create(kv, cfg));
  spdlog::info("device tier: {:.1f} MiB of hot slots ({} of {} B per (layer, kv head)) + sinks and a {}-chunk window "
               "ring for {} sequences",
               hot->bytes() / 1048576.0, hot->slots_per_set(), hot->piece_bytes(), hot->ring_chunks(), resident_seqs);
  return hot;
}

Status attach_device_tier(const ModelOptions& opt, LoadedModel& m, const SparseConfig& sparse_cfg,
                          int32_t resident_seqs) {
  m.model().set_hot_chunks(nullptr);
  m.device_kv.reset();
  HS_ASSIGN_OR_RETURN(m.device_kv, make_device_tier(opt, m.model(), *m.kv, sparse_cfg, resident_seqs));
  m.model().set_hot_chunks(m.device_kv.get());
  return Status::ok();
}

void add_sampling_options(CLI::App* cmd, SamplingOptions& o) {
  SamplingParams& p = o.params;
  cmd->add_option("--temp,--temperature", p.temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
  cmd->add_option("--top-k", p.top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", p.top_p, "Nucleus sampling mass (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", p.min_p, "Drop tokens below min-p x the top probability (0 = off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", p.repetition_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  cmd->add_option("--presence-penalty", p.presence_penalty, "Presence penalty (-2..2)")->capture_default_str();
  cmd->add_option("--frequency-penalty", p.frequency_penalty, "Frequency penalty (-2..2)")->capture_default_str();
  cmd->add_option("-s,--seed", o.seed, "RNG seed (-1 = random)")->capture_default_str();
}

Result<SamplingParams> SamplingOptions::resolve() const {
  SamplingParams p = params;
  if (seed >= 0) p.seed = static_cast<uint64_t>(seed);
  HS_RETURN_IF_ERROR(p.validate());
  return p;
}

std::unique_ptr<KvCache> make_kv_cache(const ModelOptions&, const LanguageModel& model, KvDtype dtype,
                                       int32_t n_pages) {
  const KvGeometry g = model.kv_geometry(16, dtype);
  // A split model's ranks keep their own kv heads' pages (Decoder: a cache per rank under these block ids).
  const bool host_pages = model.device() == Device::kCpu && model.tensor_parallel_size() == 1;
  return std::make_unique<KvCache>(g, n_pages, KvCache::kDefaultMaxLeases, host_pages);
}

// --load-format dummy: the random-weight GGUF of --config's shape (model/dummy_model.h).
static Result<std::unique_ptr<gguf::File>> make_dummy_file(const ModelOptions& opt) {
  if (opt.config.empty())
    return make_error(StatusCode::kInvalidArgument, "--load-format dummy needs --config FILE (a Hugging Face "
                      "config.json, e.g. configs/llama-3.1-8b.json)");
  if (!opt.model.empty())
    return make_error(StatusCode::kInvalidArgument, "--load-format dummy makes random weights: drop --model {}",
                      opt.model);
  DummyModelSpec spec;
  spec.config_path = opt.config;
  HS_ASSIGN_OR_RETURN(spec.weight_type, parse_dummy_dtype(opt.dummy_dtype));
  spec.vocab_path = opt.vocab == "synthetic" ? std::string() : opt.vocab;
  spec.seed = opt.dummy_seed;
  ThreadPool fill_pool(opt.threads);
  const auto t0 = std::chrono::steady_clock::now();
  HS_ASSIGN_OR_RETURN(auto file, make_dummy_model(spec, fill_pool));
  spdlog::info("dummy model: {} ({:.2f} GB of random weights made in {:.1f} s)", file->path(),
               static_cast<double>(file->file_size()) / 1e9,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return file;
}

Result<std::unique_ptr<Decoder>> load_decoder(const ModelOptions& opt, Device device) {
  if (opt.load_format == "dummy") {
    HS_ASSIGN_OR_RETURN(auto file, make_dummy_file(opt));
    return Decoder::create(std::move(file), device, opt.tensor_parallel);
  }
  if (opt.model.empty())
    return make_error(StatusCode::kInvalidArgument, "--model FILE is required (or --load-format dummy --config FILE)");
  if (!opt.config.empty()) return make_error(StatusCode::kInvalidArgument, "--config is for --load-format dummy");
  return Decoder::load(opt.model, device, opt.tensor_parallel);
}

Result<ModelPair> load_models(const ModelOptions& opt, Device device) {
  ModelPair p;
  // A GGUF (read or made) of either kind, by its architecture.
  auto either = [&](std::unique_ptr<gguf::File> file) -> Result<ModelPair> {
    HS_ASSIGN_OR_RETURN(ModelConfig c, load_model_config(*file));
    if (c.is_hybrid()) {
      HS_ASSIGN_OR_RETURN(p.hybrid, HybridDecoder::create(std::move(file), device, opt.tensor_parallel));
    } else {
      HS_ASSIGN_OR_RETURN(p.decoder, Decoder::create(std::move(file), device, opt.tensor_parallel));
    }
    return std::move(p);
  };
  if (opt.load_format == "gguf" && !opt.model.empty() && std::filesystem::is_directory(opt.model)) {
    if (!opt.config.empty()) return make_error(StatusCode::kInvalidArgument, "--config is for --load-format dummy");
    HS_ASSIGN_OR_RETURN(auto file, load_hf_model(opt.model));
    HS_ASSIGN_OR_RETURN(p.hybrid, HybridDecoder::create(std::move(file), device, opt.tensor_parallel));
    return p;
  }
  if (opt.load_format == "gguf" && !opt.model.empty()) {
    if (!opt.config.empty()) return make_error(StatusCode::kInvalidArgument, "--config is for --load-format dummy");
    HS_ASSIGN_OR_RETURN(auto file, gguf::File::open(opt.model));
    return either(std::move(file));
  }
  if (opt.load_format == "dummy") {  // a hybrid config (qwen3_5, qwen3_next) makes a hybrid model
    HS_ASSIGN_OR_RETURN(auto file, make_dummy_file(opt));
    return either(std::move(file));
  }
  HS_ASSIGN_OR_RETURN(p.decoder, load_decoder(opt, device));  // its error: --model is missing
  return p;
}

Result<std::unique_ptr<Tokenizer>> make_model_tokenizer(const ModelOptions& opt, const LanguageModel& model,
                                                        std::unique_ptr<gguf::File>* vocab_file) {
  if (opt.load_format == "dummy" || opt.vocab.empty()) {  // dummy: --vocab is already in the model file
    auto tok = make_tokenizer(model.file());
    if (!tok.is_ok() && opt.load_format != "dummy")
      return make_error(tok.status().code(), "{} (a model file without a tokenizer takes --vocab GGUF or --vocab "
                        "synthetic)", tok.status().message());
    return tok;
  }
  HS_ASSIGN_OR_RETURN(*vocab_file, make_vocab_file(opt.vocab, model.config().n_vocab));
  return make_tokenizer(**vocab_file);
}

Result<std::unique_ptr<RecurrentPool>> make_state_pool(HybridDecoder& model, KvCache& kv, int32_t n_slots,
                                                       int32_t n_checkpoints) {
  HS_RETURN_IF_ERROR(model.set_states(nullptr));
  auto pool = std::make_unique<RecurrentPool>(kv, n_slots, n_checkpoints);
  HS_RETURN_IF_ERROR(model.set_states(pool.get()));
  spdlog::info("recurrent state: {} slots + {} prefix-cache checkpoints x {:.2f} MiB = {:.1f} MiB", n_slots,
               n_checkpoints, model.state_bytes_per_slot() / 1048576.0,
               static_cast<double>(model.state_bytes_per_slot()) * (n_slots + n_checkpoints) / 1048576.0);
  return pool;
}

Status remake_state_pool(LoadedModel& m, int32_t n_slots, int32_t n_checkpoints) {
  if (!m.hybrid) return Status::ok();
  // Detach before the old pool dies (the model must not keep its address), and let it unhook
  // from the KV cache before the new one chains whatever listener is left.
  HS_RETURN_IF_ERROR(m.hybrid->set_states(nullptr));
  m.states.reset();
  HS_ASSIGN_OR_RETURN(m.states, make_state_pool(*m.hybrid, *m.kv, n_slots, n_checkpoints));
  return Status::ok();
}

std::string model_display_name(const ModelOptions& opt) {
  if (opt.load_format == "dummy")
    return fmt::format("dummy-{}-{}", std::filesystem::path(opt.config).stem().string(), opt.dummy_dtype);
  std::string path = opt.model;
  while (path.size() > 1 && path.back() == '/') path.pop_back();  // a checkpoint directory
  return std::filesystem::path(path).stem().string();
}

Result<LoadedModel> load_model(const ModelOptions& opt) {
  LoadedModel m;
  HS_ASSIGN_OR_RETURN(Device device, parse_device(opt.device));
  HS_ASSIGN_OR_RETURN(ModelPair pair, load_models(opt, device));
  m.decoder = std::move(pair.decoder);
  m.hybrid = std::move(pair.hybrid);
  HS_ASSIGN_OR_RETURN(m.tokenizer, make_model_tokenizer(opt, m.model(), &m.vocab));
  const ModelConfig& c = m.model().config();
  if (m.tokenizer->n_vocab() < c.n_vocab)
    return make_error(StatusCode::kCorrupt, "tokenizer has {} tokens but the embedding has {} rows",
                      m.tokenizer->n_vocab(), c.n_vocab);
  HS_ASSIGN_OR_RETURN(KvDtype dtype, parse_kv_dtype(opt.kv_cache_dtype));
  m.kv = make_kv_cache(opt, m.model(), dtype, (opt.ctx_size + 15) / 16);
  HS_RETURN_IF_ERROR(apply_kv_tier(opt, m.model()));
  m.pool = std::make_unique<ThreadPool>(opt.threads);
  if (m.hybrid) {
    HS_ASSIGN_OR_RETURN(m.states, make_state_pool(*m.hybrid, *m.kv, kDefaultResidentSeqs, 0));
  }
  HS_RETURN_IF_ERROR(attach_sparse(opt, m));
  if (m.sparse) HS_RETURN_IF_ERROR(attach_device_tier(opt, m, m.sparse->config(), kDefaultResidentSeqs));
  return m;
}

}  // namespace hs::app
