// sparse/sketch_fitter.cpp — see sketch_fitter.h.
#include "sparse/sketch_fitter.h"

#include <atomic>

#include "sparse/sym_eigen.h"

namespace hs {

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
  std::vector<double> k(hd);  // [head_dim] the key in double
  for (int64_t r = 0; r < n; ++r) {
    const float* kr = keys + r * stride;
    for (int d = 0; d < hd; ++d) k[d] = kr[d];
    for (int d = 0; d < hd; ++d) a.sum[d] += k[d];
    for (int i = 0; i < hd; ++i) {
      double* row = a.moment.data() + static_cast<size_t>(i) * hd;
      const double ki = k[i];
#pragma omp simd
      for (int j = 0; j <= i; ++j) row[j] += ki * k[j];
    }
  }
  a.n += n;
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
    auto eig = symmetric_eigen(std::move(m), hd);
    if (!eig.is_ok()) {
      errors[i] = eig.status();
      return;
    }
    double total = 0.0, kept = 0.0;
    for (int j = 0; j < hd; ++j) total += std::max(eig->values[j], 0.0);
    for (int j = 0; j < rank; ++j) kept += std::max(eig->values[j], 0.0);
    float* B = b.basis[l].data() + static_cast<size_t>(h) * hd * rank;  // [head_dim][rank]
    for (int d = 0; d < hd; ++d)
      for (int j = 0; j < rank; ++j) B[d * rank + j] = static_cast<float>(eig->vectors[static_cast<size_t>(d) * hd + j]);
    for (int d = 0; d < hd; ++d) b.mean[l][static_cast<size_t>(h) * hd + d] = static_cast<float>(mu[d]);
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

}  // namespace hs
