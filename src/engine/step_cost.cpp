// engine/step_cost.cpp — see step_cost.h.
#include "engine/step_cost.h"

#include <algorithm>

namespace hs {

StepCostModel StepCostModel::from_config(const ModelConfig& c, int64_t weight_bytes, double kv_token_bytes,
                                         double mem_bw, double matmul_flops) {
  StepCostModel m;
  const double embd_params = static_cast<double>(c.n_vocab) * c.n_embd;
  const double per_layer_params = static_cast<double>(c.n_embd) * (c.q_dim() + 2 * c.kv_dim()) +
                                  static_cast<double>(c.q_dim()) * c.n_embd + 3.0 * c.n_embd * c.n_ff;
  m.fixed_s = static_cast<double>(weight_bytes) / mem_bw;
  m.per_token_s = 2.0 * per_layer_params * c.n_layer / matmul_flops;
  m.per_row_s = 2.0 * embd_params / matmul_flops;
  int n_local = 0;
  for (bool swa : c.layer_is_swa) n_local += swa;
  const double key_bytes = c.n_head_kv * kv_token_bytes;  // K and V of every kv head
  m.per_key_full_s = key_bytes * (c.n_attn_layers() - n_local) / mem_bw;  // hybrid: KV layers only
  m.per_key_local_s = key_bytes * n_local / mem_bw;
  m.window = c.sliding_window;
  return m;
}

double StepCostModel::key_cost(int64_t pos) const {
  const double keys = static_cast<double>(pos + 1);
  const double local = window > 0 ? std::min<double>(keys, window) : keys;
  return keys * per_key_full_s + local * per_key_local_s;
}

double StepCostModel::chunk_attn(int64_t pos0, int64_t n) const {
  if (n <= 0) return 0;
  // Sum of key_cost over the chunk: exact for the full layers (arithmetic series); the
  // local layers are bounded by the window.
  const double full_keys = static_cast<double>(n) * (pos0 + 1) + 0.5 * static_cast<double>(n) * (n - 1);
  double local_keys = full_keys;
  if (window > 0) local_keys = std::min(local_keys, static_cast<double>(n) * window);
  return full_keys * per_key_full_s + local_keys * per_key_local_s;
}

double StepCostModel::chunk_cost(int64_t pos0, int64_t n) const {
  if (n <= 0) return 0;
  return a_ * chunk_other(n) + b_ * chunk_attn(pos0, n);
}

void StepCostModel::observe(double o, double at, double t) {
  constexpr double kDecay = 0.98;  // ~50 steps of memory
  s_oo_ = kDecay * s_oo_ + o * o;
  s_oa_ = kDecay * s_oa_ + o * at;
  s_aa_ = kDecay * s_aa_ + at * at;
  s_ot_ = kDecay * s_ot_ + o * t;
  s_at_ = kDecay * s_at_ + at * t;
  // Common scale k (1-D fit of t ≈ k · (o + at)), then a ridge fit of (a, b) pulled towards k:
  // steps whose two parts move together (collinear data) cannot tell a from b, and an
  // unregularized fit would swing a wildly (and with it the allowance).
  const double s_tt = s_oo_ + 2 * s_oa_ + s_aa_;
  if (s_tt <= 0) return;
  const double k = (s_ot_ + s_at_) / s_tt;
  const double lambda = 0.05 * 0.5 * (s_oo_ + s_aa_);
  const double m00 = s_oo_ + lambda, m01 = s_oa_, m11 = s_aa_ + lambda;
  const double r0 = s_ot_ + lambda * k, r1 = s_at_ + lambda * k;
  const double det = m00 * m11 - m01 * m01;
  double a = k, b = k;
  if (det > 0) {
    a = (r0 * m11 - r1 * m01) / det;
    b = (r1 * m00 - r0 * m01) / det;
  }
  // Keep the fit sane: positive, within a factor 4 of the common scale.
  const double kk = std::clamp(k, 0.05, 20.0);
  a_ = std::clamp(a, kk / 4, kk * 4);
  b_ = std::clamp(b, kk / 4, kk * 4);
}

int32_t StepCostModel::max_chunk(int64_t pos0, int32_t max_n, double allowance) const {
  int32_t lo = 0, hi = max_n;  // chunk_cost is increasing in n
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo + 1) / 2;
    if (chunk_cost(pos0, mid) <= allowance) lo = mid; else hi = mid - 1;
  }
  return lo;
}

}  // namespace hs
