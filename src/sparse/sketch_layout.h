// sparse/sketch_layout.h — the format of stored key sketches, shared by every backend's sparse
// path: the element type, the bytes of one kv head's block of a page, and a host view of one
// layer's sketch pages. Layout of a head block (dimension-major, so a kernel scores 16 tokens
// per vector):
//   f32 / f16:  [rank][P] values                   (value (d, t) at d·P + t)
//   int8:       [rank][P] int8, then [P] f16 scales  (s_t[d] = scale_t · q8[d][t], per-token absmax)
// Header-only, costs nothing.
#pragma once

#include <cstdint>

namespace hs {

enum class SketchElem : uint8_t { kF32, kF16, kInt8 };

inline const char* sketch_elem_name(SketchElem e) {
  switch (e) {
    case SketchElem::kF32: return "f32";
    case SketchElem::kF16: return "f16";
    case SketchElem::kInt8: return "int8";
  }
  return "?";
}

// Bytes of one kv head's block in a page of `page_tokens` tokens.
inline int64_t sketch_head_bytes(SketchElem e, int rank, int page_tokens) {
  const int64_t n = static_cast<int64_t>(rank) * page_tokens;
  switch (e) {
    case SketchElem::kF32: return 4 * n;
    case SketchElem::kF16: return 2 * n;
    case SketchElem::kInt8: return n + 2 * page_tokens;  // values, then one f16 scale per token
  }
  return 0;
}

// One layer's sketch pages in host memory (the sketch pages share the KV cache's block ids).
struct PagedSketchView {
  const uint8_t* layer_base = nullptr;  // head h, page b at layer_base + h * head_stride + b * block_bytes
  int64_t block_bytes = 0;              // sketch_head_bytes(elem, rank, P)
  int64_t head_stride = 0;              // n_blocks * block_bytes
  const int32_t* blocks = nullptr;      // block table of the sequence (the KV cache's)
  int page_tokens = 16;                 // P
  int rank = 0;
  SketchElem elem = SketchElem::kF16;

  // The block of kv head h in the page that holds token `pos`.
  const uint8_t* head_block(int32_t pos, int kv_head) const {
    return layer_base + kv_head * head_stride + static_cast<int64_t>(blocks[pos / page_tokens]) * block_bytes;
  }
};

}  // namespace hs
