// backend/cuda/cuda_backend.h — the Backend of one CUDA device: cuBLAS matmuls on bf16
// weights, the kernels of kernels.h, a device copy of the KV pages.
//
// What it owns: one non-blocking stream (every op is enqueued on it; only to_host, from_host
// and end_step wait), one cuBLAS handle bound to that stream with a fixed 32 MiB workspace
// (so the GEMMs can be captured in a CUDA graph later), the prepared weights (GGUF tensors
// dequantized on the host, uploaded as bf16 [rows][cols]; one upload per host pointer, so
// tied embeddings share it), the step's device tables (tokens, positions, sequence index,
// CSR page table, logit rows; one pinned staging buffer, one copy per step) and a device
// copy of the KV pages of the KvCache the plans name, in the host's layout (kv/kv_cache.h):
// plain f16, bf16 or f32 elements, or scaled rows (fp8 e4m3 or int8 with an f16 scale a row,
// int4 with f16 (d, m) a row; byte-identical to the host's pages). The host cache's pages are never read or
// written by this backend: its geometry and pool size only decide the device copy's shape.
// Scratch (the bf16 copy of a matmul input, attention partials, step tables) grows when a
// step needs more and is never shrunk; growth synchronises the stream first.
//
// Cost: prepare_weight dequantizes on host threads and uploads in 16 MiB chunks (double
// buffered); a step costs one host-to-device copy of its tables plus the kernels; see
// docs/cuda-backend.md for each op's cost and what is left for speed.
//
// The header keeps CUDA's headers out (opaque stream / handle types), so plain C++ files can
// include it. Not thread-safe: the engine thread owns it (the device is made current at
// every entry point that starts work: alloc, prepare_*, copies, begin_step).
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/gemm_quant_mma.h"
#include "backend/cuda/hot_set.h"
#include "backend/cuda/hybrid_kernels.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/op_profile.h"
#include "backend/cuda/quant_layout.h"
#include "backend/cuda/sparse_kernels.h"

struct CUstream_st;    // cudaStream_t
struct CUevent_st;     // cudaEvent_t
struct cublasContext;  // cublasHandle_t
struct CUgraphExec_st; // cudaGraphExec_t

namespace hs::cuda {

// The device-resident quantized kind of a GGUF type (Q4_0, Q8_0, Q4_K), or none.
std::optional<QuantKind> quant_kind_of(DType t);

class CudaBackend final : public Backend {
 public:
  // Device `device_index` (cudaSetDevice), its stream, cuBLAS handle and workspace.
  static Result<std::unique_ptr<CudaBackend>> create(int device_index);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return name_; }  // "cuda:0 NVIDIA H200 (cc 9.0, 139 GiB)"
  int device_index() const override { return device_; }
  Status make_current() override;
  void* native_stream() const override { return stream_; }

  Result<Buffer> alloc(size_t bytes, std::string_view what) override;
  void free_memory(void* ptr) override;
  Result<Buffer> alloc_host(size_t bytes, std::string_view what) override;  // cudaMallocHost
  void free_host_memory(void* ptr) override;
  Result<Tensor> prepare_weight(const Tensor& host, std::string_view name) override;
  // One allocation for weights of one device form and column count (q / k / v): matmul_multi
  // then runs a large batch of them as one GEMM.
  Result<std::vector<Tensor>> prepare_weight_group(std::span<const Tensor> hosts,
                                                   std::span<const std::string> names) override;
  Result<Tensor> prepare_vector(std::span<const float> host, std::string_view name) override;
  Status to_host(const Tensor& src, void* dst) override;
  Status from_host(const void* src, Tensor dst) override;

  Status begin_step(const ForwardPlan& plan) override;
  // Decode-sized steps (<= kMaxGraphTokens tokens) run as CUDA graphs: a shape seen once
  // eagerly (scratch grows to it) is captured the second time and replayed from then on.
  // The key is (tokens, logit rows, the attention key-range bucket); a graph is dropped when
  // any device buffer was allocated or freed after its capture (its pointers may be stale).
  Status run_step(const std::function<Status()>& body) override;
  void set_graphs(bool on) override { graphs_on_ = on; }
  Status end_step() override;
  static constexpr int64_t kMaxGraphTokens = 256;
  // 16-bit weights go through the GEMV kernels for up to this many rows, cuBLAS above: on the
  // H200 the tensor-core GEMV of gemv.cu streamed 1.7 TB/s at 8 rows where cuBLAS gave the
  // 8B shape's batch-8 decode 1,348 t/s against 817 (docs/benchmarks.md, session 9).
  static constexpr int64_t kMaxGemv16Rows = 2;

