// model/tensor_parallel.cpp — plan_tensor_parallel and ShardStore (tensor_parallel.h).
#include "model/tensor_parallel.h"

#include <cstring>

#include "core/quant.h"
#include "core/tensor.h"

namespace hs {

Result<std::vector<TpSlice>> plan_tensor_parallel(const ModelConfig& c, int size, int64_t ff_align) {
  if (size < 1) return make_error(StatusCode::kInvalidArgument, "--tensor-parallel-size must be at least 1 (got {})", size);
  if (size > 1 && (c.is_hybrid() || c.is_moe()))
    return make_error(StatusCode::kUnsupported,
                      "--tensor-parallel-size {}: {} is a hybrid / mixture-of-experts model, which is not split yet "
                      "(llama, gemma3 and qwen2 are)", size, c.arch_name);
  if (c.n_head % size != 0)
    return make_error(StatusCode::kInvalidArgument,
                      "--tensor-parallel-size {} does not divide the model's {} attention heads", size, c.n_head);
  const int kv = c.n_head_kv;
  if (kv % size != 0 && size % kv != 0)
    return make_error(StatusCode::kInvalidArgument,
                      "--tensor-parallel-size {} and the model's {} kv heads: one must divide the other", size, kv);
  if (c.n_ff < size || c.n_vocab < size)
    return make_error(StatusCode::kInvalidArgument, "--tensor-parallel-size {} is larger than the FFN or vocabulary", size);
  const int64_t align = (ff_align > 0 && c.n_ff % ff_align == 0 && c.n_ff / ff_align >= size) ? ff_align : 1;
  const int64_t units = c.n_ff / align;
  std::vector<TpSlice> out(size);
  const int hq = c.n_head / size;
  const int group = c.n_head / kv;  // query heads per kv head
  for (int r = 0; r < size; ++r) {
    TpSlice& s = out[r];
    s.rank = r;
    s.size = size;
    s.q_head0 = r * hq;
    s.n_q_heads = hq;
    if (size <= kv) {
      s.n_kv_heads = kv / size;
      s.kv_head0 = r * s.n_kv_heads;
    } else {  // N / kv ranks share (a replica of) each kv head
      s.n_kv_heads = 1;
      s.kv_head0 = s.q_head0 / group;
    }
    s.ff0 = units * r / size * align;
    s.n_ff = units * (r + 1) / size * align - s.ff0;
    s.vocab0 = static_cast<int64_t>(c.n_vocab) * r / size;
    s.n_vocab = static_cast<int64_t>(c.n_vocab) * (r + 1) / size - s.vocab0;
  }
  return out;
}

WeightView ShardStore::rows(const WeightView& w, int64_t r0, int64_t n) {
  WeightView v = w;
  v.data = static_cast<const uint8_t*>(w.data) + r0 * tensor_row_bytes(w.type, w.n_in);
  v.n_out = n;
  return v;
}

Result<WeightView> ShardStore::cols(const WeightView& w, int64_t c0, int64_t n) {
  if (c0 < 0 || n <= 0 || c0 + n > w.n_in)
    return make_error(StatusCode::kInvalidArgument, "column slice [{}, {}) of a matrix of {} columns", c0, c0 + n, w.n_in);
  if (c0 == 0 && n == w.n_in) return w;
  const auto info = dtype_info(w.type);
  if (!info) return make_error(StatusCode::kUnsupported, "column slice of an unknown weight type");
  const int64_t blk = info->block_elems;
  const int64_t src_row = tensor_row_bytes(w.type, w.n_in);
  const bool whole_blocks = c0 % blk == 0 && n % blk == 0;
  const DType out_type = whole_blocks ? w.type : DType::F32;
  const int64_t dst_row = tensor_row_bytes(out_type, n);
  auto buf = std::make_unique<uint8_t[]>(static_cast<size_t>(dst_row * w.n_out));
  const uint8_t* src = static_cast<const uint8_t*>(w.data);
  if (whole_blocks) {
    const int64_t off = c0 / blk * info->block_bytes;
    for (int64_t r = 0; r < w.n_out; ++r) std::memcpy(buf.get() + r * dst_row, src + r * src_row + off, dst_row);
  } else {
    if (!dequantize_supported(w.type))
      return make_error(StatusCode::kUnsupported, "column slice [{}, {}) of a {} matrix: not on its blocks and not "
                        "dequantizable", c0, c0 + n, info->name);
    std::vector<float> row(static_cast<size_t>(w.n_in));
    for (int64_t r = 0; r < w.n_out; ++r) {
      HS_RETURN_IF_ERROR(dequantize_row(w.type, src + r * src_row, static_cast<size_t>(src_row), row.data(), w.n_in));
      std::memcpy(buf.get() + r * dst_row, row.data() + c0, static_cast<size_t>(n) * sizeof(float));
    }
  }
  WeightView v{out_type, n, w.n_out, buf.get()};
  bytes_ += dst_row * w.n_out;
  bufs_.push_back(std::move(buf));
  return v;
}

const std::vector<float>& ShardStore::sub(const std::vector<float>& v, int64_t off, int64_t n) {
  if (v.empty()) {
    vecs_.emplace_back();
  } else {
    vecs_.emplace_back(v.begin() + off, v.begin() + off + n);
    bytes_ += n * static_cast<int64_t>(sizeof(float));
  }
  return vecs_.back();
}

}  // namespace hs
