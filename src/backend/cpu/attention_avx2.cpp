// backend/cpu/attention_avx2.cpp — attention_kernel.h compiled for AVX2 + FMA.
#include "backend/cpu/attention_kernel.h"

namespace hs::cpu::detail {
void attention_partial_avx2(const float* q, int n_q, const PagedKvView& kv, int kv_head, int32_t begin,
                            int32_t end, float scale, AttnPartial part) {
  attention_partial_impl(q, n_q, kv, kv_head, begin, end, scale, part);
}
}  // namespace hs::cpu::detail
