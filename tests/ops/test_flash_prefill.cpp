// tests/ops/test_flash_prefill.cpp — the tensor-core flash prefill (backend/cuda/flash_prefill.h)
// against a double-precision host reference of the same paged attention, or, where that would
// be slow (thousands of tokens), against launch_attention, the exact fp32 kernel.
//
// Each case builds random f16 / bf16 K/V pages for its sequences under a random page
// permutation; every slot no sequence owns (unused pages, page tails past a sequence's last
// key) holds NaN, so a kernel that reads a key it must not see turns its output into NaN. q
// rows are N(0, sd) with NaN in their padding (stride > cols), out is poisoned with NaN before
// the launch and its padding must stay NaN. Fresh inputs every run (HS_TEST_SEED=<n> replays;
// the seed is in every failure message).
//
// Tolerance (flash_prefill.h's precision statement): Q and P are rounded to the cache's type,
// unit roundoff u = 2^-11 (f16) or 2^-8 (bf16); with N(0, 1) data a score moves by ~u and an
// output by ~u * |V| at worst. Bounds: max |err| <= 4e-3 * max|V| and ||err|| / ||ref|| <= 2e-3
// for f16; 2.5e-2 * max|V| and 1.5e-2 for bf16 (~5x above what u predicts: the norm error is
// ~u / sqrt(3) per score unit from Q plus as much from P, while a wrong key, a missing rescale
// or a lost tile are O(1) errors). The sharp-softmax case (q sd 4) widens both by its sd, the
// score errors growing with the scores.
//
// Skips without a CUDA device, as tests/ops/test_backend_ops.cpp does (make_backend(kCuda)
// fails), and in builds without CUDA. FlashPrefill.Rate prints the T = 8192 llama-8B rate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/fp16.h"
#include "ops_test_util.h"

#if defined(HS_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "backend/cuda/flash_prefill.h"
#endif

namespace hs {
namespace {

using ops_test::normal;
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

uint16_t to_bits(float x, KvElem e) { return e == KvElem::kF16 ? fp32_to_fp16(x) : fp32_to_bf16(x); }
float from_bits(uint16_t b, KvElem e) { return e == KvElem::kF16 ? fp16_to_fp32(b) : bf16_to_fp32(b); }

struct Seq {
  int start = 0;  // first position of the step's tokens (the cached prefix is [0, start))
  int count = 0;  // tokens in the step
};

struct Case {
  std::string name;
  KvElem elem = KvElem::kF16;
  int head_dim = 128, n_kv = 2, group = 4, window = 0;
  std::vector<Seq> seqs;
  int row_pad = 0;        // extra floats per q / out row (odd: unaligned rows, the scalar paths)
  float q_sd = 1.0f;      // larger: sharper softmax (exercises the running-max rescale)
  bool host_ref = true;   // double host reference; false: launch_attention
};

// The step of a case on the device and on the host.
struct Problem {
  Case c;
  int n = 0, n_head = 0, D = 0, cols = 0, stride = 0;
  int64_t page_elems = 0;
  std::vector<int32_t> positions, seq_index, page_indptr, page_indices;
  std::vector<uint16_t> pages;             // [n_pages][n_kv][P][K | V][D] bits
  std::vector<std::vector<float>> kf, vf;  // per sequence [n_kv][keys][D], the stored values as floats
  std::vector<float> q;                    // [n][stride]
  double max_v = 0;
  std::unique_ptr<DevBuf> d_pages, d_pos, d_seq, d_indptr, d_indices, d_q;

