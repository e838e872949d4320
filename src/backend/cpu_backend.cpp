// backend/cpu_backend.cpp — see cpu_backend.h.
#include "backend/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_exact.h"
#include "backend/cpu/ops.h"
#include "backend/cpu_checks.h"
#include "backend/cpu_sparse_kernels.h"
#include "sparse/sparse_runtime.h"

namespace hs {

namespace {

cpu::WeightView weight_view(const Tensor& w) { return cpu::WeightView{w.dtype, w.cols, w.rows, w.data}; }

Status need_f32(const Tensor& t, const char* op, const char* what) {
  if (t.dtype != DType::F32 || t.device != Device::kCpu || !t.contiguous())
    return make_error(StatusCode::kInvalidArgument, "{}: {} must be contiguous host f32 (got {} on {})", op, what,
                      dtype_name(t.dtype), device_name(t.device));
  return Status::ok();
}

Status same_shape(const Tensor& a, const Tensor& b, const char* op) {
  if (a.rows != b.rows || a.cols != b.cols)
    return make_error(StatusCode::kInvalidArgument, "{}: shapes [{}][{}] and [{}][{}] differ", op, a.rows, a.cols, b.rows,
                      b.cols);
  return Status::ok();
}

}  // namespace

std::string CpuBackend::name() const {
  return std::string("cpu (") + cpu::simd_level() + ")";
}

// Device memory is host memory here: the aligned, zeroed allocation of alloc_host.
Result<Buffer> CpuBackend::alloc(size_t bytes, std::string_view what) { return alloc_host(bytes, what); }

void CpuBackend::free_memory(void* ptr) { std::free(ptr); }

Result<Tensor> CpuBackend::prepare_weight(const Tensor& host, std::string_view) { return host; }

Result<Tensor> CpuBackend::prepare_vector(std::span<const float> host, std::string_view) {
  return Tensor::matrix(host.data(), DType::F32, host.empty() ? 0 : 1, static_cast<int64_t>(host.size()));
}

Status CpuBackend::to_host(const Tensor& src, void* dst) {
  if (!src.contiguous()) return make_error(StatusCode::kInvalidArgument, "to_host: source rows are strided");
  std::memcpy(dst, src.data, static_cast<size_t>(src.bytes()));
  return Status::ok();
}

Status CpuBackend::from_host(const void* src, Tensor dst) {
  if (!dst.contiguous()) return make_error(StatusCode::kInvalidArgument, "from_host: destination rows are strided");
  std::memcpy(dst.data, src, static_cast<size_t>(dst.bytes()));
  return Status::ok();
}

ThreadPool& CpuBackend::pool() const { return *plan_->pool; }

Status CpuBackend::begin_step(const ForwardPlan& plan) {
  if (!plan.pool) return make_error(StatusCode::kInvalidArgument, "cpu backend: the step plan has no thread pool");
  if (plan.kv && !plan.kv->has_host_pages())
    return make_error(StatusCode::kInvalidArgument, "cpu backend: the KV cache has no host pages (made for a device backend)");
  plan_ = &plan;
  n_rope_tables_ = 0;
  seq_rows_valid_ = false;
  return Status::ok();
}

Status CpuBackend::end_step() {
  attention_.end_step();
  return Status::ok();
}

const SparseKernels* CpuBackend::host_sparse_kernels() const { return &cpu_sparse_kernels(); }

Status CpuBackend::set_sparse(SparseRuntime* rt, HotChunks* hot) {
  if (rt && !rt->host_selection())
    return make_error(StatusCode::kInvalidArgument,
                      "cpu backend: the sparse runtime was made without host sparse kernels (Backend::host_sparse_kernels)");
  attention_.set_sparse(rt, hot);
  return Status::ok();
}

Status CpuBackend::rebuild_sparse_metadata(KvCache& kv, const SeqKv& seq, int32_t n_tokens) {
  SparseRuntime* sp = attention_.sparse();
  if (!sp) return Status::ok();
  const KvGeometry& g = kv.geometry();
  std::vector<float> k(g.head_dim), v(g.head_dim);  // [head_dim]
  for (int l = 0; l < g.n_layer; ++l)
    if (sp->layer_sparse(l))
      for (int h = 0; h < g.n_kv_heads; ++h)
        for (int32_t p = 0; p < n_tokens; ++p) {
          kv.read(seq, l, h, p, k.data(), v.data());
          sp->on_key(seq.blocks, l, h, p, k.data());
        }
  return Status::ok();
}

Status CpuBackend::embedding(const Tensor& table, Tensor out) {
  HS_RETURN_IF_ERROR(need_f32(out, "embedding", "out"));
  const int64_t n = plan_->n_tokens();
  if (out.rows != n || out.cols != table.cols)
    return make_error(StatusCode::kInvalidArgument, "embedding: out [{}][{}] for {} tokens of width {}", out.rows, out.cols,
                      n, table.cols);
  return cpu::get_rows(weight_view(table), plan_->tokens.data(), n, out.f32());
}

Status CpuBackend::matmul(const Tensor& w, const Tensor& x, Tensor y) {
  HS_RETURN_IF_ERROR(need_f32(x, "matmul", "x"));
  HS_RETURN_IF_ERROR(need_f32(y, "matmul", "y"));
  if (x.cols != w.cols || y.cols != w.rows || x.rows != y.rows)
    return make_error(StatusCode::kInvalidArgument, "matmul: x [{}][{}] · w[{}][{}]ᵀ -> y [{}][{}]", x.rows, x.cols, w.rows,
                      w.cols, y.rows, y.cols);
  const cpu::WeightView wv = weight_view(w);
  switch (precision_) {
    case MatmulPrecision::kExact: return cpu::matmul_exact(wv, x.f32(), x.rows, y.f32(), pool());
    case MatmulPrecision::kInt8x2: return cpu::matmul(wv, x.f32(), x.rows, y.f32(), pool(), cpu::ActPrecision::kInt8x2);
    case MatmulPrecision::kInt8: return cpu::matmul(wv, x.f32(), x.rows, y.f32(), pool(), cpu::ActPrecision::kInt8);
  }
  return make_error(StatusCode::kInternal, "bad matmul precision");
}

Status CpuBackend::matmul_multi(std::span<const Tensor> ws, const Tensor& x, std::span<const Tensor> ys) {
  if (precision_ == MatmulPrecision::kExact || ws.size() > 8) return Backend::matmul_multi(ws, x, ys);
  if (ws.size() != ys.size()) return make_error(StatusCode::kInvalidArgument, "matmul_multi: {} weights, {} outputs", ws.size(), ys.size());
  HS_RETURN_IF_ERROR(need_f32(x, "matmul_multi", "x"));
  cpu::WeightView wv[8];
  float* yp[8];
  for (size_t i = 0; i < ws.size(); ++i) {
    HS_RETURN_IF_ERROR(need_f32(ys[i], "matmul_multi", "y"));
    if (ys[i].rows != x.rows || ys[i].cols != ws[i].rows || ws[i].cols != x.cols)
      return make_error(StatusCode::kInvalidArgument, "matmul_multi: weight {} shape mismatch", i);
    wv[i] = weight_view(ws[i]);
    yp[i] = ys[i].f32();
  }
  const auto act = precision_ == MatmulPrecision::kInt8 ? cpu::ActPrecision::kInt8 : cpu::ActPrecision::kInt8x2;
  return cpu::matmul_multi(std::span<const cpu::WeightView>(wv, ws.size()), x.f32(), x.rows,
                           std::span<float* const>(yp, ws.size()), pool(), act);
}

Status CpuBackend::rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor out) {
  HS_RETURN_IF_ERROR(cpu_checks::need_rows(x, "rms_norm", "x"));
  HS_RETURN_IF_ERROR(cpu_checks::need_rows(out, "rms_norm", "out"));
  HS_RETURN_IF_ERROR(same_shape(x, out, "rms_norm"));
  if (!w.empty() && w.cols != x.cols)
    return make_error(StatusCode::kInvalidArgument, "rms_norm: weight of {} for rows of {}", w.cols, x.cols);
  const float* wp = w.empty() ? nullptr : w.f32();
  const int width = static_cast<int>(x.cols);
  const int64_t xs = x.row_stride / 4, os = out.row_stride / 4;  // strided views (a column slice) allowed
  for (int64_t r = 0; r < x.rows; ++r) cpu::rms_norm(x.f32() + r * xs, wp, width, eps, out.f32() + r * os);
  return Status::ok();
}

