// backend/cuda/cuda_ops.cpp — the ops of CudaBackend (cuda_backend.h): host checks of every
// operand (device, dtype, shape, strides, the step's tables), then one launcher of kernels.h
// or one cuBLAS call on the backend's stream. Nothing here waits or allocates, except the
// scratch growth of matmul (bf16 input copy) and attention (partials) on a larger step.
// Cost: the kernels' own (docs/cuda-backend.md); the host side is a few comparisons per op,
// plus an O(n) token-id check in embedding.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include <spdlog/spdlog.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/flash_prefill.h"
#include "backend/cuda/gemm16_mma.h"
#include "backend/cuda/gemm_quant_mma.h"
#include "backend/cuda/gemv_kernels.h"
#include "backend/cuda/gemv_quant_warp.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_stage.h"

namespace hs::cuda {

Status CudaBackend::embedding(const Tensor& table, Tensor out) {
  OpProfile::Scope prof(&profile_, "embedding", stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(need_step("embedding"));
  HS_RETURN_IF_ERROR(check_on_device(table, "embedding", "the table"));
  HS_RETURN_IF_ERROR(check_f32(out, "embedding", "out"));
  const int64_t n = plan_->n_tokens();
  HS_RETURN_IF_ERROR(check_rows(out, n, "embedding", "out"));
  if (out.cols != table.cols)
    return make_error(StatusCode::kInvalidArgument, "cuda embedding: out has {} columns, the table {}", out.cols,
                      table.cols);
  for (int64_t i = 0; i < n; ++i)
    if (plan_->tokens[i] < 0 || plan_->tokens[i] >= table.rows)
      return make_error(StatusCode::kInvalidArgument, "cuda embedding: token {} is {}, the table has {} rows", i,
                        plan_->tokens[i], table.rows);
  if (table.dtype == DType::F16)
    return launched(launch_embedding_f16(table.as<const uint16_t>(), table.row_stride / 2, d_tokens_, rows_of(out), stream_),
                    "embedding");
  if (table.dtype == DType::BF16)
    return launched(launch_embedding_bf16(table.as<const uint16_t>(), table.row_stride / 2, d_tokens_, rows_of(out), stream_),
                    "embedding");
  if (const auto qk = quant_kind_of(table.dtype))
    return launched(launch_embedding_quant(*qk, table.as<const uint8_t>(), table.cols, table.row_stride, d_tokens_,
                                           rows_of(out), stream_),
                    "embedding");
  if (table.dtype == DType::F32)
    return launched(launch_embedding_f32(table.as<const float>(), table.row_stride / 4, d_tokens_, rows_of(out), stream_),
                    "embedding");
  return make_error(StatusCode::kInvalidArgument, "cuda embedding: the table is {}, want f16 / bf16 (prepare_weight) or f32",
                    dtype_name(table.dtype));
}

Status CudaBackend::convert_input(const Tensor& x, DType type, const char* op) {
  const InputTag& t = xb_tag_;
  if (t.p == x.data && t.rows == x.rows && t.cols == x.cols && t.stride == x.row_stride && t.type == type)
    return Status::ok();  // xb_ already holds it (written beside x by the op that made x)
  const size_t bytes = static_cast<size_t>(x.rows) * static_cast<size_t>(x.cols) * 2;
  HS_RETURN_IF_ERROR(grow(xb_, bytes, "the 16-bit copy of a matmul input"));
  if (type == DType::F16) {
    HS_RETURN_IF_ERROR(launched(launch_f32_to_f16(crows_of(x), static_cast<uint16_t*>(xb_.ptr), stream_), op));
  } else {
    HS_RETURN_IF_ERROR(launched(launch_f32_to_bf16(crows_of(x), static_cast<uint16_t*>(xb_.ptr), stream_), op));
  }
  set_input_tag(x, type);
  return Status::ok();
}

Result<CudaBackend::Copy16> CudaBackend::out16_for(const Tensor& out) {
  // Decode-sized batches whose next matmul reads x as f16 (16-bit weights from kMaxGemv16Rows + 1
  // rows on cuBLAS; quantized ones from gemm_quant_min_rows_ on the quantized GEMM, above
  // kMaxGemvRows without it); rows the width of a model's activations.
  if (!early16_ || !gemm_in_ || gemm_in_mixed_ || out.rows > kMaxGraphTokens || out.cols < 256 || out.cols % 4 != 0)
    return Copy16{};
  int64_t min_rows = *gemm_in_ == DType::BF16 ? kMaxGemv16Rows : kMaxGemvRows;
  if (quant_in_ && gemm_quant_) min_rows = std::min<int64_t>(min_rows, gemm_quant_min_rows_ - 1);  // the quantized GEMM's input
  if (out.rows <= min_rows) return Copy16{};
  HS_RETURN_IF_ERROR(grow(xb_, static_cast<size_t>(out.rows) * static_cast<size_t>(out.cols) * 2,
                          "the 16-bit copy of a matmul input"));
  return Copy16{static_cast<uint16_t*>(xb_.ptr), *gemm_in_ == DType::BF16};
}

Result<OutQ> CudaBackend::outq_for(const Tensor& out) {
  if (!earlyq_ || !quant_warp_ || !quant_in_ || quant_in_mixed_ || out.rows < 1 || out.rows > kMaxQuantWarpRecordRows ||
      out.cols > kMaxOutQCols)
    return OutQ{};
  const std::optional<QuantKind> k = quant_kind_of(*quant_in_);
  if (!k || !quant_cols_valid(*k, out.cols)) return OutQ{};
  HS_RETURN_IF_ERROR(grow(qx_, gemv_quant_warp_scratch_bytes(out.cols, static_cast<int>(out.rows)),
                          "the int16 copy of a quantized matmul's input"));
  return OutQ{static_cast<uint8_t*>(qx_.ptr), static_cast<int>(*k)};
}

void CudaBackend::clear_input_tag_if_written(const Tensor& y) {
  const auto overlaps = [&y](const InputTag& t) {
    const auto* a = static_cast<const uint8_t*>(y.data);
    const auto* b = static_cast<const uint8_t*>(t.p);
    const int64_t ya = y.rows * y.row_stride, tb = t.rows * t.stride;  // spans in bytes
    return t.p && a < b + tb && b < a + ya;
  };
  if (overlaps(xb_tag_)) xb_tag_ = InputTag{};
  if (overlaps(qx_tag_)) qx_tag_ = InputTag{};
}

Status CudaBackend::gemm16(const Tensor& w, const void* xb, int64_t n, Tensor y, bool accumulate) {
  const cudaDataType_t t = w.dtype == DType::F16 ? CUDA_R_16F : CUDA_R_16BF;
  const int64_t lda = w.row_stride / 2, ldc = y.row_stride / 4;
  if (w.rows > INT_MAX || w.cols > INT_MAX || n > INT_MAX || lda > INT_MAX || ldc > INT_MAX)
    return make_error(StatusCode::kUnsupported, "cuda matmul: {} x {} over {} rows exceeds cuBLAS's int sizes", w.rows,
                      w.cols, n);
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // Column-major view: yᵀ [n_out x n] = wᵀᵀ · xᵀ, with w stored as a [n_in x n_out] matrix.
  HS_CUBLAS(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows), static_cast<int>(n),
                         static_cast<int>(w.cols), &one, w.data, t, static_cast<int>(lda), xb, t,
                         static_cast<int>(w.cols), &beta, y.data, CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT));
  return Status::ok();
}