  cuda::KvLayerView view() const {
    cuda::KvLayerView kv;
    kv.base = d_pages->p;
    kv.page_elems = page_elems;
    kv.page_tokens = kP;
    kv.n_kv_heads = c.n_kv;
    kv.head_dim = D;
    kv.elem = c.elem;
    return kv;
  }
  cuda::StepTables tables() const {
    return cuda::StepTables{d_pos->as<int32_t>(), d_seq->as<int32_t>(), d_indptr->as<int32_t>(),
                            d_indices->as<int32_t>()};
  }
  cuda::CRows q_rows() const { return cuda::CRows{d_q->as<float>(), n, cols, stride}; }
  cuda::AttnArgs args() const {
    cuda::AttnArgs a;
    a.n_head = n_head;
    a.n_head_kv = c.n_kv;
    a.head_dim = D;
    a.scale = 1.0f / std::sqrt(static_cast<float>(D));
    a.window = c.window;
    return a;
  }
};

Problem build(const Case& c, std::mt19937_64& rng) {
  Problem p;
  p.c = c;
  p.D = c.head_dim;
  p.n_head = c.n_kv * c.group;
  p.cols = p.n_head * p.D;
  p.stride = p.cols + c.row_pad;
  p.page_elems = static_cast<int64_t>(c.n_kv) * kP * 2 * p.D;
  const uint16_t nan_bits = c.elem == KvElem::kF16 ? 0x7e00u : 0x7fc0u;

  int total_pages = 3;  // spares nobody owns
  for (const Seq& s : c.seqs) total_pages += (s.start + s.count + kP - 1) / kP;
  std::vector<int32_t> perm(static_cast<size_t>(total_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  p.pages.assign(static_cast<size_t>(total_pages * p.page_elems), nan_bits);

  std::normal_distribution<float> nd(0.0f, 1.0f);
  size_t next = 0;
  p.page_indptr.push_back(0);
  for (size_t si = 0; si < c.seqs.size(); ++si) {
    const Seq& s = c.seqs[si];
    const int keys = s.start + s.count;
    const int n_pages = (keys + kP - 1) / kP;
    for (int i = 0; i < n_pages; ++i) p.page_indices.push_back(perm[next++]);
    p.page_indptr.push_back(static_cast<int32_t>(p.page_indices.size()));
    std::vector<float> kf(static_cast<size_t>(c.n_kv) * keys * p.D), vf(kf.size());
    for (int key = 0; key < keys; ++key) {
      const int64_t page = p.page_indices[static_cast<size_t>(p.page_indptr[si] + key / kP)];
      for (int h = 0; h < c.n_kv; ++h) {
        uint16_t* row = &p.pages[static_cast<size_t>(page * p.page_elems + (static_cast<int64_t>(h) * kP + key % kP) * 2 * p.D)];
        for (int d = 0; d < p.D; ++d) {
          row[d] = to_bits(nd(rng), c.elem);
          row[p.D + d] = to_bits(nd(rng), c.elem);
          const size_t at = (static_cast<size_t>(h) * keys + key) * p.D + d;
          kf[at] = from_bits(row[d], c.elem);
          vf[at] = from_bits(row[p.D + d], c.elem);
          p.max_v = std::max(p.max_v, static_cast<double>(std::fabs(vf[at])));
        }
      }
    }
    p.kf.push_back(std::move(kf));
    p.vf.push_back(std::move(vf));
    for (int i = 0; i < s.count; ++i) {
      p.positions.push_back(s.start + i);
      p.seq_index.push_back(static_cast<int32_t>(si));
    }
  }
  p.n = static_cast<int>(p.positions.size());
  p.q.assign(static_cast<size_t>(p.n) * p.stride, std::numeric_limits<float>::quiet_NaN());
  const std::vector<float> qv = normal(rng, static_cast<size_t>(p.n) * p.cols, c.q_sd);
  for (int i = 0; i < p.n; ++i)
    std::copy_n(qv.begin() + static_cast<int64_t>(i) * p.cols, p.cols, p.q.begin() + static_cast<int64_t>(i) * p.stride);

  p.d_pages = upload(p.pages);
  p.d_pos = upload(p.positions);
  p.d_seq = upload(p.seq_index);
  p.d_indptr = upload(p.page_indptr);
  p.d_indices = upload(p.page_indices);
  p.d_q = upload(p.q);
  return p;
}

// out [n][stride] (padding untouched) in double: softmax(scale q k) v over [first, pos].
std::vector<float> host_reference(const Problem& p) {
  std::vector<float> out(static_cast<size_t>(p.n) * p.stride, std::numeric_limits<float>::quiet_NaN());
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.D));
  std::vector<double> s, acc(static_cast<size_t>(p.D));
  for (int i = 0; i < p.n; ++i) {
    const int si = p.seq_index[static_cast<size_t>(i)], pos = p.positions[static_cast<size_t>(i)];
    const int keys = p.c.seqs[static_cast<size_t>(si)].start + p.c.seqs[static_cast<size_t>(si)].count;
    const int first = p.c.window > 0 ? std::max(0, pos - p.c.window + 1) : 0;
    for (int h = 0; h < p.n_head; ++h) {
      const int kvh = h / p.c.group;
      const float* qr = &p.q[static_cast<size_t>(i) * p.stride + static_cast<size_t>(h) * p.D];
      const float* kb = &p.kf[static_cast<size_t>(si)][static_cast<size_t>(kvh) * keys * p.D];
      const float* vb = &p.vf[static_cast<size_t>(si)][static_cast<size_t>(kvh) * keys * p.D];
      s.assign(static_cast<size_t>(pos - first + 1), 0.0);
      double mx = -std::numeric_limits<double>::infinity();
      for (int j = first; j <= pos; ++j) {
        double d = 0;
        for (int e = 0; e < p.D; ++e) d += static_cast<double>(qr[e]) * kb[static_cast<size_t>(j) * p.D + e];
        s[static_cast<size_t>(j - first)] = d * scale;
        mx = std::max(mx, d * scale);
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0;
      for (int j = first; j <= pos; ++j) {
        const double w = std::exp(s[static_cast<size_t>(j - first)] - mx);
        sum += w;
        for (int e = 0; e < p.D; ++e) acc[static_cast<size_t>(e)] += w * vb[static_cast<size_t>(j) * p.D + e];
      }
      for (int e = 0; e < p.D; ++e)
        out[static_cast<size_t>(i) * p.stride + static_cast<size_t>(h) * p.D + e] = static_cast<float>(acc[static_cast<size_t>(e)] / sum);
    }
  }
  return out;
}

// launch_attention (exact fp32) on the same step; out [n][stride].
std::vector<float> device_reference(const Problem& p) {
  int dev = 0, n_sm = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev);
  cuda::AttnArgs a = p.args();
  int32_t max_range = 0;
  for (int pos : p.positions) max_range = std::max(max_range, p.c.window > 0 ? std::min(pos + 1, p.c.window) : pos + 1);
  a.split = cuda::plan_attention_split(p.n, p.c.n_kv, max_range, n_sm);
  DevBuf scratch(cuda::attention_scratch_floats(p.n, p.c.n_kv, p.c.group, p.D, a.split) * 4);
  a.scratch = scratch.as<float>();
  std::vector<float> out(static_cast<size_t>(p.n) * p.stride, std::numeric_limits<float>::quiet_NaN());
  DevBuf d_out(out.size() * 4);
  cudaMemcpy(d_out.p, out.data(), out.size() * 4, cudaMemcpyHostToDevice);
  const cudaError_t e = cuda::launch_attention(p.view(), p.tables(), p.q_rows(), cuda::Rows{d_out.as<float>(), p.n, p.cols, p.stride}, a, nullptr);
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaMemcpy(out.data(), d_out.p, out.size() * 4, cudaMemcpyDeviceToHost);
  return out;
}

// launch_flash_prefill into a NaN-poisoned out; returns out [n][stride].
std::vector<float> run_flash(const Problem& p, cudaStream_t stream = nullptr) {
  std::vector<float> out(static_cast<size_t>(p.n) * p.stride, std::numeric_limits<float>::quiet_NaN());
  DevBuf d_out(out.size() * 4);
  DevBuf scratch(cuda::flash_prefill_scratch_bytes(p.n, p.n_head, p.D));
  cudaMemcpy(d_out.p, out.data(), out.size() * 4, cudaMemcpyHostToDevice);
  const cudaError_t e = cuda::launch_flash_prefill(p.view(), p.tables(), p.q_rows(),
                                                   cuda::Rows{d_out.as<float>(), p.n, p.cols, p.stride}, p.args(), scratch.p,
                                                   stream);
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaMemcpy(out.data(), d_out.p, out.size() * 4, cudaMemcpyDeviceToHost);
  return out;
}

void print_header() {
  static bool printed = false;
  if (printed) return;
  printed = true;
  std::printf("%-34s %8s %12s %12s %12s %10s\n", "flash_prefill case", "tokens", "max_abs_err", "of_max|V|", "rel_err",
              "tol");
}

// got against want over the [n][cols] view; the padding of got must still be NaN.
void compare(const Problem& p, const std::vector<float>& got, const std::vector<float>& want, const char* ref_name) {
  const bool f16 = p.c.elem == KvElem::kF16;
  // Score errors scale with the scores: q_sd > 1 widens both bounds by q_sd.
  const double widen = std::max(1.0, static_cast<double>(p.c.q_sd));
  const double tol_abs = (f16 ? 4e-3 : 2.5e-2) * p.max_v * widen, tol_rel = (f16 ? 2e-3 : 1.5e-2) * widen;
  double max_abs = 0, num = 0, den = 0;
  int64_t bad = 0, pad_written = 0;
  for (int i = 0; i < p.n; ++i)
    for (int c = 0; c < p.stride; ++c) {
      const size_t at = static_cast<size_t>(i) * p.stride + c;
      if (c >= p.cols) {
        pad_written += !std::isnan(got[at]);
        continue;
      }
      if (!std::isfinite(got[at])) {
        ++bad;
        continue;
      }
      const double e = std::fabs(static_cast<double>(got[at]) - want[at]);
      max_abs = std::max(max_abs, e);
      num += e * e;
      den += static_cast<double>(want[at]) * want[at];
    }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const bool ok = bad == 0 && pad_written == 0 && max_abs <= tol_abs && rel <= tol_rel;
  print_header();
  std::printf("%-34s %8d %12.3e %12.3e %12.3e %10.1e%s (vs %s)\n", p.c.name.c_str(), p.n, max_abs,
              p.max_v > 0 ? max_abs / p.max_v : 0.0, rel, tol_rel, ok ? "" : "  FAIL", ref_name);
  EXPECT_EQ(bad, 0) << p.c.name << ": non-finite or unwritten outputs; " << seed_note();
  EXPECT_EQ(pad_written, 0) << p.c.name << ": row padding written; " << seed_note();
  EXPECT_LE(max_abs, tol_abs) << p.c.name << " (max|V| " << p.max_v << "); " << seed_note();
  EXPECT_LE(rel, tol_rel) << p.c.name << "; " << seed_note();
}

class FlashPrefill : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dev = make_backend(Device::kCuda);
    if (!dev.is_ok()) GTEST_SKIP() << "no CUDA backend: " << dev.status().message();
    dev_ = std::move(*dev);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    rng_.seed(test_seed() ^ std::hash<std::string>{}(info->name()));
  }

