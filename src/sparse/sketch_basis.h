// sparse/sketch_basis.h — the frozen per-(layer, kv head) key sketch basis and its file.
//
// For each attention layer L and kv head h: an orthonormal basis B [head_dim][rank] and a
// key mean mu [head_dim]. A key k is sketched as s = Bᵀ(k − mu); a query q scores it as
//   q·k ≈ q·mu + (Bᵀq)ᵀ s,
// exact when k − mu lies in span(B). This is the best rank-r *affine* approximation of the
// keys (PCA of the centred keys), which reconstructs at least as well as the best rank-r
// *linear* one (PCA of the uncentred second moment E[kkᵀ]): keys carry a large mean
// component, and centring keeps it exactly at the cost of one extra q·mu per query head —
// a constant over the tokens of a head, so it changes no ranking within a head but keeps
// heads comparable when GQA takes the max over the group. `centered = false` fits and stores
// mu = 0 (plain second-moment PCA). See docs/sparse-attention.md.
//
// Query-aware (bilinear) bases (`query_aware`): the key side B is no longer orthonormal and
// the query is projected by its own matrix A [head_dim][rank]:
//   q·k ≈ q·mu + (Aᵀq)ᵀ (Bᵀ(k − mu)),
// with A, B minimising E[(qᵀ(I − ABᵀ)(k − mu))²] = ‖Σq^½ (I − ABᵀ) Σk^½‖²_F under the key
// covariance Σk and the query second moment Σq (sketch_fitter.h): the rank-r budget goes to
// the directions that move the score q·k, not to those where keys vary most. For a plain
// (PCA) basis A = B.
//
// File (safetensors, one per model): tensors
//   sketch.layers.{L}.basis       F32 [n_kv_heads, head_dim, rank]   (B, key side)
//   sketch.layers.{L}.mean        F32 [n_kv_heads, head_dim]
//   sketch.layers.{L}.energy      F32 [n_kv_heads]   (explained share from the fit; optional)
//   sketch.layers.{L}.query_basis F32 [n_kv_heads, head_dim, rank]   (A; query-aware files only)
// for every attention layer L, and __metadata__ {format: "hindsight.sketch", version: "1",
// n_layer, n_kv_heads, head_dim, rank, post_rope, centered, model_name, model_sha256, and
// query_aware: "true" for query-aware files (absent: false)}. B is checked orthonormal only
// when the file is not query-aware (a reader that predates query_aware rejects such a file
// there, rather than scoring with the wrong query projection).
// Layers without a tensor (linear-attention layers of hybrid models) have no basis.
// Cost: n_layer · n_kv_heads · head_dim · (rank + 1) floats (Gemma 3 270M: 18·256·65·4 B = 1.2 MB),
// plus n_layer · n_kv_heads · head_dim · rank for A when query-aware.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace hs {

inline int default_sketch_rank(int head_dim) { return head_dim / 4 > 0 ? head_dim / 4 : 1; }

struct SketchBasis {
  int n_layer = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int rank = 0;
  bool post_rope = true;  // keys (and queries) are sketched after RoPE
  bool centered = true;   // mean is fitted (else all zeros)
  bool query_aware = false;  // queries are projected by query_basis (A), B is not orthonormal
  std::string model_name;
  std::string model_sha256;
  std::vector<std::vector<float>> basis;   // [n_layer][n_kv_heads][head_dim][rank]; empty: no attention
  std::vector<std::vector<float>> mean;    // [n_layer][n_kv_heads][head_dim]; empty with basis
  std::vector<std::vector<float>> energy;  // [n_layer][n_kv_heads] explained share; may be empty
  // A per layer, [n_layer][n_kv_heads][head_dim][rank]; query-aware only (else empty), empty with basis.
  std::vector<std::vector<float>> query_basis;

  bool has_layer(int layer) const { return layer >= 0 && layer < n_layer && !basis[layer].empty(); }
  // B of (layer, head): [head_dim][rank]
  const float* B(int layer, int head) const {
    return basis[layer].data() + static_cast<int64_t>(head) * head_dim * rank;
  }
  // The query-side projection of (layer, head), [head_dim][rank]: A when query-aware, else B.
  const float* A(int layer, int head) const {
    if (!query_aware) return B(layer, head);
    return query_basis[layer].data() + static_cast<int64_t>(head) * head_dim * rank;
  }
  // mu of (layer, head): [head_dim]
  const float* mu(int layer, int head) const { return mean[layer].data() + static_cast<int64_t>(head) * head_dim; }

  // Geometry with every layer present, bases zero (fill them), means zero.
  static SketchBasis zeros(int n_layer, int n_kv_heads, int head_dim, int rank);
  // Every (layer, head) gets the first `rank` columns of the identity (tests, rank = head_dim: exact).
  static SketchBasis identity(int n_layer, int n_kv_heads, int head_dim, int rank);
  // The basis of kv heads [h0, h0 + n) only (a tensor-parallel rank's heads: model/tensor_parallel.h).
  SketchBasis heads(int h0, int n) const;

  // Structure, sizes, finite values and, unless query-aware, orthonormality
  // (|BᵀB − I| <= tol elementwise); query-aware: A present for every layer with a basis.
  Status validate(float tol = 1e-3f) const;
  // Against the model: same n_layer, n_kv_heads, head_dim, and a basis for every layer with
  // attention (`attention_layers` empty: all layers).
  Status check_geometry(int model_n_layer, int model_n_kv_heads, int model_head_dim,
                        const std::vector<bool>& attention_layers = {}) const;

  Status save(const std::string& path) const;
  static Result<SketchBasis> load(const std::string& path);
};

}  // namespace hs