  // MatmulPrecision::kExact: precise matmuls, each input split into two 16-bit terms (x = hi + lo)
  // and two GEMMs summed on cuBLAS (~16 mantissa bits of x instead of 8; twice the matmul work,
  // no GEMV kernels). Any other precision: one 16-bit input (the default, what bench measures).
  void set_matmul_precision(MatmulPrecision p) override { precise_ = p == MatmulPrecision::kExact; }
  MatmulPrecision matmul_precision() const override {
    return precise_ ? MatmulPrecision::kExact : kDefaultMatmulPrecision;
  }

  Status embedding(const Tensor& table, Tensor out) override;
  Status matmul(const Tensor& w, const Tensor& x, Tensor y) override;
  Status matmul_multi(std::span<const Tensor> ws, const Tensor& x, std::span<const Tensor> ys) override;
  Status rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) override;
  Status rope(Tensor x, int head_dim, float theta, bool neox) override;
  Status rope_qk(Tensor q, Tensor k, int head_dim, float theta, bool neox) override;
  Status rope_qk_kv_write(int layer, Tensor q, Tensor k, const Tensor& v, int head_dim, float theta,
                          bool neox) override;
  Status add_rms_norm(Tensor x, const Tensor& y, const Tensor& w, float eps, Tensor out) override;
  Status glu(GluKind kind, const Tensor& gate, const Tensor& up, Tensor out) override;
  Status add(Tensor x, const Tensor& y) override;
  Status add_bias(Tensor x, const Tensor& bias) override;
  Status scale(Tensor x, float s) override;
  Status softcap(Tensor x, float cap) override;
  Status copy(const Tensor& src, Tensor dst) override;
  Status logit_rows(const Tensor& src, Tensor dst) override;
  Status kv_write(int layer, const Tensor& k, const Tensor& v) override;
  Status attention(int layer, const Tensor& q, Tensor out, const AttentionParams& p) override;

  // Hybrid (Gated DeltaNet) and MoE ops (cuda_hybrid.cpp, kernels in hybrid.cu): the per-sequence
  // ones read the step's active-sequence tables; MoE experts take 16-bit (bf16 / f16) weights.
  Status conv1d_causal(const Tensor& x, const Tensor& w, int kernel, Tensor state, Tensor out) override;
  Status gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                          Tensor state, Tensor out, const DeltaRuleParams& p) override;
  Status l2_norm(Tensor x, int head_dim, float eps, float scale) override;
  Status rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor out) override;
  Status sigmoid_mul(Tensor x, const Tensor& gate) override;
  Status delta_gates(Tensor a, Tensor b, const Tensor& ssm_a, const Tensor& dt_bias) override;
  Status rope_partial(Tensor x, int head_dim, int rot_dims, float theta, bool neox) override;
  Status qk_norm_rope_kv_write(int layer, const Tensor& q_src, Tensor q, Tensor k, const Tensor& v,
                               const Tensor& q_norm, const Tensor& k_norm, float eps, int head_dim, int rot_dims,
                               float theta, bool neox) override;
  Status moe_route(const Tensor& logits, Tensor ids, Tensor weights, const MoeParams& p) override;
  Status moe_experts(const Tensor& x, const Tensor& gate_exps, const Tensor& up_exps, const Tensor& down_exps,
                     const Tensor& ids, const Tensor& weights, Tensor out, const MoeParams& p) override;
  Status add_sigmoid_gated(Tensor x, const Tensor& y, const Tensor& gate) override;

  // Device-to-device copy of 2 GiB and a 8192^3 bf16 cuBLAS GEMM (fp32 accumulate), best of 5 each
  // (cuda_peaks.cpp).
  Result<DevicePeaks> measure_peaks() override;
  // HS_CUDA_PROFILE=1: per-op device times so far (op_profile.h); "" otherwise.
  std::string profile_report() const override { return profile_.report(); }

  // Bytes of device memory this backend holds for weights and vectors (prepare_*).
  size_t weight_bytes() const { return weight_bytes_; }

  // Tests / debugging: copy layer `layer` of the device KV copy (every page of the bound
  // cache: n_blocks x KvGeometry::page_bytes(), laid out like KvCache::layer_base) to `host`;
  // synchronises the stream. Error when no cache is bound or the layer is out of range.
  Status read_kv_pages(int layer, void* host);
  // Tests: the norms / GLU / gated norm writing the GEMV's x records (HS_CUDA_EARLYQ=1) on or off.
  void set_early_quantized_inputs(bool on) { earlyq_ = on; }

  // ---- sparse attention on the GPU (cuda_sparse.cpp, docs/gpu-sparse.md) ------------------
  // Attaches a SparseRuntime in sketch mode (max rule, chunk = page, optional exact rerank; no
  // group-mass first stage / tail / Quest):
  // its basis is uploaded and device sketch pages beside the KV pages are kept from then on;
  // decode tokens whose context reaches min_context select chunks and attend only to them on
  // full-attention layers. The CPU's device tier (HotChunks) is refused: here all KV is on the
  // device. null: dense, sketch pages freed.
  Status set_sparse(SparseRuntime* rt, HotChunks* hot) override;
  Status rebuild_sparse_metadata(KvCache& kv, const SeqKv& seq, int32_t n_tokens) override;
  // Host tier (cuda_host_tier.cpp, hot_set.h): the KV pages in mapped pinned host memory and,
  // while a sparse runtime is attached, a hot set of hot_budget_bytes on the device. Before the
  // first step (a bound cache is rebound, its contents lost).
  Status set_kv_tier(const KvTier& t) override;
  // Slots per (sparse layer, kv head) of the hot set (0: none) and the sparse tokens one step
  // can serve from it (more are run dense).
  int32_t hot_slots() const { return hot_.n_slots; }
  int64_t hot_max_rows() const { return hot_max_tokens_; }
  // Tests (the storm): every slot of every pool read back after the stream drains. A slot is
  // resident when its block's residency entry points at it; it is stale when its first `fill`
  // tokens' bytes (rows and scales) differ from its block's bytes in the host pages now.
  struct HotSetAudit {
    int64_t slots = 0, empty = 0, resident = 0, stale = 0;
    // The first stale slot: layer, kv head, block, fill and the first token whose bytes differ.
    int stale_layer = -1, stale_head = -1;
    int32_t stale_block = -1, stale_fill = 0, stale_token = -1;
  };
  Result<HotSetAudit> audit_hot_set();
  // Tests: the selections of `layer`'s last attention call (rows = (token - t0) * n_kv_heads +
  // head, t0 = 0 in decode-only steps; in a step with a prompt run t0 is its first sparse token
  // and the rows end at its last: select_sparse), each the ascending chunk ids; an empty vector
  // for a dense row. Synchronises.
  Result<std::vector<std::vector<int32_t>>> last_selections(int64_t n_rows);

 private:
  // A device allocation that grows (scratch); contents are not kept across growth.
  struct Scratch {
    void* ptr = nullptr;
    size_t bytes = 0;
  };

  CudaBackend() = default;
  Status init(int device_index);
  Status device_malloc(void** ptr, size_t bytes, std::string_view what);
  Status grow(Scratch& s, size_t bytes, std::string_view what);
  Status ensure_load_staging(size_t bytes);
  // How a host weight is stored on the device (validates it; names it in errors).
  struct WeightForm {
    DType dev_type = DType::F16;
    std::optional<QuantKind> quant;  // kept quantized (quant_layout.h rows)
    bool as_bf16 = false;            // else f16 (when not quantized)
    size_t row_b = 0;                // bytes of one device row
  };
  Result<WeightForm> weight_form(const Tensor& host, std::string_view name) const;
  static std::string weight_what(const Tensor& host, std::string_view name, const WeightForm& f);
  // Converts / repacks `host` on the load threads and copies it to dev ([rows][row_b]); syncs.
  Status upload_weight(const Tensor& host, std::string_view name, const WeightForm& form, void* dev);
  Tensor register_weight(const Tensor& host, const WeightForm& form, void* dev);  // into the cache
  struct FreeOnError;
  Status bind_kv(const KvCache& kv);
  // y = x16 · wᵀ with w f16 or bf16 and x16 the input converted to w's dtype.
  Status gemm16(const Tensor& w, const void* xb, int64_t n, Tensor y, bool accumulate = false);
  // y = x · wᵀ through the hi / lo split of x (set_matmul_precision(kExact)).
  Status matmul_precise(const Tensor& w, const Tensor& x, Tensor y);
  // y = x · wᵀ for one weight of any prepared form: the GEMV kernels for up to kMaxGemvRows
  // rows of quantized weights and kMaxGemv16Rows of 16-bit ones (unless HS_CUDA_GEMV=0), else cuBLAS on the f16 /
  // bf16 weight or on a dequantized f16 copy of a quantized one (wdq_). `converted` is the dtype
  // whose 16-bit copy of x sits in xb_ (F32: none yet); updated when this converts.
  Status matmul_one(const Tensor& w, const Tensor& x, Tensor y, DType& converted);
  // y_i = x · w_iᵀ for up to kMaxGemvWarpWeights 16-bit weights of one dtype sharing x (1..2 rows)
  // in one warp-per-row launch (gemv_warp.cu): the launch's status, or nullopt (nothing launched)
  // for a shape that kernel does not take (the caller falls back).
  // 3..8 rows of 16-bit weights on tensor cores (gemm16_mma.h): nullopt when the shape does not fit.
  std::optional<Status> gemm16_mma(std::span<const Tensor> ws, const Tensor& x, std::span<const Tensor> ys,
                                   const char* op);
  std::optional<Status> gemv16_warp(std::span<const Tensor> ws, const Tensor& x, std::span<const Tensor> ys,
                                    const char* op);
  Status convert_input(const Tensor& x, DType type, const char* op);
  // The checks of rms_norm / rope; the weight pointer (null: no scale).
  Result<const float*> check_rms_norm(const Tensor& x, const Tensor& w, const Tensor& out, const char* op) const;
  Status check_rope(const Tensor& x, int head_dim, const char* op) const;
  // kv_write's checks of (layer, k, v); the layer's view of the device KV copy.
  Result<KvLayerView> kv_write_view(int layer, const Tensor& k, const Tensor& v, const char* op) const;
  Status need_step(const char* op) const;
  // begin_step: the active-sequence tables of hybrid_kernels.h into the pinned staging (each
  // region n entries, indptr n + 1).
  void fill_seq_tables(const ForwardPlan& plan, int32_t* rows, int32_t* slot, int32_t* fresh, int32_t* indptr);
  // The hybrid ops' checks: a recurrent-state tensor of slot_floats per slot that every plan
  // sequence's slot fits; the step's active-sequence tables.
  Status check_state(const Tensor& state, int64_t slot_floats, const char* op) const;
  SeqTables seq_tables() const;

  int device_ = 0;
  int n_sm_ = 1;
  std::string name_;
  CUstream_st* stream_ = nullptr;
  CUevent_st* tables_copied_ = nullptr;  // the last step-table copy out of the pinned staging
  CUevent_st* load_copied_[2] = {nullptr, nullptr};  // prepare_weight's two staging halves
  cublasContext* cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;  // [kCublasWorkspaceBytes]

  // Prepared weights and vectors, freed with the backend. The cache is keyed by the host
  // address (plus type and shape): the host tensor must stay mapped and unchanged while this
  // backend lives (an mmap'd GGUF does).
  struct CachedWeight {
    Tensor dev;  // [rows][cols] bf16
    DType src = DType::F32;
    int64_t rows = 0, cols = 0;
  };
  std::vector<void*> owned_;
  std::unordered_map<const void*, CachedWeight> weight_cache_;
  size_t weight_bytes_ = 0;
  std::unique_ptr<ThreadPool> load_pool_;  // host threads for dequantization (first prepare)
  void* load_staging_[2] = {nullptr, nullptr};  // pinned, [load_staging_bytes_] bf16 rows each
  size_t load_staging_bytes_ = 0;

  // Step tables: one pinned staging buffer and one device buffer of int32, laid out as
  // [tokens n][positions n][seq_index n][page_indptr n_seqs+1][page_indices total][logit_rows n_out].
  void* tables_host_ = nullptr;  // pinned
  size_t tables_host_bytes_ = 0;
  Scratch tables_dev_;
  const int32_t* d_tokens_ = nullptr;
  const int32_t* d_positions_ = nullptr;
  const int32_t* d_seq_index_ = nullptr;
  const int32_t* d_page_indptr_ = nullptr;
  const int32_t* d_page_indices_ = nullptr;
  const int32_t* d_logit_rows_ = nullptr;
  const int32_t* d_act_rows_ = nullptr;    // hybrid_kernels.h SeqTables
  const int32_t* d_act_slot_ = nullptr;
  const int32_t* d_act_fresh_ = nullptr;
  const int32_t* d_act_indptr_ = nullptr;
  std::vector<int32_t> seq_count_, seq_first_;  // fill_seq_tables' scratch
  mutable int64_t state_rows_seen_ = INT64_MAX;  // fewest slots of any state tensor a hybrid op checked
  Scratch moe_h_;  // [n * n_used][n_ff] f32: the routed rows' silu(gate) * up (moe_experts)
  bool precise_ = false;  // set_matmul_precision(kExact)
  Scratch xsplit_;        // [2][n][n_in] 16-bit: hi then lo of a precise matmul's input
  bool in_step_ = false;
  bool kv_ready_ = false;   // plan has a KV cache, sequences and a page table covering its tokens
  int32_t max_pos1_ = 0;    // max over tokens of positions[i] + 1, rounded up to its bucket
                            // (range_bucket): the attention split depends only on the bucket

  // Step-table capacities (ints; grown by doubling, never shrunk): fixed offsets, so a graph
  // captured for one step reads the next step's tables at the same addresses.
  size_t cap_tokens_ = 0, cap_indptr_ = 0, cap_pages_ = 0;

  // CUDA graphs of decode steps.
  struct GraphKey {
    int64_t n_tokens = 0, n_logits = 0;
    int32_t range_bucket = 0;
    int64_t n_sparse = 0;          // 1: some tokens select (which ones: the device tables)
    int32_t dense_bucket = 0;      // range bucket of the other tokens
    bool operator==(const GraphKey& o) const {
      return n_tokens == o.n_tokens && n_logits == o.n_logits && range_bucket == o.range_bucket &&
             n_sparse == o.n_sparse && dense_bucket == o.dense_bucket;
    }
  };
  struct GraphKeyHash {
    size_t operator()(const GraphKey& k) const {
      return std::hash<int64_t>()(k.n_tokens * 1000003 + k.n_logits * 8191 + k.range_bucket + k.n_sparse * 131 +
                                  k.dense_bucket * 7);
    }
  };
  struct Graph {
    CUgraphExec_st* exec = nullptr;  // null: seen once (eager), capture next time
    uint64_t generation = 0;         // alloc_generation_ at capture
    bool failed = false;             // capture failed: always eager
  };
  bool graphs_on_ = true;
  uint64_t alloc_generation_ = 0;  // bumped by every device allocation and free
  std::unordered_map<GraphKey, Graph, GraphKeyHash> graphs_;
  int64_t graph_replays_ = 0, graph_captures_ = 0;

  OpProfile profile_;
  bool keep_quantized_ = true;  // HS_CUDA_QUANT=0: quantized GGUF weights become f16 at load
  bool gemv16_ = true;          // HS_CUDA_GEMV=0: 16-bit weights always through cuBLAS
  bool flash_on_ = true;        // HS_CUDA_FLASH=0: prefill attention on the exact kernel too
  bool quant_warp_ = true;      // HS_CUDA_QUANT_WARP=0: quantized batch 1-2 on the tensor-core GEMV
  // 16-bit weights at 3-8 rows: HS_CUDA_MMA16=0 (default) cuBLAS, 1 the tensor-core GEMV where
  // the weights have at most one 32-row tile per SM, 2 always; HS_CUDA_MMA16_VARIANT picks its
  // load scheme (gemm16_mma.h). Off by default: ahead of cuBLAS alone on q/k/v and o, no gain in
  // the model (docs/benchmarks.md, session 11).
  int mma16_ = 0;
  int mma16_variant_ = -1;
  // Activation rows up to which quantized matmuls take the dp2a warp GEMV (more: the tensor-core
  // GEMV of gemv.cu, then dequantize + cuBLAS). HS_CUDA_QW_ROWS (2: session 16's rule).
  int quant_warp_rows_ = 8;  // kMaxQuantWarpRows (gemv_quant_warp.h)
  // Quantized weights at 5..kMaxGemmQuantTokens rows: the tensor-core quantized GEMM (one pass
  // over the weights per 32 rows, gemm_quant_mma.h); HS_CUDA_GEMMQ=0: the GEMV kernels up to 8
  // rows, dequantize + cuBLAS above. HS_CUDA_GEMMQ_MIN: the fewest rows it takes (default 5:
  // the dp2a warp GEMV runs 1-4 rows in one pass over the weights, 5-8 in two; on an H100 the
  // 27B shape's batch 8 went 344 -> 427 t/s with the GEMM, batch 4 321 -> 231, session 24).
  bool gemm_quant_ = true;
  int gemm_quant_min_rows_ = 5;
  // Up to 8 rows on its barrier-free variant (gemm_quant_mma.h; HS_CUDA_GEMMQ_WARP=0: the staged
  // one). Slower alone (GemmBandwidth: 1.2 vs 1.6 TB/s) but faster in a replayed step, where no
  // cluster waits to be placed: on an H100 the 27B shape's batch 8 went 460 -> 521 t/s and
  // 8 x 32K 333 -> 358 (session 25).
  bool gemm_quant_warp_ = true;
  bool takes_gemm_quant(int64_t rows) const {
    return gemm_quant_ && rows >= gemm_quant_min_rows_ && rows <= kMaxGemmQuantTokens;
  }
  int delta_fused_max_ = 64;  // gated_delta_rule: the prologue fused up to this many step tokens (HS_CUDA_DELTA_FUSED_MAX)
  // HS_CUDA_PDL=0 turns off: the 16-bit GEMVs (batch 1-2, and the tensor-core one) launched as
  // programmatic dependents, loading weights while the previous kernel (which lets them start
  // at its beginning, pdl.cuh) finishes. Measured: tg128 bf16 218 -> 228 t/s on the 8B shape.
  bool pdl_on_ = true;
  // HS_CUDA_ROPE_KV=0 turns off: rope_qk_kv_write as one kernel (plain KV pages).
  bool rope_kv_fused_ = true;
  // The step's attention launches (begin_step): token ranges [begin, end) of one sequence's
  // prompt run (flash) or of the decode / short tokens between them (exact kernel).
  static constexpr int64_t kFlashMinRun = 32;
  struct AttnRange {
    int64_t begin = 0, end = 0;
    bool flash = false;
    int32_t page_begin = 0, n_pages = 0;  // flash: its sequence's pages in the step's page table
  };
  std::vector<AttnRange> attn_ranges_;
  bool has_flash_range_ = false;
  Scratch wdq_;    // [rows][cols] f16: a quantized weight dequantized for a large-batch matmul
  Scratch qx_;     // gemv_quant_warp's int16 copy of x (gemv_quant_warp_scratch_bytes)
  Scratch xb_;     // [n][n_in] bf16 / f16: matmul input
  // Which f32 tensor xb_ holds the 16-bit copy of (convert_input, or written beside its f32
  // output by rms_norm / add_rms_norm / glu for the matmul after them): a matmul of that tensor
  // skips its conversion kernel. Every other op clears it (it may write the tensor), as do
  // from_host, begin_step and a matmul whose output overlaps it.
  struct InputTag {
    const void* p = nullptr;
    int64_t rows = 0, cols = 0, stride = 0;
    DType type = DType::F32;
  };
  InputTag xb_tag_;
  // The 16-bit input type of the model's cuBLAS matmuls (bf16 weights: BF16; f16 and quantized
  // ones, dequantized to f16: F16), from prepare_weight; unset or mixed: no early copies.
  std::optional<DType> gemm_in_;
  bool gemm_in_mixed_ = false;
  bool early16_ = true;  // HS_CUDA_EARLY16=0: no early copies (every matmul converts its input)
  // Where an op writing `out` (f32) should also write its 16-bit copy: into xb_ (grown) when a
  // decode-sized batch's next matmul will take the cuBLAS path; p = null otherwise (kernels.h
  // Out16 has the same two fields).
  struct Copy16 {
    uint16_t* p = nullptr;
    bool bf16 = true;
  };
  Result<Copy16> out16_for(const Tensor& out);
  void set_input_tag(const Tensor& t, DType type) { xb_tag_ = InputTag{t.data, t.rows, t.cols, t.row_stride, type}; }
  void clear_input_tag() {
    xb_tag_ = InputTag{};
    qx_tag_ = InputTag{};
  }
  void clear_input_tag_if_written(const Tensor& y);
  // The same for the quantized batch-1/2 GEMV: which f32 tensor qx_ holds the x records of (type:
  // the weight dtype they are for), written by that GEMV's own quantize kernel or beside its f32
  // output by rms_norm / add_rms_norm / glu (outq_for); a GEMV of that tensor skips quantizing.
  // quant_in_ is the kind of the model's quantized weights (prepare_weight; unset or mixed: no
  // early records). HS_CUDA_EARLYQ=1 turns them on; off by default: measured slower on the 8B
  // Q4_0 shape (tg128 465 -> 448 t/s, docs/benchmarks.md session 12): the norm's single CTA
  // writing 128 blocks of records is on the critical path, where the quantize kernel ran
  // overlapped (a programmatic dependent) over 128 warps.
  InputTag qx_tag_;
  std::optional<DType> quant_in_;
  bool quant_in_mixed_ = false;
  // The norms, the GLU and the gated norm write the quantized GEMV's x records beside their
  // output (HS_CUDA_EARLYQ=1; off: session 28, H100, 27B tg128 −4.9 %, and ±0 with the GLU and the
  // gated norm alone).
  bool earlyq_ = false;
  // Where an op writing `out` should also write the GEMV's records: qx_ (grown) for a batch of
  // 1-2 rows of a model with one quantized kind; s = null otherwise.
  Result<OutQ> outq_for(const Tensor& out);
  void set_quant_tag(const Tensor& t, DType w) { qx_tag_ = InputTag{t.data, t.rows, t.cols, t.row_stride, w}; }
  bool quant_tag_holds(const Tensor& x, DType w) const {
    return qx_tag_.p == x.data && qx_tag_.rows == x.rows && qx_tag_.cols == x.cols && qx_tag_.stride == x.row_stride &&
           qx_tag_.type == w;
  }
  // The attention split is planned from this bucket of the longest key range, not the exact
  // length, so a graph captured at one length serves every length of its bucket.
  static int32_t range_bucket(int32_t max_pos1);
  // GPU sparse attention state (cuda_sparse.cpp).
  Status bind_sparse_pages();  // sketch pages for the bound KV pool (begin_step)
  // Sketches of this step's keys of `layer` (post-RoPE k) when the layer is sparse.
  Status write_sketches(int layer, const Tensor& k);
  // The launchers' view of layer `layer` of the device KV copy.
  KvLayerView layer_kv_view(int layer) const;
  // Sparse attention of this step's sparse rows of `layer` is possible (sketch basis, no window).
  bool sparse_layer(int layer, const AttentionParams& p) const;
  // Launches the selection for `layer`; fills the AttnArgs' sp_* fields.
  Status select_sparse(int layer, const Tensor& q, const AttentionParams& p, AttnArgs& a);
  void plan_sparse_step(const ForwardPlan& plan, std::vector<int32_t>& flags);  // begin_step
  SparseRuntime* sparse_ = nullptr;
  int sketch_rank_ = 0;
  int32_t sketch_blocks_ = 0;          // pool size the sketch pages were made for
  void* sketch_base_ = nullptr;        // [full layers][n_blocks][n_kv][P][rank] f16
  int64_t sketch_layer_bytes_ = 0;
  // Hierarchical scoring (SparseConfig::page_shortlist): a layer's page summaries [n_blocks][n_kv]
  // [2][rank] f16 follow its sketches at this offset (0: not kept).
  int64_t sketch_summary_offset_ = 0;
  std::vector<int> sketch_slot_;       // [n_layer] index among the sparse layers, -1: none
  void* basis_dev_ = nullptr;          // per sparse layer: B, A [n_kv][hd][rank], mu [n_kv][hd] f32
  int64_t basis_layer_floats_ = 0;
  int64_t n_sparse_tokens_ = 0;        // this step's tokens that select
  std::vector<int32_t> sparse_flags_;  // [n] host copy of d_sparse_tok_'s step
  int32_t dense_max_pos1_ = 0;         // bucketed max over the other tokens (0: none)
  const int32_t* d_sparse_tok_ = nullptr;  // [n] step table: 1 = selects
  Scratch sel_;     // [n * n_kv] x (chunks [cap] | pages [cap]) then lengths [n * n_kv], int32
  Scratch scores_;  // [n * n_kv][score stride] f32
  Scratch shortlist_;  // hierarchical scoring / rerank: [n * n_kv] x (list [shortlist] i32, scores [shortlist] f32), n_list [n * n_kv]
  Scratch rerank_mass_;  // rerank: [n * n_kv][shortlist + cap][G] exact log masses, f32
  int64_t sel_rows_ = 0;  // rows of the last selection (last_selections)
  int sel_cap_ = 0;
  Scratch yall_;   // [n][sum of rows] f32: a fused projection's output before its split
  // Prefill staging (kv_stage.h): a prompt run's sequence's pages of one layer as 16-bit pages
  // [n_pages][kv_stage_page_bytes], for the flash kernel where the pages cannot feed it (the
  // host tier's mapped pages, fp8 / int8 / int4). stage_max_bytes_: HS_CUDA_PREFILL_STAGE
  // (bytes; 0 = off: such runs take the exact kernel over the pages, as before session 24).
  Scratch stage_;
  size_t stage_max_bytes_ = size_t{4} << 30;
  bool stage_warned_ = false;
  // The step's sparse tokens span [sp_first_, sp_end_) (plan_sparse_step); the last selection's
  // rows are tokens [sel_first_, sel_end_) (select_sparse: every token when graph-replayable).
  int64_t sp_first_ = 0, sp_end_ = 0;
  int64_t sel_first_ = 0, sel_end_ = 0;
  size_t stage_failed_bytes_ = SIZE_MAX;  // the smallest copy that did not fit (not retried)
  // stage_ of at least `bytes` (grown by half, within the cap); false when the device has no room
  // (the caller falls back to the exact kernel). Kept between steps.
  bool grow_stage(size_t bytes);
  bool stage_tables_ = false;              // the step uploaded d_stage_indices_
  const int32_t* d_stage_indices_ = nullptr;  // [total pages]: each sequence's pages as 0..n-1
  Scratch attn_;   // attention partials (kernels.h attention_scratch_floats)

  // Host tier (cuda_host_tier.cpp).
  KvTier kv_tier_;
  bool kv_base_host_ = false;  // kv_base_ is mapped pinned host memory (cudaFreeHost)
  struct HotSet {
    void* base = nullptr;  // one allocation: res | slot_block | slot_fill | slot_used | clock | slots
    int32_t n_slots = 0;
    int n_layers = 0;
    int64_t piece_bytes = 0;
    int64_t res_ints = 0, meta_ints = 0, clock_ints = 0;  // per layer
    int64_t slots_bytes = 0;                                // per layer
    int64_t layer_bytes = 0;                                // all of one layer's arrays, 256-aligned
    unsigned long long* counters = nullptr;                 // [kHotCounters] device
    unsigned long long* counters_host = nullptr;            // pinned copy (end_step)
    unsigned long long seen[4] = {0, 0, 0, 0};
  } hot_;
  int64_t hot_max_tokens_ = 0;
  float hot_force_miss_ = 0.0f;  // HS_CUDA_HOT_FORCE_MISS=F: that fraction of selected pieces miss (1: worst case)
  Scratch hot_scratch_;          // slots_out [n * n_kv][cap], then hot_step_scratch_ints
  // The K / V rows of the step's last kv_write (layer hot_kv_layer_, -1: none this step): the
  // resolve tops the decode rows' growing pages up from them.
  int hot_kv_layer_ = -1;
  CRows hot_k_, hot_v_;
  Status bind_hot_set();         // bind_sparse_pages, host tier on
  void free_hot_set();
  // hot_set.h's view of sparse layer slot `slot`.
  HotPoolView hot_pool(int slot) const;
  Status hot_fetch(int layer, int slot, const SelectArgs& s, int64_t rows, AttnArgs& a);
  void collect_hot_counters();  // end_step
  void note_hot_kv(int layer, const Tensor& k, const Tensor& v);  // kv_write / rope_qk_kv_write

  // Device KV copy: n_layer layers of n_blocks pages, layer l at kv_base_ + l * kv_layer_bytes_.
  const KvCache* kv_bound_ = nullptr;
  KvGeometry kv_geom_;
  int32_t kv_blocks_ = 0;
  void* kv_base_ = nullptr;
  int64_t kv_page_elems_ = 0;
  int64_t kv_layer_bytes_ = 0;
};

// The backend of CUDA device `device_index`. Errors: no CUDA device (with the runtime's
// reason), an index out of range, a failed stream / cuBLAS set-up.
Result<std::unique_ptr<Backend>> make_cuda_backend(int device_index);

}  // namespace hs::cuda