  void run_case(const Case& c) {
    const Problem p = build(c, rng_);
    ASSERT_TRUE(p.d_pages->p && p.d_q->p) << "device allocation failed";
    ASSERT_TRUE(cuda::flash_prefill_supported(p.view(), p.D, c.group)) << c.name;
    const std::vector<float> got = run_flash(p);
    if (HasFailure()) return;
    if (c.host_ref) {
      compare(p, got, host_reference(p), "host double");
    } else {
      compare(p, got, device_reference(p), "launch_attention");
    }
  }

  std::unique_ptr<Backend> dev_;
  std::mt19937_64 rng_;
};

Case make(std::string name, KvElem elem, int hd, int n_kv, int group, int window, std::vector<Seq> seqs) {
  Case c;
  c.name = std::move(name);
  c.elem = elem;
  c.head_dim = hd;
  c.n_kv = n_kv;
  c.group = group;
  c.window = window;
  c.seqs = std::move(seqs);
  return c;
}

const char* elem_name(KvElem e) { return e == KvElem::kF16 ? "f16" : "bf16"; }

TEST_F(FlashPrefill, MatchesHostReference) {
  for (KvElem e : {KvElem::kF16, KvElem::kBF16}) {
    const std::string t = elem_name(e);
    std::vector<Case> cases = {
        make(t + " n1 hd128 g4", e, 128, 2, 4, 0, {{0, 1}}),
        make(t + " n1 at pos 700 hd128 g4", e, 128, 2, 4, 0, {{700, 1}}),
        make(t + " n1000 ragged hd128 g4", e, 128, 2, 4, 0, {{0, 1000}}),
        make(t + " 2 seqs, 2nd at 300, g2", e, 128, 2, 2, 0, {{0, 200}, {300, 177}}),
        make(t + " window 64 hd128 g8", e, 128, 1, 8, 64, {{0, 333}}),
        make(t + " window 64 prefix 500 g1", e, 128, 2, 1, 64, {{500, 150}, {0, 37}}),
        make(t + " hd64 g1", e, 64, 3, 1, 0, {{0, 150}, {40, 61}}),
        make(t + " hd64 g8 window 100", e, 64, 1, 8, 100, {{0, 260}}),
        make(t + " hd256 g4", e, 256, 1, 4, 0, {{0, 100}, {129, 33}}),
        make(t + " hd256 g2 window 50", e, 256, 2, 2, 50, {{10, 140}}),
        make(t + " g3 (padded rows)", e, 128, 2, 3, 0, {{0, 130}, {17, 45}}),
    };
    Case odd = make(t + " unaligned rows hd128 g4", e, 128, 2, 4, 0, {{5, 90}});
    odd.row_pad = 1;
    cases.push_back(odd);
    Case padded = make(t + " padded rows hd64 g2", e, 64, 2, 2, 0, {{0, 70}});
    padded.row_pad = 4 * 64;
    cases.push_back(padded);
    Case sharp = make(t + " sharp softmax q sd 4", e, 128, 1, 4, 0, {{0, 400}});
    sharp.q_sd = 4.0f;  // scores ~N(0, 16): the running max jumps past its slack now and then
    cases.push_back(sharp);
    for (const Case& c : cases) {
      run_case(c);
      if (HasFatalFailure()) return;
    }
  }
}

