// tests/ops/test_decode_attention_rate.cpp — launch_attention (backend/cuda/attention.cu's
// split-K decode kernel and its merge) at decode shapes, against a double-precision host
// reference, and (HS_ATTN_BENCH=1) its rate at llama-8B decode shapes.
//
// DecodeAttention.MatchesHostReference: f16 / bf16 / fp8 (kv/kv_quant.h's scaled layout) pages
// of 4096 keys under a random page permutation, 8 kv heads x G 4, head_dim 128, two decode
// tokens of one sequence (positions 4095 and 777: the second token's later runs are empty),
// with the split the backend plans, one run (the kernel writes out directly), and runs of 100
// keys (run starts not aligned to the kernel's tiles); plus a sliding window, G 8, G 1 / head_dim
// 64, G 3 / head_dim 256. Every page slot no key owns holds NaN (f16 / bf16 NaN, e4m3 0x7F, NaN
// scales), so a kernel that reads a key it must not see turns its output into NaN; q rows are
// N(0, 1) with NaN padding (stride > cols: unaligned rows), out is poisoned with NaN and its
// padding must stay NaN. Bound: the kernel is fp32 with ex2.approx (~2 ulp) over thousands of
// keys, ~1e-6 relative; the test allows max |err| <= 1e-4 * max|V| and ||err|| / ||ref|| <= 1e-4
// (a wrong key, a lost rescale or a lost run are O(1e-2) or more). Fresh inputs every run
// (HS_TEST_SEED=<n> replays; the seed is in every failure message).
//
// DecodeAttention.Rate (HS_ATTN_BENCH=1 only): batch 1, 8 kv heads, G 4, head_dim 128,
// f16 / bf16 / fp8 pages of 4096, 32768 and 131072 keys (random page permutation, random
// data); prints us per call (attention + merge, the backend's split) and GB/s of K + V bytes
// read, next to a cudaMemcpy device-to-device rate measured in the same process (reported
// as read + write bytes per second, as copy benchmarks quote it).
//
// Skips without a CUDA device (make_backend(kCuda) fails), as tests/ops/test_flash_prefill.cpp
// does, and in builds without CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/fp16.h"
#include "kv/kv_quant.h"
#include "ops_test_util.h"

#if defined(HS_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "backend/cuda/kernels.h"
#endif

