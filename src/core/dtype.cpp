// core/dtype.cpp — the table behind core/dtype.h (sizes from ggml-common.h block structs).
#include "core/dtype.h"

#include <array>

namespace hs {
namespace {

constexpr std::array<DTypeInfo, 20> kTable{{
    {DType::F32, "F32", 1, 4, true},
    {DType::F16, "F16", 1, 2, true},
    {DType::Q4_0, "Q4_0", 32, 18, true},
    {DType::Q4_1, "Q4_1", 32, 20, true},
    {DType::Q5_0, "Q5_0", 32, 22, true},
    {DType::Q5_1, "Q5_1", 32, 24, true},
    {DType::Q8_0, "Q8_0", 32, 34, true},
    {DType::Q8_1, "Q8_1", 32, 36, false},
    {DType::Q2_K, "Q2_K", 256, 84, false},
    {DType::Q3_K, "Q3_K", 256, 110, false},
    {DType::Q4_K, "Q4_K", 256, 144, true},
    {DType::Q5_K, "Q5_K", 256, 176, true},
    {DType::Q6_K, "Q6_K", 256, 210, true},
    {DType::Q8_K, "Q8_K", 256, 292, false},
    {DType::I8, "I8", 1, 1, false},
    {DType::I16, "I16", 1, 2, false},
    {DType::I32, "I32", 1, 4, false},
    {DType::I64, "I64", 1, 8, false},
    {DType::F64, "F64", 1, 8, false},
    {DType::BF16, "BF16", 1, 2, true},
}};

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t raw_type) {
  for (const auto& e : kTable)
    if (static_cast<uint32_t>(e.type) == raw_type) return e;
  return std::nullopt;
}

std::string_view dtype_name(DType t) {
  auto info = dtype_info(t);
  return info ? info->name : std::string_view("?");
}

}  // namespace hs
