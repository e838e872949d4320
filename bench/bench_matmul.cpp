// bench/bench_matmul.cpp — speed of backend/cpu/matmul on the real weight shapes of the two
// default models, at each SIMD level, plus the thread pool's dispatch cost.
//
// Shapes (n_in -> n_out): SmolLM2-135M Q4_1 576->576 (q/o), 576->192 (k/v), 576->1536
// (gate/up), 1536->576 (down), Q8_0 576->49152 (tied output); Gemma 3 270M Q5_0 640->1024,
// Q4_K 1024->640, Q6_K 2048->640, Q8_0 640->262144 (tied output). Each runs as a matvec
// (n_tokens = 1, decode) and, except the vocabulary projections (prefill only needs the
// last token's logits), with n_tokens = 512 (prefill). Weights are random bytes with sane
// fp16 scales: speed does not depend on the values.
//
// Counters: W_GB/s = weight bytes streamed per second (the decode roofline is the memory
// bandwidth), GFLOP/s = 2 * n_in * n_out * n_tokens per second. Args: level (1 avx2,
// 2 avx512), tok = n_tokens, thr = threads, cold = 1 when each call reads its weight from
// DRAM (a fresh copy out of >= 128 MiB of copies), as in a real decode step; cold = 0
// repeats one weight, which then sits in the L2/L3 for the small shapes; x2 = activation
// precision (0 kInt8, 1 kInt8x2). Example:
//   build/h-mm/bin/hs_bench_matmul --benchmark_filter='Q4_1' --benchmark_min_time=0.3
#include <benchmark/benchmark.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/fp16.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace {

using hs::DType;
using hs::cpu::SimdLevel;

struct Shape {
  const char* name;
  DType type;
  int64_t n_in, n_out;
  bool prefill;  // also benchmark n_tokens = 512
};

const Shape kShapes[] = {
    {"smollm2/q4_1/attn_q", DType::Q4_1, 576, 576, true},
    {"smollm2/q4_1/attn_k", DType::Q4_1, 576, 192, true},
    {"smollm2/q4_1/ffn_up", DType::Q4_1, 576, 1536, true},
    {"smollm2/q4_1/ffn_down", DType::Q4_1, 1536, 576, true},
    {"smollm2/q8_0/output", DType::Q8_0, 576, 49152, false},
    {"gemma3/q5_0/attn_q", DType::Q5_0, 640, 1024, true},
    {"gemma3/q4_k/attn_out", DType::Q4_K, 1024, 640, true},
    {"gemma3/q6_k/ffn_down", DType::Q6_K, 2048, 640, true},
    {"gemma3/q8_0/output", DType::Q8_0, 640, 262144, false},
};

void put_half(uint8_t* p, float v) {
  const uint16_t h = hs::fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Random weights of a shape, built once and kept (the vocabulary matrices are large).
const std::vector<uint8_t>& weights_for(const Shape& s) {
  static std::map<std::string, std::unique_ptr<std::vector<uint8_t>>> cache;
  auto& slot = cache[s.name];
  if (slot) return *slot;
  const int64_t row_bytes = hs::cpu::weight_row_bytes(s.type, s.n_in);
  slot = std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(row_bytes * s.n_out));
  std::mt19937_64 rng(42);
  for (size_t i = 0; i + 8 <= slot->size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(slot->data() + i, &v, 8);
  }
  const auto info = *hs::dtype_info(s.type);
  const int64_t n_blocks = s.n_in * s.n_out / info.block_elems;
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* p = slot->data() + b * info.block_bytes;
    if (s.type == DType::Q6_K) {
      put_half(p + offsetof(hs::BlockQ6K, d), 0.01f);
    } else {
      put_half(p, 0.01f);
      if (s.type == DType::Q4_1 || s.type == DType::Q4_K) put_half(p + 2, 0.005f);
    }
  }
  return *slot;
}

