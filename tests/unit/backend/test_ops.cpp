// tests/unit/backend/test_ops.cpp — CPU ops against straightforward double-precision
// references on fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/glu_kernel.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"

namespace hs {
namespace cpu::detail {
void silu_mul_avx2(const float*, const float*, int64_t, float*);
void silu_mul_avx512(const float*, const float*, int64_t, float*);
void gelu_tanh_mul_avx2(const float*, const float*, int64_t, float*);
void gelu_tanh_mul_avx512(const float*, const float*, int64_t, float*);
}  // namespace cpu::detail
namespace {

std::vector<float> randn(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(CpuOps, RmsNorm) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  auto x = randn(576, rng), w = randn(576, rng);
  std::vector<float> out(576);
  cpu::rms_norm(x.data(), w.data(), 576, 1e-5f, out.data());
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double inv = 1 / std::sqrt(ss / 576 + 1e-5);
  for (int i = 0; i < 576; ++i) ASSERT_NEAR(out[i], x[i] * inv * w[i], 1e-5 * (1 + std::fabs(x[i] * inv * w[i]))) << seed;
}

// RoPE: normal style rotates adjacent pairs; NeoX rotates halves. Check against the
// complex-number definition, and that NeoX equals normal style on a permuted vector.
TEST(CpuOps, RopeBothStyles) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int hd = 64, heads = 3, pos = 1234;
  const float theta = 10000.0f;
  auto x = randn(heads * hd, rng);
  auto normal = x, neox = x;
  cpu::rope(normal.data(), heads, hd, pos, theta, false);
  cpu::rope(neox.data(), heads, hd, pos, theta, true);
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < hd / 2; ++i) {
      const double a = pos * std::pow(double(theta), -2.0 * i / hd);
      const float* r = x.data() + h * hd;
      // normal: (r[2i], r[2i+1]) rotated by a
      EXPECT_NEAR(normal[h * hd + 2 * i], r[2 * i] * std::cos(a) - r[2 * i + 1] * std::sin(a), 1e-4) << seed;
      EXPECT_NEAR(normal[h * hd + 2 * i + 1], r[2 * i] * std::sin(a) + r[2 * i + 1] * std::cos(a), 1e-4) << seed;
      // neox: (r[i], r[i + hd/2]) rotated by a
      EXPECT_NEAR(neox[h * hd + i], r[i] * std::cos(a) - r[i + hd / 2] * std::sin(a), 1e-4) << seed;
      EXPECT_NEAR(neox[h * hd + i + hd / 2], r[i] * std::sin(a) + r[i + hd / 2] * std::cos(a), 1e-4) << seed;
    }
}

TEST(CpuOps, GatedActivations) {
  // Fixed edge values plus fresh random ones over a wide range (both signs, large |x|).
  std::vector<float> g{-120.0f, -30.0f, -3.0f, -0.5f, 0.0f, 0.7f, 4.0f, 30.0f, 120.0f};
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (int i = 0; i < 1000; ++i) g.push_back(nd(rng));
  std::vector<float> u(g.size()), out(g.size());
  for (auto& x : u) x = nd(rng);
  const int64_t n = static_cast<int64_t>(g.size());
  cpu::silu_mul(g.data(), u.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const double ref = g[i] / (1 + std::exp(-double(g[i]))) * u[i];
    EXPECT_NEAR(out[i], ref, 1e-6 * (1 + std::fabs(ref))) << "seed " << seed << " x " << g[i];
  }
  cpu::gelu_tanh_mul(g.data(), u.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[i];
    const double ref = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) * u[i];
    EXPECT_NEAR(out[i], ref, 1e-6 * (1 + std::fabs(ref))) << "seed " << seed << " x " << g[i];
  }
}

