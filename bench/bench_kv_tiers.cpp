// bench/bench_kv_tiers.cpp — speed of the KV tier kernels: attention of one GQA group over
// stored pieces per dtype (reported as piece bytes read per second and tokens per second),
// next to the dense f16 paged kernel over the same number of tokens, and the cost of
// plan + execute for a sparse step's fetch.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "core/fp16.h"
#include "kv/tier/kv_tiers.h"
#include "kv/tier/piece_attention.h"

namespace hs {
namespace {

constexpr int kC = 16, kNq = 4, kPieces = 1024;  // 16K tokens per call

void BM_PieceAttention(benchmark::State& state) {
  const auto dt = static_cast<KvStoreDtype>(state.range(0));
  const int hd = static_cast<int>(state.range(1));
  const PieceLayout L = PieceLayout::make(dt, hd, kC);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint8_t> buf(static_cast<size_t>(kPieces) * L.stride);  // [kPieces][stride]
  std::vector<float> row(hd);
  for (int p = 0; p < kPieces; ++p)
    for (int t = 0; t < kC; ++t)
      for (int kv = 0; kv < 2; ++kv) {
        for (float& x : row) x = nd(rng);
        uint8_t* base = buf.data() + static_cast<int64_t>(p) * L.stride;
        kv_encode_row(dt, row.data(), hd, base + L.row_offset(t, kv), base + L.scale_offset(t, kv));
      }
  std::vector<PieceSpan> spans(kPieces);
  // Visit pieces in a random order (as selected chunks land in hot slots).
  std::vector<int> order(kPieces);
  for (int i = 0; i < kPieces; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (int i = 0; i < kPieces; ++i)
    spans[i] = {PieceView{buf.data() + static_cast<int64_t>(order[i]) * L.stride, &L}, kC};
  std::vector<float> q(kNq * hd), mx(kNq), sm(kNq), acc(kNq * hd);
  for (float& x : q) x = nd(rng);
  for (auto _ : state) {
    attention_over_pieces(q.data(), kNq, spans.data(), kPieces, 0.1f, mx.data(), sm.data(), acc.data());
    benchmark::DoNotOptimize(acc.data());
  }
  state.SetBytesProcessed(state.iterations() * kPieces * L.bytes);
  state.SetItemsProcessed(state.iterations() * kPieces * kC);
  state.SetLabel(std::string(kv_store_dtype_name(dt)) + " " + kv_quant_simd_level());
}
BENCHMARK(BM_PieceAttention)
    ->ArgsProduct({{static_cast<int>(KvStoreDtype::kF32), static_cast<int>(KvStoreDtype::kF16),
                    static_cast<int>(KvStoreDtype::kBF16), static_cast<int>(KvStoreDtype::kInt8),
                    static_cast<int>(KvStoreDtype::kInt4)},
                   {64, 128, 256}});

// The dense paged f16 kernel of backend/cpu over the same token count, for scale.
void BM_DenseF16Paged(benchmark::State& state) {
  const int hd = static_cast<int>(state.range(0)), P = 16, n_tok = kPieces * kC;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> data(static_cast<size_t>(n_tok) * 2 * hd);  // [n_pages][1 head][P][2][hd]
  for (uint16_t& h : data) h = fp32_to_fp16(nd(rng));
  std::vector<int32_t> blocks(n_tok / P);
  for (int i = 0; i < n_tok / P; ++i) blocks[i] = i;
  std::shuffle(blocks.begin(), blocks.end(), rng);
  cpu::PagedKvView kv{data.data(), static_cast<int64_t>(P) * 2 * hd, blocks.data(), P, hd, true};
  std::vector<float> q(kNq * hd), out(kNq * hd);
  for (float& x : q) x = nd(rng);
  for (auto _ : state) {
    cpu::attention_paged(q.data(), kNq, kv, 0, 0, n_tok, 0.1f, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * n_tok * 4LL * hd);
  state.SetItemsProcessed(state.iterations() * n_tok);
  state.SetLabel(cpu::attention_simd_level());
}
BENCHMARK(BM_DenseF16Paged)->Arg(64)->Arg(128)->Arg(256);

// plan + execute of 128 selected chunks of one (layer, head), about half of them hot.
void BM_PlanExecute(benchmark::State& state) {
  TierGeometry g{1, 1, 128, 16, 16, KvStoreDtype::kInt8};
  DeviceTierConfig cfg;
  cfg.max_seqs = 1;
  const DeviceTierSizing probe = *DeviceTier::size_for(g, DeviceTierConfig{1LL << 40, 1, 16, 256});
  cfg.budget_bytes = probe.resident_bytes + 192 * PieceLayout::make(g.dtype, 128, 16).stride;
  auto tiers = KvTiers::create(g, 4096, cfg);
  KvTiers& t = **tiers;
  TierSeq seq = *t.start();
  const int n_tok = 32768;
  (void)t.reserve(seq, n_tok);
  std::vector<float> k(128, 0.5f), v(128, -0.5f);
  for (int p = 0; p < n_tok; ++p) t.write(seq, 0, 0, p, k.data(), v.data());
  t.commit(seq, n_tok);
  std::mt19937 rng(1);
  std::vector<int32_t> sel(128);
  for (auto _ : state) {
    for (int32_t& c : sel) c = 1 + static_cast<int32_t>(rng() % 256);  // 256 candidates, 192 slots
    auto plan = t.plan(seq, 0, 0, sel);
    t.execute(*plan);
    t.end_step();
  }
  const FetchStats s = t.device().total_stats();
  state.counters["hit_rate"] = static_cast<double>(s.hits) / static_cast<double>(s.hits + s.misses);
  state.SetBytesProcessed(s.bytes_moved);
  state.SetItemsProcessed(state.iterations() * 128);
}
BENCHMARK(BM_PlanExecute);

}  // namespace
}  // namespace hs

BENCHMARK_MAIN();