Status CudaBackend::matmul_precise(const Tensor& w, const Tensor& x, Tensor y) {
  Tensor w16 = w;
  if (const std::optional<QuantKind> qk = quant_kind_of(w.dtype)) {
    HS_RETURN_IF_ERROR(grow(wdq_, static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols) * 2,
                            "the f16 copy of a quantized weight (precise matmul)"));
    HS_RETURN_IF_ERROR(launched(launch_dequantize_quant(*qk, w.as<const uint8_t>(), w.rows, w.cols, w.row_stride,
                                                        static_cast<uint16_t*>(wdq_.ptr), stream_),
                                "matmul (dequantize)"));
    w16 = Tensor::matrix(wdq_.ptr, DType::F16, w.rows, w.cols, Device::kCuda);
  }
  if (w16.dtype != DType::BF16 && w16.dtype != DType::F16)
    return make_error(StatusCode::kInvalidArgument, "cuda matmul: weight {} is not a prepared 16-bit or quantized weight",
                      shape(w));
  const size_t elems = static_cast<size_t>(x.rows) * static_cast<size_t>(x.cols);
  HS_RETURN_IF_ERROR(grow(xsplit_, 2 * elems * 2, "the hi / lo copies of a precise matmul's input"));
  uint16_t* hi = static_cast<uint16_t*>(xsplit_.ptr);
  uint16_t* lo = hi + elems;
  HS_RETURN_IF_ERROR(launched(launch_f32_split16(crows_of(x), hi, lo, w16.dtype == DType::BF16, stream_),
                              "matmul (precise input split)"));
  HS_RETURN_IF_ERROR(gemm16(w16, hi, x.rows, y));
  return gemm16(w16, lo, x.rows, y, /*accumulate=*/true);
}

namespace {
Status check_matmul(const Tensor& w, const Tensor& x, const Tensor& y) {
  HS_RETURN_IF_ERROR(check_on_device(w, "matmul", "the weight"));
  const bool quant = quant_kind_of(w.dtype).has_value();
  if ((w.dtype != DType::BF16 && w.dtype != DType::F16 && !quant) || w.row_stride % (quant ? 16 : 2) != 0)
    return make_error(StatusCode::kInvalidArgument,
                      "cuda matmul: the weight is {}, want f16 / bf16 / Q4_0 / Q8_0 / Q4_K from prepare_weight", shape(w));
  HS_RETURN_IF_ERROR(check_f32(x, "matmul", "x"));
  HS_RETURN_IF_ERROR(check_f32(y, "matmul", "y"));
  if (x.cols != w.cols || y.cols != w.rows || y.rows != x.rows)
    return make_error(StatusCode::kInvalidArgument, "cuda matmul: w {} with x {} into y {}", shape(w), shape(x), shape(y));
  return Status::ok();
}

// Up to 3 16-bit weights and their outputs in the arrays the multi-weight launchers take
// (the caller has checked ws.size() against the launcher's limit).
struct Weights16 {
  static constexpr int kMax = 3;
  static_assert(kMax == kMaxGemvWarpWeights && kMax == kMaxGemm16MmaWeights, "one packing for both launchers");
  const uint16_t* w[kMax] = {};
  int64_t rows[kMax] = {}, strides[kMax] = {};  // strides in elements
  Rows y[kMax];
  Weights16(std::span<const Tensor> ws, std::span<const Tensor> ys) {
    for (size_t i = 0; i < ws.size() && i < kMax; ++i) {
      w[i] = ws[i].as<const uint16_t>();
      rows[i] = ws[i].rows;
      strides[i] = ws[i].row_stride / 2;
      y[i] = rows_of(ys[i]);
    }
  }
};
}  // namespace

std::optional<Status> CudaBackend::gemv16_warp(std::span<const Tensor> ws, const Tensor& x, std::span<const Tensor> ys,
                                               const char* op) {
  const Weights16 p(ws, ys);
  GemvWarpConfig cfg;
  cfg.pdl = pdl_on_;
  const cudaError_t e = launch_gemv16_warp_multi(ws[0].dtype == DType::BF16, static_cast<int>(ws.size()), p.w, p.rows,
                                                 x.cols, p.strides, crows_of(x), p.y, stream_, &cfg);
  if (e == cudaErrorInvalidValue) return std::nullopt;
  return launched(e, op);
}

