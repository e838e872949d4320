// backend/cpu/sketch_score.cpp — query projection and the run-time ISA dispatch of the sketch
// scoring kernels (sketch_score_kernel.h).
#include "backend/cpu/sketch_score.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/sketch_score_kernel.h"

namespace hs::cpu {
namespace detail {
void sketch_score_avx2(const float*, const float*, int, const PagedSketchView&, int, int32_t, int32_t, float*);
void sketch_score_avx512(const float*, const float*, int, const PagedSketchView&, int, int32_t, int32_t, float*);
void sketch_chunk_max_avx2(const float*, const float*, int, const PagedSketchView&, int, int32_t, int, int32_t,
                           int32_t, float*);
void sketch_chunk_head_mass_avx2(const float*, const float*, int, const PagedSketchView&, int, int32_t, int, int32_t,
                                 int32_t, float, float*);
void sketch_chunk_max_avx512(const float*, const float*, int, const PagedSketchView&, int, int32_t, int, int32_t,
                           int32_t, float*);
void sketch_chunk_head_mass_avx512(const float*, const float*, int, const PagedSketchView&, int, int32_t, int, int32_t,
                                 int32_t, float, float*);
}  // namespace detail

namespace {

using ScoreFn = void (*)(const float*, const float*, int, const PagedSketchView&, int, int32_t, int32_t, float*);
using ChunkFn = void (*)(const float*, const float*, int, const PagedSketchView&, int, int32_t, int, int32_t, int32_t,
                         float*);
using HeadMassFn = void (*)(const float*, const float*, int, const PagedSketchView&, int, int32_t, int, int32_t,
                            int32_t, float, float*);

struct Dispatch {
  ScoreFn score;
  ChunkFn chunk;
  HeadMassFn head_mass;
  const char* name;
};

Dispatch pick() {
  const char* force = std::getenv("HS_SIMD");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const Dispatch scalar{detail::sketch_score_impl, detail::sketch_chunk_max_impl, detail::sketch_chunk_head_mass_impl, "scalar"};
  if (force && std::strcmp(force, "scalar") == 0) return scalar;
  if (avx512 && !(force && std::strcmp(force, "avx2") == 0))
    return {detail::sketch_score_avx512, detail::sketch_chunk_max_avx512, detail::sketch_chunk_head_mass_avx512,
            "avx512"};
  if (avx2) return {detail::sketch_score_avx2, detail::sketch_chunk_max_avx2, detail::sketch_chunk_head_mass_avx2, "avx2"};
  return scalar;
}

const Dispatch& dispatch() {
  static const Dispatch d = pick();
  return d;
}

}  // namespace

void sketch_encode(SketchElem e, const float* s, int rank, int P, int lane, uint8_t* blk) {
  switch (e) {
    case SketchElem::kF32:
      for (int d = 0; d < rank; ++d) std::memcpy(blk + 4 * (static_cast<int64_t>(d) * P + lane), &s[d], 4);
      return;
    case SketchElem::kF16:
      for (int d = 0; d < rank; ++d) {
        const _Float16 h = static_cast<_Float16>(s[d]);
        std::memcpy(blk + 2 * (static_cast<int64_t>(d) * P + lane), &h, 2);
      }
      return;
    case SketchElem::kInt8: {
      float amax = 0.0f;
      for (int d = 0; d < rank; ++d) amax = std::max(amax, std::fabs(s[d]));
      const _Float16 h = static_cast<_Float16>(amax / 127.0f);  // quantize with the stored (rounded) scale
      const float scale = static_cast<float>(h);
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      for (int d = 0; d < rank; ++d) {
        const float q = std::clamp(std::nearbyint(s[d] * inv), -127.0f, 127.0f);
        blk[static_cast<int64_t>(d) * P + lane] = static_cast<uint8_t>(static_cast<int8_t>(q));
      }
      std::memcpy(blk + static_cast<int64_t>(rank) * P + 2 * lane, &h, 2);
      return;
    }
  }
}

void sketch_decode(SketchElem e, const uint8_t* blk, int rank, int P, int lane, float* s) {
  float scale = 1.0f;
  if (e == SketchElem::kInt8) {
    _Float16 h;
    std::memcpy(&h, blk + static_cast<int64_t>(rank) * P + 2 * lane, 2);
    scale = static_cast<float>(h);
  }
  for (int d = 0; d < rank; ++d) {
    const int64_t i = static_cast<int64_t>(d) * P + lane;
    switch (e) {
      case SketchElem::kF32: std::memcpy(&s[d], blk + 4 * i, 4); break;
      case SketchElem::kF16: {
        _Float16 h;
        std::memcpy(&h, blk + 2 * i, 2);
        s[d] = static_cast<float>(h);
        break;
      }
      case SketchElem::kInt8: s[d] = scale * static_cast<float>(static_cast<int8_t>(blk[i])); break;
    }
  }
}

void sketch_project_queries(const float* q, int n_q, const float* basis, const float* mean, int head_dim, int rank,
                            float* q_hat, float* bias) {
  for (int g = 0; g < n_q; ++g) {
    const float* qg = q + static_cast<int64_t>(g) * head_dim;
    float* out = q_hat + static_cast<int64_t>(g) * rank;
    for (int j = 0; j < rank; ++j) out[j] = 0.0f;
    float b = 0.0f;
    for (int d = 0; d < head_dim; ++d) {
      const float x = qg[d];
      const float* row = basis + static_cast<int64_t>(d) * rank;
#pragma omp simd
      for (int j = 0; j < rank; ++j) out[j] += x * row[j];
      b += x * mean[d];
    }
    bias[g] = b;
  }
}

void sketch_score(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                  int32_t begin, int32_t end, float* scores) {
  dispatch().score(q_hat, bias, n_q, v, kv_head, begin, end, scores);
}

void sketch_chunk_max(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                      int32_t n_tokens, int chunk_tokens, int32_t chunk_begin, int32_t chunk_end, float* chunk_max) {
  dispatch().chunk(q_hat, bias, n_q, v, kv_head, n_tokens, chunk_tokens, chunk_begin, chunk_end, chunk_max);
}

void sketch_chunk_head_mass(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                            int32_t n_tokens, int chunk_tokens, int32_t chunk_begin, int32_t chunk_end, float alpha,
                            float* out) {
  dispatch().head_mass(q_hat, bias, n_q, v, kv_head, n_tokens, chunk_tokens, chunk_begin, chunk_end, alpha, out);
}

const char* sketch_score_simd_level() { return dispatch().name; }

}  // namespace hs::cpu
