// backend/cpu_backend.h — the Backend over host memory, with the kernels of backend/cpu/.
//
// Weights stay in place in the mmap'd GGUF (quantized types are read by cpu::matmul with no
// dequantized copy); activations are host f32 rows; KV is the KvCache's own pages (the host
// tier). Work is spread over the plan's ThreadPool. Matmul precision (MatmulPrecision) picks
// cpu::matmul_exact or the int8 / int8x2 integer-dot kernels. Attention, dense or sparse,
// is backend/cpu_attention.h.
// Cost: the kernels' own (docs/cpu-engine.md); RoPE cos/sin are computed once per step and
// base (theta) and shared by every layer and by Q and K.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "backend/cpu_attention.h"

namespace hs {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::kCpu; }
  std::string name() const override;

  Result<Buffer> alloc(size_t bytes, std::string_view what) override;
  void free_memory(void* ptr) override;
  Result<Tensor> prepare_weight(const Tensor& host, std::string_view name) override;
  Result<Tensor> prepare_vector(std::span<const float> host, std::string_view name) override;
  Status to_host(const Tensor& src, void* dst) override;
  Status from_host(const void* src, Tensor dst) override;

  Status begin_step(const ForwardPlan& plan) override;
  Status end_step() override;

  Status embedding(const Tensor& table, Tensor out) override;
  Status matmul(const Tensor& w, const Tensor& x, Tensor y) override;
  Status matmul_multi(std::span<const Tensor> ws, const Tensor& x, std::span<const Tensor> ys) override;
  Status rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) override;
  Status rope(Tensor x, int head_dim, float theta, bool neox) override;
  Status glu(GluKind kind, const Tensor& gate, const Tensor& up, Tensor out) override;
  Status add(Tensor x, const Tensor& y) override;
  Status add_bias(Tensor x, const Tensor& bias) override;
  Status scale(Tensor x, float s) override;
  Status softcap(Tensor x, float cap) override;
  Status copy(const Tensor& src, Tensor dst) override;
  Status logit_rows(const Tensor& src, Tensor dst) override;
  Status kv_write(int layer, const Tensor& k, const Tensor& v) override;
  Status attention(int layer, const Tensor& q, Tensor out, const AttentionParams& p) override;
  // Hybrid (Gated DeltaNet) ops: backend/cpu_backend_hybrid.cpp over backend/cpu/delta_rule.h.
  Status conv1d_causal(const Tensor& x, const Tensor& w, int kernel, Tensor state, Tensor out) override;
  Status gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                          Tensor state, Tensor out, const DeltaRuleParams& p) override;
  Status l2_norm(Tensor x, int head_dim, float eps, float scale) override;
  Status rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor out) override;
  Status sigmoid_mul(Tensor x, const Tensor& gate) override;
  Status delta_gates(Tensor a, Tensor b, const Tensor& ssm_a, const Tensor& dt_bias) override;
  Status rope_partial(Tensor x, int head_dim, int rot_dims, float theta, bool neox) override;
  // Mixture of experts: backend/cpu_backend_moe.cpp.
  Status moe_route(const Tensor& logits, Tensor ids, Tensor weights, const MoeParams& p) override;
  Status moe_experts(const Tensor& x, const Tensor& gate_exps, const Tensor& up_exps, const Tensor& down_exps,
                     const Tensor& ids, const Tensor& weights, Tensor out, const MoeParams& p) override;
  Status add_sigmoid_gated(Tensor x, const Tensor& y, const Tensor& gate) override;

  void set_matmul_precision(MatmulPrecision p) override { precision_ = p; }
  MatmulPrecision matmul_precision() const override { return precision_; }
  const SparseKernels* host_sparse_kernels() const override;
  Status set_sparse(SparseRuntime* rt, HotChunks* hot) override;
  // Reads every key of the host pages back into the runtime's sketch / Quest store.
  Status rebuild_sparse_metadata(KvCache& kv, const SeqKv& seq, int32_t n_tokens) override;

 private:
  ThreadPool& pool() const;
  // cos | sin tables of this step's positions for (theta, head_dim): [n][head_dim / 2] each.
  const float* rope_table(float theta, int head_dim);

  MatmulPrecision precision_ = kDefaultMatmulPrecision;
  CpuAttention attention_;
  struct RopeTable {
    float theta = 0;
    int head_dim = 0;
    std::vector<float> cs;  // [n][cos | sin of head_dim / 2]
  };
  std::vector<RopeTable> rope_tables_;  // this step's, one per (theta, head_dim) asked for
  int n_rope_tables_ = 0;
  // This step's batch rows per sequence (CSR), built by the first hybrid op of the step.
  void build_seq_rows();
  Status check_state(const Tensor& state, int64_t slot_floats, const char* op) const;
  bool seq_rows_valid_ = false;
  std::vector<int32_t> seq_rows_, seq_rows_indptr_;  // [n], [n_seqs + 1]
  // moe_experts' scratch, grown to the largest step seen (never shrunk): the (token, slot) pairs
  // grouped by expert, and their activations.
  struct MoeScratch {
    std::vector<int32_t> indptr;    // [n_experts + 1] CSR over the grouped rows
    std::vector<int32_t> token;     // [n · k] the token of grouped row r
    std::vector<int32_t> row_of;    // [n · k] the grouped row of (token t, slot j) at t · k + j
    std::vector<float> x, g, u, d;  // [n · k][n_embd], [n · k][n_ff] x2, [n · k][n_embd]
  };
  MoeScratch moe_;
};

}  // namespace hs