// The ISA variants of the gated activations (backend/cpu/glu_kernel.h) give the baseline's bits:
// the same operations, wider lanes, no FMA contraction.
TEST(CpuOps, GatedActivationsSameBitsAtEveryLevel) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 6.0f);
  const int64_t n = 1037;  // not a multiple of any lane count
  std::vector<float> g(n), u(n), ref(n), got(n);
  for (auto& x : g) x = nd(rng);
  for (auto& x : u) x = nd(rng);
  g[0] = -200.0f;
  g[1] = 200.0f;
  using Fn = void (*)(const float*, const float*, int64_t, float*);
  struct Level { cpu::SimdLevel level; Fn silu, gelu; };
  cpu::detail::silu_mul_impl(g.data(), u.data(), n, ref.data());
  std::vector<float> ref_gelu(n);
  cpu::detail::gelu_tanh_mul_impl(g.data(), u.data(), n, ref_gelu.data());
  for (const Level& l : {Level{cpu::SimdLevel::kAvx2, cpu::detail::silu_mul_avx2, cpu::detail::gelu_tanh_mul_avx2},
                         Level{cpu::SimdLevel::kAvx512, cpu::detail::silu_mul_avx512, cpu::detail::gelu_tanh_mul_avx512}}) {
    if (!cpu::simd_level_available(l.level)) continue;
    l.silu(g.data(), u.data(), n, got.data());
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), n * sizeof(float)), 0) << cpu::simd_level_name(l.level) << " seed " << seed;
    l.gelu(g.data(), u.data(), n, got.data());
    EXPECT_EQ(std::memcmp(got.data(), ref_gelu.data(), n * sizeof(float)), 0)
        << cpu::simd_level_name(l.level) << " seed " << seed;
  }
}

// Paged attention (one pass, online softmax, GQA group, optional split + merge) equals
// dense softmax attention over the same keys, for ranges that start and end inside pages.
TEST(CpuOps, PagedAttentionMatchesDense) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  // head_dim 64/256 take the fixed-size kernel, 40 the generic one.
  for (const int hd : {64, 256, 40}) {
  const int P = 16, n_kv_heads = 2, n_pages = 9, group = 3;
  const int64_t page_floats = int64_t(n_kv_heads) * P * 2 * hd;
  auto store = randn(page_floats * n_pages, rng);
  std::vector<int32_t> blocks{5, 2, 7, 0, 3, 8, 1};  // a scrambled block table
  auto q = randn(group * hd, rng);
  cpu::PagedKvView view{store.data(), page_floats, blocks.data(), P, hd, false};
  for (auto [begin, end] : {std::pair{0, 1}, {0, 100}, {37, 101}, {90, 112}}) {
    for (int head = 0; head < n_kv_heads; ++head) {
      std::vector<float> out(group * hd), split_out(group * hd);
      cpu::attention_paged(q.data(), group, view, head, begin, end, 0.125f, out.data());
      // Same range in three uneven parts, merged.
      const int32_t cut1 = begin + (end - begin) / 3, cut2 = begin + (end - begin) * 2 / 3;
      std::vector<float> buf(3 * group * (2 + hd));
      cpu::AttnPartial parts[3];
      int32_t bounds[4] = {begin, cut1, cut2, end};
      for (int p = 0; p < 3; ++p) {
        float* b = buf.data() + p * group * (2 + hd);
        parts[p] = {b, b + group, b + 2 * group};
        cpu::attention_partial(q.data(), group, view, head, bounds[p], bounds[p + 1], 0.125f, parts[p]);
      }
      cpu::attention_merge(parts, 3, group, hd, split_out.data());
      auto row = [&](int pos) {
        return store.data() + blocks[pos / P] * page_floats + (int64_t(head) * P + pos % P) * 2 * hd;
      };
      for (int g = 0; g < group; ++g) {
        std::vector<double> s(end - begin), ref(hd, 0.0);
        double mx = -1e300;
        for (int p = begin; p < end; ++p) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double(q[g * hd + d]) * row(p)[d];
          s[p - begin] = dot * 0.125;
          mx = std::max(mx, s[p - begin]);
        }
        double sum = 0;
        for (auto& v : s) sum += (v = std::exp(v - mx));
        for (int p = begin; p < end; ++p)
          for (int d = 0; d < hd; ++d) ref[d] += s[p - begin] / sum * row(p)[hd + d];
        for (int d = 0; d < hd; ++d) {
          ASSERT_NEAR(out[g * hd + d], ref[d], 1e-4) << "seed " << seed << " range " << begin << "-" << end;
          ASSERT_NEAR(split_out[g * hd + d], ref[d], 1e-4) << "seed " << seed << " split " << begin << "-" << end;
        }
      }
    }
  }
  }
  std::printf("[attention] simd level: %s\n", cpu::attention_simd_level());
}