std::optional<Status> CudaBackend::gemm16_mma(std::span<const Tensor> ws, const Tensor& x, std::span<const Tensor> ys,
                                              const char* op) {
  if (mma16_ == 0 || x.rows <= kMaxGemv16Rows || x.rows > kMaxGemm16MmaTokens || ws.empty() ||
      ws.size() > static_cast<size_t>(kMaxGemm16MmaWeights) || x.cols % 32 != 0 ||
      (ws[0].dtype != DType::BF16 && ws[0].dtype != DType::F16) ||
      !std::all_of(ws.begin(), ws.end(), [&](const Tensor& w) { return w.dtype == ws[0].dtype; }))
    return std::nullopt;
  const Weights16 p(ws, ys);
  // Measured (docs/benchmarks.md): ahead of cuBLAS while the weights have at most one 32-row tile
  // per SM; behind on large ones (gate/up of an 8B model), where cuBLAS streams at ~4 TB/s.
  if (mma16_ == 1 && gemm16_mma_tiles(p.rows, static_cast<int>(ws.size())) > n_sm_) return std::nullopt;
  if (Status st = convert_input(x, ws[0].dtype, op); !st.is_ok()) return st;
  const cudaError_t e = launch_gemm16_mma(ws[0].dtype == DType::BF16, static_cast<int>(ws.size()), p.w, p.rows, x.cols,
                                          p.strides, static_cast<const uint16_t*>(xb_.ptr), static_cast<int>(x.rows), p.y,
                                          stream_, 0, mma16_variant_, pdl_on_);
  if (e == cudaErrorInvalidValue) return std::nullopt;
  return launched(e, op);
}

Status CudaBackend::matmul_one(const Tensor& w, const Tensor& x, Tensor y, DType& converted) {
  if (w.rows == 0) return Status::ok();
  if (precise_) return matmul_precise(w, x, y);
  const std::optional<QuantKind> qk = quant_kind_of(w.dtype);
  if (qk && takes_gemm_quant(x.rows)) {
    // The quantized tensor-core GEMM (one pass over the weights per 32 rows).
    if (converted != DType::F16) {
      HS_RETURN_IF_ERROR(convert_input(x, DType::F16, "matmul"));
      converted = DType::F16;
    }
    const cudaError_t e = launch_gemm_quant_mma(*qk, w.as<const uint8_t>(), w.rows, w.cols, w.row_stride,
                                                static_cast<const uint16_t*>(xb_.ptr), x.cols, static_cast<int>(x.rows),
                                                rows_of(y), stream_, pdl_on_, nullptr, gemm_quant_warp_);
    if (e != cudaErrorInvalidValue) return launched(e, "matmul (quantized tensor-core GEMM)");
  }
  if (qk ? x.rows <= kMaxGemvRows : gemv16_ && x.rows <= kMaxGemv16Rows) {
    if (qk && x.rows <= quant_warp_rows_ && quant_warp_) {  // batch 1-8: warp per row, dp2a on int16 x
      const void* before = qx_.ptr;
      HS_RETURN_IF_ERROR(grow(qx_, gemv_quant_warp_scratch_bytes(w.cols, static_cast<int>(x.rows)),
                              "the int16 copy of a quantized matmul's input"));
      const bool ready = qx_.ptr == before && quant_tag_holds(x, w.dtype);  // records written beside x
      const cudaError_t e = launch_gemv_quant_warp(*qk, w.as<const uint8_t>(), w.rows, w.cols, w.row_stride,
                                                   crows_of(x), rows_of(y), qx_.ptr, stream_, nullptr, ready);
      if (e != cudaErrorInvalidValue) {
        set_quant_tag(x, w.dtype);
        return launched(e, "matmul (quantized GEMV, warp per row)");
      }
      qx_tag_ = InputTag{};
    }
    if (qk)
      return launched(launch_gemv_quant(*qk, w.as<const uint8_t>(), w.rows, w.cols, w.row_stride, crows_of(x),
                                        rows_of(y), stream_),
                      "matmul (quantized GEMV)");
    if (x.rows <= kMaxGemvWarpRows) {  // the warp-per-row kernel; its shape limits send the rest on
      if (auto st = gemv16_warp(std::span<const Tensor>(&w, 1), x, std::span<const Tensor>(&y, 1),
                                "matmul (GEMV, warp per row)"))
        return *st;
    }
    return launched(launch_gemv16(w.dtype == DType::BF16, w.as<const uint16_t>(), w.rows, w.cols, w.row_stride / 2,
                                  crows_of(x), rows_of(y), stream_),
                    "matmul (GEMV)");
  }
  if (!qk) {  // 3..8 rows: the tensor-core GEMV (its limits send the rest to cuBLAS)
    if (auto st = gemm16_mma(std::span<const Tensor>(&w, 1), x, std::span<const Tensor>(&y, 1),
                             "matmul (tensor-core GEMV)")) {
      converted = w.dtype;  // xb_ holds x in the weight's type
      return *st;
    }
  }
  Tensor w16 = w;
  if (qk) {  // a large batch: dequantize once, then tensor cores
    const size_t bytes = static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols) * 2;
    HS_RETURN_IF_ERROR(grow(wdq_, bytes, "the f16 copy of a quantized weight (large-batch matmul)"));
    HS_RETURN_IF_ERROR(launched(launch_dequantize_quant(*qk, w.as<const uint8_t>(), w.rows, w.cols, w.row_stride,
                                                        static_cast<uint16_t*>(wdq_.ptr), stream_),
                                "matmul (dequantize)"));
    w16 = Tensor::matrix(wdq_.ptr, DType::F16, w.rows, w.cols, Device::kCuda);
  }
  if (converted != w16.dtype) {
    HS_RETURN_IF_ERROR(convert_input(x, w16.dtype, "matmul"));
    converted = w16.dtype;
  }
  return gemm16(w16, xb_.ptr, x.rows, y);
}

Status CudaBackend::matmul(const Tensor& w, const Tensor& x, Tensor y) {
  OpProfile::Scope prof(&profile_, profile_.on() ? fmt::format("matmul {}x{} {} (n={})", w.rows, w.cols,
                                                              dtype_name(w.dtype), x.rows)
                                                 : std::string(), stream_);
  HS_RETURN_IF_ERROR(check_matmul(w, x, y));
  if (x.rows == 0 || w.rows == 0) return Status::ok();
  clear_input_tag_if_written(y);
  if (x.cols == 0) return launched(launch_scale(rows_of(y), 0.0f, stream_), "matmul");  // empty sum
  DType converted = DType::F32;
  return matmul_one(w, x, y, converted);
}

