// kv/paged_kv_view.h — host kernels' view of one layer's plain (f32 / f16) KV pages, and the
// partial result of an attention over a key range. Plain structs of pointers, owned by nobody:
// the CPU backend's attention kernels and the host sparse path (sparse/sparse_kernels.h) take
// them. Costs nothing.
#pragma once

#include <cstdint>

namespace hs {

// Pages follow kv/kv_cache.h: [n_kv_heads][P][K | V][head_dim], addressed through a block table.
struct PagedKvView {
  const void* layer_base = nullptr;  // page b starts at layer_base + b * page_elems elements
  int64_t page_elems = 0;            // n_kv_heads * P * 2 * head_dim
  const int32_t* blocks = nullptr;   // block table of the sequence
  int page_tokens = 16;              // P
  int head_dim = 0;
  bool f16 = false;                  // elements are IEEE half (else float32)
};

// Partial result of one key range for G query heads (online softmax; merged by the backend).
struct AttnPartial {
  float* max;  // [G] running max of the scaled scores
  float* sum;  // [G] sum of exp(score - max)
  float* acc;  // [G][head_dim] sum of exp(score - max) * V
};

}  // namespace hs
