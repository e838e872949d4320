// core/dtype.h — tensor element types (GGML numbering, as stored in GGUF files).
//
// A type is either a plain scalar (F32, F16, BF16, ...) or a quantized block type holding
// `block_elems` elements in `block_bytes` bytes. Row sizes are always whole blocks.
// Lookups are constexpr table reads: free on any path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hs {

// Values match ggml's `enum ggml_type` (GGUF tensor-info `type` field).
enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

struct DTypeInfo {
  DType type;
  std::string_view name;
  uint32_t block_elems;  // elements per block (1 for scalars)
  uint32_t block_bytes;  // bytes per block
  bool supported;        // hindsight can dequantize / compute with it
};

// Info for a raw GGUF type id, or nullopt when the id is unknown to hindsight.
std::optional<DTypeInfo> dtype_info(uint32_t raw_type);
inline std::optional<DTypeInfo> dtype_info(DType t) { return dtype_info(static_cast<uint32_t>(t)); }
std::string_view dtype_name(DType t);

// Bytes taken by `n_elems` elements (n_elems must be a multiple of block_elems).
inline uint64_t dtype_row_bytes(const DTypeInfo& info, uint64_t n_elems) {
  return n_elems / info.block_elems * info.block_bytes;
}

}  // namespace hs
