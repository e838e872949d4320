// model/tensor_parallel.cpp — plan_tensor_parallel and ShardStore (tensor_parallel.h).
#include "model/tensor_parallel.h"

#include <cstring>

#include "core/quant.h"
#include "core/tensor.h"

namespace hs {

Result<std::vector<TpSlice>> plan_tensor_parallel(const ModelConfig& c, int size, int64_t ff_align) {
  if (size < 1) return make_error(StatusCode::kInvalidArgument, "--tensor-parallel-size must be at least 1 (got {})", size);
  if (size > 1 && c.is_hybrid() && (c.ssm_n_k_heads % size != 0 || c.ssm_n_k_heads < size))
    return make_error(StatusCode::kInvalidArgument,
                      "--tensor-parallel-size {} does not divide the model's {} linear-attention key heads", size,
                      c.ssm_n_k_heads);
  if (c.n_head % size != 0)
    return make_error(StatusCode::kInvalidArgument,
                      "--tensor-parallel-size {} does not divide the model's {} attention heads", size, c.n_head);
  const int kv = c.n_head_kv;
  if (kv % size != 0 && size % kv != 0)
    return make_error(StatusCode::kInvalidArgument,
                      "--tensor-parallel-size {} and the model's {} kv heads: one must divide the other", size, kv);
  const int64_t ff = c.is_moe() ? 0 : c.n_ff;  // a MoE model's FFN is its experts
  if ((!c.is_moe() && ff < size) || (c.is_moe() && (c.n_ff_exp < size || c.n_ff_shexp < size)) || c.n_vocab < size)
    return make_error(StatusCode::kInvalidArgument, "--tensor-parallel-size {} is larger than the FFN or vocabulary", size);
  // Rank r's share [begin, begin + n) of `total` columns, in whole ff_align blocks when total allows.
  const auto share = [&](int64_t total, int r, int64_t& begin, int64_t& n) {
    const int64_t align = (ff_align > 0 && total % ff_align == 0 && total / ff_align >= size) ? ff_align : 1;
    const int64_t units = total / align;
    begin = units * r / size * align;
    n = units * (r + 1) / size * align - begin;
  };
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
    share(ff, r, s.ff0, s.n_ff);
    if (c.is_moe()) {
      share(c.n_ff_exp, r, s.ffe0, s.n_ffe);
      share(c.n_ff_shexp, r, s.shexp0, s.n_shexp);
    }
    s.vocab0 = static_cast<int64_t>(c.n_vocab) * r / size;
    s.n_vocab = static_cast<int64_t>(c.n_vocab) * (r + 1) / size - s.vocab0;
    if (c.is_hybrid()) {
      s.n_ssm_k_heads = c.ssm_n_k_heads / size;
      s.ssm_k_head0 = r * s.n_ssm_k_heads;
    }
  }
  return out;
}

std::vector<int> ssm_v_heads(const ModelConfig& c, const TpSlice& s) {
  const int nk = c.ssm_n_k_heads, per = nk > 0 ? c.ssm_n_v_heads / nk : 0;
  std::vector<int> v;
  if (c.ssm_v_tiled) {  // v head j reads key head j % n_k: local t * nk_r + i is global k0 + i + n_k * t
    for (int t = 0; t < per; ++t)
      for (int i = 0; i < s.n_ssm_k_heads; ++i) v.push_back(s.ssm_k_head0 + i + nk * t);
  } else {  // v head j reads key head j / per: the key heads' runs in order
    for (int i = 0; i < s.n_ssm_k_heads; ++i)
      for (int t = 0; t < per; ++t) v.push_back((s.ssm_k_head0 + i) * per + t);
  }
  return v;
}

ModelConfig rank_config(const ModelConfig& c, const TpSlice& s) {
  if (s.size == 1) return c;
  ModelConfig r = c;
  r.n_head = s.n_q_heads;
  r.n_head_kv = s.n_kv_heads;
  r.n_ff = static_cast<int>(s.n_ff);
  if (c.is_moe()) {
    r.n_ff_exp = static_cast<int>(s.n_ffe);
    r.n_ff_shexp = static_cast<int>(s.n_shexp);
  }
  if (c.is_hybrid()) {
    r.ssm_n_k_heads = s.n_ssm_k_heads;
    r.ssm_n_v_heads = c.ssm_n_k_heads > 0 ? c.ssm_n_v_heads / c.ssm_n_k_heads * s.n_ssm_k_heads : 0;
  }
  return r;
}

WeightView ShardStore::rows(const WeightView& w, int64_t r0, int64_t n) {
  WeightView v = w;
  v.data = static_cast<const uint8_t*>(w.data) + r0 * tensor_row_bytes(w.type, w.n_in);
  v.n_out = n;
  return v;
}