const float* CpuBackend::rope_table(float theta, int head_dim) {
  for (int i = 0; i < n_rope_tables_; ++i)
    if (rope_tables_[i].theta == theta && rope_tables_[i].head_dim == head_dim) return rope_tables_[i].cs.data();
  if (static_cast<int>(rope_tables_.size()) <= n_rope_tables_) rope_tables_.emplace_back();
  RopeTable& t = rope_tables_[n_rope_tables_++];
  t.theta = theta;
  t.head_dim = head_dim;
  const int half = head_dim / 2;
  const int64_t n = plan_->n_tokens();
  if (static_cast<int64_t>(t.cs.size()) < n * 2 * half) t.cs.resize(n * 2 * half);
  for (int64_t i = 0; i < n; ++i) {
    float* row = t.cs.data() + i * 2 * half;
    cpu::rope_table(plan_->positions[i], theta, head_dim, row, row + half);
  }
  return t.cs.data();
}

Status CpuBackend::rope(Tensor x, int head_dim, float theta, bool neox) {
  HS_RETURN_IF_ERROR(need_f32(x, "rope", "x"));
  if (x.rows != plan_->n_tokens() || head_dim <= 0 || head_dim % 2 || x.cols % head_dim)
    return make_error(StatusCode::kInvalidArgument, "rope: [{}][{}] with head_dim {} for {} tokens", x.rows, x.cols,
                      head_dim, plan_->n_tokens());
  const float* tab = rope_table(theta, head_dim);
  const int half = head_dim / 2;
  const int n_heads = static_cast<int>(x.cols / head_dim);
  for (int64_t i = 0; i < x.rows; ++i) {
    const float* cs = tab + i * 2 * half;
    cpu::rope_apply(x.f32() + i * x.cols, n_heads, head_dim, cs, cs + half, neox);
  }
  return Status::ok();
}

