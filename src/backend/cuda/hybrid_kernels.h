// backend/cuda/hybrid_kernels.h — launchers of the hybrid (Gated DeltaNet) and mixture-of-experts
// kernels of hybrid.cu (internal to backend/cuda; same seam rules as kernels.h: plain structs,
// C++17, no fmt). The ops around them (checks, scratch) are cuda_hybrid.cpp.
//
// Per-sequence ops read the step's active-sequence tables (begin_step): sequence j of the step
// (those with at least one row, in plan order) owns rows rows[indptr[j] .. indptr[j + 1]) in
// order, its recurrent state in slot slot[j], fresh[j] = 1 when its first row is at position 0
// (its slot's old contents are ignored, as on the CPU). indptr has n_tokens + 1 entries, padded
// with the total, so a launch sized by the step's token count (what a CUDA graph keys on) covers
// every sequence and the padding blocks exit.
//
// Numerics: the delta rule runs the recurrent form for every token (the CPU's chunked prefill is
// the same recurrence regrouped), its dot products summed in 4 partial sums of k_dim / 4 rows
// (fused multiply-adds), so it equals the CPU up to rounding; norms accumulate squares in double
// like the CPU.
// Cost: conv one thread per (sequence, channel), K - 1 floats of history in registers; the delta
// rule one CTA per (sequence, v-head, 32 columns), each column's k_dim floats of state in 4
// lanes' registers (read and written once per step), 4 · k_dim · v_dim flops per token, tokens
// in sequence; MoE one warp per
// (routed row, n_ff row) for gate / up and per (token, n_embd column) for down: each routed row
// reads its expert's weights (fine for decode; a prefill of many rows rereads them, from L2
// mostly: grouped GEMMs are the next step, docs/hybrid-models.md).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"

namespace hs::cuda {

struct SeqTables {
  const int32_t* indptr = nullptr;  // [n_tokens + 1]
  const int32_t* rows = nullptr;    // [n_tokens]
  const int32_t* slot = nullptr;    // [n_tokens] (first n_active used)
  const int32_t* fresh = nullptr;   // [n_tokens]
  int64_t n_grid = 0;               // sequences a launch covers: the step's token count
};

// Widest conv kernel the launcher takes (Qwen3.5 / Qwen3-Next: 4).
constexpr int kMaxConvKernel = 8;
// out = silu(causal depthwise conv(x)) per sequence; w: [channels][kernel] f32; state:
// [slots][(kernel - 1) * channels] f32 (history row-major, oldest first), updated.
cudaError_t launch_conv1d_causal(CRows x, const float* w, int kernel, float* state, int64_t state_cols, Rows out,
                                 SeqTables t, cudaStream_t s);

// Widest key head the delta-rule kernel takes: its state column lives in 4 lanes' registers,
// k_dim / 4 floats each (Qwen3.5 / Qwen3-Next: 128).
constexpr int kMaxDeltaKDim = 256;
struct DeltaArgs {
  int n_k_heads = 0, n_v_heads = 0, k_dim = 0, v_dim = 0;
  bool v_tiled = true;
  // The prologue (backend.h DeltaPrologue) when ssm_a is set: q, k L2-normalised as they are
  // staged, the gates computed from raw g / beta (the l2_norm and delta_gates kernels' math).
  const float* ssm_a = nullptr;    // [n_v_heads]
  const float* dt_bias = nullptr;  // [n_v_heads]
  float l2_eps = 0.0f, q_scale = 1.0f;
};
// The gated delta rule per (sequence, v-head); state: [slots][n_v * k_dim * v_dim] f32.
cudaError_t launch_gated_delta_rule(CRows q, CRows k, CRows v, CRows g, CRows beta, float* state, int64_t state_cols,
                                    Rows out, DeltaArgs a, SeqTables t, cudaStream_t s);

// In place per head of head_dim: x <- x * rsqrt(sum x^2 + eps), then * scale when scale != 1.
cudaError_t launch_l2_norm(Rows x, int head_dim, float eps, float scale, cudaStream_t s);
// out = w * rms_norm(x) * silu(z) per group of `group` columns (w: [group]). outq: also write out's
// records for the quantized GEMV after it (1-2 rows, group a multiple of 32, x.cols a whole
// number of u-steps); cudaErrorInvalidValue, launching nothing, for a shape that does not take it.
cudaError_t launch_rms_norm_gated(CRows x, CRows z, const float* w, int group, float eps, Rows out, cudaStream_t s,
                                  OutQ outq = OutQ{});
// x *= sigmoid(gate).
cudaError_t launch_sigmoid_mul(Rows x, CRows gate, cudaStream_t s);
// a <- ssm_a * softplus(a + dt_bias), b <- sigmoid(b); ssm_a, dt_bias: [a.cols].
cudaError_t launch_delta_gates(Rows a, Rows b, const float* ssm_a, const float* dt_bias, cudaStream_t s);
// RoPE on the first rot_dims of every head of head_dim (angle pos * theta^(-2i / rot_dims)).
cudaError_t launch_rope_partial(Rows x, int head_dim, int rot_dims, float theta, bool neox, const int32_t* positions,
                                cudaStream_t s);

// The router per row of logits [n][n_experts]: softmax, the n_used best (ties: lower id),
// renormalised when norm_topk. ids: [n][n_used] int32, weights: [n][n_used] f32, contiguous.
cudaError_t launch_moe_route(CRows logits, int n_used, bool norm_topk, int32_t* ids, float* weights, cudaStream_t s);
// A stack of 16-bit expert matrices: expert e's row r at p + (e * rows_per_expert + r) * stride.
struct ExpertWeights {
  const uint16_t* p = nullptr;
  int64_t stride = 0;  // elements between rows
  int64_t rows_per_expert = 0;
  bool bf16 = true;  // else f16
};
// h[r][f] = silu(gate_e · x[t]) * (up_e · x[t]) for routed row r = t * n_used + j, e = ids[r];
// h: [n * n_used][n_ff] f32 scratch. Rows routed to an id outside [0, n_experts) get zeros.
cudaError_t launch_moe_gate_up(CRows x, ExpertWeights gate, ExpertWeights up, const int32_t* ids, int n_used,
                               int n_experts, float* h, cudaStream_t s);
// out[t][c] = sum_j weights[t][j] * (down_e · h[t * n_used + j])[c], in j order.
cudaError_t launch_moe_down(const float* h, int64_t n_ff, ExpertWeights down, const int32_t* ids, const float* weights,
                            int n_used, int n_experts, Rows out, cudaStream_t s);
// x[r][c] += sigmoid(gate[r][0]) * y[r][c].
cudaError_t launch_add_sigmoid_gated(Rows x, CRows y, CRows gate, cudaStream_t s);

}  // namespace hs::cuda
