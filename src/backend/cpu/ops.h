// backend/cpu/ops.h — the CPU backend's element-wise, normalisation, RoPE and attention ops.
//
// Small, memory-bound kernels written so GCC vectorises them (plain loops over contiguous
// floats). Matmul lives in matmul.h, attention in attention.h.
#pragma once

#include <cstdint>

namespace hs::cpu {

// out[i] = x[i] / rms(x) * w[i]   (w may be null → no scale). x and out may alias.
void rms_norm(const float* x, const float* w, int n, float eps, float* out);
// In-place RoPE on n_heads rows of head_dim floats at position `pos`.
//  neox=false: pairs (x[2i], x[2i+1]); neox=true: pairs (x[i], x[i+d/2]); freq_i = theta^(-2i/d).
void rope(float* x, int n_heads, int head_dim, int32_t pos, float theta, bool neox);
// The same in two steps, so one table serves every layer and both Q and K of a token:
// cs/sn: [head_dim / 2] cos and sin of pos · theta^(-2i/head_dim).
void rope_table(int32_t pos, float theta, int head_dim, float* cs, float* sn);
void rope_apply(float* x, int n_heads, int head_dim, const float* cs, const float* sn, bool neox);
// out[i] = act(gate[i]) * up[i]
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out);
void add_inplace(float* x, const float* y, int64_t n);
void scale_inplace(float* x, float s, int64_t n);
// Numerically stable in-place softmax.
void softmax(float* x, int n);

}  // namespace hs::cpu