Status CudaBackend::matmul_multi(std::span<const Tensor> ws, const Tensor& x, std::span<const Tensor> ys) {
  OpProfile::Scope prof(&profile_, profile_.on() ? fmt::format("matmul_multi x{} {}x{} {} (n={})", ws.size(),
                                                              ws.empty() ? 0 : ws[0].rows, x.cols,
                                                              ws.empty() ? "-" : dtype_name(ws[0].dtype), x.rows)
                                                 : std::string(), stream_);
  if (ws.size() != ys.size())
    return make_error(StatusCode::kInvalidArgument, "cuda matmul_multi: {} weights for {} outputs", ws.size(), ys.size());
  for (size_t i = 0; i < ws.size(); ++i) HS_RETURN_IF_ERROR(check_matmul(ws[i], x, ys[i]));
  if (ws.empty() || x.rows == 0) return Status::ok();
  for (const Tensor& y : ys) clear_input_tag_if_written(y);
  if (x.cols == 0) {
    for (const Tensor& y : ys) HS_RETURN_IF_ERROR(launched(launch_scale(rows_of(y), 0.0f, stream_), "matmul_multi"));
    return Status::ok();
  }
  if (precise_) {  // each weight through the hi / lo split
    for (size_t i = 0; i < ws.size(); ++i) HS_RETURN_IF_ERROR(matmul_precise(ws[i], x, ys[i]));
    return Status::ok();
  }
  // Batch 1-2 of 16-bit weights: all of them (q/k/v, gate/up) in one warp-per-row launch.
  if (gemv16_ && x.rows <= kMaxGemvWarpRows && ws.size() <= static_cast<size_t>(kMaxGemvWarpWeights) &&
      (ws[0].dtype == DType::BF16 || ws[0].dtype == DType::F16) &&
      std::all_of(ws.begin(), ws.end(), [&](const Tensor& w) { return w.dtype == ws[0].dtype; })) {
    if (auto st = gemv16_warp(ws, x, ys, "matmul_multi (GEMV, warp per row)")) return *st;
  }
  // Batch 1-2 of quantized weights of one kind: x quantized once, one launch over all of them.
  if (const std::optional<QuantKind> qk = quant_kind_of(ws[0].dtype);
      qk && quant_warp_ && x.rows <= quant_warp_rows_ && !takes_gemm_quant(x.rows) &&
      ws.size() <= static_cast<size_t>(kMaxQuantWarpWeights) &&
      std::all_of(ws.begin(), ws.end(),
                  [&](const Tensor& w) { return w.dtype == ws[0].dtype && w.row_stride == ws[0].row_stride; })) {
    const void* before = qx_.ptr;
    HS_RETURN_IF_ERROR(grow(qx_, gemv_quant_warp_scratch_bytes(x.cols, static_cast<int>(x.rows)),
                            "the int16 copy of a quantized matmul's input"));
    const bool ready = qx_.ptr == before && quant_tag_holds(x, ws[0].dtype);  // records written beside x
    QuantWarpOut outs[kMaxQuantWarpWeights];
    for (size_t i = 0; i < ws.size(); ++i) outs[i] = QuantWarpOut{ws[i].as<const uint8_t>(), ws[i].rows, rows_of(ys[i])};
    const cudaError_t e = launch_gemv_quant_warp_multi(*qk, static_cast<int>(ws.size()), outs, x.cols, ws[0].row_stride,
                                                       crows_of(x), qx_.ptr, stream_, nullptr, ready);
    if (e != cudaErrorInvalidValue) {
      set_quant_tag(x, ws[0].dtype);
      return launched(e, "matmul_multi (quantized GEMV, warp per row)");
    }
    qx_tag_ = InputTag{};
  }
  // 5..128 rows of quantized weights of one kind: one quantized tensor-core GEMM launch over all
  // of them (small ones, a Gated-DeltaNet layer's 48-row gates, ride along with the large).
  if (const std::optional<QuantKind> qk = quant_kind_of(ws[0].dtype);
      qk && takes_gemm_quant(x.rows) && ws.size() <= static_cast<size_t>(kMaxGemmQuantWeights) &&
      std::all_of(ws.begin(), ws.end(), [&](const Tensor& w) { return w.dtype == ws[0].dtype; })) {
    HS_RETURN_IF_ERROR(convert_input(x, DType::F16, "matmul_multi"));
    GemmQuantOut outs[kMaxGemmQuantWeights];
    for (size_t i = 0; i < ws.size(); ++i)
      outs[i] = GemmQuantOut{ws[i].as<const uint8_t>(), ws[i].rows, ws[i].row_stride, rows_of(ys[i])};
    const cudaError_t e = launch_gemm_quant_mma_multi(*qk, static_cast<int>(ws.size()), outs, x.cols,
                                                      static_cast<const uint16_t*>(xb_.ptr), x.cols,
                                                      static_cast<int>(x.rows), stream_, pdl_on_, nullptr,
                                                      gemm_quant_warp_);
    if (e != cudaErrorInvalidValue) return launched(e, "matmul_multi (quantized tensor-core GEMM)");
  }
  // 3..8 rows of 16-bit weights: one tensor-core launch over all of them, each into its own y.
  if (auto st = gemm16_mma(ws, x, ys, "matmul_multi (tensor-core GEMV)")) return *st;
  // A large batch over 16-bit weights back to back in one allocation (prepare_weight_group) with
  // a small one among them (k / v beside q): one GEMM over all their rows, then each output's
  // columns; the small GEMMs alone are latency-bound (~10 us each for 1024 x 4096 at 64 rows).
  // Decode-sized batches only (<= kMaxGraphTokens rows): a prompt's GEMMs are compute-bound
  // apiece, and the split's copy of the output would cost more than it saves.
  if (x.rows > kMaxGemv16Rows && x.rows <= kMaxGraphTokens && ws.size() >= 2 && ws.size() <= 3 &&
      (ws[0].dtype == DType::BF16 || ws[0].dtype == DType::F16)) {
    bool adjacent = true;
    int64_t total = 0, min_rows = ws[0].rows, max_rows = ws[0].rows;
    for (size_t i = 0; i < ws.size(); ++i) {
      adjacent = adjacent && ws[i].dtype == ws[0].dtype && ws[i].row_stride == ws[0].row_stride &&
                 (i == 0 || static_cast<const uint8_t*>(ws[i].data) ==
                                static_cast<const uint8_t*>(ws[i - 1].data) + ws[i - 1].rows * ws[i - 1].row_stride);
      total += ws[i].rows;
      min_rows = std::min(min_rows, ws[i].rows);
      max_rows = std::max(max_rows, ws[i].rows);
    }
    if (adjacent && 2 * min_rows <= max_rows) {
      HS_RETURN_IF_ERROR(convert_input(x, ws[0].dtype, "matmul_multi"));
      HS_RETURN_IF_ERROR(grow(yall_, static_cast<size_t>(x.rows * total) * 4, "a fused projection's output"));
      Tensor w_all = Tensor::matrix(ws[0].data, ws[0].dtype, total, x.cols, Device::kCuda);
      w_all.row_stride = ws[0].row_stride;
      const Tensor y_all = Tensor::matrix(yall_.ptr, DType::F32, x.rows, total, Device::kCuda);  // [n][total]
      HS_RETURN_IF_ERROR(gemm16(w_all, xb_.ptr, x.rows, y_all));
      Rows parts[3];
      for (size_t i = 0; i < ws.size(); ++i) parts[i] = rows_of(ys[i]);
      return launched(launch_split_cols(crows_of(y_all), static_cast<int>(ws.size()), parts, stream_),
                      "matmul_multi (split of the fused projection)");
    }
  }
  // The 16-bit input is converted once per weight dtype (every weight of a GGUF model has the same one).
  DType converted = DType::F32;
  for (size_t i = 0; i < ws.size(); ++i) HS_RETURN_IF_ERROR(matmul_one(ws[i], x, ys[i], converted));
  return Status::ok();
}