namespace hs {
namespace {

using ops_test::seed_note;
using ops_test::test_seed;

#if defined(HS_WITH_CUDA)

using cuda::KvElem;

constexpr int kP = 16;  // page tokens

#define HS_CU(expr)                                                                                   \
  do {                                                                                                \
    const cudaError_t hs_e_ = (expr);                                                                 \
    ASSERT_EQ(hs_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(hs_e_) << "; " << seed_note(); \
  } while (0)

// A device buffer of `bytes`, freed with the object.
struct DevBuf {
  void* p = nullptr;
  DevBuf() = default;
  explicit DevBuf(size_t bytes) {
    if (cudaMalloc(&p, std::max<size_t>(bytes, 16)) != cudaSuccess) p = nullptr;
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

template <typename T>
std::unique_ptr<DevBuf> upload(const std::vector<T>& v) {
  auto b = std::make_unique<DevBuf>(v.size() * sizeof(T));
  if (b->p && !v.empty()) cudaMemcpy(b->p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return b;
}

const char* elem_name(KvElem e) {
  switch (e) {
    case KvElem::kF32: return "f32";
    case KvElem::kF16: return "f16";
    case KvElem::kBF16: return "bf16";
    case KvElem::kFp8: return "fp8";
    case KvElem::kInt8: return "int8";
    case KvElem::kInt4: return "int4";
  }
  return "?";
}

struct Shape {
  KvElem elem = KvElem::kF16;
  int n_kv = 8, group = 4, head_dim = 128;
  int keys = 4096;  // the sequence's cached keys
  int window = 0;
};

// One sequence's pages of one layer: host bytes (NaN where no key lives) and, when asked,
// the stored values as floats [n_kv][keys][D].
struct Pages {
  Shape s;
  int64_t page_bytes = 0, page_elems = 0, head_stride = 0, scales_offset = 0;
  int n_seq_pages = 0, n_pages = 0;
  std::vector<int32_t> indices;  // the sequence's pages, in key order
  std::vector<uint8_t> bytes;    // [n_pages][page_bytes]
  std::vector<float> kf, vf;
  double max_v = 0;

  int elem_bytes() const { return s.elem == KvElem::kFp8 ? 1 : 2; }
  cuda::KvLayerView view(void* base) const {
    cuda::KvLayerView kv;
    kv.base = base;
    kv.page_elems = page_elems;
    kv.page_tokens = kP;
    kv.n_kv_heads = s.n_kv;
    kv.head_dim = s.head_dim;
    kv.elem = s.elem;
    kv.head_stride = head_stride;
    kv.scales_offset = scales_offset;
    return kv;
  }
  // K + V bytes a token at the last position reads (fp8: with the scales).
  double bytes_read() const {
    const double per_key = s.elem == KvElem::kFp8 ? 2.0 * s.head_dim + 4 : 2.0 * s.head_dim * 2;
    return per_key * s.n_kv * s.keys;
  }
};

// random: N(0, 1) values (and their floats) when true; else cheap finite bit patterns (the
// rate test's 100s of MB).
Pages build_pages(const Shape& s, std::mt19937_64& rng, bool exact_values) {
  Pages p;
  p.s = s;
  const int D = s.head_dim;
  if (s.elem == KvElem::kFp8) {
    p.scales_offset = 2LL * kP * D;
    p.head_stride = (p.scales_offset + 4LL * kP + 15) / 16 * 16;
    p.page_bytes = s.n_kv * p.head_stride;
    p.page_elems = p.page_bytes;
  } else {
    p.page_elems = static_cast<int64_t>(s.n_kv) * kP * 2 * D;
    p.page_bytes = p.page_elems * 2;
  }
  p.n_seq_pages = (s.keys + kP - 1) / kP;
  p.n_pages = p.n_seq_pages + 3;  // spares nobody owns
  std::vector<int32_t> perm(static_cast<size_t>(p.n_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  p.indices.assign(perm.begin(), perm.begin() + p.n_seq_pages);

  // NaN everywhere first: 16-bit NaN (f16 0x7e00, bf16 0x7fc0), e4m3 0x7f with NaN scales.
  p.bytes.resize(static_cast<size_t>(p.n_pages * p.page_bytes));
  const uint16_t nan16 = s.elem == KvElem::kBF16 ? 0x7fc0u : 0x7e00u;
  if (s.elem == KvElem::kFp8) {
    std::memset(p.bytes.data(), 0x7f, p.bytes.size());
    for (int pg = 0; pg < p.n_pages; ++pg)
      for (int h = 0; h < s.n_kv; ++h)
        for (int k = 0; k < 2 * kP; ++k) {
          uint8_t* sc = &p.bytes[static_cast<size_t>(pg * p.page_bytes + h * p.head_stride + p.scales_offset + 2 * k)];
          std::memcpy(sc, &nan16, 2);
        }
  } else {
    for (size_t at = 0; at + 1 < p.bytes.size(); at += 2) std::memcpy(&p.bytes[at], &nan16, 2);
  }

  if (exact_values) {
    p.kf.assign(static_cast<size_t>(s.n_kv) * s.keys * D, 0.0f);
    p.vf.assign(p.kf.size(), 0.0f);
  }
  std::normal_distribution<float> nd(0.0f, 1.0f);
  uint64_t h64 = rng() | 1;
  auto next16 = [&h64]() {  // xorshift64*
    h64 ^= h64 >> 12;
    h64 ^= h64 << 25;
    h64 ^= h64 >> 27;
    return static_cast<uint16_t>((h64 * 0x2545F4914F6CDD1DULL) >> 48);
  };
  std::vector<float> row(static_cast<size_t>(D));
  for (int key = 0; key < s.keys; ++key) {
    const int64_t page = p.indices[static_cast<size_t>(key / kP)];
    const int tp = key % kP;
    for (int h = 0; h < s.n_kv; ++h)
      for (int kv = 0; kv < 2; ++kv) {
        float* dst = exact_values ? &(kv == 0 ? p.kf : p.vf)[(static_cast<size_t>(h) * s.keys + key) * D] : nullptr;
        if (s.elem == KvElem::kFp8) {
          uint8_t* blk = &p.bytes[static_cast<size_t>(page * p.page_bytes + h * p.head_stride)];
          uint8_t* bytes = blk + (2 * tp + kv) * D;
          uint16_t dbits;
          if (exact_values) {
            float amax = 0;
            for (int d = 0; d < D; ++d) amax = std::max(amax, std::fabs(row[static_cast<size_t>(d)] = nd(rng)));
            dbits = fp32_to_fp16(std::min(amax / 448.0f, 65504.0f));
            const float df = fp16_to_fp32(dbits);
            for (int d = 0; d < D; ++d) {
              bytes[d] = df > 0 ? fp8_e4m3_from_float(row[static_cast<size_t>(d)] / df) : 0;
              dst[d] = df * fp8_e4m3_to_float(bytes[d]);
            }
          } else {
            dbits = fp32_to_fp16(1.0f / 256.0f);
            for (int d = 0; d < D; d += 2) {
              const uint16_t r = next16();
              bytes[d] = static_cast<uint8_t>(r & 0xf7u);  // never 0x7f / 0xff (NaN)
              bytes[d + 1] = static_cast<uint8_t>((r >> 8) & 0xf7u);
            }
          }
          std::memcpy(blk + p.scales_offset + 2 * (2 * tp + kv), &dbits, 2);
        } else {
          uint8_t* bytes = &p.bytes[static_cast<size_t>(page * p.page_bytes + ((h * kP + tp) * 2 + kv) * D * 2)];
          for (int d = 0; d < D; ++d) {
            uint16_t b;
            if (exact_values) {
              const float x = nd(rng);
              b = s.elem == KvElem::kF16 ? fp32_to_fp16(x) : fp32_to_bf16(x);
              dst[d] = s.elem == KvElem::kF16 ? fp16_to_fp32(b) : bf16_to_fp32(b);
            } else {
              const uint16_t r = next16();  // +-[0.5, 1) with random mantissas
              b = s.elem == KvElem::kF16 ? static_cast<uint16_t>((r & 0x83ffu) | 0x3800u)
                                         : static_cast<uint16_t>((r & 0x807fu) | 0x3f00u);
            }
            std::memcpy(bytes + 2 * d, &b, 2);
          }
        }
        if (exact_values && kv == 1)
          for (int d = 0; d < D; ++d) p.max_v = std::max(p.max_v, static_cast<double>(std::fabs(dst[d])));
      }
  }
  return p;
}

// out [n][stride] in double: softmax(scale q.k) v over [first, pos] of each token.
std::vector<float> host_reference(const Pages& p, const std::vector<int32_t>& positions, const std::vector<float>& q,
                                  int stride, float scale) {
  const Shape& s = p.s;
  const int D = s.head_dim, n_head = s.n_kv * s.group;
  std::vector<float> out(positions.size() * stride, std::numeric_limits<float>::quiet_NaN());
  std::vector<double> sc, acc(static_cast<size_t>(D));
  for (size_t i = 0; i < positions.size(); ++i) {
    const int pos = positions[i];
    const int first = s.window > 0 ? std::max(0, pos - s.window + 1) : 0;
    for (int h = 0; h < n_head; ++h) {
      const int kvh = h / s.group;
      const float* qr = &q[i * stride + static_cast<size_t>(h) * D];
      const float* kb = &p.kf[static_cast<size_t>(kvh) * s.keys * D];
      const float* vb = &p.vf[static_cast<size_t>(kvh) * s.keys * D];
      sc.assign(static_cast<size_t>(pos - first + 1), 0.0);
      double mx = -std::numeric_limits<double>::infinity();
      for (int j = first; j <= pos; ++j) {
        double d = 0;
        for (int e = 0; e < D; ++e) d += static_cast<double>(qr[e]) * kb[static_cast<size_t>(j) * D + e];
        sc[static_cast<size_t>(j - first)] = d * scale;
        mx = std::max(mx, d * scale);
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0;
      for (int j = first; j <= pos; ++j) {
        const double w = std::exp(sc[static_cast<size_t>(j - first)] - mx);
        sum += w;
        for (int e = 0; e < D; ++e) acc[static_cast<size_t>(e)] += w * vb[static_cast<size_t>(j) * D + e];
      }
      for (int e = 0; e < D; ++e) out[i * stride + static_cast<size_t>(h) * D + e] = static_cast<float>(acc[static_cast<size_t>(e)] / sum);
    }
  }
  return out;
}

int device_sms() {
  int dev = 0, n_sm = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev);
  return std::max(1, n_sm);
}

class DecodeAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dev = make_backend(Device::kCuda);
    if (!dev.is_ok()) GTEST_SKIP() << "no CUDA backend: " << dev.status().message();
    dev_ = std::move(*dev);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    rng_.seed(test_seed() ^ std::hash<std::string>{}(info->name()));
  }

  // One shape: two decode tokens (the last key and key 777) under three splits.
  void check_shape(const Shape& s) {
    const Pages p = build_pages(s, rng_, true);
    const int D = s.head_dim, n_head = s.n_kv * s.group, cols = n_head * D, stride = cols + 3;
    const std::vector<int32_t> positions = {s.keys - 1, std::min(777, s.keys - 1)};
    const int n = static_cast<int>(positions.size());
    const std::vector<int32_t> seq_index(positions.size(), 0), indptr = {0, p.n_seq_pages};
    std::vector<float> q(static_cast<size_t>(n) * stride, std::numeric_limits<float>::quiet_NaN());
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < cols; ++c) q[static_cast<size_t>(i) * stride + c] = nd(rng_);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const std::vector<float> want = host_reference(p, positions, q, stride, scale);

    auto d_pages = upload(p.bytes);
    auto d_pos = upload(positions);
    auto d_seq = upload(seq_index);
    auto d_indptr = upload(indptr);
    auto d_indices = upload(p.indices);
    auto d_q = upload(q);
    ASSERT_TRUE(d_pages->p && d_q->p) << "device allocation failed";
    const cuda::StepTables t{d_pos->as<int32_t>(), d_seq->as<int32_t>(), d_indptr->as<int32_t>(),
                             d_indices->as<int32_t>()};
    const int32_t max_range = s.window > 0 ? std::min(s.keys, s.window) : s.keys;

    cuda::AttnArgs a;
    a.n_head = n_head;
    a.n_head_kv = s.n_kv;
    a.head_dim = D;
    a.scale = scale;
    a.window = s.window;
    struct Split {
      const char* name;
      cuda::AttnSplit split;
    };
    const cuda::AttnSplit planned = cuda::plan_attention_split(n, s.n_kv, max_range, device_sms());
    const Split splits[] = {{"planned", planned},
                            {"one run", cuda::AttnSplit{1, max_range}},
                            {"runs of 100", cuda::AttnSplit{(max_range + 99) / 100, 100}}};
    for (const Split& sp : splits) {
      a.split = sp.split;
      DevBuf scratch(cuda::attention_scratch_floats(n, s.n_kv, s.group, D, a.split) * sizeof(float));
      a.scratch = a.split.n_splits > 1 ? scratch.as<float>() : nullptr;
      std::vector<float> got(q.size(), std::numeric_limits<float>::quiet_NaN());
      auto d_out = upload(got);
      const cudaError_t e = cuda::launch_attention(p.view(d_pages->p), t, cuda::CRows{d_q->as<float>(), n, cols, stride},
                                                   cuda::Rows{d_out->as<float>(), n, cols, stride}, a, nullptr);
      ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
      HS_CU(cudaDeviceSynchronize());
      HS_CU(cudaMemcpy(got.data(), d_out->p, got.size() * 4, cudaMemcpyDeviceToHost));

      double max_abs = 0, num = 0, den = 0;
      int64_t bad = 0, pad_written = 0;
      for (int i = 0; i < n; ++i)
        for (int c = 0; c < stride; ++c) {
          const size_t at = static_cast<size_t>(i) * stride + c;
          if (c >= cols) {
            pad_written += !std::isnan(got[at]);
            continue;
          }
          if (!std::isfinite(got[at])) {
            ++bad;
            continue;
          }
          const double err = std::fabs(static_cast<double>(got[at]) - want[at]);
          max_abs = std::max(max_abs, err);
          num += err * err;
          den += static_cast<double>(want[at]) * want[at];
        }
      const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
      const std::string name = std::string(elem_name(s.elem)) + " kv " + std::to_string(s.n_kv) + " G" +
                               std::to_string(s.group) + " hd" + std::to_string(D) + " keys " + std::to_string(s.keys) +
                               " w" + std::to_string(s.window) + " " + sp.name + " (" +
                               std::to_string(a.split.n_splits) + " x " + std::to_string(a.split.split_len) + ")";
      std::printf("decode attention %-62s max_abs %.3e (%.3e of max|V|) rel %.3e%s\n", name.c_str(), max_abs,
                  p.max_v > 0 ? max_abs / p.max_v : 0.0, rel,
                  bad == 0 && pad_written == 0 && max_abs <= 1e-4 * p.max_v && rel <= 1e-4 ? "" : "  FAIL");
      EXPECT_EQ(bad, 0) << name << ": non-finite or unwritten outputs; " << seed_note();
      EXPECT_EQ(pad_written, 0) << name << ": row padding written; " << seed_note();
      EXPECT_LE(max_abs, 1e-4 * p.max_v) << name << "; " << seed_note();
      EXPECT_LE(rel, 1e-4) << name << "; " << seed_note();
    }
  }

  std::unique_ptr<Backend> dev_;
  std::mt19937_64 rng_;
};

TEST_F(DecodeAttention, MatchesHostReference) {
  for (KvElem e : {KvElem::kF16, KvElem::kBF16, KvElem::kFp8}) {
    Shape s;
    s.elem = e;
    check_shape(s);  // llama-8B: 8 kv heads, G 4, head_dim 128, 4096 keys
    if (HasFatalFailure()) return;
  }
  std::vector<Shape> more;
  {
    Shape s;
    s.window = 1000;  // first key 3096: run starts off the tile grid
    more.push_back(s);
    s.window = 0;
    s.elem = KvElem::kFp8;
    s.group = 8;  // G 8: 32-lane rows
    s.n_kv = 2;
    more.push_back(s);
    s.elem = KvElem::kBF16;
    s.group = 1;
    s.head_dim = 64;
    s.keys = 1500;
    more.push_back(s);
    s.elem = KvElem::kF16;
    s.group = 3;  // padded to the G 4 kernel
    s.head_dim = 256;
    s.window = 333;
    more.push_back(s);
  }
  for (const Shape& s : more) {
    check_shape(s);
    if (HasFatalFailure()) return;
  }
}

TEST_F(DecodeAttention, Rate) {
  const char* on = std::getenv("HS_ATTN_BENCH");
  if (on == nullptr || std::string(on) != "1") GTEST_SKIP() << "set HS_ATTN_BENCH=1 to time decode attention";
  const int n_sm = device_sms();
  cudaEvent_t t0, t1;
  HS_CU(cudaEventCreate(&t0));
  HS_CU(cudaEventCreate(&t1));

  // The copy rate: 512 MiB device to device.
  {
    const size_t bytes = size_t{512} << 20;
    DevBuf src(bytes), dst(bytes);
    ASSERT_TRUE(src.p && dst.p);
    HS_CU(cudaMemset(src.p, 1, bytes));
    for (int w = 0; w < 2; ++w) HS_CU(cudaMemcpy(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice));
    constexpr int kIters = 10;
    HS_CU(cudaEventRecord(t0));
    for (int it = 0; it < kIters; ++it) HS_CU(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice));
    HS_CU(cudaEventRecord(t1));
    HS_CU(cudaEventSynchronize(t1));
    float ms = 0;
    HS_CU(cudaEventElapsedTime(&ms, t0, t1));
    const double per = ms / kIters * 1e-3;
    std::printf("cudaMemcpy D2D 512 MiB: %.1f us, %.0f GB/s (read + write), %.0f GB/s read\n", per * 1e6,
                2.0 * bytes / per / 1e9, bytes / per / 1e9);
  }

  for (int keys : {4096, 32768, 131072})
    for (KvElem e : {KvElem::kF16, KvElem::kBF16, KvElem::kFp8}) {
      Shape s;
      s.elem = e;
      s.keys = keys;
      const Pages p = build_pages(s, rng_, false);
      const int D = s.head_dim, n_head = s.n_kv * s.group, cols = n_head * D;
      const std::vector<int32_t> positions = {keys - 1}, seq_index = {0}, indptr = {0, p.n_seq_pages};
      std::vector<float> q(static_cast<size_t>(cols));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& x : q) x = nd(rng_);
      auto d_pages = upload(p.bytes);
      auto d_pos = upload(positions);
      auto d_seq = upload(seq_index);
      auto d_indptr = upload(indptr);
      auto d_indices = upload(p.indices);
      auto d_q = upload(q);
      DevBuf d_out(static_cast<size_t>(cols) * 4);
      ASSERT_TRUE(d_pages->p && d_q->p && d_out.p) << "device allocation failed";
      const cuda::StepTables t{d_pos->as<int32_t>(), d_seq->as<int32_t>(), d_indptr->as<int32_t>(),
                               d_indices->as<int32_t>()};
      cuda::AttnArgs a;
      a.n_head = n_head;
      a.n_head_kv = s.n_kv;
      a.head_dim = D;
      a.scale = 1.0f / std::sqrt(static_cast<float>(D));
      a.split = cuda::plan_attention_split(1, s.n_kv, keys, n_sm);
      DevBuf scratch(cuda::attention_scratch_floats(1, s.n_kv, s.group, D, a.split) * sizeof(float));
      a.scratch = a.split.n_splits > 1 ? scratch.as<float>() : nullptr;
      const cuda::CRows qr{d_q->as<float>(), 1, cols, cols};
      const cuda::Rows out{d_out.as<float>(), 1, cols, cols};
      const cuda::KvLayerView kv = p.view(d_pages->p);
      for (int w = 0; w < 3; ++w) HS_CU(cuda::launch_attention(kv, t, qr, out, a, nullptr));
      const int iters = keys >= 131072 ? 20 : 50;
      HS_CU(cudaEventRecord(t0));
      for (int it = 0; it < iters; ++it) HS_CU(cuda::launch_attention(kv, t, qr, out, a, nullptr));
      HS_CU(cudaEventRecord(t1));
      HS_CU(cudaEventSynchronize(t1));
      float ms = 0;
      HS_CU(cudaEventElapsedTime(&ms, t0, t1));
      const double per = static_cast<double>(ms) / iters * 1e-3;
      std::vector<float> got(static_cast<size_t>(cols));
      HS_CU(cudaMemcpy(got.data(), d_out.p, got.size() * 4, cudaMemcpyDeviceToHost));
      int64_t bad = 0;
      for (float x : got) bad += !std::isfinite(x);
      std::printf("decode attention %-4s %6d keys, 8 kv heads x G 4, hd 128, %3d runs of %5d: %8.1f us, %6.0f GB/s of K+V\n",
                  elem_name(e), keys, a.split.n_splits, a.split.split_len, per * 1e6, p.bytes_read() / per / 1e9);
      EXPECT_EQ(bad, 0) << elem_name(e) << " " << keys << " keys: non-finite outputs";
    }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
}

#else

TEST(DecodeAttention, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif  // HS_WITH_CUDA

}  // namespace
}  // namespace hs
