// backend/cpu_backend_hybrid.cpp — CpuBackend's hybrid (Gated DeltaNet) ops: per-sequence
// causal conv and delta rule over the plan's recurrent-state slots, the gates and norms
// around them, partial RoPE. Work is split over (sequence, head) pairs on the plan's pool;
// each op validates shapes, strides and slots first (errors name the op).
// Cost: the kernels' (backend/cpu/delta_rule.h); O(n) to group the step's rows by sequence,
// once per step.
#include <cmath>

#include "backend/cpu/delta_rule.h"
#include "backend/cpu/ops.h"
#include "backend/cpu_backend.h"
#include "backend/cpu_checks.h"

namespace hs {
namespace {

using cpu_checks::need_rows;

Status need_vector(const Tensor& t, int64_t n, const char* op, const char* what) {
  if (t.dtype != DType::F32 || t.device != Device::kCpu || t.rows * t.cols != n || (t.rows > 1 && !t.contiguous()))
    return make_error(StatusCode::kInvalidArgument, "{}: {} must be {} host f32 values (got [{}][{}] {})", op, what, n,
                      t.rows, t.cols, dtype_name(t.dtype));
  return Status::ok();
}

cpu::RowsView rows_of(const Tensor& t, int64_t col = 0) { return {t.f32() + col, t.row_stride / 4}; }
cpu::MutRowsView mut_rows_of(const Tensor& t, int64_t col = 0) { return {t.f32() + col, t.row_stride / 4}; }

}  // namespace

void CpuBackend::build_seq_rows() {
  if (seq_rows_valid_) return;
  const ForwardPlan& p = *plan_;
  const int64_t n = p.n_tokens();
  const size_t n_seqs = p.seqs.size();
  seq_rows_indptr_.assign(n_seqs + 1, 0);
  for (int64_t t = 0; t < n; ++t) ++seq_rows_indptr_[p.seq_index[t] + 1];
  for (size_t s = 0; s < n_seqs; ++s) seq_rows_indptr_[s + 1] += seq_rows_indptr_[s];
  seq_rows_.resize(n);
  std::vector<int32_t> fill(seq_rows_indptr_.begin(), seq_rows_indptr_.end() - 1);
  for (int64_t t = 0; t < n; ++t) seq_rows_[fill[p.seq_index[t]]++] = static_cast<int32_t>(t);
  seq_rows_valid_ = true;
}

Status CpuBackend::check_state(const Tensor& state, int64_t slot_floats, const char* op) const {
  const ForwardPlan& p = *plan_;
  if (state.dtype != DType::F32 || state.device != Device::kCpu || state.cols != slot_floats || !state.contiguous())
    return make_error(StatusCode::kInvalidArgument, "{}: state must be host f32 [slots][{}] (got [{}][{}] {})", op,
                      slot_floats, state.rows, state.cols, dtype_name(state.dtype));
  if (p.state_slots.size() != p.seqs.size())
    return make_error(StatusCode::kInvalidArgument, "{}: the plan has {} state slots for {} sequences", op,
                      p.state_slots.size(), p.seqs.size());
  for (size_t s = 0; s < p.state_slots.size(); ++s)
    if (p.state_slots[s] < 0 || p.state_slots[s] >= state.rows)
      return make_error(StatusCode::kInvalidArgument, "{}: sequence {} has state slot {} of {}", op, s,
                        p.state_slots[s], state.rows);
  return Status::ok();
}

Status CpuBackend::conv1d_causal(const Tensor& x, const Tensor& w, int kernel, Tensor state, Tensor out) {
  HS_RETURN_IF_ERROR(need_rows(x, "conv1d_causal", "x"));
  HS_RETURN_IF_ERROR(need_rows(out, "conv1d_causal", "out"));
  const int64_t C = x.cols;
  if (kernel < 1 || out.cols != C || out.rows != x.rows || x.rows != plan_->n_tokens() || x.data == out.data)
    return make_error(StatusCode::kInvalidArgument, "conv1d_causal: x [{}][{}] -> out [{}][{}] (kernel {}, {} tokens)",
                      x.rows, C, out.rows, out.cols, kernel, plan_->n_tokens());
  HS_RETURN_IF_ERROR(need_vector(w, C * kernel, "conv1d_causal", "w"));
  HS_RETURN_IF_ERROR(check_state(state, (kernel - 1) * C, "conv1d_causal"));
  build_seq_rows();
  const ForwardPlan& p = *plan_;
  const int64_t n_seqs = static_cast<int64_t>(p.seqs.size());
  pool().parallel_for(n_seqs, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t s = begin; s < end; ++s) {
      const int32_t b = seq_rows_indptr_[s], e = seq_rows_indptr_[s + 1];
      if (b == e) continue;
      float* st = state.f32() + static_cast<int64_t>(p.state_slots[s]) * state.cols;
      if (p.positions[seq_rows_[b]] == 0) std::fill(st, st + state.cols, 0.0f);
      cpu::conv1d_causal_silu(rows_of(x), w.f32(), static_cast<int>(C), kernel, st, mut_rows_of(out),
                              std::span<const int32_t>(seq_rows_.data() + b, e - b));
    }
  });
  return Status::ok();
}