Result<const float*> CudaBackend::check_rms_norm(const Tensor& x, const Tensor& w, const Tensor& out,
                                                 const char* op) const {
  HS_RETURN_IF_ERROR(check_f32(x, op, "x"));
  HS_RETURN_IF_ERROR(check_f32(out, op, "out"));
  HS_RETURN_IF_ERROR(check_same_shape(x, out, op, "x", "out"));
  if (w.empty()) return static_cast<const float*>(nullptr);
  HS_RETURN_IF_ERROR(check_f32(w, op, "the weight"));
  if (w.rows * w.cols != x.cols || !(w.rows == 1 || w.contiguous()))
    return make_error(StatusCode::kInvalidArgument, "cuda {}: weight {} for rows of {}", op, shape(w), x.cols);
  return static_cast<const float*>(w.f32());
}

Status CudaBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) {
  OpProfile::Scope prof(&profile_, "rms_norm", stream_);
  clear_input_tag();
  HS_ASSIGN_OR_RETURN(const float* wp, check_rms_norm(x, w, out, "rms_norm"));
  HS_ASSIGN_OR_RETURN(const Copy16 c16, out16_for(out));
  HS_ASSIGN_OR_RETURN(const OutQ oq, outq_for(out));
  if ((c16.p || oq.s) && launch_rms_norm16(crows_of(x), wp, eps, rows_of(out), Out16{c16.p, c16.bf16}, stream_, oq)) {
    HS_RETURN_IF_ERROR(launched(cudaGetLastError(), "rms_norm"));
    if (c16.p) set_input_tag(out, c16.bf16 ? DType::BF16 : DType::F16);
    if (oq.s) set_quant_tag(out, *quant_in_);
    return Status::ok();
  }
  return launched(launch_rms_norm(crows_of(x), wp, eps, rows_of(out), stream_), "rms_norm");
}

Status CudaBackend::add_rms_norm(Tensor x, const Tensor& y, const Tensor& w, float eps, Tensor out) {
  OpProfile::Scope prof(&profile_, "add_rms_norm", stream_);
  clear_input_tag();
  HS_ASSIGN_OR_RETURN(const float* wp, check_rms_norm(x, w, out, "add_rms_norm"));
  HS_RETURN_IF_ERROR(check_f32(y, "add_rms_norm", "y"));
  HS_RETURN_IF_ERROR(check_same_shape(x, y, "add_rms_norm", "x", "y"));
  HS_ASSIGN_OR_RETURN(const Copy16 c16, out16_for(out));
  HS_ASSIGN_OR_RETURN(const OutQ oq, outq_for(out));
  if ((c16.p || oq.s) &&
      launch_add_rms_norm16(rows_of(x), crows_of(y), wp, eps, rows_of(out), Out16{c16.p, c16.bf16}, stream_, oq)) {
    HS_RETURN_IF_ERROR(launched(cudaGetLastError(), "add_rms_norm"));
    if (c16.p) set_input_tag(out, c16.bf16 ? DType::BF16 : DType::F16);
    if (oq.s) set_quant_tag(out, *quant_in_);
    return Status::ok();
  }
  return launched(launch_add_rms_norm(rows_of(x), crows_of(y), wp, eps, rows_of(out), stream_), "add_rms_norm");
}

Status CudaBackend::check_rope(const Tensor& x, int head_dim, const char* op) const {
  HS_RETURN_IF_ERROR(need_step(op));
  HS_RETURN_IF_ERROR(check_f32(x, op, "x"));
  HS_RETURN_IF_ERROR(check_rows(x, plan_->n_tokens(), op, "x"));
  if (head_dim <= 0 || head_dim % 2 != 0 || x.cols % head_dim != 0)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: head_dim {} for rows of {}", op, head_dim, x.cols);
  return Status::ok();
}

Status CudaBackend::rope(Tensor x, int head_dim, float theta, bool neox) {
  OpProfile::Scope prof(&profile_, "rope", stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_rope(x, head_dim, "rope"));
  return launched(launch_rope(rows_of(x), head_dim, theta, neox, d_positions_, stream_), "rope");
}

Status CudaBackend::rope_qk(Tensor q, Tensor k, int head_dim, float theta, bool neox) {
  OpProfile::Scope prof(&profile_, "rope_qk", stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_rope(q, head_dim, "rope_qk"));
  HS_RETURN_IF_ERROR(check_rope(k, head_dim, "rope_qk"));
  return launched(launch_rope_qk(rows_of(q), rows_of(k), head_dim, theta, neox, d_positions_, stream_), "rope_qk");
}

