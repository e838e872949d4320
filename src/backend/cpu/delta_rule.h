// backend/cpu/delta_rule.h — the CPU kernels of the hybrid (Gated DeltaNet) layers: the
// gated delta rule in its recurrent and chunked forms, the depthwise causal conv1d with its
// rolling state, and the small gates and norms around them.
//
// Formulas are transformers' Qwen3.5 / Qwen3-Next torch paths (models-and-gguf.md §1). Per
// v-head, state S [k_dim][v_dim] f32, token t with normalised q_t (scaled), k_t, gate g_t (log
// decay, <= 0) and beta_t:
//   S <- exp(g_t) S ;  delta = beta_t (v_t - Sᵀ k_t) ;  S <- S + k_t deltaᵀ ;  o_t = Sᵀ q_t.
// The chunked form computes the same per chunk of C tokens (C = 64) from the chunk's start
// state S0 with cumulative decays γ: a unit lower-triangular solve for the deltas
//   delta_i = beta_i (v_i - e^{γ_i} S0ᵀ k_i) - Σ_{j<i} beta_i e^{γ_i-γ_j} (k_i·k_j) delta_j,
// then o_i = e^{γ_i} S0ᵀ q_i + Σ_{j<=i} e^{γ_i-γ_j} (q_i·k_j) delta_j and
// S = e^{γ_last} S0 + Σ_j e^{γ_last-γ_j} k_j delta_jᵀ: O(C·(C + k_dim)·v_dim) per chunk and head
// instead of C sequential rank-1 updates, the form a GPU kernel runs as matmuls.
// Rows of one sequence are addressed through a row list (a batch interleaves sequences).
// Cost: recurrent 4·k_dim·v_dim flops per token and v-head; chunked about the same plus
// C·(k_dim + v_dim) per token.
#pragma once

#include <cstdint>
#include <span>

namespace hs::cpu {

inline constexpr int kDeltaChunk = 64;

// Rows of an f32 matrix: row r at p + r * stride (floats).
struct RowsView {
  const float* p = nullptr;
  int64_t stride = 0;
  const float* row(int64_t r) const { return p + r * stride; }
};
struct MutRowsView {
  float* p = nullptr;
  int64_t stride = 0;
  float* row(int64_t r) const { return p + r * stride; }
};

// One v-head of one sequence. q/k point at the k-head's columns, v/out at the v-head's, g/beta
// at the v-head's column (one float per row). rows: the sequence's batch rows in order.
// state: [k_dim][v_dim], updated in place. q must already be L2-normalised and scaled.
struct DeltaHead {
  RowsView q, k, v, g, beta;
  MutRowsView out;
  float* state = nullptr;
  int k_dim = 0, v_dim = 0;
};
void delta_rule_recurrent(const DeltaHead& h, std::span<const int32_t> rows);
void delta_rule_chunked(const DeltaHead& h, std::span<const int32_t> rows, int chunk = kDeltaChunk);

// Depthwise causal conv over `channels` of one sequence, then SiLU:
//   out_t[c] = silu(Σ_j w[c][j] · x_{t-(K-1)+j}[c]),  x_{<0} from `state`,
// state: [K-1][channels], the last K-1 inputs, oldest first (updated in place). w: [channels][K].
// out must not alias x.
void conv1d_causal_silu(RowsView x, const float* w, int channels, int kernel, float* state, MutRowsView out,
                        std::span<const int32_t> rows);

// x <- x · rsqrt(Σ x² + eps) per row of n (transformers' l2norm; eps 1e-6 there).
void l2_norm(const float* x, int n, float eps, float* out);
// out = w ⊙ (x · rsqrt(mean x² + eps)) ⊙ silu(z) over n (Qwen3-Next / 3.5 RMSNormGated).
void rms_norm_gated(const float* x, const float* z, const float* w, int n, float eps, float* out);
// x[i] *= sigmoid(g[i]).
void sigmoid_mul(float* x, const float* g, int64_t n);
// The Gated-DeltaNet gates of one row of n_v heads, in place: a <- ssm_a ⊙ softplus(a + dt_bias)
// (ssm_a = -exp(A_log), as GGUF stores it), b <- sigmoid(b).
void delta_gates(float* a, float* b, const float* ssm_a, const float* dt_bias, int n_v);

}  // namespace hs::cpu
