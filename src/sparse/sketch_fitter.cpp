// sparse/sketch_fitter.cpp — see sketch_fitter.h.
#include "sparse/sketch_fitter.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "sparse/sym_eigen.h"

namespace hs {
namespace {

// moment (lower triangle) += Σ_r x_r x_rᵀ over n rows of hd floats at x + r * stride;
// sum (optional) += Σ_r x_r.
void accumulate_moment(const float* x, int64_t n, int64_t stride, int hd, std::vector<double>& moment,
                       std::vector<double>* sum) {
  std::vector<double> v(hd);  // [head_dim] the row in double
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * stride;
    for (int d = 0; d < hd; ++d) v[d] = xr[d];
    if (sum)
      for (int d = 0; d < hd; ++d) (*sum)[d] += v[d];
    for (int i = 0; i < hd; ++i) {
      double* row = moment.data() + static_cast<size_t>(i) * hd;
      const double vi = v[i];
#pragma omp simd
      for (int j = 0; j <= i; ++j) row[j] += vi * v[j];
    }
  }
}

// c [n][n] = a [n][n] · b [n][n], row-major.
std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b, int n) {
  std::vector<double> c(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) {
    double* ci = c.data() + static_cast<size_t>(i) * n;
    for (int k = 0; k < n; ++k) {
      const double aik = a[static_cast<size_t>(i) * n + k];
      const double* bk = b.data() + static_cast<size_t>(k) * n;
#pragma omp simd
      for (int j = 0; j < n; ++j) ci[j] += aik * bk[j];
    }
  }
  return c;
}

}  // namespace

SketchFitter::SketchFitter(int n_layer, int n_kv_heads, int head_dim)
    : n_layer_(n_layer), n_kv_heads_(n_kv_heads), head_dim_(head_dim) {
  acc_.resize(static_cast<size_t>(n_layer) * n_kv_heads);
}

void SketchFitter::add_keys(int layer, int head, const float* keys, int64_t n, int64_t stride) {
  Acc& a = acc_[index(layer, head)];
  const int hd = head_dim_;
  if (a.sum.empty()) {
    a.sum.assign(hd, 0.0);
    a.moment.assign(static_cast<size_t>(hd) * hd, 0.0);
  }
  accumulate_moment(keys, n, stride, hd, a.moment, &a.sum);
  a.n += n;
}

void SketchFitter::add_queries(int layer, int head, const float* queries, int64_t n, int64_t stride) {
  Acc& a = acc_[index(layer, head)];
  const int hd = head_dim_;
  if (a.qmoment.empty()) a.qmoment.assign(static_cast<size_t>(hd) * hd, 0.0);
  accumulate_moment(queries, n, stride, hd, a.qmoment, nullptr);
  a.qn += n;
}

Result<SketchBasis> SketchFitter::fit(const Options& opt, ThreadPool* pool) const {
  const int hd = head_dim_;
  const int rank = opt.rank > 0 ? opt.rank : default_sketch_rank(hd);
  if (rank > hd)
    return make_error(StatusCode::kInvalidArgument, "fit-sketch: rank {} exceeds head_dim {}", rank, hd);
  SketchBasis b;
  b.n_layer = n_layer_;
  b.n_kv_heads = n_kv_heads_;
  b.head_dim = hd;
  b.rank = rank;
  b.centered = opt.centered;
  b.post_rope = opt.post_rope;
  b.query_aware = opt.query_aware;
  if (opt.query_aware) b.query_basis.resize(n_layer_);
  b.basis.resize(n_layer_);
  b.mean.resize(n_layer_);
  b.energy.resize(n_layer_);
  for (int l = 0; l < n_layer_; ++l) {
    int seen = 0;
    for (int h = 0; h < n_kv_heads_; ++h) seen += acc_[index(l, h)].n > 0;
    if (seen == 0) continue;
    if (seen != n_kv_heads_)
      return make_error(StatusCode::kInvalidArgument, "fit-sketch: layer {}: only {} of {} kv heads saw keys", l, seen,
                        n_kv_heads_);
    b.basis[l].assign(static_cast<size_t>(n_kv_heads_) * hd * rank, 0.0f);
    b.mean[l].assign(static_cast<size_t>(n_kv_heads_) * hd, 0.0f);
    b.energy[l].assign(n_kv_heads_, 0.0f);
    if (opt.query_aware) {
      for (int h = 0; h < n_kv_heads_; ++h)
        if (acc_[index(l, h)].qn == 0)
          return make_error(StatusCode::kInvalidArgument, "fit-sketch: layer {} head {}: query-aware fit without queries",
                            l, h);
      b.query_basis[l].assign(static_cast<size_t>(n_kv_heads_) * hd * rank, 0.0f);
    }
  }

  std::vector<Status> errors(acc_.size());
  auto fit_one = [&](size_t i) {
    const Acc& a = acc_[i];
    if (a.n == 0) return;
    const int l = static_cast<int>(i / n_kv_heads_), h = static_cast<int>(i % n_kv_heads_);
    const double inv_n = 1.0 / static_cast<double>(a.n);
    std::vector<double> mu(hd, 0.0);  // [head_dim]
    if (opt.centered)
      for (int d = 0; d < hd; ++d) mu[d] = a.sum[d] * inv_n;
    std::vector<double> m(static_cast<size_t>(hd) * hd);  // [head_dim][head_dim] full symmetric
    for (int r = 0; r < hd; ++r)
      for (int c = 0; c <= r; ++c) {
        const double v = a.moment[static_cast<size_t>(r) * hd + c] * inv_n - mu[r] * mu[c];
        m[static_cast<size_t>(r) * hd + c] = m[static_cast<size_t>(c) * hd + r] = v;
      }
    for (int d = 0; d < hd; ++d) b.mean[l][static_cast<size_t>(h) * hd + d] = static_cast<float>(mu[d]);
    auto eig = symmetric_eigen(std::move(m), hd);
    if (!eig.is_ok()) {
      errors[i] = eig.status();
      return;
    }
    if (opt.query_aware) {
      errors[i] = fit_query_aware(a, *eig, rank, b.basis[l].data() + static_cast<size_t>(h) * hd * rank,
                                  b.query_basis[l].data() + static_cast<size_t>(h) * hd * rank, b.energy[l][h]);
      return;
    }
    double total = 0.0, kept = 0.0;
    for (int j = 0; j < hd; ++j) total += std::max(eig->values[j], 0.0);
    for (int j = 0; j < rank; ++j) kept += std::max(eig->values[j], 0.0);
    float* B = b.basis[l].data() + static_cast<size_t>(h) * hd * rank;  // [head_dim][rank]
    for (int d = 0; d < hd; ++d)
      for (int j = 0; j < rank; ++j) B[d * rank + j] = static_cast<float>(eig->vectors[static_cast<size_t>(d) * hd + j]);
    b.energy[l][h] = total > 0 ? static_cast<float>(kept / total) : 1.0f;
  };
  if (pool) {
    pool->parallel_for(static_cast<int64_t>(acc_.size()), 1, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) fit_one(static_cast<size_t>(i));
    });
  } else {
    for (size_t i = 0; i < acc_.size(); ++i) fit_one(i);
  }
  for (const Status& s : errors) HS_RETURN_IF_ERROR(s);
  HS_RETURN_IF_ERROR(b.validate());
  return b;
}

