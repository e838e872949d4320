// tests/unit/sparse/sparse_test_util.h — seeds, random orthonormal bases and a paged KV
// context shared by the sparse tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "kv/kv_cache.h"

namespace hs::test {

// A fresh seed per run (HS_TEST_SEED=... reproduces one), printed so a failure can be replayed.
inline unsigned sparse_seed() {
  const char* env = std::getenv("HS_TEST_SEED");
  const unsigned seed = env ? static_cast<unsigned>(std::strtoul(env, nullptr, 10)) : std::random_device{}();
  std::printf("[   seed   ] %u (rerun with HS_TEST_SEED=%u)\n", seed, seed);
  return seed;
}

// N(0, 1) K and V for positions [begin, end) of every layer and kv head of `seq`.
inline void write_random(KvCache& kv, const SeqKv& seq, int32_t begin, int32_t end, std::mt19937& rng) {
  const KvGeometry& g = kv.geometry();
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(g.head_dim), v(g.head_dim);  // [head_dim]
  for (int32_t p = begin; p < end; ++p)
    for (int l = 0; l < g.n_layer; ++l)
      for (int h = 0; h < g.n_kv_heads; ++h) {
        for (int d = 0; d < g.head_dim; ++d) k[d] = nd(rng), v[d] = nd(rng);
        kv.write(seq, l, h, p, k.data(), v.data());
      }
}

// `n` distinct chunk ids from [0, n_chunks), ascending.
inline std::vector<int32_t> random_chunks(int32_t n_chunks, int n, std::mt19937& rng) {
  std::vector<int32_t> all(n_chunks);
  for (int32_t i = 0; i < n_chunks; ++i) all[i] = i;
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(std::min<int32_t>(n, n_chunks));
  std::sort(all.begin(), all.end());
  return all;
}

inline std::vector<float> randn(std::mt19937& rng, size_t n, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// [n][r] with orthonormal columns (Gram-Schmidt in double on a Gaussian matrix).
inline std::vector<float> random_orthonormal(std::mt19937& rng, int n, int r) {
  std::normal_distribution<double> nd;
  std::vector<double> m(static_cast<size_t>(n) * r);
  for (double& x : m) x = nd(rng);
  for (int j = 0; j < r; ++j) {
    for (int pass = 0; pass < 2; ++pass)
      for (int i = 0; i < j; ++i) {
        double dot = 0;
        for (int d = 0; d < n; ++d) dot += m[d * r + i] * m[d * r + j];
        for (int d = 0; d < n; ++d) m[d * r + j] -= dot * m[d * r + i];
      }
    double norm = 0;
    for (int d = 0; d < n; ++d) norm += m[d * r + j] * m[d * r + j];
    norm = std::sqrt(norm);
    for (int d = 0; d < n; ++d) m[d * r + j] /= norm;
  }
  return std::vector<float>(m.begin(), m.end());
}

// One sequence of n_tokens in a KvCache (a single layer unless told), keys/values given.
struct PagedContext {
  KvCache cache;
  SeqKv seq;
  PagedContext(const KvGeometry& g, int32_t n_tokens, std::mt19937& rng)
      : cache(g, (n_tokens + g.page_tokens - 1) / g.page_tokens + 1) {
    const Status s = cache.reserve(seq, n_tokens);
    (void)s;
    // Shuffle the block table so pages are not in position order.
    std::shuffle(seq.blocks.begin(), seq.blocks.end(), rng);
    seq.n_tokens = n_tokens;
  }
  cpu::PagedKvView view(int layer = 0) const {
    const KvGeometry& g = cache.geometry();
    return cpu::PagedKvView{cache.layer_base(layer), g.page_elems(), seq.blocks.data(), g.page_tokens, g.head_dim,
                            g.dtype == KvDtype::kF16};
  }
};

// Keys N(0, 1) with a share hot_p of "hot" tokens scaled up 2.5x, values N(0, 1), into
// (layer 0, head 0) of ctx; on_key(t, k, v) sees each token's rows after they are written.
template <typename OnKey>
void fill_hot_keys(PagedContext& ctx, std::mt19937& rng, double hot_p, OnKey on_key) {
  const int hd = ctx.cache.geometry().head_dim;
  std::bernoulli_distribution hot(hot_p);
  for (int32_t t = 0; t < ctx.seq.n_tokens; ++t) {
    auto k = randn(rng, hd);
    if (hot(rng))
      for (float& x : k) x *= 2.5f;
    const auto v = randn(rng, hd);
    ctx.cache.write(ctx.seq, 0, 0, t, k.data(), v.data());
    on_key(t, k.data(), v.data());
  }
}

}  // namespace hs::test