Status CpuBackend::glu(GluKind kind, const Tensor& gate, const Tensor& up, Tensor out) {
  HS_RETURN_IF_ERROR(need_f32(gate, "glu", "gate"));
  HS_RETURN_IF_ERROR(need_f32(up, "glu", "up"));
  HS_RETURN_IF_ERROR(need_f32(out, "glu", "out"));
  HS_RETURN_IF_ERROR(same_shape(gate, up, "glu"));
  HS_RETURN_IF_ERROR(same_shape(gate, out, "glu"));
  // Elementwise, so any split gives the same bits: threads take 16K-element pieces (a prefill's
  // [n][n_ff] is millions of elements: 5.6 % of Qwen2.5-Coder-0.5B's pp512 on one thread).
  const int64_t n = gate.rows * gate.cols;
  constexpr int64_t kPiece = 16384;
  const auto run = [&](int64_t b, int64_t e, int) {
    const int64_t lo = b * kPiece, len = std::min(n, e * kPiece) - lo;
    if (kind == GluKind::kSilu) cpu::silu_mul(gate.f32() + lo, up.f32() + lo, len, out.f32() + lo);
    else cpu::gelu_tanh_mul(gate.f32() + lo, up.f32() + lo, len, out.f32() + lo);
  };
  const int64_t pieces = (n + kPiece - 1) / kPiece;
  if (pieces > 1) pool().parallel_for(pieces, 1, run);
  else run(0, pieces, 0);
  return Status::ok();
}

Status CpuBackend::add(Tensor x, const Tensor& y) {
  HS_RETURN_IF_ERROR(need_f32(x, "add", "x"));
  HS_RETURN_IF_ERROR(need_f32(y, "add", "y"));
  HS_RETURN_IF_ERROR(same_shape(x, y, "add"));
  cpu::add_inplace(x.f32(), y.f32(), x.rows * x.cols);
  return Status::ok();
}

Status CpuBackend::add_bias(Tensor x, const Tensor& bias) {
  HS_RETURN_IF_ERROR(need_f32(bias, "add_bias", "bias"));
  if (x.dtype != DType::F32 || x.device != Device::kCpu || x.row_stride < x.row_bytes() || x.row_stride % 4 != 0)
    return make_error(StatusCode::kInvalidArgument, "add_bias: x must be host f32 rows (got {} on {}, row stride {} B)",
                      dtype_name(x.dtype), device_name(x.device), x.row_stride);
  if (bias.rows * bias.cols != x.cols)
    return make_error(StatusCode::kInvalidArgument, "add_bias: bias [{}][{}] for rows of {}", bias.rows, bias.cols,
                      x.cols);
  for (int64_t r = 0; r < x.rows; ++r)
    cpu::add_inplace(reinterpret_cast<float*>(static_cast<uint8_t*>(x.data) + r * x.row_stride), bias.f32(), x.cols);
  return Status::ok();
}

