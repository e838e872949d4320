// backend/cpu/attention.cpp — dispatch and merge for the paged attention kernel.
#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/attention_kernel.h"
#include "backend/cpu/attention_tile_kernel.h"

namespace hs::cpu {
namespace detail {
void attention_partial_avx2(const float*, int, const PagedKvView&, int, int32_t, int32_t, float, AttnPartial);
void attention_partial_avx512(const float*, int, const PagedKvView&, int, int32_t, int32_t, float, AttnPartial);
void chunk_log_mass_avx2(const float*, int, const PagedKvView&, int, const int32_t*, int, int, int32_t, float, float*);
void chunk_log_mass_avx512(const float*, int, const PagedKvView&, int, const int32_t*, int, int, int32_t, float, float*);
void attention_tile_avx2(const PrefillTile&, int, const PagedKvView&, int, float);
void key_scores_avx2(const float*, const PagedKvView&, int, int32_t, float, float*);
void key_scores_avx512(const float*, const PagedKvView&, int, int32_t, float, float*);
void attention_tile_avx512(const PrefillTile&, int, const PagedKvView&, int, float);
}  // namespace detail

namespace {

using PartialFn = void (*)(const float*, int, const PagedKvView&, int, int32_t, int32_t, float, AttnPartial);
using LogMassFn = void (*)(const float*, int, const PagedKvView&, int, const int32_t*, int, int, int32_t, float, float*);
using TileFn = void (*)(const PrefillTile&, int, const PagedKvView&, int, float);
using ScoresFn = void (*)(const float*, const PagedKvView&, int, int32_t, float, float*);

struct Dispatch {
  PartialFn fn;
  const char* name;
  LogMassFn log_mass;
  TileFn tile;
  ScoresFn scores;
};

Dispatch pick() {
  const char* force = std::getenv("HS_SIMD");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (force && std::strcmp(force, "scalar") == 0)
    return {detail::attention_partial_impl, "scalar", detail::chunk_log_mass_impl, detail::attention_tile_impl, detail::key_scores_impl};
  if (avx512 && !(force && std::strcmp(force, "avx2") == 0))
    return {detail::attention_partial_avx512, "avx512", detail::chunk_log_mass_avx512, detail::attention_tile_avx512, detail::key_scores_avx512};
  if (avx2) return {detail::attention_partial_avx2, "avx2", detail::chunk_log_mass_avx2, detail::attention_tile_avx2, detail::key_scores_avx2};
  return {detail::attention_partial_impl, "scalar", detail::chunk_log_mass_impl, detail::attention_tile_impl, detail::key_scores_impl};
}

const Dispatch& dispatch() {
  static const Dispatch d = pick();
  return d;
}

}  // namespace

void attention_partial(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t begin, int32_t end,
                       float scale, AttnPartial part) {
  dispatch().fn(q, n_q, kv, kv_head, begin, end, scale, part);
}

void attention_merge(const AttnPartial* parts, int n_parts, int n_q, int head_dim, float* out) {
  for (int g = 0; g < n_q; ++g) {
    float m = -INFINITY;
    for (int p = 0; p < n_parts; ++p) m = std::max(m, parts[p].max[g]);
    float total = 0.0f;
    float* o = out + g * head_dim;
    std::fill(o, o + head_dim, 0.0f);
    for (int p = 0; p < n_parts; ++p) {
      const float w = parts[p].max[g] == -INFINITY ? 0.0f : std::exp(parts[p].max[g] - m);
      total += parts[p].sum[g] * w;
      const float* acc = parts[p].acc + g * head_dim;
      for (int d = 0; d < head_dim; ++d) o[d] += w * acc[d];
    }
    const float inv = total > 0 ? 1.0f / total : 0.0f;
    for (int d = 0; d < head_dim; ++d) o[d] *= inv;
  }
}

void attention_paged(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t begin, int32_t end,
                     float scale, float* out) {
  std::vector<float> buf(static_cast<size_t>(n_q) * (2 + kv.head_dim));
  AttnPartial part{buf.data(), buf.data() + n_q, buf.data() + 2 * n_q};
  attention_partial(q, n_q, kv, kv_head, begin, end, scale, part);
  attention_merge(&part, 1, n_q, kv.head_dim, out);
}

void chunk_log_mass(const float* q, int n_q, const PagedKvView& kv, int kv_head, const int32_t* chunk_ids,
                    int n_chunks, int chunk_tokens, int32_t n_tokens, float scale, float* out) {
  if (n_q <= detail::kMaxGroup && chunk_tokens <= detail::kMaxPage && kv.page_tokens % chunk_tokens == 0) {
    dispatch().log_mass(q, n_q, kv, kv_head, chunk_ids, n_chunks, chunk_tokens, n_tokens, scale, out);
    return;
  }
  // Outside the kernel's limits: one attention partial per chunk (reads V too).
  std::vector<float> buf(static_cast<size_t>(n_q) * (2 + kv.head_dim));
  const AttnPartial part{buf.data(), buf.data() + n_q, buf.data() + 2 * n_q};
  for (int i = 0; i < n_chunks; ++i) {
    float* o = out + static_cast<int64_t>(i) * n_q;
    const int32_t b = chunk_ids[i] * chunk_tokens, e = std::min(n_tokens, b + chunk_tokens);
    if (b >= e) {
      for (int g = 0; g < n_q; ++g) o[g] = -INFINITY;
      continue;
    }
    attention_partial(q, n_q, kv, kv_head, b, e, scale, part);
    for (int g = 0; g < n_q; ++g) o[g] = part.max[g] + std::log(part.sum[g]);
  }
}

void key_scores(const float* q, const PagedKvView& kv, int kv_head, int32_t n_tokens, float scale, float* out) {
  if (kv.page_tokens <= detail::kMaxPage) {
    dispatch().scores(q, kv, kv_head, n_tokens, scale, out);
    return;
  }
  for (int32_t t = 0; t < n_tokens; ++t) {  // pages larger than the kernel's scratch: one key at a time
    const int P = kv.page_tokens, hd = kv.head_dim;
    const int64_t off = static_cast<int64_t>(kv.blocks[t / P]) * kv.page_elems + (static_cast<int64_t>(kv_head) * P + t % P) * 2 * hd;
    float dot = 0.0f;
    for (int d = 0; d < hd; ++d)
      dot += q[d] * (kv.f16 ? static_cast<float>(static_cast<const _Float16*>(kv.layer_base)[off + d])
                            : static_cast<const float*>(kv.layer_base)[off + d]);
    out[t] = dot * scale;
  }
}

int attention_tile_max_tokens(int n_q, int head_dim) {
  if (n_q < 1 || (head_dim != 64 && head_dim != 128 && head_dim != 256)) return 0;
  return detail::kTileMaxFloats / head_dim / n_q;  // 0 when one token's rows do not fit
}

void attention_prefill_tile(const PrefillTile& tile, int n_q, const PagedKvView& kv, int kv_head, float scale) {
  dispatch().tile(tile, n_q, kv, kv_head, scale);
}

const char* attention_simd_level() { return dispatch().name; }

}  // namespace hs::cpu