Status CudaBackend::glu(GluKind kind, const Tensor& gate, const Tensor& up, Tensor out) {
  OpProfile::Scope prof(&profile_, "glu", stream_);
  HS_RETURN_IF_ERROR(check_f32(gate, "glu", "gate"));
  HS_RETURN_IF_ERROR(check_f32(up, "glu", "up"));
  HS_RETURN_IF_ERROR(check_f32(out, "glu", "out"));
  HS_RETURN_IF_ERROR(check_same_shape(gate, up, "glu", "gate", "up"));
  HS_RETURN_IF_ERROR(check_same_shape(gate, out, "glu", "gate", "out"));
  const int k = kind == GluKind::kSilu ? 0 : 1;
  clear_input_tag();
  HS_ASSIGN_OR_RETURN(const OutQ oq, outq_for(out));
  if (oq.s) {  // batch 1-2 before a quantized GEMV: the f32 product and its records in one pass
    const cudaError_t e = launch_glu_q(k, crows_of(gate), crows_of(up), rows_of(out), oq, stream_);
    if (e != cudaErrorInvalidValue) {
      HS_RETURN_IF_ERROR(launched(e, "glu"));
      set_quant_tag(out, *quant_in_);
      return Status::ok();
    }
  }
  HS_ASSIGN_OR_RETURN(const Copy16 c16, out16_for(out));
  HS_RETURN_IF_ERROR(launched(launch_glu(k, crows_of(gate), crows_of(up), rows_of(out), stream_, Out16{c16.p, c16.bf16}),
                              "glu"));
  if (c16.p) set_input_tag(out, c16.bf16 ? DType::BF16 : DType::F16);
  return Status::ok();
}

Status CudaBackend::add(Tensor x, const Tensor& y) {
  OpProfile::Scope prof(&profile_, "add", stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_f32(x, "add", "x"));
  HS_RETURN_IF_ERROR(check_f32(y, "add", "y"));
  HS_RETURN_IF_ERROR(check_same_shape(x, y, "add", "x", "y"));
  return launched(launch_add(rows_of(x), crows_of(y), stream_), "add");
}

Status CudaBackend::scale(Tensor x, float s) {
  OpProfile::Scope prof(&profile_, "scale", stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_f32(x, "scale", "x"));
  return launched(launch_scale(rows_of(x), s, stream_), "scale");
}

Status CudaBackend::softcap(Tensor x, float cap) {
  OpProfile::Scope prof(&profile_, "softcap", stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_f32(x, "softcap", "x"));
  if (!(cap > 0.0f) || !std::isfinite(cap))
    return make_error(StatusCode::kInvalidArgument, "cuda softcap: cap {} must be positive", cap);
  return launched(launch_softcap(rows_of(x), cap, stream_), "softcap");
}

Status CudaBackend::copy(const Tensor& src, Tensor dst) {
  OpProfile::Scope prof(&profile_, "copy", stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_on_device(src, "copy", "src"));
  HS_RETURN_IF_ERROR(check_on_device(dst, "copy", "dst"));
  HS_RETURN_IF_ERROR(check_same_shape(src, dst, "copy", "src", "dst"));
  if (src.dtype != dst.dtype)
    return make_error(StatusCode::kInvalidArgument, "cuda copy: src is {}, dst {}", dtype_name(src.dtype),
                      dtype_name(dst.dtype));
  if (src.rows == 0 || src.cols == 0) return Status::ok();
  const int64_t row_b = src.row_bytes();
  HS_CUDA(cudaMemcpy2DAsync(dst.data, static_cast<size_t>(dst.row_stride), src.data, static_cast<size_t>(src.row_stride),
                            static_cast<size_t>(row_b), static_cast<size_t>(src.rows), cudaMemcpyDeviceToDevice, stream_));
  return Status::ok();
}

Status CudaBackend::logit_rows(const Tensor& src, Tensor dst) {
  OpProfile::Scope prof(&profile_, "logit_rows", stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(need_step("logit_rows"));
  HS_RETURN_IF_ERROR(check_f32(src, "logit_rows", "src"));
  HS_RETURN_IF_ERROR(check_f32(dst, "logit_rows", "dst"));
  const auto& rows = plan_->logit_rows;
  if (dst.rows != static_cast<int64_t>(rows.size()) || dst.cols != src.cols)
    return make_error(StatusCode::kInvalidArgument, "cuda logit_rows: dst {} for {} rows of src {}", shape(dst),
                      rows.size(), shape(src));
  for (int32_t r : rows)
    if (r >= src.rows)
      return make_error(StatusCode::kInvalidArgument, "cuda logit_rows: row {} of a {}-row src", r, src.rows);
  return launched(launch_gather_rows(crows_of(src), d_logit_rows_, rows_of(dst), stream_), "logit_rows");
}

namespace {
// The launchers' view of one layer of the device KV copy (kernels.h KvLayerView); scaled pages
// (fp8, int8, int4) are the host's layout, so their block stride and scales offset come from it.
KvLayerView kv_layer_view(const KvGeometry& g, uint8_t* layer_base, int64_t page_elems) {
  KvLayerView v{layer_base, page_elems, g.page_tokens, g.n_kv_heads, g.head_dim, KvElem::kF16};
  switch (g.dtype) {
    case KvDtype::kF32: v.elem = KvElem::kF32; break;
    case KvDtype::kBF16: v.elem = KvElem::kBF16; break;
    case KvDtype::kFp8:
    case KvDtype::kInt8:
    case KvDtype::kInt4: {
      const PieceLayout L = g.head_layout();
      v.elem = g.dtype == KvDtype::kFp8 ? KvElem::kFp8 : g.dtype == KvDtype::kInt8 ? KvElem::kInt8 : KvElem::kInt4;
      v.head_stride = L.stride;
      v.scales_offset = L.scales_offset;
      break;
    }
    default: v.elem = KvElem::kF16; break;
  }
  return v;
}
}  // namespace

bool CudaBackend::grow_stage(size_t bytes) {
  if (bytes <= stage_.bytes) return true;
  if (bytes >= stage_failed_bytes_) return false;  // this much did not fit before: no retry each layer
  // Half again what is asked (a prompt grows chunk by chunk) but never past the cap; exactly
  // what is asked when that does not fit. The copy is used by eager steps only (a step with a
  // prompt run is never graph-captured), so its address changing invalidates no graph: plain
  // cudaMalloc, no alloc_generation_ bump.
  const size_t want = std::max(bytes, std::min(stage_max_bytes_, stage_.bytes + stage_.bytes / 2));
  if (stage_.ptr) {
    if (cudaStreamSynchronize(stream_) != cudaSuccess) return false;  // queued kernels may still read it
    (void)cudaFree(stage_.ptr);
    stage_.ptr = nullptr;
    stage_.bytes = 0;
  }
  auto try_alloc = [&](size_t b) {
    if (cudaMalloc(&stage_.ptr, b) == cudaSuccess) {
      stage_.bytes = b;
      return true;
    }
    (void)cudaGetLastError();  // out-of-memory is not sticky
    stage_.ptr = nullptr;
    return false;
  };
  if (try_alloc(want) || (want > bytes && try_alloc(bytes))) return true;
  stage_failed_bytes_ = bytes;
  if (!stage_warned_) {
    spdlog::warn("cuda: no device memory for a {}-byte prefill staging copy; such prompt runs take the exact kernel",
                 bytes);
    stage_warned_ = true;
  }
  return false;
}

KvLayerView CudaBackend::layer_kv_view(int layer) const {
  return kv_layer_view(kv_geom_, static_cast<uint8_t*>(kv_base_) + layer * kv_layer_bytes_, kv_page_elems_);
}

Result<KvLayerView> CudaBackend::kv_write_view(int layer, const Tensor& k, const Tensor& v, const char* op) const {
  HS_RETURN_IF_ERROR(need_step(op));
  if (!kv_ready_)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: the step has no KV cache, sequences or page table", op);
  const KvGeometry& g = kv_geom_;
  if (layer < 0 || layer >= g.n_layer)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: layer {} of {}", op, layer, g.n_layer);
  HS_RETURN_IF_ERROR(check_f32(k, op, "k"));
  HS_RETURN_IF_ERROR(check_f32(v, op, "v"));
  HS_RETURN_IF_ERROR(check_rows(k, plan_->n_tokens(), op, "k"));
  HS_RETURN_IF_ERROR(check_same_shape(k, v, op, "k", "v"));
  if (k.cols != static_cast<int64_t>(g.n_kv_heads) * g.head_dim)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: k has {} columns, the cache {} kv heads x {}", op, k.cols,
                      g.n_kv_heads, g.head_dim);
  (void)g;
  return layer_kv_view(layer);
}