Status CpuBackend::gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                    const Tensor& beta, Tensor state, Tensor out, const DeltaRuleParams& dp) {
  const char* op = "gated_delta_rule";
  for (const auto& [t, what] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&g, "g"}, {&beta, "beta"}, {&out, "out"}})
    HS_RETURN_IF_ERROR(need_rows(*t, op, what));
  const int64_t n = plan_->n_tokens();
  if (dp.n_k_heads <= 0 || dp.n_v_heads % dp.n_k_heads != 0 || q.cols != int64_t{dp.n_k_heads} * dp.k_dim ||
      k.cols != q.cols || v.cols != int64_t{dp.n_v_heads} * dp.v_dim || out.cols != v.cols || g.cols != dp.n_v_heads ||
      beta.cols != dp.n_v_heads || q.rows != n || k.rows != n || v.rows != n || g.rows != n || beta.rows != n ||
      out.rows != n)
    return make_error(StatusCode::kInvalidArgument,
                      "{}: q [{}][{}] k [{}][{}] v [{}][{}] g [{}][{}] for {} tokens of {} k heads x {} / {} v heads x {}",
                      op, q.rows, q.cols, k.rows, k.cols, v.rows, v.cols, g.rows, g.cols, n, dp.n_k_heads, dp.k_dim,
                      dp.n_v_heads, dp.v_dim);
  const int64_t head_state = int64_t{dp.k_dim} * dp.v_dim;
  HS_RETURN_IF_ERROR(check_state(state, dp.n_v_heads * head_state, op));
  if (const DeltaPrologue* pr = dp.prologue) {  // the layer's own ops, in place
    HS_RETURN_IF_ERROR(l2_norm(q, dp.k_dim, pr->l2_eps, pr->q_scale));
    HS_RETURN_IF_ERROR(l2_norm(k, dp.k_dim, pr->l2_eps, 1.0f));
    HS_RETURN_IF_ERROR(delta_gates(g, beta, pr->ssm_a, pr->dt_bias));
  }
  build_seq_rows();
  const ForwardPlan& p = *plan_;
  const int64_t n_seqs = static_cast<int64_t>(p.seqs.size());
  const int ratio = dp.n_v_heads / dp.n_k_heads;
  pool().parallel_for(n_seqs * dp.n_v_heads, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t s = task / dp.n_v_heads;
      const int h = static_cast<int>(task % dp.n_v_heads);
      const int32_t b = seq_rows_indptr_[s], e = seq_rows_indptr_[s + 1];
      if (b == e) continue;
      const int kh = dp.v_tiled ? h % dp.n_k_heads : h / ratio;
      cpu::DeltaHead dh;
      dh.q = rows_of(q, int64_t{kh} * dp.k_dim);
      dh.k = rows_of(k, int64_t{kh} * dp.k_dim);
      dh.v = rows_of(v, int64_t{h} * dp.v_dim);
      dh.g = rows_of(g, h);
      dh.beta = rows_of(beta, h);
      dh.out = mut_rows_of(out, int64_t{h} * dp.v_dim);
      dh.state = state.f32() + static_cast<int64_t>(p.state_slots[s]) * state.cols + h * head_state;
      dh.k_dim = dp.k_dim;
      dh.v_dim = dp.v_dim;
      if (p.positions[seq_rows_[b]] == 0) std::fill(dh.state, dh.state + head_state, 0.0f);
      const std::span<const int32_t> rows(seq_rows_.data() + b, e - b);
      if (rows.size() > 1) cpu::delta_rule_chunked(dh, rows);
      else cpu::delta_rule_recurrent(dh, rows);
    }
  });
  return Status::ok();
}

Status CpuBackend::l2_norm(Tensor x, int head_dim, float eps, float scale) {
  HS_RETURN_IF_ERROR(need_rows(x, "l2_norm", "x"));
  if (head_dim <= 0 || x.cols % head_dim)
    return make_error(StatusCode::kInvalidArgument, "l2_norm: rows of {} in heads of {}", x.cols, head_dim);
  const int64_t heads = x.cols / head_dim;
  for (int64_t r = 0; r < x.rows; ++r) {
    float* row = reinterpret_cast<float*>(static_cast<uint8_t*>(x.data) + r * x.row_stride);
    for (int64_t h = 0; h < heads; ++h) {
      float* p = row + h * head_dim;
      cpu::l2_norm(p, head_dim, eps, p);
      if (scale != 1.0f)
        for (int i = 0; i < head_dim; ++i) p[i] *= scale;
    }
  }
  return Status::ok();
}

