// sparse/sketch_fitter.h — fits a SketchBasis by PCA of real keys.
//
// Per (layer, kv head) it accumulates, in double, the key sum and the uncentred second moment
// Σ k kᵀ (head_dim × head_dim). fit() forms either the covariance (centered: Σ kkᵀ/n − mu muᵀ)
// or the second moment itself, eigen-decomposes it (sym_eigen.h) and keeps the eigenvectors
// of the `rank` largest eigenvalues as B. The explained energy of a head is
// Σ top-rank eigenvalues / trace: the share of E‖k − mu‖² (or E‖k‖²) that the sketch keeps.
//
// Query-aware fit (Options::query_aware; needs add_queries with the post-RoPE queries of every
// query head of the kv head's GQA group, same positions): with Σk the key covariance (or second
// moment) and Σq = E[q qᵀ], the rank-r bilinear map minimising the mean squared score error
//   E[(qᵀ(I − ABᵀ)(k − mu))²] = ‖Σq^½ (I − ABᵀ) Σk^½‖²_F     (q, k drawn independently)
// is the truncated SVD of M = Σq^½ Σk^½ = U S Vᵀ (Eckart–Young): B = Σk^-½ V_r, A = Σq^-½ U_r S_r.
// Since U_r S_r = M V_r, A = Σq^-½ Σq^½ Σk^½ V_r = Σk^½ V_r whenever Σq is invertible, and that
// choice stays optimal when it is not; so the fit never inverts Σq. It eigen-decomposes Σk
// (Σk^±½ from its eigenvalues floored at 1e-6 · trace(Σk) / head_dim, so keys that never vary
// in a direction cannot blow up Σk^-½), then MᵀM = Σk^½ Σq Σk^½, whose top-r eigenvectors are
// V_r and eigenvalues S_r². With the floor applied to both roots ABᵀ = Σk^½ V_r V_rᵀ Σk^-½,
// = I at rank = head_dim (exact scores). The sketch s = Bᵀ(k − mu) is whitened (E[s sᵀ] ≈ I),
// so its entries stay O(1) for f16. energy = Σ_{j<r} S_j² / Σ_j S_j²: the share of
// E[(q·(k − mu))²] the sketch keeps.
// Cost: add_keys is n · head_dim² / 2 FMAs (only the lower triangle is accumulated), add_queries
// the same per query row; fit is one Jacobi decomposition per (layer, head), two plus two
// head_dim³ products when query-aware. add_keys/add_queries for different (layer, head) pairs
// may run concurrently; for the same pair, calls must be serialized by the caller.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "sparse/sketch_basis.h"

namespace hs {

struct SymEigen;

class SketchFitter {
 public:
  SketchFitter(int n_layer, int n_kv_heads, int head_dim);

  // keys: n rows of head_dim floats, row r at keys + r * stride.
  void add_keys(int layer, int head, const float* keys, int64_t n, int64_t stride);
  int64_t n_keys(int layer, int head) const { return acc_[index(layer, head)].n; }
  // queries: n rows of head_dim floats (post-RoPE, one query head of the kv head's group; call
  // once per query head of the group), row r at queries + r * stride. Query-aware fit only.
  void add_queries(int layer, int head, const float* queries, int64_t n, int64_t stride);
  int64_t n_queries(int layer, int head) const { return acc_[index(layer, head)].qn; }

  struct Options {
    int rank = 0;            // 0: default_sketch_rank(head_dim)
    bool centered = true;
    bool post_rope = true;   // recorded in the file: the keys given were post-RoPE
    bool query_aware = false;  // bilinear fit under the query second moment (above)
  };
  // Layers where no head saw a key get no basis (linear-attention layers of hybrid models);
  // a layer where some heads saw keys and others did not is an error, and so is, when
  // query-aware, a (layer, head) with keys but no queries.
  Result<SketchBasis> fit(const Options& opt, ThreadPool* pool = nullptr) const;

 private:
  struct Acc {
    int64_t n = 0;
    std::vector<double> sum;     // [head_dim]
    std::vector<double> moment;  // [head_dim][head_dim], lower triangle valid
    int64_t qn = 0;               // query rows seen
    std::vector<double> qmoment;  // [head_dim][head_dim] Σ q qᵀ, lower triangle valid
  };
  size_t index(int layer, int head) const { return static_cast<size_t>(layer) * n_kv_heads_ + head; }
  // The query-aware B, A [head_dim][rank] and energy of one head from its key eigen-decomposition.
  Status fit_query_aware(const Acc& a, const SymEigen& key_eig, int rank, float* B, float* A, float& energy) const;

  int n_layer_, n_kv_heads_, head_dim_;
  std::vector<Acc> acc_;  // [n_layer][n_kv_heads]
};

}  // namespace hs
