// sparse/sketch_fitter.h — fits a SketchBasis by PCA of real keys.
//
// Per (layer, kv head) it accumulates, in double, the key sum and the uncentred second moment
// Σ k kᵀ (head_dim × head_dim). fit() forms either the covariance (centered: Σ kkᵀ/n − mu muᵀ)
// or the second moment itself, eigen-decomposes it (sym_eigen.h) and keeps the eigenvectors
// of the `rank` largest eigenvalues as B. The explained energy of a head is
// Σ top-rank eigenvalues / trace: the share of E‖k − mu‖² (or E‖k‖²) that the sketch keeps.
// Cost: add_keys is n · head_dim² / 2 FMAs (only the lower triangle is accumulated); fit is one
// Jacobi decomposition per (layer, head). add_keys for different (layer, head) pairs may run
// concurrently; for the same pair, calls must be serialized by the caller.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "sparse/sketch_basis.h"

namespace hs {

class SketchFitter {
 public:
  SketchFitter(int n_layer, int n_kv_heads, int head_dim);

  // keys: n rows of head_dim floats, row r at keys + r * stride.
  void add_keys(int layer, int head, const float* keys, int64_t n, int64_t stride);
  int64_t n_keys(int layer, int head) const { return acc_[index(layer, head)].n; }

  struct Options {
    int rank = 0;            // 0: default_sketch_rank(head_dim)
    bool centered = true;
    bool post_rope = true;   // recorded in the file: the keys given were post-RoPE
  };
  // Layers where no head saw a key get no basis (linear-attention layers of hybrid models);
  // a layer where some heads saw keys and others did not is an error.
  Result<SketchBasis> fit(const Options& opt, ThreadPool* pool = nullptr) const;

 private:
  struct Acc {
    int64_t n = 0;
    std::vector<double> sum;     // [head_dim]
    std::vector<double> moment;  // [head_dim][head_dim], lower triangle valid
  };
  size_t index(int layer, int head) const { return static_cast<size_t>(layer) * n_kv_heads_ + head; }

  int n_layer_, n_kv_heads_, head_dim_;
  std::vector<Acc> acc_;  // [n_layer][n_kv_heads]
};

}  // namespace hs