Status CpuBackend::scale(Tensor x, float s) {
  HS_RETURN_IF_ERROR(need_f32(x, "scale", "x"));
  cpu::scale_inplace(x.f32(), s, x.rows * x.cols);
  return Status::ok();
}

Status CpuBackend::softcap(Tensor x, float cap) {
  HS_RETURN_IF_ERROR(need_f32(x, "softcap", "x"));
  float* p = x.f32();
  const int64_t n = x.rows * x.cols;
  for (int64_t i = 0; i < n; ++i) p[i] = cap * std::tanh(p[i] / cap);
  return Status::ok();
}

Status CpuBackend::copy(const Tensor& src, Tensor dst) {
  HS_RETURN_IF_ERROR(same_shape(src, dst, "copy"));
  if (src.dtype != dst.dtype) return make_error(StatusCode::kInvalidArgument, "copy: dtypes differ");
  for (int64_t r = 0; r < src.rows; ++r)
    std::memcpy(static_cast<uint8_t*>(dst.data) + r * dst.row_stride,
                static_cast<const uint8_t*>(src.data) + r * src.row_stride, static_cast<size_t>(src.row_bytes()));
  return Status::ok();
}

Status CpuBackend::logit_rows(const Tensor& src, Tensor dst) {
  HS_RETURN_IF_ERROR(need_f32(src, "logit_rows", "src"));
  HS_RETURN_IF_ERROR(need_f32(dst, "logit_rows", "dst"));
  const auto& rows = plan_->logit_rows;
  if (dst.rows != static_cast<int64_t>(rows.size()) || dst.cols != src.cols)
    return make_error(StatusCode::kInvalidArgument, "logit_rows: dst [{}][{}] for {} rows of {}", dst.rows, dst.cols,
                      rows.size(), src.cols);
  for (size_t j = 0; j < rows.size(); ++j)
    std::memcpy(dst.f32() + j * dst.cols, src.f32() + rows[j] * src.cols, static_cast<size_t>(src.cols) * 4);
  return Status::ok();
}

Status CpuBackend::kv_write(int layer, const Tensor& k, const Tensor& v) {
  HS_RETURN_IF_ERROR(need_f32(k, "kv_write", "k"));
  HS_RETURN_IF_ERROR(need_f32(v, "kv_write", "v"));
  HS_RETURN_IF_ERROR(same_shape(k, v, "kv_write"));
  const KvGeometry& g = plan_->kv->geometry();
  if (k.rows != plan_->n_tokens() || k.cols != static_cast<int64_t>(g.n_kv_heads) * g.head_dim)
    return make_error(StatusCode::kInvalidArgument, "kv_write: k [{}][{}] for {} tokens of {} x {}", k.rows, k.cols,
                      plan_->n_tokens(), g.n_kv_heads, g.head_dim);
  attention_.write(*plan_, layer, k.f32(), v.f32(), static_cast<int>(k.cols), g.head_dim);
  return Status::ok();
}

Status CpuBackend::attention(int layer, const Tensor& q, Tensor out, const AttentionParams& p) {
  HS_RETURN_IF_ERROR(need_f32(q, "attention", "q"));
  HS_RETURN_IF_ERROR(need_f32(out, "attention", "out"));
  HS_RETURN_IF_ERROR(same_shape(q, out, "attention"));
  if (p.n_head_kv <= 0 || p.n_head % p.n_head_kv || q.cols != static_cast<int64_t>(p.n_head) * p.head_dim ||
      q.rows != plan_->n_tokens())
    return make_error(StatusCode::kInvalidArgument, "attention: q [{}][{}] for {} heads ({} kv) of {}", q.rows, q.cols,
                      p.n_head, p.n_head_kv, p.head_dim);
  attention_.run(*plan_, layer, q.f32(), out.f32(), p);
  return Status::ok();
}

}  // namespace hs
