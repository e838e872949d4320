// backend/cpu/attention_tile_kernel.h — the prefill attention tile (attention.h,
// attention_prefill_tile), written once and compiled per ISA like attention_kernel.h.
//
// A tile is T consecutive query tokens of one sequence × the G query heads of one kv head:
// R = T·G query rows. Keys are taken 16 at a time (one vector of scores per row): the block's
// K rows are transposed into Kt [head_dim][16] f32 and its V rows converted into Vb
// [16][head_dim] f32 once, then every row of the tile reuses them from L1:
//   scores  S[r][0..16) = Σ_d q[r][d] · Kt[d][·]      (broadcast q, one FMA per d, 8 rows at once)
//   softmax per row: causal / window mask, online max and sum
//   output  acc[r][·] += Σ_j p[r][j] · Vb[j][·]       (the rows' accumulators in registers)
// so a key is read (and converted) once per tile instead of once per query token, and no
// dot product ends in a horizontal sum. Cost: 4·R·16·head_dim FLOPs per key block against
// 2·16·head_dim elements transposed or converted; rows whose keys are all masked are skipped.
// Scratch lives on the stack: Q and acc of at most kTileMaxFloats floats each.
#pragma once

#include <cmath>
#include <cstring>

#include "backend/cpu/attention.h"
#include "backend/cpu/simd_math.h"

