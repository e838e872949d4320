// backend/cpu/delta_rule.cpp — see delta_rule.h. float32 throughout (transformers computes
// these in fp32 too); the chunk's scratch is thread-local, sized once per thread.
#include "backend/cpu/delta_rule.h"

#include <cmath>
#include <vector>

namespace hs::cpu {
namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }

float dot(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// tmp[j] = Σ_a x[a] · S[a][j]: Sᵀx for S [k_dim][v_dim].
void state_t_times(const float* S, const float* x, int k_dim, int v_dim, float* tmp) {
  for (int j = 0; j < v_dim; ++j) tmp[j] = 0;
  for (int a = 0; a < k_dim; ++a) {
    const float xa = x[a];
    const float* s = S + static_cast<int64_t>(a) * v_dim;
    for (int j = 0; j < v_dim; ++j) tmp[j] += xa * s[j];
  }
}

}  // namespace

void delta_rule_recurrent(const DeltaHead& h, std::span<const int32_t> rows) {
  const int dk = h.k_dim, dv = h.v_dim;
  thread_local std::vector<float> scratch;
  if (static_cast<int>(scratch.size()) < dv) scratch.resize(dv);
  float* u = scratch.data();  // [v_dim] Sᵀk, then delta
  float* S = h.state;         // [k_dim][v_dim]
  for (int32_t r : rows) {
    const float* q = h.q.row(r);
    const float* k = h.k.row(r);
    const float* v = h.v.row(r);
    const float e = std::exp(h.g.row(r)[0]), beta = h.beta.row(r)[0];
    float* o = h.out.row(r);
    // S <- e·S and u = Sᵀk in one sweep.
    for (int j = 0; j < dv; ++j) u[j] = 0;
    for (int a = 0; a < dk; ++a) {
      float* s = S + static_cast<int64_t>(a) * dv;
      const float ka = k[a];
      for (int j = 0; j < dv; ++j) {
        s[j] *= e;
        u[j] += ka * s[j];
      }
    }
    for (int j = 0; j < dv; ++j) u[j] = beta * (v[j] - u[j]);
    // S += k·deltaᵀ and o = Sᵀq in one sweep.
    for (int j = 0; j < dv; ++j) o[j] = 0;
    for (int a = 0; a < dk; ++a) {
      float* s = S + static_cast<int64_t>(a) * dv;
      const float ka = k[a], qa = q[a];
      for (int j = 0; j < dv; ++j) {
        s[j] += ka * u[j];
        o[j] += qa * s[j];
      }
    }
  }
}

