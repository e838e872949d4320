// backend/cpu_backend_moe.cpp — CpuBackend's mixture-of-experts ops (qwen3next): the softmax
// top-k router, the routed experts run grouped (per expert one gate/up matmul pair and one down
// matmul over the rows routed to it, through CpuBackend::matmul_multi / matmul, so the matmul
// precision applies as everywhere), and the shared expert's sigmoid gate. Each op validates
// shapes first (errors name the op).
// Cost: the router O(n · n_experts · k); the experts n · k rows of 3 matmuls of n_ff x n_embd
// (each expert's weights are read once per step, whatever the number of its rows), plus copying
// n · k rows in and n · k rows out; scratch moe_ of (2 · n_embd + 2 · n_ff) · n · k floats, grown
// to the largest step and kept.
#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.h"
#include "backend/cpu_backend.h"

namespace hs {
namespace {

Status need_host(const Tensor& t, DType type, int64_t rows, int64_t cols, const char* op, const char* what) {
  if (t.dtype != type || t.device != Device::kCpu || !t.contiguous() || t.rows != rows || t.cols != cols)
    return make_error(StatusCode::kInvalidArgument, "{}: {} must be contiguous host {} [{}][{}] (got {} [{}][{}] on {})",
                      op, what, dtype_name(type), rows, cols, dtype_name(t.dtype), t.rows, t.cols, device_name(t.device));
  return Status::ok();
}

}  // namespace

Status CpuBackend::moe_route(const Tensor& logits, Tensor ids, Tensor weights, const MoeParams& p) {
  const char* op = "moe_route";
  if (p.n_experts <= 0 || p.n_used <= 0 || p.n_used > p.n_experts)
    return make_error(StatusCode::kInvalidArgument, "{}: {} of {} experts", op, p.n_used, p.n_experts);
  const int64_t n = logits.rows, E = p.n_experts, k = p.n_used;
  HS_RETURN_IF_ERROR(need_host(logits, DType::F32, n, E, op, "logits"));
  HS_RETURN_IF_ERROR(need_host(ids, DType::I32, n, k, op, "ids"));
  HS_RETURN_IF_ERROR(need_host(weights, DType::F32, n, k, op, "weights"));
  std::vector<float> prob(static_cast<size_t>(E));  // [E]
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits.f32() + t * E;
    const float mx = *std::max_element(l, l + E);
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += prob[e] = std::exp(l[e] - mx);
    for (int64_t e = 0; e < E; ++e) prob[e] /= sum;
    for (int64_t e = 0; e < E; ++e) order[e] = static_cast<int32_t>(e);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); });
    float chosen = 0;
    for (int64_t j = 0; j < k; ++j) chosen += prob[order[j]];
    int32_t* id = ids.as<int32_t>() + t * k;
    float* w = weights.f32() + t * k;
    for (int64_t j = 0; j < k; ++j) {
      id[j] = order[j];
      w[j] = p.norm_topk ? prob[order[j]] / chosen : prob[order[j]];
    }
  }
  return Status::ok();
}

