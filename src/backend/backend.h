// backend/backend.h — the op table every architecture's forward pass is written against.
//
// A Backend owns device memory (weights, KV pages of the caches it is handed, scratch) and
// runs the op set of ARCHITECTURE.md ("Backends") on Tensor views in that memory. A model
// file calls only these ops; `backend/cpu_backend.*` implements them with the CPU kernels of
// backend/cpu/ (thread pool behind the interface), `backend/cuda/` with cuBLAS and CUDA
// kernels. Activations are f32 rows ([n_tokens][width]); weights are whatever
// prepare_weight made of the GGUF tensor (the CPU keeps the quantized view in place, CUDA
// uploads 16-bit: f16 for GGUF block types, bf16 for BF16/F32).
//
// Plan / run (FlashInfer's split): the host builds a ForwardPlan (tokens, positions, CSR page
// tables, which rows want logits), begin_step() copies it into the backend's fixed buffers,
// then the layer ops run over those buffers without further host decisions; end_step() ends
// the step (the CPU's sparse fetch counters, a CUDA stream sync). Ops are asynchronous on a
// device backend: only to_host() and end_step() wait.
//
// Cost: a virtual call per op (~30 per layer); nothing is allocated per step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"

namespace hs {

class SparseRuntime;
class HotChunks;
class SparseKernels;

// How the CPU's matmuls treat activations (docs/cpu-engine.md, "Matmul precision"):
//  kExact  float32 activations, weights dequantized in registers (cpu::matmul_exact);
//  kInt8x2 8-bit activations plus an 8-bit residual, integer dots (cpu::matmul);
//  kInt8   8-bit activations as llama.cpp does: fastest, but moves logits by ~0.1.
// kExact and kInt8x2 both agree with transformers (golden tests); kInt8 does not. The CUDA
// backend computes 16-bit x 16-bit (the weight's f16 or bf16) with fp32 accumulation and ignores this.
enum class MatmulPrecision { kExact, kInt8x2, kInt8 };
inline constexpr MatmulPrecision kDefaultMatmulPrecision = MatmulPrecision::kInt8x2;
const char* matmul_precision_name(MatmulPrecision p);
Result<MatmulPrecision> parse_matmul_precision(std::string_view name);  // exact | int8x2 | int8

// One forward step, planned on the host. Token i is at positions[i] of seqs[seq_index[i]];
// its keys are [0, positions[i]] of that sequence (KV written by kv_write of this step).
struct ForwardPlan {
  std::span<const int32_t> tokens;     // [n]
  std::span<const int32_t> positions;  // [n]
  std::span<const int32_t> seq_index;  // [n]
  std::span<SeqKv* const> seqs;        // [n_seqs] pages reserved for this step's tokens
  KvCache* kv = nullptr;
  std::vector<int32_t> seq_tokens;     // [n_seqs] batch tokens per sequence (1: a decode token)
  std::vector<int32_t> logit_rows;     // [n_out] batch rows that want logits, in order
  std::vector<int32_t> page_indptr;    // [n_seqs + 1] CSR: pages of seq s are page_indices[indptr[s], indptr[s+1])
  std::vector<int32_t> page_indices;   // [total pages] block ids
  std::vector<int32_t> state_slots;    // [n_seqs] recurrent-state slot of each sequence (hybrid models; else empty)
  int32_t max_kv_len = 0;              // longest key range of any token
  ThreadPool* pool = nullptr;          // host threads (the CPU backend's workers)
  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
};

struct AttentionParams {
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  float scale = 1.0f;  // softmax scale
  int window = 0;      // > 0: sliding window, key j visible to position p iff p - j < window
};

enum class GluKind { kSilu, kGeluTanh };  // out = act(gate) * up

// What gated_delta_rule applies to its inputs first when given one (a Gated-DeltaNet layer's
// l2_norm of q and k and its delta_gates, the same math as those ops, so a backend can do them
// in the rule's own kernel): q, k <- l2_norm(·, k_dim, l2_eps, scale) with scale q_scale for q
// and 1 for k; g <- ssm_a ⊙ softplus(g + dt_bias), beta <- sigmoid(beta) (ssm_a, dt_bias:
// [n_v_heads] f32, prepare_vector). q, k, g and beta hold unspecified values afterwards.
struct DeltaPrologue {
  float l2_eps = 0.0f;
  float q_scale = 1.0f;
  Tensor ssm_a, dt_bias;
};

// The gated delta rule's head layout (backend gated_delta_rule).
struct DeltaRuleParams {
  int n_k_heads = 0, n_v_heads = 0, k_dim = 0, v_dim = 0;
  // v-head h reads k-head h % n_k_heads (tiled: llama.cpp's qwen35 files, and ours) or
  // h / (n_v_heads / n_k_heads) (grouped: transformers, qwen3next files).
  bool v_tiled = true;
  const DeltaPrologue* prologue = nullptr;  // null: q, k, g, beta arrive normalised and gated
};

// A mixture-of-experts FFN's routing (backend moe_route / moe_experts).
struct MoeParams {
  int n_experts = 0, n_used = 0;  // experts, experts per token (top-k)
  bool norm_topk = true;          // renormalise the chosen probabilities to sum 1
};

// What the device reaches, measured (bench's roofline fractions divide by these): memory copy
// rate (bytes read + written per second) and the dense 16-bit matmul rate (FLOP/s).
struct DevicePeaks {
  double memory_bytes_per_s = 0;
  double matmul_flops_per_s = 0;
  std::string how;  // what was timed
};

class Backend;

// Memory from a backend (device memory from alloc, or host memory from alloc_host), freed by
// it when this handle dies.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* owner, void* ptr, size_t bytes, bool host = false)
      : owner_(owner), ptr_(ptr), bytes_(bytes), host_(host) {}
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }
  void reset();
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  Backend* owner_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  bool host_ = false;  // from alloc_host: freed by free_host_memory
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;  // "cpu (avx512, 16 threads)", "cuda:0 NVIDIA H200"
  // Which device of its kind (CUDA ordinal; 0 on the CPU).
  virtual int device_index() const { return 0; }
  // Makes this backend's device the calling thread's current one (CUDA: cudaSetDevice). One host
  // thread driving several backends (tensor-parallel ranks) calls it before each rank's ops.
  virtual Status make_current() { return Status::ok(); }
  // The queue this backend's ops run on (CUDA: its cudaStream_t; null on the CPU), for
  // collectives that must be ordered after them (backend/communicator.h).
  virtual void* native_stream() const { return nullptr; }

  // ---- memory ------------------------------------------------------------------------
  // Zero-initialised; errors name the size and what is free.
  virtual Result<Buffer> alloc(size_t bytes, std::string_view what) = 0;
  virtual void free_memory(void* ptr) = 0;  // Buffer's deleter
  // Host memory that to_host / from_host copy at the bus's full rate: page-locked on CUDA (a
  // copy into pageable memory goes through the driver's bounce buffer at a fraction of it), plain
  // 64-byte-aligned memory on the CPU. Zero-initialised.
  virtual Result<Buffer> alloc_host(size_t bytes, std::string_view what);
  virtual void free_host_memory(void* ptr);  // Buffer's deleter for alloc_host
  // A GGUF weight (host view, mmap'd) in the form this backend's matmul and embedding read;
  // `name` for errors. The CPU returns the view itself; CUDA uploads it as f16 or bf16, once per
  // host address (tied embeddings share it): the host weight must stay mapped and unchanged
  // for the backend's lifetime.
  virtual Result<Tensor> prepare_weight(const Tensor& host, std::string_view name) = 0;
  // Several weights prepared together (q / k / v, gate / up): a device backend may place them
  // back to back so that matmul_multi can run them as one matrix. The default prepares each.
  virtual Result<std::vector<Tensor>> prepare_weight_group(std::span<const Tensor> hosts,
                                                           std::span<const std::string> names);
  // A small f32 vector (norm weights) on this device; the host span must outlive a CPU view.
  virtual Result<Tensor> prepare_vector(std::span<const float> host, std::string_view name) = 0;
  // Copies `src` (contiguous rows) to host memory; waits for the work queued before it.
  virtual Status to_host(const Tensor& src, void* dst) = 0;
  // Copies host memory into `dst` (contiguous rows).
  virtual Status from_host(const void* src, Tensor dst) = 0;

  // ---- step --------------------------------------------------------------------------
  virtual Status begin_step(const ForwardPlan& plan) = 0;
  // Runs `body`, the step's ops (between begin_step and end_step). A device backend may
  // capture it into a graph when a step of the same shape repeats (same token count, logit
  // rows and attention split, no buffer reallocated since) and replay the graph instead:
  // the body then reads only the fixed buffers begin_step filled. The CPU just calls it.
  virtual Status run_step(const std::function<Status()>& body) { return body(); }
  // Graph capture on (default; HS_CUDA_GRAPHS=0 turns it off) or off: eager and graph steps
  // give bitwise-identical results (the golden tests check it).
  virtual void set_graphs(bool) {}
  virtual Status end_step() = 0;
  const ForwardPlan& plan() const { return *plan_; }

  // ---- ops (activations f32 [rows][cols]) -------------------------------------------
  // out[i] = table[plan.tokens[i]] as f32. out: [n][n_embd].
  virtual Status embedding(const Tensor& table, Tensor out) = 0;
  // y = x · wᵀ. w: [n_out][n_in] (prepared), x: [n][n_in], y: [n][n_out].
  virtual Status matmul(const Tensor& w, const Tensor& x, Tensor y) = 0;
  // Several weights over one input (q/k/v, gate/up); the default runs them one by one.
  virtual Status matmul_multi(std::span<const Tensor> ws, const Tensor& x, std::span<const Tensor> ys);
  // out = x / rms(x) * w per row (w: [cols] f32; empty: no scale). out may be x.
  virtual Status rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) = 0;
  // In place: x [n][n_heads * head_dim], row i rotated at plan.positions[i]; neox rotates
  // halves (x[j], x[j + d/2]), else adjacent pairs; freq_j = theta^(-2j/head_dim).
  virtual Status rope(Tensor x, int head_dim, float theta, bool neox) = 0;
  // Fused pairs a device backend runs as one kernel (the defaults compose the ops, so every
  // backend gives the same result as the separate calls):
  // rope(q) and rope(k) at the same positions;
  virtual Status rope_qk(Tensor q, Tensor k, int head_dim, float theta, bool neox) {
    HS_RETURN_IF_ERROR(rope(q, head_dim, theta, neox));
    return rope(k, head_dim, theta, neox);
  }
  // rope_qk(q, k) then kv_write(layer, k, v): the step's rotated keys and its values into the
  // cache in one pass (k is left rotated, as rope_qk leaves it);
  virtual Status rope_qk_kv_write(int layer, Tensor q, Tensor k, const Tensor& v, int head_dim, float theta,
                                  bool neox) {
    HS_RETURN_IF_ERROR(rope_qk(q, k, head_dim, theta, neox));
    return kv_write(layer, k, v);
  }
  // add(x, y) then rms_norm(x, w, eps, out): the residual add and the next layer's norm.
  virtual Status add_rms_norm(Tensor x, const Tensor& y, const Tensor& w, float eps, Tensor out) {
    HS_RETURN_IF_ERROR(add(x, y));
    return rms_norm(x, w, eps, out);
  }
  virtual Status glu(GluKind kind, const Tensor& gate, const Tensor& up, Tensor out) = 0;
  virtual Status add(Tensor x, const Tensor& y) = 0;   // x += y
  // x[r][c] += bias[c] for every row r (attention projection biases: qwen2's q/k/v). x:
  // [rows][cols] f32 (rows may be strided), bias: [cols] f32 as prepare_vector made it.
  virtual Status add_bias(Tensor x, const Tensor& bias) = 0;
  virtual Status scale(Tensor x, float s) = 0;         // x *= s
  virtual Status softcap(Tensor x, float cap) = 0;     // x = cap * tanh(x / cap)
  virtual Status copy(const Tensor& src, Tensor dst) = 0;
  // dst[j] = src[plan.logit_rows[j]].
  virtual Status logit_rows(const Tensor& src, Tensor dst) = 0;
  // K and V of every plan token (post-RoPE, [n][n_kv_heads * head_dim]) into its page of
  // `layer` in plan.kv, converting to the cache dtype.
  virtual Status kv_write(int layer, const Tensor& k, const Tensor& v) = 0;
  // Exact softmax attention of every plan token over its keys (causal; GQA; window) in
  // plan.kv's `layer`: q, out [n][n_head * head_dim]. The CPU backend also runs the sparse
  // path here when one is attached.
  virtual Status attention(int layer, const Tensor& q, Tensor out, const AttentionParams& p) = 0;

  // ---- hybrid (Gated DeltaNet) ops: CPU and CUDA; the base class refuses them -----------
  // Recurrent state is a per-layer Tensor [n_slots][slot floats] in this backend's memory;
  // sequence s of the plan uses row plan.state_slots[s]. A sequence whose first token of the
  // step is at position 0 starts from zeros (its slot's old contents are ignored), so a slot
  // needs no clearing between owners. Rows of x / q / k / v may be strided (column slices).
  // out = silu(depthwise causal conv(x)) per sequence, state = its last kernel - 1 inputs.
  // x, out: [n][channels] (out must not alias x); w: [channels][kernel] f32 (prepare_vector);
  // state: [n_slots][(kernel - 1) * channels].
  virtual Status conv1d_causal(const Tensor& x, const Tensor& w, int kernel, Tensor state, Tensor out) {
    return hybrid_unsupported("conv1d_causal", x, w, kernel, state, out);
  }
  // The gated delta rule per sequence and v-head (models-and-gguf.md §1): chunked (64) for a
  // sequence with several step tokens, recurrent for one. q, k: [n][n_k_heads * k_dim]
  // (L2-normalised, q scaled; raw with a p.prologue); v, out: [n][n_v_heads * v_dim]; g, beta:
  // [n][n_v_heads]; state: [n_slots][n_v_heads * k_dim * v_dim], per head [k_dim][v_dim].
  virtual Status gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                  const Tensor& beta, Tensor state, Tensor out, const DeltaRuleParams& p) {
    return hybrid_unsupported("gated_delta_rule", q, k, v, g, beta, state, out, p);
  }
  // In place, per group of head_dim columns: x <- x · rsqrt(Σ x² + eps) · scale.
  virtual Status l2_norm(Tensor x, int head_dim, float eps, float scale) {
    return hybrid_unsupported("l2_norm", x, head_dim, eps, scale);
  }
  // out = w ⊙ rms_norm(x) ⊙ silu(z) per group of w.cols columns; x, z, out [n][heads * w.cols].
  virtual Status rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor out) {
    return hybrid_unsupported("rms_norm_gated", x, z, w, eps, out);
  }
  // x *= sigmoid(gate), same shapes (the gated attention's output gate).
  virtual Status sigmoid_mul(Tensor x, const Tensor& gate) { return hybrid_unsupported("sigmoid_mul", x, gate); }
  // The Gated-DeltaNet gates in place, a, b: [n][n_v]: a <- ssm_a ⊙ softplus(a + dt_bias),
  // b <- sigmoid(b); ssm_a = -exp(A_log) and dt_bias: [n_v] f32 (prepare_vector).
  virtual Status delta_gates(Tensor a, Tensor b, const Tensor& ssm_a, const Tensor& dt_bias) {
    return hybrid_unsupported("delta_gates", a, b, ssm_a, dt_bias);
  }
  // rope() on the first rot_dims of every head of head_dim (freq_j = theta^(-2j/rot_dims)); the
  // other dims pass through. The default serves rot_dims == head_dim.
  virtual Status rope_partial(Tensor x, int head_dim, int rot_dims, float theta, bool neox) {
    if (rot_dims == head_dim) return rope(x, head_dim, theta, neox);
    return hybrid_unsupported("rope_partial", x, head_dim, rot_dims, theta, neox);
  }

  // Qwen3.5's gated attention before attending, per head of head_dim: q = rms_norm(q_src, q_norm),
  // k = rms_norm(k, k_norm) in place, rope_partial of both on their first rot_dims, then
  // kv_write(layer, k, v). q_src: [n * n_head][head_dim] (strided: the q half of each head's
  // [q | gate] row), q: [n][n_head * head_dim], k, v: [n][n_kv * head_dim]; q_norm, k_norm:
  // [head_dim] f32. A device backend runs it as one kernel; the default composes the ops.
  virtual Status qk_norm_rope_kv_write(int layer, const Tensor& q_src, Tensor q, Tensor k, const Tensor& v,
                                       const Tensor& q_norm, const Tensor& k_norm, float eps, int head_dim,
                                       int rot_dims, float theta, bool neox) {
    HS_RETURN_IF_ERROR(rms_norm(q_src, q_norm, eps, q.reshaped(head_dim)));
    HS_RETURN_IF_ERROR(rms_norm(k.reshaped(head_dim), k_norm, eps, k.reshaped(head_dim)));
    HS_RETURN_IF_ERROR(rope_partial(q, head_dim, rot_dims, theta, neox));
    HS_RETURN_IF_ERROR(rope_partial(k, head_dim, rot_dims, theta, neox));
    return kv_write(layer, k, v);
  }

  // ---- mixture of experts (qwen3next): CPU and CUDA (16-bit experts); the base class refuses them
  // The router: per row of logits [n][n_experts] f32 (x · ffn_gate_inpᵀ), the softmax over the
  // experts, the n_used most probable (ties: the lower id first), their probabilities renormalised
  // to sum 1 when p.norm_topk. ids: [n][n_used] I32 (best first), weights: [n][n_used] f32.
  virtual Status moe_route(const Tensor& logits, Tensor ids, Tensor weights, const MoeParams& p) {
    return hybrid_unsupported("moe_route", logits, ids, weights, p);
  }
  // The routed experts (grouped: each expert's matmuls run once over the rows routed to it):
  // out[t] = Σ_j weights[t][j] · down_e(silu(gate_e · x[t]) ⊙ (up_e · x[t])), e = ids[t][j], summed
  // in j order. x, out: [n][n_embd] (out must not alias x); gate_exps, up_exps: [n_experts · n_ff][n_embd]
  // (expert e is rows [e · n_ff, (e + 1) · n_ff), the GGUF's 3-D {n_embd, n_ff, n_experts}),
  // down_exps: [n_experts · n_embd][n_ff], all prepared weights; ids / weights from moe_route.
  virtual Status moe_experts(const Tensor& x, const Tensor& gate_exps, const Tensor& up_exps, const Tensor& down_exps,
                             const Tensor& ids, const Tensor& weights, Tensor out, const MoeParams& p) {
    return hybrid_unsupported("moe_experts", x, gate_exps, up_exps, down_exps, ids, weights, out, p);
  }
  // The shared expert's gate: x[r] += sigmoid(gate[r][0]) · y[r]. x, y: [n][width]; gate: [n][1]
  // (x · ffn_gate_inp_shexpᵀ).
  virtual Status add_sigmoid_gated(Tensor x, const Tensor& y, const Tensor& gate) {
    return hybrid_unsupported("add_sigmoid_gated", x, y, gate);
  }

  // Times a large copy and a large 16-bit GEMM on the device (~1 s; allocates and frees its
  // own buffers). Unsupported where not implemented.
  virtual Result<DevicePeaks> measure_peaks() {
    return make_error(StatusCode::kUnsupported, "measuring peaks is not implemented on the {} backend",
                      device_name(device()));
  }

  // Per-op device times when the backend profiles (CUDA: HS_CUDA_PROFILE=1); "" otherwise.
  virtual std::string profile_report() const { return {}; }

  // ---- CPU-only extensions (the CUDA backend refuses them) ------------------------------
  virtual void set_matmul_precision(MatmulPrecision) {}
  virtual MatmulPrecision matmul_precision() const { return kDefaultMatmulPrecision; }
  // The kernels of the host sparse path (sparse/sparse_kernels.h: sketch scoring, exact chunk
  // masses) when this backend selects through sparse/ (CPU); null when it selects on its own
  // device (CUDA), in which case SparseRuntime::create gets null and builds no host stores.
  virtual const SparseKernels* host_sparse_kernels() const { return nullptr; }
  // Sparse attention and its device tier (sparse/); null: dense. CPU: every mode; CUDA: sketch
  // selection with the max rule, chunk = page (docs/gpu-sparse.md).
  virtual Status set_sparse(SparseRuntime* rt, HotChunks* hot) {
    if (rt || hot)
      return make_error(StatusCode::kUnsupported,
                        "sparse attention is not implemented on the {} backend (it runs dense)", device_name(device()));
    return Status::ok();
  }
  // Where a device backend keeps the KV pages (docs/gpu-sparse.md, "Host tier"): on the device
  // (default), or in mapped pinned host memory with a device hot set of hot_budget_bytes that
  // serves the sparse rows' selected pieces (dense rows then read the host pages over the bus).
  // Before the first step that binds a KV cache. The CPU backend's pages are host memory anyway:
  // it refuses host = true.
  struct KvTier {
    bool host = false;
    int64_t hot_budget_bytes = 0;
  };
  virtual Status set_kv_tier(const KvTier& t) {
    if (t.host)
      return make_error(StatusCode::kUnsupported, "--kv-tier host is for a GPU backend ({} keeps its KV in host memory)",
                        device_name(device()));
    return Status::ok();
  }
  // The sparse metadata (sketches / Quest bounds) of keys [0, n_tokens) of `seq` recomputed
  // from the KV pages this backend holds: a synthetic context (bench) or one restored without
  // its metadata. No-op when no sparse runtime is attached. Outside a step.
  virtual Status rebuild_sparse_metadata(KvCache& kv, const SeqKv& seq, int32_t n_tokens) {
    (void)kv, (void)seq, (void)n_tokens;
    return Status::ok();
  }

 protected:
  template <typename... Args>
  Status hybrid_unsupported(const char* op, const Args&...) const {
    return make_error(StatusCode::kUnsupported, "{} is not implemented on the {} backend yet (hybrid models run on cpu)",
                      op, device_name(device()));
  }
  const ForwardPlan* plan_ = nullptr;
};

inline Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = o.owner_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    host_ = o.host_;
    o.owner_ = nullptr;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

inline void Buffer::reset() {
  if (owner_ && ptr_) host_ ? owner_->free_host_memory(ptr_) : owner_->free_memory(ptr_);
  owner_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

// Which backends this build has; "cuda" errors clearly when the build or the machine has none.
Result<Device> parse_device(std::string_view name);  // cpu | cuda
// A backend for `device` (cuda: device `index`; fails without a GPU, naming why).
Result<std::unique_ptr<Backend>> make_backend(Device device, int index = 0);
bool cuda_compiled();

}  // namespace hs