Status SketchFitter::fit_query_aware(const Acc& a, const SymEigen& key_eig, int rank, float* B, float* A,
                                     float& energy) const {
  const int hd = head_dim_;
  const size_t nn = static_cast<size_t>(hd) * hd;
  // Σk^±½ = V diag(λ'^±½) Vᵀ with λ' = max(λ, floor).
  double trace = 0.0;
  for (int j = 0; j < hd; ++j) trace += std::max(key_eig.values[j], 0.0);
  const double floor = trace > 0.0 ? 1e-6 * trace / hd : 1.0;
  std::vector<double> root(nn, 0.0), inv_root(nn, 0.0);  // [head_dim][head_dim] Σk^½, Σk^-½
  const std::vector<double>& V = key_eig.vectors;        // column j: eigenvector j
  for (int j = 0; j < hd; ++j) {
    const double lam = std::max(key_eig.values[j], floor);
    const double sr = std::sqrt(lam), isr = 1.0 / sr;
    for (int r = 0; r < hd; ++r) {
      const double vr = V[static_cast<size_t>(r) * hd + j];
      double* rr = root.data() + static_cast<size_t>(r) * hd;
      double* ir = inv_root.data() + static_cast<size_t>(r) * hd;
#pragma omp simd
      for (int c = 0; c < hd; ++c) {
        const double vv = vr * V[static_cast<size_t>(c) * hd + j];
        rr[c] += sr * vv;
        ir[c] += isr * vv;
      }
    }
  }
  // Σq = E[q qᵀ] (full symmetric from the lower triangle).
  std::vector<double> sq(nn);
  const double inv_qn = 1.0 / static_cast<double>(a.qn);
  for (int r = 0; r < hd; ++r)
    for (int c = 0; c <= r; ++c)
      sq[static_cast<size_t>(r) * hd + c] = sq[static_cast<size_t>(c) * hd + r] =
          a.qmoment[static_cast<size_t>(r) * hd + c] * inv_qn;
  // MᵀM = Σk^½ Σq Σk^½: eigenvectors V_M (right singular vectors of M), eigenvalues S².
  auto m_eig = symmetric_eigen(matmul(matmul(root, sq, hd), root, hd), hd);
  HS_RETURN_IF_ERROR(m_eig.status());
  double total = 0.0, kept = 0.0;
  for (int j = 0; j < hd; ++j) total += std::max(m_eig->values[j], 0.0);
  for (int j = 0; j < rank; ++j) kept += std::max(m_eig->values[j], 0.0);
  energy = total > 0 ? static_cast<float>(kept / total) : 1.0f;
  // B = Σk^-½ V_r, A = Σk^½ V_r  ([head_dim][rank]).
  for (int d = 0; d < hd; ++d)
    for (int j = 0; j < rank; ++j) {
      double bd = 0.0, ad = 0.0;
      for (int e = 0; e < hd; ++e) {
        const double v = m_eig->vectors[static_cast<size_t>(e) * hd + j];
        bd += inv_root[static_cast<size_t>(d) * hd + e] * v;
        ad += root[static_cast<size_t>(d) * hd + e] * v;
      }
      B[d * rank + j] = static_cast<float>(bd);
      A[d * rank + j] = static_cast<float>(ad);
    }
  return Status::ok();
}

}  // namespace hs