Result<WeightView> ShardStore::cols(const WeightView& w, int64_t c0, int64_t n) {
  return cols(w, std::vector<IndexSpan>{{c0, n}});
}

Result<WeightView> ShardStore::cols(const WeightView& w, const std::vector<IndexSpan>& spans) {
  int64_t n = 0;
  bool whole_blocks = true;
  const auto info = dtype_info(w.type);
  if (!info) return make_error(StatusCode::kUnsupported, "column slice of an unknown weight type");
  const int64_t blk = info->block_elems;
  for (const IndexSpan& sp : spans) {
    if (sp.begin < 0 || sp.n <= 0 || sp.begin + sp.n > w.n_in)
      return make_error(StatusCode::kInvalidArgument, "column slice [{}, {}) of a matrix of {} columns", sp.begin,
                        sp.begin + sp.n, w.n_in);
    n += sp.n;
    whole_blocks = whole_blocks && sp.begin % blk == 0 && sp.n % blk == 0;
  }
  if (spans.size() == 1 && spans[0].begin == 0 && n == w.n_in) return w;
  const int64_t src_row = tensor_row_bytes(w.type, w.n_in);
  const DType out_type = whole_blocks ? w.type : DType::F32;
  const int64_t dst_row = tensor_row_bytes(out_type, n);
  auto buf = std::make_unique<uint8_t[]>(static_cast<size_t>(dst_row * w.n_out));
  const uint8_t* src = static_cast<const uint8_t*>(w.data);
  if (whole_blocks) {
    for (int64_t r = 0; r < w.n_out; ++r) {
      uint8_t* dst = buf.get() + r * dst_row;
      for (const IndexSpan& sp : spans) {
        const int64_t bytes = sp.n / blk * info->block_bytes;
        std::memcpy(dst, src + r * src_row + sp.begin / blk * info->block_bytes, static_cast<size_t>(bytes));
        dst += bytes;
      }
    }
  } else {
    if (!dequantize_supported(w.type))
      return make_error(StatusCode::kUnsupported, "column slice of a {} matrix: not on its blocks and not "
                        "dequantizable", info->name);
    std::vector<float> row(static_cast<size_t>(w.n_in));
    for (int64_t r = 0; r < w.n_out; ++r) {
      HS_RETURN_IF_ERROR(dequantize_row(w.type, src + r * src_row, static_cast<size_t>(src_row), row.data(), w.n_in));
      float* dst = reinterpret_cast<float*>(buf.get() + r * dst_row);
      for (const IndexSpan& sp : spans) {
        std::memcpy(dst, row.data() + sp.begin, static_cast<size_t>(sp.n) * sizeof(float));
        dst += sp.n;
      }
    }
  }
  WeightView v{out_type, n, w.n_out, buf.get()};
  bytes_ += dst_row * w.n_out;
  bufs_.push_back(std::move(buf));
  return v;
}

Result<WeightView> ShardStore::rows(const WeightView& w, const std::vector<IndexSpan>& spans) {
  int64_t n = 0;
  for (const IndexSpan& sp : spans) {
    if (sp.begin < 0 || sp.n <= 0 || sp.begin + sp.n > w.n_out)
      return make_error(StatusCode::kInvalidArgument, "row slice [{}, {}) of a matrix of {} rows", sp.begin,
                        sp.begin + sp.n, w.n_out);
    n += sp.n;
  }
  if (spans.size() == 1) return rows(w, spans[0].begin, spans[0].n);
  const int64_t row = tensor_row_bytes(w.type, w.n_in);
  auto buf = std::make_unique<uint8_t[]>(static_cast<size_t>(row * n));
  uint8_t* dst = buf.get();
  for (const IndexSpan& sp : spans) {
    std::memcpy(dst, static_cast<const uint8_t*>(w.data) + sp.begin * row, static_cast<size_t>(sp.n * row));
    dst += sp.n * row;
  }
  WeightView v{w.type, w.n_in, n, buf.get()};
  bytes_ += row * n;
  bufs_.push_back(std::move(buf));
  return v;
}

const std::vector<float>& ShardStore::sub(const std::vector<float>& v, int64_t off, int64_t n) {
  return sub(v, std::vector<IndexSpan>{{off, n}});
}

const std::vector<float>& ShardStore::sub(const std::vector<float>& v, const std::vector<IndexSpan>& spans) {
  vecs_.emplace_back();
  if (v.empty()) return vecs_.back();
  for (const IndexSpan& sp : spans) {
    vecs_.back().insert(vecs_.back().end(), v.begin() + sp.begin, v.begin() + sp.begin + sp.n);
    bytes_ += sp.n * static_cast<int64_t>(sizeof(float));
  }
  return vecs_.back();
}

}  // namespace hs