hs::ThreadPool& pool_with(int n_threads) {
  static std::map<int, std::unique_ptr<hs::ThreadPool>> pools;
  auto& p = pools[n_threads];
  if (!p) p = std::make_unique<hs::ThreadPool>(n_threads);
  return *p;
}

void bm_matmul(benchmark::State& state, Shape s) {
  const auto level = static_cast<SimdLevel>(state.range(0));
  const int64_t n_tokens = state.range(1);
  const int n_threads = static_cast<int>(state.range(2));
  const bool cold = state.range(3) != 0;
  const auto prec = static_cast<hs::cpu::ActPrecision>(state.range(4));
  if (!hs::cpu::simd_level_available(level)) {
    state.SkipWithError("SIMD level not available on this CPU");
    return;
  }
  const auto& w = weights_for(s);
  // Cold: cycle through copies of the weight totalling >= kColdBytes (4x the L3), so every
  // call streams its weight from DRAM, as a decode step does (a whole model exceeds the L3).
  constexpr size_t kColdBytes = size_t{128} << 20;
  std::vector<uint8_t> copies;
  size_t n_copies = 1;
  if (cold && w.size() < kColdBytes) {
    n_copies = (kColdBytes + w.size() - 1) / w.size();
    copies.resize(n_copies * w.size());  // [n_copies][weight bytes]
    for (size_t c = 0; c < n_copies; ++c) std::memcpy(copies.data() + c * w.size(), w.data(), w.size());
  }
  std::vector<float> x(static_cast<size_t>(n_tokens * s.n_in));  // [n_tokens][n_in]
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  std::vector<float> y(static_cast<size_t>(n_tokens * s.n_out));  // [n_tokens][n_out]
  hs::ThreadPool& pool = pool_with(n_threads);
  size_t it = 0;
  for (auto _ : state) {
    const uint8_t* data = copies.empty() ? w.data() : copies.data() + (it++ % n_copies) * w.size();
    const hs::cpu::WeightView wv{s.type, s.n_in, s.n_out, data};
    const hs::Status st = hs::cpu::matmul_at(level, wv, x.data(), n_tokens, y.data(), pool, prec);
    if (!st.is_ok()) {
      state.SkipWithError(st.to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(hs::cpu::simd_level_name(level)) + " " + hs::cpu::act_precision_name(prec));
  state.counters["W_GB/s"] = benchmark::Counter(static_cast<double>(w.size()) / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * static_cast<double>(s.n_in * s.n_out * n_tokens) / 1e9,
      benchmark::Counter::kIsIterationInvariantRate);
}

void bm_dispatch(benchmark::State& state) {
  hs::ThreadPool& pool = pool_with(static_cast<int>(state.range(0)));
  int64_t sink[64] = {};
  for (auto _ : state) {
    pool.parallel_for(8, 1, [&](int64_t b, int64_t, int t) { sink[8 * t] += b; });
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(sink);
}

const int kRegistered = [] {
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  for (const Shape& s : kShapes) {
    for (int level : {1, 2}) {
      auto* b = benchmark::RegisterBenchmark(
          (std::string("matmul/") + s.name + "/" +
           hs::cpu::simd_level_name(static_cast<SimdLevel>(level)))
              .c_str(),
          bm_matmul, s);
      b->ArgNames({"level", "tok", "thr", "cold", "x2"})->UseRealTime()->Unit(benchmark::kMicrosecond);
      for (int prec : {0, 1}) {
        b->Args({level, 1, hw, 1, prec});  // decode, weight from DRAM (the real case)
        if (hw > 1) b->Args({level, 1, 1, 1, prec});
        b->Args({level, 1, hw, 0, prec});  // decode, weight in cache (small shapes fit L2/L3)
        if (hw > 1) b->Args({level, 1, 1, 0, prec});
        if (s.prefill) b->Args({level, 512, hw, 0, prec});
      }
    }
  }
  benchmark::RegisterBenchmark("thread_pool/dispatch_8_tasks", bm_dispatch)
      ->Arg(hw)
      ->UseRealTime()
      ->Unit(benchmark::kNanosecond);
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
