// backend/cpu/sketch_score.cpp — query projection and the run-time ISA dispatch of the sketch
// scoring kernels (sketch_score_kernel.h).
#include "backend/cpu/sketch_score.h"

#include <cstdlib>
#include <cstring>

#include "backend/cpu/sketch_score_kernel.h"

namespace hs::cpu {
namespace detail {
void sketch_score_avx2(const float*, const float*, int, const PagedSketchView&, int, int32_t, int32_t, float*);
void sketch_score_avx512(const float*, const float*, int, const PagedSketchView&, int, int32_t, int32_t, float*);
void sketch_chunk_max_avx2(const float*, const float*, int, const PagedSketchView&, int, int32_t, int, int32_t,
                           int32_t, float*);
void sketch_chunk_max_avx512(const float*, const float*, int, const PagedSketchView&, int, int32_t, int, int32_t,
                             int32_t, float*);
}  // namespace detail

namespace {

using ScoreFn = void (*)(const float*, const float*, int, const PagedSketchView&, int, int32_t, int32_t, float*);
using ChunkFn = void (*)(const float*, const float*, int, const PagedSketchView&, int, int32_t, int, int32_t, int32_t,
                         float*);

struct Dispatch {
  ScoreFn score;
  ChunkFn chunk;
  const char* name;
};

Dispatch pick() {
  const char* force = std::getenv("HS_SIMD");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const Dispatch scalar{detail::sketch_score_impl, detail::sketch_chunk_max_impl, "scalar"};
  if (force && std::strcmp(force, "scalar") == 0) return scalar;
  if (avx512 && !(force && std::strcmp(force, "avx2") == 0))
    return {detail::sketch_score_avx512, detail::sketch_chunk_max_avx512, "avx512"};
  if (avx2) return {detail::sketch_score_avx2, detail::sketch_chunk_max_avx2, "avx2"};
  return scalar;
}

const Dispatch& dispatch() {
  static const Dispatch d = pick();
  return d;
}

}  // namespace

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

const char* sketch_score_simd_level() { return dispatch().name; }

}  // namespace hs::cpu