// f16 pages: same result as f32 pages holding the same (f16-rounded) values.
TEST(CpuOps, PagedAttentionF16MatchesF32) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int P = 16, hd = 64, n_kv_heads = 2, n_pages = 6, group = 4;
  const int64_t page_elems = int64_t(n_kv_heads) * P * 2 * hd;
  auto store = randn(page_elems * n_pages, rng);
  std::vector<_Float16> half(store.size());
  for (size_t i = 0; i < store.size(); ++i) {
    half[i] = static_cast<_Float16>(store[i]);
    store[i] = static_cast<float>(half[i]);
  }
  std::vector<int32_t> blocks{4, 1, 5, 0, 2, 3};
  auto q = randn(group * hd, rng);
  cpu::PagedKvView v32{store.data(), page_elems, blocks.data(), P, hd, false};
  cpu::PagedKvView v16{half.data(), page_elems, blocks.data(), P, hd, true};
  std::vector<float> a(group * hd), b(group * hd);
  for (int head = 0; head < n_kv_heads; ++head) {
    cpu::attention_paged(q.data(), group, v32, head, 3, 90, 0.125f, a.data());
    cpu::attention_paged(q.data(), group, v16, head, 3, 90, 0.125f, b.data());
    for (int i = 0; i < group * hd; ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << "seed " << seed;
  }
}

// The prefill tile (blocked over query tokens) against attention_partial per token and head,
// causal and windowed, f32 and f16 pages, tiles starting anywhere in a page, batch rows
// scattered (the tile reads its tokens through a row list).
TEST(CpuOps, PrefillTileMatchesPerTokenAttention) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (const bool f16 : {false, true}) {
    for (const int hd : {64, 128, 256}) {
      for (const int group : {1, 3, 7}) {
        const int P = 16, n_kv_heads = 2, n_pages = 8;
        const int64_t page_elems = int64_t(n_kv_heads) * P * 2 * hd;
        auto store = randn(page_elems * n_pages, rng);
        std::vector<_Float16> half(store.size());
        for (size_t i = 0; i < store.size(); ++i) half[i] = static_cast<_Float16>(store[i]);
        std::vector<int32_t> blocks{6, 2, 7, 0, 3, 5, 1, 4};
        const cpu::PagedKvView view{f16 ? static_cast<const void*>(half.data()) : store.data(), page_elems,
                                    blocks.data(), P, hd, f16};
        const int max_tok = cpu::attention_tile_max_tokens(group, hd);
        ASSERT_GT(max_tok, 0);
        for (const int window : {0, 21}) {
          for (auto [pos0, n_tok] : {std::pair{0, 1}, {0, 40}, {5, 17}, {37, 64}, {100, 9}}) {
            n_tok = std::min(n_tok, max_tok);
            const int64_t stride = int64_t(n_kv_heads) * group * hd;  // [row][kv head][group][hd]
            const int n_rows = n_tok + 3;
            auto q = randn(n_rows * stride, rng);
            std::vector<int32_t> rows(n_tok);
            for (int i = 0; i < n_tok; ++i) rows[i] = n_rows - 1 - i;  // not the batch order, gaps unused
            for (int head = 0; head < n_kv_heads; ++head) {
              std::vector<float> out(n_rows * stride, 0.0f);
              cpu::PrefillTile tile{q.data() + head * group * hd, stride, out.data() + head * group * hd, stride,
                                    rows.data(), n_tok, pos0, window};
              cpu::attention_prefill_tile(tile, group, view, head, 0.125f);
              for (int i = 0; i < n_tok; ++i) {
                const int32_t pos = pos0 + i, first = window > 0 ? std::max(0, pos - window + 1) : 0;
                std::vector<float> ref(group * hd);
                cpu::attention_paged(q.data() + rows[i] * stride + head * group * hd, group, view, head, first,
                                     pos + 1, 0.125f, ref.data());
                const float* got = out.data() + rows[i] * stride + head * group * hd;
                for (int e = 0; e < group * hd; ++e)
                  ASSERT_NEAR(got[e], ref[e], 2e-5f) << "seed " << seed << " f16 " << f16 << " hd " << hd << " group "
                                                     << group << " window " << window << " pos " << pos;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cpu::attention_tile_max_tokens(4, 40), 0);  // a head size the tile kernel does not take
}

// --kv-tier host is a GPU placement: the CPU backend's pages are host memory already, so it refuses
// it with a message naming the flag (and accepts the default placement).
TEST(CpuOps, RefusesTheGpuHostTier) {
  auto be = make_backend(Device::kCpu);
  ASSERT_TRUE(be.is_ok()) << be.status().to_string();
  const Status st = (*be)->set_kv_tier({true, int64_t{1} << 30});
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("--kv-tier host"), std::string::npos) << st.message();
  EXPECT_TRUE((*be)->set_kv_tier({false, 0}).is_ok());
}

}  // namespace
}  // namespace hs