Status CudaBackend::kv_write(int layer, const Tensor& k, const Tensor& v) {
  OpProfile::Scope prof(&profile_, "kv_write", stream_);
  clear_input_tag();
  HS_ASSIGN_OR_RETURN(const KvLayerView view, kv_write_view(layer, k, v, "kv_write"));
  const StepTables t{d_positions_, d_seq_index_, d_page_indptr_, d_page_indices_};
  HS_RETURN_IF_ERROR(launched(launch_kv_write(view, t, crows_of(k), crows_of(v), stream_), "kv_write"));
  note_hot_kv(layer, k, v);
  return write_sketches(layer, k);
}

Status CudaBackend::rope_qk_kv_write(int layer, Tensor q, Tensor k, const Tensor& v, int head_dim, float theta,
                                     bool neox) {
  if (rope_kv_fused_) {
    OpProfile::Scope prof(&profile_, "rope_qk_kv_write", stream_);
    clear_input_tag();
    HS_RETURN_IF_ERROR(check_rope(q, head_dim, "rope_qk_kv_write"));
    HS_RETURN_IF_ERROR(check_rope(k, head_dim, "rope_qk_kv_write"));
    HS_ASSIGN_OR_RETURN(const KvLayerView view, kv_write_view(layer, k, v, "rope_qk_kv_write"));
    const StepTables t{d_positions_, d_seq_index_, d_page_indptr_, d_page_indices_};
    const cudaError_t e =
        launch_rope_kv_write(rows_of(q), rows_of(k), crows_of(v), head_dim, theta, neox, view, t, stream_);
    if (e != cudaErrorInvalidValue) {
      HS_RETURN_IF_ERROR(launched(e, "rope_qk_kv_write"));
      note_hot_kv(layer, k, v);
      return write_sketches(layer, k);
    }
  }
  HS_RETURN_IF_ERROR(rope_qk(q, k, head_dim, theta, neox));  // fused off (HS_CUDA_ROPE_KV=0): the two kernels
  return kv_write(layer, k, v);
}