namespace hs::cpu::detail {
namespace {

typedef int32_t v16i __attribute__((vector_size(64)));

constexpr int kTileKeys = 16;
constexpr int kTileMaxFloats = 16384;  // rows × head_dim of Q (and of acc) per tile
#if defined(__AVX512F__)
constexpr int kTileAccRegs = 24;  // v16f accumulators the output stage keeps live (zmm: 32 registers)
#else
constexpr int kTileAccRegs = 6;   // v16f is two ymm registers (16 of them)
#endif

// exp(x) for x <= 0, lane-wise: exp_nonpositive's polynomial on 16 lanes.
v16f exp_nonpositive_v16(v16f x) {
  x = x < -87.0f ? -87.0f : x;
  const v16f n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const v16f r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  v16f p = r * 1.3981999507e-3f + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const v16i bits = (__builtin_convertvector(n, v16i) + 127) << 23;
  v16f scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

float hmax_v16(v16f v) {
  const v8f a0 = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
  const v8f a1 = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const v8f a = a0 > a1 ? a0 : a1;
  const v4f b0 = __builtin_shufflevector(a, a, 0, 1, 2, 3), b1 = __builtin_shufflevector(a, a, 4, 5, 6, 7);
  const v4f b = b0 > b1 ? b0 : b1;
  const float c0 = b[0] > b[2] ? b[0] : b[2], c1 = b[1] > b[3] ? b[1] : b[3];
  return c0 > c1 ? c0 : c1;
}

// S[u][·] = Σ_d q[u][d] · Kt[d][·] for R rows (q: [R][HD] contiguous, s: [R][16]).
template <int R, int HD>
void tile_scores(const float* q, const float* kt, float* s) {
  v16f a[R];
  for (int u = 0; u < R; ++u) a[u] = v16f{};
  for (int d = 0; d < HD; ++d) {
    const v16f k = load_v16(kt + d * kTileKeys);
    for (int u = 0; u < R; ++u) a[u] += q[u * HD + d] * k;
  }
  for (int u = 0; u < R; ++u) store_v16(s + u * kTileKeys, a[u]);
}

// acc[u][·] = acc[u][·] · corr[u] + Σ_{j<nk} p[u][j] · Vb[j][·] for R rows.
template <int R, int NV>
void tile_values(float* acc, const float* p, const float* corr, const float* vb, int nk) {
  constexpr int hd = 16 * NV;
  v16f a[R][NV];
  for (int u = 0; u < R; ++u)
    for (int i = 0; i < NV; ++i) a[u][i] = load_v16(acc + u * hd + 16 * i) * corr[u];
  for (int j = 0; j < nk; ++j) {
    for (int i = 0; i < NV; ++i) {
      const v16f v = load_v16(vb + j * hd + 16 * i);
      for (int u = 0; u < R; ++u) a[u][i] += p[u * kTileKeys + j] * v;
    }
  }
  for (int u = 0; u < R; ++u)
    for (int i = 0; i < NV; ++i) store_v16(acc + u * hd + 16 * i, a[u][i]);
}

template <typename T, int NV>
void attention_tile_fixed(const PrefillTile& t, int G, const PagedKvView& kv, int kv_head, float scale) {
  constexpr int hd = 16 * NV;
  constexpr int kMaxRows = kTileMaxFloats / hd;
  constexpr int kValueRows = kTileAccRegs / NV > 0 ? kTileAccRegs / NV : 1;
  const int n_rows = t.n_tokens * G;  // <= kMaxRows (attention_tile_max_tokens)
  alignas(64) float Q[kMaxRows * hd];        // [rows][hd] scaled queries, row r = token r / G, head r % G
  alignas(64) float acc[kMaxRows * hd];      // [rows][hd] unnormalized outputs
  alignas(64) float S[kMaxRows * kTileKeys];  // [rows][16] scores, then probabilities
  alignas(64) float Kt[hd * kTileKeys];      // [hd][16] the key block, transposed
  alignas(64) float Vb[kTileKeys * hd];      // [16][hd] the value block
  float m[kMaxRows], l[kMaxRows], corr[kMaxRows];
  for (int i = 0; i < t.n_tokens; ++i) {
    const float* src = t.q + static_cast<int64_t>(t.rows[i]) * t.q_stride;
    for (int e = 0; e < G * hd; ++e) Q[i * G * hd + e] = src[e] * scale;
  }
  for (int r = 0; r < n_rows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    for (int d = 0; d < hd; ++d) acc[r * hd + d] = 0.0f;
  }
  const int P = kv.page_tokens;
  const int32_t pos_last = t.pos0 + t.n_tokens - 1;
  const int32_t key_first = t.window > 0 && t.pos0 - t.window + 1 > 0 ? t.pos0 - t.window + 1 : 0;
  const v16i lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  for (int32_t kb = key_first; kb <= pos_last; kb += kTileKeys) {
    const int nk = pos_last + 1 - kb < kTileKeys ? pos_last + 1 - kb : kTileKeys;
    for (int j = 0; j < nk; ++j) {
      const int32_t p = kb + j;
      const T* row = static_cast<const T*>(kv.layer_base) + static_cast<int64_t>(kv.blocks[p / P]) * kv.page_elems +
                     (static_cast<int64_t>(kv_head) * P + p % P) * 2 * hd;
      for (int i = 0; i < NV; ++i) {
        const v16f k = load_v16(row + 16 * i);
        for (int x = 0; x < 16; ++x) Kt[(16 * i + x) * kTileKeys + j] = k[x];
        store_v16(Vb + j * hd + 16 * i, load_v16(row + hd + 16 * i));
      }
    }
    for (int j = nk; j < kTileKeys; ++j) {  // past the last key: zeros (masked below)
      for (int d = 0; d < hd; ++d) Kt[d * kTileKeys + j] = 0.0f;
      for (int d = 0; d < hd; ++d) Vb[j * hd + d] = 0.0f;
    }
    // Tokens that see at least one key of the block: pos_i >= kb and (window) first_i <= kb + nk - 1.
    const int i_lo = kb - t.pos0 > 0 ? kb - t.pos0 : 0;
    int i_hi = t.n_tokens;
    if (t.window > 0 && kb + nk - 1 + t.window - t.pos0 < i_hi) i_hi = kb + nk - 1 + t.window - t.pos0;
    if (i_lo >= i_hi) continue;
    const int r_lo = i_lo * G, r_hi = i_hi * G;
    int r = r_lo;
    for (; r + 8 <= r_hi; r += 8) tile_scores<8, hd>(Q + r * hd, Kt, S + r * kTileKeys);
    for (; r < r_hi; ++r) tile_scores<1, hd>(Q + r * hd, Kt, S + r * kTileKeys);
    for (r = r_lo; r < r_hi; ++r) {
      const int32_t pos = t.pos0 + r / G;
      const int32_t first = t.window > 0 && pos - t.window + 1 > 0 ? pos - t.window + 1 : 0;
      const bool whole = nk == kTileKeys && kb + kTileKeys - 1 <= pos && kb >= first;
      v16f s = load_v16(S + r * kTileKeys);
      v16i valid = {};
      if (!whole) {
        const v16i key = lane + kb;
        valid = (key <= pos) & (key >= first) & (lane < nk);
        s = valid ? s : -INFINITY;
      }
      const float block_max = hmax_v16(s);
      const float m_new = block_max > m[r] ? block_max : m[r];
      corr[r] = m[r] == -INFINITY ? 0.0f : exp_nonpositive(m[r] - m_new);
      v16f p = exp_nonpositive_v16(s - m_new);
      if (!whole) p = valid ? p : 0.0f;
      l[r] = l[r] * corr[r] + hsum_v16(p);
      m[r] = m_new;
      store_v16(S + r * kTileKeys, p);
    }
    for (r = r_lo; r + kValueRows <= r_hi; r += kValueRows)
      tile_values<kValueRows, NV>(acc + r * hd, S + r * kTileKeys, corr + r, Vb, nk);
    for (; r < r_hi; ++r) tile_values<1, NV>(acc + r * hd, S + r * kTileKeys, corr + r, Vb, nk);
  }
  for (int i = 0; i < t.n_tokens; ++i) {
    float* dst = t.out + static_cast<int64_t>(t.rows[i]) * t.out_stride;
    for (int g = 0; g < G; ++g) {
      const int r = i * G + g;
      const float inv = 1.0f / l[r];  // l > 0: every token sees its own key
      for (int d = 0; d < hd; ++d) dst[g * hd + d] = acc[r * hd + d] * inv;
    }
  }
}

template <typename T>
void attention_tile_dispatch(const PrefillTile& t, int G, const PagedKvView& kv, int kv_head, float scale) {
  switch (kv.head_dim) {
    case 64: return attention_tile_fixed<T, 4>(t, G, kv, kv_head, scale);
    case 128: return attention_tile_fixed<T, 8>(t, G, kv, kv_head, scale);
    case 256: return attention_tile_fixed<T, 16>(t, G, kv, kv_head, scale);
    default: return;  // attention_tile_max_tokens is 0 for other head sizes
  }
}

void attention_tile_impl(const PrefillTile& t, int G, const PagedKvView& kv, int kv_head, float scale) {
  if (kv.f16)
    attention_tile_dispatch<_Float16>(t, G, kv, kv_head, scale);
  else
    attention_tile_dispatch<float>(t, G, kv, kv_head, scale);
}

}  // namespace
}  // namespace hs::cpu::detail