Status CpuBackend::rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor out) {
  HS_RETURN_IF_ERROR(need_rows(x, "rms_norm_gated", "x"));
  HS_RETURN_IF_ERROR(need_rows(z, "rms_norm_gated", "z"));
  HS_RETURN_IF_ERROR(need_rows(out, "rms_norm_gated", "out"));
  const int64_t hd = w.rows * w.cols;
  if (hd <= 0 || x.cols % hd || z.cols != x.cols || out.cols != x.cols || z.rows != x.rows || out.rows != x.rows)
    return make_error(StatusCode::kInvalidArgument, "rms_norm_gated: x [{}][{}], z [{}][{}], out [{}][{}], weight of {}",
                      x.rows, x.cols, z.rows, z.cols, out.rows, out.cols, hd);
  HS_RETURN_IF_ERROR(need_vector(w, hd, "rms_norm_gated", "w"));
  const int64_t heads = x.cols / hd;
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t h = 0; h < heads; ++h)
      cpu::rms_norm_gated(rows_of(x).row(r) + h * hd, rows_of(z).row(r) + h * hd, w.f32(), static_cast<int>(hd), eps,
                          mut_rows_of(out).row(r) + h * hd);
  return Status::ok();
}

Status CpuBackend::sigmoid_mul(Tensor x, const Tensor& gate) {
  HS_RETURN_IF_ERROR(need_rows(x, "sigmoid_mul", "x"));
  HS_RETURN_IF_ERROR(need_rows(gate, "sigmoid_mul", "gate"));
  if (x.rows != gate.rows || x.cols != gate.cols)
    return make_error(StatusCode::kInvalidArgument, "sigmoid_mul: x [{}][{}], gate [{}][{}]", x.rows, x.cols, gate.rows,
                      gate.cols);
  for (int64_t r = 0; r < x.rows; ++r) cpu::sigmoid_mul(mut_rows_of(x).row(r), rows_of(gate).row(r), x.cols);
  return Status::ok();
}

Status CpuBackend::delta_gates(Tensor a, Tensor b, const Tensor& ssm_a, const Tensor& dt_bias) {
  HS_RETURN_IF_ERROR(need_rows(a, "delta_gates", "a"));
  HS_RETURN_IF_ERROR(need_rows(b, "delta_gates", "b"));
  if (a.rows != b.rows || a.cols != b.cols)
    return make_error(StatusCode::kInvalidArgument, "delta_gates: a [{}][{}], b [{}][{}]", a.rows, a.cols, b.rows, b.cols);
  HS_RETURN_IF_ERROR(need_vector(ssm_a, a.cols, "delta_gates", "ssm_a"));
  HS_RETURN_IF_ERROR(need_vector(dt_bias, a.cols, "delta_gates", "dt_bias"));
  for (int64_t r = 0; r < a.rows; ++r)
    cpu::delta_gates(mut_rows_of(a).row(r), mut_rows_of(b).row(r), ssm_a.f32(), dt_bias.f32(), static_cast<int>(a.cols));
  return Status::ok();
}

Status CpuBackend::rope_partial(Tensor x, int head_dim, int rot_dims, float theta, bool neox) {
  if (rot_dims == head_dim) return rope(x, head_dim, theta, neox);
  HS_RETURN_IF_ERROR(need_rows(x, "rope_partial", "x"));
  if (x.rows != plan_->n_tokens() || head_dim <= 0 || x.cols % head_dim || rot_dims <= 0 || rot_dims % 2 ||
      rot_dims > head_dim)
    return make_error(StatusCode::kInvalidArgument, "rope_partial: [{}][{}] with head_dim {}, {} rotated, for {} tokens",
                      x.rows, x.cols, head_dim, rot_dims, plan_->n_tokens());
  const float* tab = rope_table(theta, rot_dims);
  const int half = rot_dims / 2;
  const int64_t n_heads = x.cols / head_dim;
  for (int64_t i = 0; i < x.rows; ++i) {
    const float* cs = tab + i * 2 * half;
    float* row = mut_rows_of(x).row(i);
    for (int64_t h = 0; h < n_heads; ++h) cpu::rope_apply(row + h * head_dim, 1, rot_dims, cs, cs + half, neox);
  }
  return Status::ok();
}

}  // namespace hs