// Many sequences in one step: short prompts, some continuing a cached prefix, some of one
// token, back to back (tiles straddle sequences).
TEST_F(FlashPrefill, ManySequences) {
  std::uniform_int_distribution<int> len(1, 40), start(0, 100), coin(0, 2);
  for (KvElem e : {KvElem::kF16, KvElem::kBF16})
    for (int group : {1, 4, 8}) {
      std::vector<Seq> seqs;
      for (int s = 0; s < 64; ++s) seqs.push_back({coin(rng_) == 0 ? 0 : start(rng_), coin(rng_) == 0 ? 1 : len(rng_)});
      run_case(make(std::string(elem_name(e)) + " 64 seqs g" + std::to_string(group), e, 128, 2, group,
                    group == 4 ? 32 : 0, seqs));
      if (HasFatalFailure()) return;
    }
}

// Long steps against the exact kernel: 16384 tokens, a window, several long sequences.
TEST_F(FlashPrefill, MatchesExactKernelOnLongSteps) {
  std::vector<Case> cases = {
      make("f16 n16384 hd128 g8", KvElem::kF16, 128, 1, 8, 0, {{0, 16384}}),
      make("bf16 n4096 hd128 g4 window 1000", KvElem::kBF16, 128, 2, 4, 1000, {{0, 4096}}),
      make("f16 3 seqs 2000 / 1500@600 / 777", KvElem::kF16, 128, 2, 4, 0, {{0, 2000}, {600, 1500}, {0, 777}}),
      make("bf16 n3000 hd64 g2", KvElem::kBF16, 64, 2, 2, 0, {{0, 3000}}),
      make("f16 n2000 hd256 g4", KvElem::kF16, 256, 1, 4, 0, {{100, 2000}}),
  };
  for (Case& c : cases) {
    c.host_ref = false;
    run_case(c);
    if (HasFatalFailure()) return;
  }
}

