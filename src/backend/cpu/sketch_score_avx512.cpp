// backend/cpu/sketch_score_avx512.cpp — sketch_score_kernel.h compiled for AVX-512.
#include "backend/cpu/sketch_score_kernel.h"

namespace hs::cpu::detail {
void sketch_score_avx512(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                       int32_t begin, int32_t end, float* scores) {
  sketch_score_impl(q_hat, bias, n_q, v, kv_head, begin, end, scores);
}
void sketch_chunk_max_avx512(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                           int32_t n_tokens, int chunk_tokens, int32_t chunk_begin, int32_t chunk_end,
                           float* chunk_max) {
  sketch_chunk_max_impl(q_hat, bias, n_q, v, kv_head, n_tokens, chunk_tokens, chunk_begin, chunk_end, chunk_max);
}
void sketch_chunk_head_mass_avx512(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v,
                                 int kv_head, int32_t n_tokens, int chunk_tokens, int32_t chunk_begin,
                                 int32_t chunk_end, float alpha, float* out) {
  sketch_chunk_head_mass_impl(q_hat, bias, n_q, v, kv_head, n_tokens, chunk_tokens, chunk_begin, chunk_end, alpha,
                              out);
}
}  // namespace hs::cpu::detail