void delta_rule_chunked(const DeltaHead& h, std::span<const int32_t> rows, int chunk) {
  const int dk = h.k_dim, dv = h.v_dim;
  const int C = chunk;
  thread_local std::vector<float> scratch;
  const size_t need = static_cast<size_t>(C) * (1 + dv) + dv;
  if (scratch.size() < need) scratch.resize(need);
  float* gam = scratch.data();   // [C] cumulative log decay within the chunk
  float* d = gam + C;            // [C][v_dim] deltas
  float* tmp = d + C * dv;       // [v_dim]
  float* S = h.state;            // [k_dim][v_dim]
  const int64_t T = static_cast<int64_t>(rows.size());
  for (int64_t c0 = 0; c0 < T; c0 += C) {
    const int L = static_cast<int>(std::min<int64_t>(C, T - c0));
    const int32_t* rr = rows.data() + c0;
    float acc = 0;
    for (int i = 0; i < L; ++i) gam[i] = acc += h.g.row(rr[i])[0];
    // Deltas by forward substitution (unit lower-triangular system), from the start state S0.
    for (int i = 0; i < L; ++i) {
      const float* ki = h.k.row(rr[i]);
      const float* vi = h.v.row(rr[i]);
      const float bi = h.beta.row(rr[i])[0];
      const float ei = std::exp(gam[i]);
      state_t_times(S, ki, dk, dv, tmp);
      float* di = d + static_cast<int64_t>(i) * dv;
      for (int j = 0; j < dv; ++j) di[j] = bi * (vi[j] - ei * tmp[j]);
      for (int jj = 0; jj < i; ++jj) {
        const float coef = bi * std::exp(gam[i] - gam[jj]) * dot(ki, h.k.row(rr[jj]), dk);
        const float* dj = d + static_cast<int64_t>(jj) * dv;
        for (int j = 0; j < dv; ++j) di[j] -= coef * dj[j];
      }
    }
    // Outputs: the start state's read plus the chunk's own causal part.
    for (int i = 0; i < L; ++i) {
      const float* qi = h.q.row(rr[i]);
      float* o = h.out.row(rr[i]);
      const float ei = std::exp(gam[i]);
      state_t_times(S, qi, dk, dv, tmp);
      for (int j = 0; j < dv; ++j) o[j] = ei * tmp[j];
      for (int jj = 0; jj <= i; ++jj) {
        const float coef = std::exp(gam[i] - gam[jj]) * dot(qi, h.k.row(rr[jj]), dk);
        const float* dj = d + static_cast<int64_t>(jj) * dv;
        for (int j = 0; j < dv; ++j) o[j] += coef * dj[j];
      }
    }
    // State at the chunk's end.
    const float e_last = std::exp(gam[L - 1]);
    for (int64_t x = 0; x < static_cast<int64_t>(dk) * dv; ++x) S[x] *= e_last;
    for (int jj = 0; jj < L; ++jj) {
      const float w = std::exp(gam[L - 1] - gam[jj]);
      const float* kj = h.k.row(rr[jj]);
      const float* dj = d + static_cast<int64_t>(jj) * dv;
      for (int a = 0; a < dk; ++a) {
        const float c = w * kj[a];
        float* s = S + static_cast<int64_t>(a) * dv;
        for (int j = 0; j < dv; ++j) s[j] += c * dj[j];
      }
    }
  }
}

void conv1d_causal_silu(RowsView x, const float* w, int channels, int kernel, float* state, MutRowsView out,
                        std::span<const int32_t> rows) {
  const int64_t T = static_cast<int64_t>(rows.size());
  const int H = kernel - 1;  // history rows
  // Input j of the window of token t: token t - H + j (state row t + j when that is < 0).
  auto input = [&](int64_t t, int j) -> const float* {
    const int64_t src = t - H + j;
    return src >= 0 ? x.row(rows[src]) : state + (t + j) * channels;
  };
  for (int64_t t = 0; t < T; ++t) {
    float* o = out.row(rows[t]);
    for (int c = 0; c < channels; ++c) o[c] = 0;
    for (int j = 0; j < kernel; ++j) {
      const float* in = input(t, j);
      for (int c = 0; c < channels; ++c) o[c] += w[static_cast<int64_t>(c) * kernel + j] * in[c];
    }
    for (int c = 0; c < channels; ++c) o[c] = silu(o[c]);
  }
  // New history: the last H inputs. Row s reads old row T + s (> s) before it is overwritten.
  for (int s = 0; s < H; ++s) {
    const int64_t src = T - H + s;
    const float* in = src >= 0 ? x.row(rows[src]) : state + (T + s) * channels;
    float* dst = state + static_cast<int64_t>(s) * channels;
    if (in != dst)
      for (int c = 0; c < channels; ++c) dst[c] = in[c];
  }
}

void l2_norm(const float* x, int n, float eps, float* out) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss + eps));
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv;
}

void rms_norm_gated(const float* x, const float* z, const float* w, int n, float eps, float* out) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv) * silu(z[i]);
}

void sigmoid_mul(float* x, const float* g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= sigmoidf(g[i]);
}

void delta_gates(float* a, float* b, const float* ssm_a, const float* dt_bias, int n_v) {
  for (int h = 0; h < n_v; ++h) {
    const float x = a[h] + dt_bias[h];
    const float sp = x > 20.0f ? x : std::log1p(std::exp(x));  // torch softplus (threshold 20)
    a[h] = ssm_a[h] * sp;
    b[h] = sigmoidf(b[h]);
  }
}

}  // namespace hs::cpu