Status CudaBackend::attention(int layer, const Tensor& q, Tensor out, const AttentionParams& p) {
  OpProfile::Scope prof(&profile_, profile_.on() ? fmt::format("attention (n={})", q.rows) : std::string(), stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(need_step("attention"));
  if (!kv_ready_)
    return make_error(StatusCode::kInvalidArgument, "cuda attention: the step has no KV cache, sequences or page table");
  const KvGeometry& g = kv_geom_;
  if (layer < 0 || layer >= g.n_layer)
    return make_error(StatusCode::kInvalidArgument, "cuda attention: layer {} of {}", layer, g.n_layer);
  if (p.n_head_kv != g.n_kv_heads || p.head_dim != g.head_dim || p.n_head <= 0 || p.n_head % p.n_head_kv != 0)
    return make_error(StatusCode::kInvalidArgument,
                      "cuda attention: {} heads over {} kv heads of {} (the cache has {} kv heads of {})", p.n_head,
                      p.n_head_kv, p.head_dim, g.n_kv_heads, g.head_dim);
  const int group = p.n_head / p.n_head_kv;
  if (!attention_shape_supported(p.head_dim, group))
    return make_error(StatusCode::kUnsupported,
                      "cuda attention: head_dim {} with {} query heads per kv head is not supported (head_dim 64, 128 or "
                      "256; at most 8 per kv head)",
                      p.head_dim, group);
  HS_RETURN_IF_ERROR(check_f32(q, "attention", "q"));
  HS_RETURN_IF_ERROR(check_f32(out, "attention", "out"));
  const int64_t n = plan_->n_tokens();
  HS_RETURN_IF_ERROR(check_rows(q, n, "attention", "q"));
  HS_RETURN_IF_ERROR(check_same_shape(q, out, "attention", "q", "out"));
  if (q.cols != static_cast<int64_t>(p.n_head) * p.head_dim)
    return make_error(StatusCode::kInvalidArgument, "cuda attention: q has {} columns for {} heads of {}", q.cols, p.n_head,
                      p.head_dim);
  if (n == 0) return Status::ok();

  const KvLayerView view = layer_kv_view(layer);
  AttnArgs a;
  a.n_head = p.n_head;
  a.n_head_kv = p.n_head_kv;
  a.head_dim = p.head_dim;
  a.scale = p.scale;
  a.window = p.window > 0 ? p.window : 0;
  // Prompt runs (>= kFlashMinRun tokens of one sequence: begin_step's attn_ranges_) on tensor
  // cores (flash_prefill.h: Q and P rounded to the cache's 16-bit type): straight from device
  // f16 / bf16 pages, or (the host tier's mapped pages, fp8 / int8 / int4 pages) from a staged
  // 16-bit copy of the sequence's pages of this layer (kv_stage.h; K / V rounded to f16 once
  // more). The rest — decode tokens, short prompts, f32 pages, HS_CUDA_FLASH=0, a run too long
  // for HS_CUDA_PREFILL_STAGE — on the exact split-K kernel.
  const bool direct = !kv_tier_.host && flash_prefill_supported(view, p.head_dim, group);
  const KvLayerView stage_view = kv_stage_view(view, nullptr);
  const bool staged = !direct && stage_tables_ && kv_stage_supported(view) &&
                      flash_prefill_supported(stage_view, p.head_dim, group);
  const bool flash = flash_on_ && has_flash_range_ && (direct || staged);
  const CRows qa = crows_of(q);
  const Rows oa = rows_of(out);
  auto sub = [](auto r, int64_t b, int64_t e) {
    r.p += b * r.stride;
    r.rows = e - b;
    return r;
  };
  // Sparse rows (decode tokens past the sparse threshold on a full layer): select their chunks
  // first; they attend at most max_selected_chunks pages, the other tokens their whole range.
  const bool sparse = sparse_layer(layer, p);
  int32_t sparse_range = 0;
  if (sparse) {
    HS_RETURN_IF_ERROR(select_sparse(layer, q, p, a));
    sparse_range = std::min(max_pos1_, a.sp_stride * kv_geom_.page_tokens);
  }
  // One exact-kernel launch over tokens [b, e); with_sparse: they lie inside the selection's rows
  // (which start at token sel_first_), else every row of the launch is dense.
  auto exact_launch = [&](int64_t b, int64_t e, bool with_sparse) -> Status {
    if (b >= e) return Status::ok();
    const int32_t max_range = p.window > 0    ? std::min(max_pos1_, p.window)
                              : with_sparse   ? std::max(dense_max_pos1_, sparse_range)
                              : sparse        ? dense_max_pos1_
                                              : max_pos1_;
    AttnArgs x = a;
    if (with_sparse && x.sp_len) {  // rows of this launch start at token b
      x.sp_len += (b - sel_first_) * p.n_head_kv;
      x.sp_pages += (b - sel_first_) * p.n_head_kv * x.sp_stride;
    } else {  // no sparse row in this launch (nor the host tier's slots)
      x.sp_len = nullptr;
      x.sp_pages = nullptr;
      x.sp_base = nullptr;
      x.sp_head_bytes = 0;
      x.sp_page_bytes = 0;
    }
    x.split = plan_attention_split(e - b, p.n_head_kv, max_range, n_sm_);
    const size_t floats = attention_scratch_floats(e - b, p.n_head_kv, group, p.head_dim, x.split);
    if (floats > 0) {
      HS_RETURN_IF_ERROR(grow(attn_, floats * sizeof(float), "attention partials"));
      x.scratch = static_cast<float*>(attn_.ptr);
    }
    const StepTables t{d_positions_ + b, d_seq_index_ + b, d_page_indptr_, d_page_indices_};
    OpProfile::Scope prof(&profile_, !profile_.on() ? std::string() : x.sp_len ? "attention: kernel (sparse rows)" : "attention: kernel",
                          stream_);
    return launched(launch_attention(view, t, sub(qa, b, e), sub(oa, b, e), x, stream_), "attention");
  };
  // Tokens [b, e): the part before the selection's rows, the part inside, the part after.
  auto exact = [&](int64_t b, int64_t e) -> Status {
    if (!sparse) return exact_launch(b, e, false);
    HS_RETURN_IF_ERROR(exact_launch(b, std::min(e, sel_first_), false));
    HS_RETURN_IF_ERROR(exact_launch(std::max(b, sel_first_), std::min(e, sel_end_), true));
    return exact_launch(std::max(b, sel_end_), e, false);
  };
  if (!flash) return exact(0, n);
  for (const AttnRange& r : attn_ranges_) {
    if (!r.flash) {
      HS_RETURN_IF_ERROR(exact(r.begin, r.end));
      continue;
    }
    if (direct) {
      const StepTables t{d_positions_ + r.begin, d_seq_index_ + r.begin, d_page_indptr_, d_page_indices_};
      HS_RETURN_IF_ERROR(launched(launch_flash_prefill(view, t, sub(qa, r.begin, r.end), sub(oa, r.begin, r.end), a,
                                                       nullptr, stream_),
                                  "attention (flash prefill)"));
      continue;
    }
    const size_t stage_bytes = static_cast<size_t>(r.n_pages) * kv_stage_page_bytes(view);
    if (stage_bytes > stage_max_bytes_ || r.n_pages <= 0) {
      HS_RETURN_IF_ERROR(exact(r.begin, r.end));
      continue;
    }
    if (!grow_stage(stage_bytes)) {  // the card is full: the exact kernel still serves the run
      HS_RETURN_IF_ERROR(exact(r.begin, r.end));
      continue;
    }
    KvLayerView sv = stage_view;
    sv.base = stage_.ptr;
    {
      OpProfile::Scope sp(&profile_, profile_.on() ? "attention: stage pages" : std::string(), stream_);
      HS_RETURN_IF_ERROR(launched(launch_kv_stage(view, d_page_indices_ + r.page_begin, r.n_pages, sv, stream_),
                                  "attention (stage pages)"));
    }
    const StepTables t{d_positions_ + r.begin, d_seq_index_ + r.begin, d_page_indptr_, d_stage_indices_};
    HS_RETURN_IF_ERROR(launched(launch_flash_prefill(sv, t, sub(qa, r.begin, r.end), sub(oa, r.begin, r.end), a, nullptr,
                                                     stream_),
                                "attention (flash prefill, staged pages)"));
  }
  return Status::ok();
}

}  // namespace hs::cuda