TEST_F(FlashPrefill, RefusesWhatItCannotRun) {
  cuda::KvLayerView kv;
  kv.page_tokens = kP;
  kv.n_kv_heads = 2;
  kv.head_dim = 128;
  kv.page_elems = 2 * kP * 2 * 128;
  kv.elem = KvElem::kF16;
  EXPECT_TRUE(cuda::flash_prefill_supported(kv, 128, 4));
  EXPECT_FALSE(cuda::flash_prefill_supported(kv, 128, 9));
  EXPECT_FALSE(cuda::flash_prefill_supported(kv, 64, 4));  // head_dim differs from the cache's
  for (KvElem e : {KvElem::kF32, KvElem::kFp8}) {
    kv.elem = e;
    EXPECT_FALSE(cuda::flash_prefill_supported(kv, 128, 4));
  }
  kv.elem = KvElem::kF16;
  kv.head_dim = 80;
  EXPECT_FALSE(cuda::flash_prefill_supported(kv, 80, 4));
  kv.head_dim = 128;
  kv.page_tokens = 24;
  EXPECT_FALSE(cuda::flash_prefill_supported(kv, 128, 4));
  kv.page_tokens = kP;
  cuda::AttnArgs a;
  a.n_head = 8;
  a.n_head_kv = 2;
  a.head_dim = 128;
  a.scale = 0.1f;
  DevBuf q(4 * 8 * 128);
  kv.base = q.p;
  kv.elem = KvElem::kFp8;
  EXPECT_EQ(cuda::launch_flash_prefill(kv, {}, cuda::CRows{q.as<float>(), 1, 8 * 128, 8 * 128},
                                       cuda::Rows{q.as<float>(), 1, 8 * 128, 8 * 128}, a, nullptr, nullptr),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

// The llama-8B prefill shape: 32 q heads, 8 kv heads, head_dim 128, 8192 tokens, f16 and
// bf16: prints the causal rate (4 * head_dim FLOPs per q head and visible key) and checks the
// result once against the exact kernel. The target is >= 250 TFLOP/s on an H200.
TEST_F(FlashPrefill, Rate) {
  for (KvElem e : {KvElem::kF16, KvElem::kBF16}) {
    Case c = make(std::string(elem_name(e)) + " llama8b T8192", e, 128, 8, 4, 0, {{0, 8192}});
    c.host_ref = false;
    const Problem p = build(c, rng_);
    ASSERT_TRUE(p.d_pages->p && p.d_q->p);
    DevBuf d_out(static_cast<size_t>(p.n) * p.stride * 4);
    const cuda::Rows out{d_out.as<float>(), p.n, p.cols, p.stride};
    cudaEvent_t t0, t1;
    HS_CU(cudaEventCreate(&t0));
    HS_CU(cudaEventCreate(&t1));
    for (int w = 0; w < 3; ++w) HS_CU(cuda::launch_flash_prefill(p.view(), p.tables(), p.q_rows(), out, p.args(), nullptr, nullptr));
    constexpr int kIters = 20;
    HS_CU(cudaEventRecord(t0));
    for (int it = 0; it < kIters; ++it)
      HS_CU(cuda::launch_flash_prefill(p.view(), p.tables(), p.q_rows(), out, p.args(), nullptr, nullptr));
    HS_CU(cudaEventRecord(t1));
    HS_CU(cudaEventSynchronize(t1));
    float ms = 0;
    HS_CU(cudaEventElapsedTime(&ms, t0, t1));
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    const double per = ms / kIters;
    const double flops = 4.0 * p.D * p.n_head * (static_cast<double>(p.n) * (p.n + 1) / 2);
    std::printf("flash_prefill %-5s T %d, 32 / 8 heads, hd 128: %.3f ms, %.1f TFLOP/s (causal, visible keys)\n",
                elem_name(e), p.n, per, flops / (per * 1e-3) / 1e12);
    compare(p, run_flash(p), device_reference(p), "launch_attention");
    if (HasFatalFailure()) return;
  }
}

#else

TEST(FlashPrefill, NeedsCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif  // HS_WITH_CUDA

}  // namespace
}  // namespace hs
