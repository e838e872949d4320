// backend/cpu/attention_avx512.cpp — attention_kernel.h and attention_tile_kernel.h compiled for AVX-512.
#include "backend/cpu/attention_kernel.h"
#include "backend/cpu/attention_tile_kernel.h"

namespace hs::cpu::detail {
void attention_partial_avx512(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t begin,
                              int32_t end, float scale, AttnPartial part) {
  attention_partial_impl(q, n_q, kv, kv_head, begin, end, scale, part);
}
void chunk_log_mass_avx512(const float* q, int n_q, const PagedKvView& kv, int kv_head, const int32_t* ids,
                         int n_ids, int C, int32_t n_tokens, float scale, float* out) {
  chunk_log_mass_impl(q, n_q, kv, kv_head, ids, n_ids, C, n_tokens, scale, out);
}
void attention_tile_avx512(const PrefillTile& t, int n_q, const PagedKvView& kv, int kv_head, float scale) {
  attention_tile_impl(t, n_q, kv, kv_head, scale);
}
void key_scores_avx512(const float* q, const PagedKvView& kv, int kv_head, int32_t n, float scale, float* out) {
  key_scores_impl(q, kv, kv_head, n, scale, out);
}
}  // namespace hs::cpu::detail