Status CpuBackend::moe_experts(const Tensor& x, const Tensor& gate_exps, const Tensor& up_exps, const Tensor& down_exps,
                               const Tensor& ids, const Tensor& weights, Tensor out, const MoeParams& p) {
  const char* op = "moe_experts";
  const int64_t n = x.rows, H = x.cols, E = p.n_experts, k = p.n_used;
  if (E <= 0 || k <= 0 || k > E || gate_exps.rows % E != 0)
    return make_error(StatusCode::kInvalidArgument, "{}: {} of {} experts over gate weights of {} rows", op, k, E,
                      gate_exps.rows);
  const int64_t F = gate_exps.rows / E;  // n_ff per expert
  if (gate_exps.cols != H || up_exps.rows != E * F || up_exps.cols != H || down_exps.rows != E * H ||
      down_exps.cols != F)
    return make_error(StatusCode::kInvalidArgument,
                      "{}: gate [{}][{}], up [{}][{}], down [{}][{}] for {} experts of {} x {}", op, gate_exps.rows,
                      gate_exps.cols, up_exps.rows, up_exps.cols, down_exps.rows, down_exps.cols, E, F, H);
  HS_RETURN_IF_ERROR(need_host(x, DType::F32, n, H, op, "x"));
  HS_RETURN_IF_ERROR(need_host(out, DType::F32, n, H, op, "out"));
  HS_RETURN_IF_ERROR(need_host(ids, DType::I32, n, k, op, "ids"));
  HS_RETURN_IF_ERROR(need_host(weights, DType::F32, n, k, op, "weights"));
  if (x.data == out.data) return make_error(StatusCode::kInvalidArgument, "{}: out aliases x", op);
  const int32_t* id = ids.as<int32_t>();
  for (int64_t i = 0; i < n * k; ++i)
    if (id[i] < 0 || id[i] >= E)
      return make_error(StatusCode::kInvalidArgument, "{}: token {} slot {} routes to expert {} of {}", op, i / k, i % k,
                        id[i], E);

  // Group the (token, slot) pairs by expert: grouped row r of expert e, in token order.
  MoeScratch& s = moe_;
  const int64_t R = n * k;
  s.indptr.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t i = 0; i < R; ++i) ++s.indptr[id[i] + 1];
  for (int64_t e = 0; e < E; ++e) s.indptr[e + 1] += s.indptr[e];
  s.token.resize(R);
  s.row_of.resize(R);
  std::vector<int32_t> fill(s.indptr.begin(), s.indptr.end() - 1);
  for (int64_t i = 0; i < R; ++i) {
    const int32_t r = fill[id[i]]++;
    s.token[r] = static_cast<int32_t>(i / k);
    s.row_of[i] = r;
  }
  if (s.x.size() < static_cast<size_t>(R * H)) s.x.resize(R * H), s.d.resize(R * H);
  if (s.g.size() < static_cast<size_t>(R * F)) s.g.resize(R * F), s.u.resize(R * F);
  for (int64_t r = 0; r < R; ++r) std::copy_n(x.f32() + s.token[r] * H, H, s.x.data() + r * H);
  auto rows = [](std::vector<float>& v, int64_t begin, int64_t end, int64_t width) {
    return Tensor::matrix(v.data() + begin * width, DType::F32, end - begin, width);
  };

  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = s.indptr[e], end = s.indptr[e + 1];
    if (b == end) continue;
    const Tensor ws[] = {gate_exps.slice_rows(e * F, (e + 1) * F), up_exps.slice_rows(e * F, (e + 1) * F)};
    const Tensor ys[] = {rows(s.g, b, end, F), rows(s.u, b, end, F)};
    HS_RETURN_IF_ERROR(matmul_multi(ws, rows(s.x, b, end, H), ys));
  }
  cpu::silu_mul(s.g.data(), s.u.data(), R * F, s.g.data());
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = s.indptr[e], end = s.indptr[e + 1];
    if (b == end) continue;
    HS_RETURN_IF_ERROR(matmul(down_exps.slice_rows(e * H, (e + 1) * H), rows(s.g, b, end, F), rows(s.d, b, end, H)));
  }
  // out[t] = Σ_j w[t][j] · d[row of (t, j)], in slot order (independent of the batch's other rows).
  const float* w = weights.f32();
  for (int64_t t = 0; t < n; ++t) {
    float* o = out.f32() + t * H;
    std::fill(o, o + H, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const float wj = w[t * k + j];
      const float* d = s.d.data() + static_cast<int64_t>(s.row_of[t * k + j]) * H;
      for (int64_t c = 0; c < H; ++c) o[c] += wj * d[c];
    }
  }
  return Status::ok();
}

Status CpuBackend::add_sigmoid_gated(Tensor x, const Tensor& y, const Tensor& gate) {
  const char* op = "add_sigmoid_gated";
  HS_RETURN_IF_ERROR(need_host(x, DType::F32, x.rows, x.cols, op, "x"));
  HS_RETURN_IF_ERROR(need_host(y, DType::F32, x.rows, x.cols, op, "y"));
  HS_RETURN_IF_ERROR(need_host(gate, DType::F32, x.rows, 1, op, "gate"));
  for (int64_t r = 0; r < x.rows; ++r) {
    const float sg = 1.0f / (1.0f + std::exp(-gate.f32()[r]));
    float* xr = x.f32() + r * x.cols;
    const float* yr = y.f32() + r * x.cols;
    for (int64_t c = 0; c < x.cols; ++c) xr[c] += sg * yr[c];
  }
  return Status::ok();
}

}  // namespace hs
