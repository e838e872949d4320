// app/bench_command.cpp — `hindsight bench -m MODEL`: in-process speed, llama-bench style.
//
// Tests: pp<N> (prefill N tokens in one batch), tg<N> (decode N tokens one at a time), and
// tg<N> @ d<D> (decode after D tokens of context). Each test repeats -r times; reported as
// mean ± std tokens/s, as a markdown table and JSON (--json FILE). Token ids are random;
// timings exclude tokenization and sampling (the logits still come to the host each step),
// as llama-bench's do. Depth context is
// synthetic: the KV pages of the first D positions are filled with random values (on a GPU
// the device copy's pages stay zeroed) instead of running a D-token prefill — decode cost depends on the amount of KV read, not on its
// values — so deep tests take seconds instead of minutes (stated in the output).
// Every model runs through LanguageModel: the dense Decoder (llama, gemma3, qwen2) and the
// hybrid Gated-DeltaNet HybridDecoder (qwen35, qwen3next), whose recurrent state slots come
// from a RecurrentPool over the KV cache (a live slot per sequence of the largest test, at least
// kDefaultResidentSeqs, and one checkpoint). A hybrid's state cannot be rebuilt from KV, so its synthetic context is the
// random KV of the full-attention layers plus, in every sequence's slot, the state of one real
// prefill of kSeedStateTokens random tokens made at start (saved as that checkpoint and
// restored per sequence): the values and scale of a real state, and its cost is fixed — a
// decode step reads and writes the whole state whatever the depth. Hybrids have no sparse
// attention yet: --sparse-compare (and --sparse sketch|quest, refused by load_model) are errors.
// With sparse attention on, each decode test also reports what a step reads (weights,
// sketch / Quest metadata, KV) and what the device tier fetched (MB per step, hit rate of the
// selected non-resident chunks; each repetition starts with a new sequence, so a cold tier).
// --sparse-compare runs every decode test dense first, then sparse.
// --batched NPL:NPP runs llama-batched-bench's test: NPL sequences, each a prompt of NPP
// random tokens prefilled (in steps of up to --ubatch tokens; contexts longer than
// --batched-synthetic-above are filled synthetically instead, as the depth tests are) and then
// --batched-gen tokens decoded by all of them together, one token per sequence per step;
// aggregate decode t/s = NPL x gen / time.
// Roofline: on a device that can measure its peaks (Backend::measure_peaks, in this run), each
// row also gives the ideal rate — decode: (weight + sketch + KV + recurrent-state bytes per step)
// / measured copy rate; prefill: matmul + attention (+ delta-rule) FLOPs / measured 16-bit
// matmul rate — and the fraction reached. What a step costs by kind: app/bench_cost.h (MoE:
// the routed share of the expert weights; hybrids: KV of the full-attention layers only, the
// state read and written once per token).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>

#include "app/bench_cost.h"
#include "app/commands.h"
#include "app/loaded_model.h"
#include "backend/cpu/matmul.h"  // cpu::simd_level (the row says which SIMD the CPU ran)

namespace hs::app {
namespace {

struct BenchOptions {
  ModelOptions model;
  std::vector<int> pp{512};
  std::vector<int> tg{128};
  std::vector<int> depths{0, 4096, 16384};
  int repetitions = 3;
  std::string json_path;
  std::string matmul = matmul_precision_name(kDefaultMatmulPrecision);
  bool sparse_compare = false;  // each tg @ depth twice: dense, then sparse
  std::vector<std::string> batched;  // "NPL:NPP" aggregate decode tests
  int batched_gen = 128;
  int batched_synthetic_above = 8192;
  int ubatch = 8192;  // most tokens per prefill step
  bool peaks = true;  // measure the device's peaks for the roofline column
};

struct Measurement {
  std::string test;
  int n_tokens = 0, depth = 0;
  std::string attention = "dense";  // dense | sketch | quest
  // Bytes per decode step (mean over the steps): weights, sketch/Quest metadata, KV read;
  // recurrent state read + written (hybrids).
  double weight_bytes = 0, score_bytes = 0, kv_bytes = 0, state_bytes = 0;
  double keys_selected_share = 1;  // selected / total keys of the sparse attentions
  // Device tier: bytes fetched into hot slots per step, and the counts over all steps.
  double fetch_bytes = 0, resident_bytes = 0;  // per step: into hot slots; into the sinks / window rings
  int64_t fetch_hits = 0, fetch_misses = 0, fetch_evictions = 0, fetch_refused = 0;
  bool tiered = false;
  double hit_rate() const {
    return fetch_hits + fetch_misses > 0 ? static_cast<double>(fetch_hits) / (fetch_hits + fetch_misses) : 0.0;
  }
  // The sketch bytes, selected share and device-tier figures from counters summed over `steps`
  // decode steps (sparse: a sparse runtime ran; its tier, the CPU's hot chunks or the GPU host
  // tier's hot set, when it counted fetch steps).
  void set_sparse_figures(const SparseStats& sum, double steps, bool sparse) {
    score_bytes = sum.score_bytes / steps;
    if (sum.keys_total > 0) keys_selected_share = static_cast<double>(sum.keys_selected) / sum.keys_total;
    tiered = sparse && sum.fetch_steps > 0;
    fetch_bytes = sum.fetch_bytes / steps;
    resident_bytes = sum.resident_bytes / steps;
    fetch_hits = sum.fetch_hits;
    fetch_misses = sum.fetch_misses;
    fetch_evictions = sum.fetch_evictions;
    fetch_refused = sum.fetch_refused;
  }
  // Aggregate tests (--batched): sequences, prefill rate (0: synthetic context).
  int n_seqs = 1;
  double prefill_tps = 0;
  // Roofline: ideal tokens/s from the measured peaks, and what bounds it (memory | matmul).
  double ideal_tps = 0;
  std::string bound;
  std::vector<double> tps;
  double mean() const { double s = 0; for (double v : tps) s += v; return s / tps.size(); }
  double stddev() const {
    double m = mean(), s = 0;
    for (double v : tps) s += (v - m) * (v - m);
    return tps.size() > 1 ? std::sqrt(s / (tps.size() - 1)) : 0.0;
  }
};

using Clock = std::chrono::steady_clock;

// Hybrid models: the checkpoint holding the state every synthetic context resumes from, and
// the length of the real prefill that made it (see the file comment).
constexpr uint64_t kSeedStateKey = 0x5eedull;
constexpr int kSeedStateTokens = 64;

// The model's sparse runtime (null: dense attention everywhere; hybrids: on the full-attention layers).
SparseRuntime* sparse_of(const LoadedModel& m) { return m.model().sparse(); }
void set_sparse(LoadedModel& m, SparseRuntime* rt) {
  m.model().set_sparse(rt);
}

// One timed run's sparse counters added to `sum`.
void add_stats(SparseStats& sum, const SparseStats& st) {
  sum.sparse_heads += st.sparse_heads;
  sum.dense_heads += st.dense_heads;
  sum.keys_total += st.keys_total;
  sum.keys_selected += st.keys_selected;
  sum.score_bytes += st.score_bytes;
  sum.kv_bytes += st.kv_bytes;
  sum.fetch_hits += st.fetch_hits;
  sum.fetch_misses += st.fetch_misses;
  sum.fetch_bytes += st.fetch_bytes;
  sum.fetch_evictions += st.fetch_evictions;
  sum.fetch_refused += st.fetch_refused;
  sum.resident_bytes += st.resident_bytes;
  sum.fetch_steps += st.fetch_steps;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> d(0, n_vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

// Time one prefill of n tokens.
Result<double> time_prefill(LoadedModel& m, int n, std::mt19937& rng) {
  SeqKv seq;
  SeqKv* seqs[] = {&seq};
  Batch b;
  auto toks = random_tokens(n, m.model().config().n_vocab, rng);
  for (int i = 0; i < n; ++i) b.add(toks[i], i, 0, i == n - 1);
  auto t0 = Clock::now();
  Status s = m.model().forward(b, seqs, *m.kv, *m.pool).status();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  m.kv->release(seq);
  HS_RETURN_IF_ERROR(s);
  return n / secs;
}

// Hybrid models: the seed state (see the file comment), a real prefill of kSeedStateTokens
// random tokens saved as checkpoint kSeedStateKey of m.states.
Status make_seed_state(LoadedModel& m, std::mt19937& rng) {
  SeqKv seq;
  SeqKv* seqs[] = {&seq};
  Batch b;
  auto toks = random_tokens(kSeedStateTokens, m.model().config().n_vocab, rng);
  for (int i = 0; i < kSeedStateTokens; ++i) b.add(toks[i], i, 0, i == kSeedStateTokens - 1);
  Status s = m.model().forward(b, seqs, *m.kv, *m.pool).status();
  if (s.is_ok()) s = m.states->save(seq, kSeedStateKey).status();
  m.kv->release(seq);
  return s;
}

// `seq` (new) as `depth` positions of synthetic context with pages for `extra` more: random KV
// (m.kv->fill_random), the sketch / Quest metadata of those keys (a sparse runtime attached),
// and (hybrid, depth > 0) the seed state restored into the sequence's slot. On error the
// caller releases seq.
Status synthetic_context(LoadedModel& m, SeqKv& seq, int depth, int extra) {
  HS_RETURN_IF_ERROR(m.kv->reserve(seq, depth + extra));
  if (m.states && depth > 0) HS_RETURN_IF_ERROR(m.states->restore(kSeedStateKey, seq));
  seq.n_tokens = depth;
  if (sparse_of(m)) HS_RETURN_IF_ERROR(m.model().rebuild_sparse_metadata(*m.kv, seq, depth));
  return Status::ok();
}

// Time n decode steps after `depth` positions of synthetic context.
Result<double> time_decode(LoadedModel& m, int n, int depth, std::mt19937& rng) {
  SeqKv seq;
  SeqKv* seqs[] = {&seq};
  if (Status st = synthetic_context(m, seq, depth, n); !st.is_ok()) {
    m.kv->release(seq);
    return st;
  }
  if (SparseRuntime* sp = sparse_of(m)) sp->reset_stats();
  const int n_vocab = m.model().config().n_vocab;
  std::uniform_int_distribution<int32_t> d(0, n_vocab - 1);
  // Random token ids drawn before the clock starts: the loop times forward steps (their logits
  // copied to the host), not sampling, as llama-bench does.
  std::vector<int32_t> toks(static_cast<size_t>(n));
  for (auto& t : toks) t = d(rng);
  auto t0 = Clock::now();
  Status s;
  for (int i = 0; i < n && s.is_ok(); ++i) {
    Batch b;
    b.add(toks[i], seq.n_tokens, 0, true);
    s = m.model().forward(b, seqs, *m.kv, *m.pool).status();
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  m.kv->release(seq);
  HS_RETURN_IF_ERROR(s);
  return n / secs;
}

struct BatchedTiming {
  double prefill_tps = 0;  // 0: synthetic context
  double decode_tps = 0;   // aggregate
  SparseStats sparse;      // the decode steps' sparse counters (a sparse runtime attached)
};

// NPL sequences of NPP tokens each, then `gen` steps of one token per sequence (--batched).
Result<BatchedTiming> time_batched(LoadedModel& m, int npl, int npp, int gen, bool synthetic, int ubatch,
                                   std::mt19937& rng) {
  std::vector<SeqKv> seq(static_cast<size_t>(npl));
  std::vector<SeqKv*> ptrs;
  for (auto& s : seq) ptrs.push_back(&s);
  auto release = [&] {
    for (auto& s : seq) m.kv->release(s);
  };
  const int n_vocab = m.model().config().n_vocab;
  std::uniform_int_distribution<int32_t> d(0, n_vocab - 1);
  BatchedTiming out;
  Status st;
  SparseRuntime* sp = sparse_of(m);
  if (synthetic) {  // as the depth tests make it
    for (auto& s : seq) {
      st = synthetic_context(m, s, npp, gen);
      if (!st.is_ok()) break;
    }
  } else {  // prompts back to back, in steps of up to ubatch tokens
    const auto t0 = Clock::now();
    Batch b;
    for (int s = 0; s < npl && st.is_ok(); ++s)
      for (int i = 0; i < npp && st.is_ok(); ++i) {
        b.add(d(rng), i, s, i == npp - 1);
        if (b.size() == ubatch || (s == npl - 1 && i == npp - 1)) {
          st = m.model().forward(b, ptrs, *m.kv, *m.pool).status();
          b.clear();
        }
      }
    out.prefill_tps = static_cast<double>(npl) * npp / std::chrono::duration<double>(Clock::now() - t0).count();
  }
  if (!st.is_ok()) {
    release();
    return st;
  }
  // Token ids drawn before the clock starts: steps are timed with their logits copied to the
  // host, without sampling (as llama-batched-bench).
  std::vector<int32_t> tok(static_cast<size_t>(npl) * gen);
  for (auto& t : tok) t = d(rng);
  if (sp) sp->reset_stats();  // the decode steps' counters only
  const auto t0 = Clock::now();
  for (int step = 0; step < gen && st.is_ok(); ++step) {
    Batch b;
    for (int s = 0; s < npl; ++s) b.add(tok[static_cast<size_t>(step) * npl + s], seq[s].n_tokens, s, true);
    st = m.model().forward(b, ptrs, *m.kv, *m.pool).status();
  }
  out.decode_tps = static_cast<double>(npl) * gen / std::chrono::duration<double>(Clock::now() - t0).count();
  if (sp) out.sparse = sp->stats();
  release();
  HS_RETURN_IF_ERROR(st);
  return out;
}

int run_bench(BenchOptions& o) {
  std::erase_if(o.pp, [](int n) { return n <= 0; });  // -p 0: no prefill test
  std::erase_if(o.tg, [](int n) { return n <= 0; });
  int max_depth = 0, max_tg = 0, max_pp = 0;
  for (int d : o.depths) max_depth = std::max(max_depth, d);
  for (int t : o.tg) max_tg = std::max(max_tg, t);
  for (int p : o.pp) max_pp = std::max(max_pp, p);
  o.model.ctx_size = std::max({o.model.ctx_size, max_depth + max_tg + 16, max_pp + 16, kSeedStateTokens + 16});
  struct BatchedTest {
    int npl = 0, npp = 0;  // sequences, prompt tokens each
  };
  std::vector<BatchedTest> batched;  // --batched, checked before the model loads
  for (const std::string& spec : o.batched) {
    BatchedTest t;
    if (std::sscanf(spec.c_str(), "%d:%d", &t.npl, &t.npp) != 2 || t.npl < 1 || t.npp < 1 || t.npl > 4096) {
      fmt::print(stderr, "error: --batched {}: want NPL:NPP (sequences:prompt tokens), e.g. 64:512\n", spec);
      return 1;
    }
    batched.push_back(t);
    // Pages for every sequence of the largest test.
    o.model.ctx_size =
        static_cast<int>(std::max<int64_t>(o.model.ctx_size, int64_t{t.npl} * (t.npp + o.batched_gen + 32)));
  }
  auto m = load_model(o.model);
  if (!m.is_ok()) {
    fmt::print(stderr, "error: {}\n", m.status().message());
    return 1;
  }
  LanguageModel& model = m->model();
  std::mt19937 rng(1234);
  if (m->hybrid) {
    // A live state slot for each sequence of the largest test, and the seed state's checkpoint.
    int32_t slots = kDefaultResidentSeqs;
    for (const BatchedTest& t : batched) slots = std::max(slots, t.npl);
    Status st = remake_state_pool(*m, slots, 1);
    if (st.is_ok()) st = make_seed_state(*m, rng);
    if (!st.is_ok()) {
      fmt::print(stderr, "error: recurrent state for {} sequences: {}\n", slots, st.message());
      return 1;
    }
  }
  model.backend().set_matmul_precision(*parse_matmul_precision(o.matmul));
  // Synthetic context: random K/V values in every page (see the file comment).
  m->kv->fill_random(rng);
  std::vector<Measurement> results;
  // Warm-up (page faults of the mapped weights, thread start; on a GPU the first prefill's
  // cuBLAS heuristics and kernel loads): a short decode and one prefill of each size.
  (void)time_decode(*m, 4, 0, rng);
  for (int n : o.pp) (void)time_prefill(*m, n, rng);
  for (int n : o.pp) {
    Measurement r{fmt::format("pp{}", n), n, 0, {}};
    for (int i = 0; i < o.repetitions; ++i) {
      auto v = time_prefill(*m, n, rng);
      if (!v.is_ok()) { fmt::print(stderr, "error: {}\n", v.status().message()); return 1; }
      r.tps.push_back(*v);
    }
    results.push_back(r);
  }
  const ModelConfig& c = model.config();
  const int64_t weight_bytes = model.weight_bytes();
  const int64_t expert_bytes = expert_weight_bytes(model.file());  // MoE: read as routed
  const double state_step_bytes = state_bytes_per_step(c);         // per sequence
  SparseRuntime* sparse = m->sparse.get();
  if (o.sparse_compare && !sparse)
    fmt::print(stderr, "warning: --sparse-compare without a sparse runtime (--sparse sketch|quest): dense only\n");
  for (int n : o.tg)
    for (int depth : o.depths) {
      std::vector<SparseRuntime*> runs{sparse};
      if (sparse && o.sparse_compare) runs = {nullptr, sparse};
      for (SparseRuntime* rt : runs) {
        set_sparse(*m, rt);
        Measurement r{depth ? fmt::format("tg{} @ d{}", n, depth) : fmt::format("tg{}", n), n, depth, {}};
        r.attention = rt ? sparse_mode_name(rt->mode()) : "dense";
        SparseStats sum;
        for (int i = 0; i < o.repetitions; ++i) {
          auto v = time_decode(*m, n, depth, rng);
          if (!v.is_ok()) { fmt::print(stderr, "error: {}\n", v.status().message()); return 1; }
          r.tps.push_back(*v);
          if (rt) add_stats(sum, rt->stats());  // time_decode reset the counters before its steps
        }
        // Bytes per step, averaged over the test's steps (each repetition runs the same ones).
        double dense_part = 0;
        for (int i = 0; i < n; ++i) {
          const int32_t n_keys = depth + i + 1;
          dense_part += dense_kv_bytes(c, m->kv->geometry(), n_keys,
                                       [&](int l) { return rt && rt->layer_sparse(l) && rt->use_sparse(n_keys); });
        }
        const double steps = static_cast<double>(n) * o.repetitions;
        r.weight_bytes = decode_weight_bytes(c, weight_bytes, expert_bytes, 1);
        r.kv_bytes = dense_part / n + sum.kv_bytes / steps;
        r.state_bytes = state_step_bytes;
        r.set_sparse_figures(sum, steps, rt != nullptr);
        results.push_back(r);
      }
      set_sparse(*m, sparse);
    }

  for (const auto [npl, npp] : batched) {
    std::vector<SparseRuntime*> runs{sparse};
    if (sparse && o.sparse_compare) runs = {nullptr, sparse};
    for (SparseRuntime* rt : runs) {
      set_sparse(*m, rt);
      const bool synthetic = npp > o.batched_synthetic_above;
      Measurement r{fmt::format("batched {}x({}+{})", npl, npp, o.batched_gen), o.batched_gen, npp,
                    rt ? sparse_mode_name(rt->mode()) : "dense"};
      r.n_seqs = npl;
      double prefill = 0;
      SparseStats sum;
      for (int i = 0; i < o.repetitions; ++i) {
        auto v = time_batched(*m, npl, npp, o.batched_gen, synthetic, o.ubatch, rng);
        if (!v.is_ok()) { fmt::print(stderr, "error: {}: {}\n", r.test, v.status().message()); return 1; }
        r.tps.push_back(v->decode_tps);
        prefill += v->prefill_tps / o.repetitions;
        add_stats(sum, v->sparse);
      }
      r.prefill_tps = prefill;
      r.weight_bytes = decode_weight_bytes(c, weight_bytes, expert_bytes, npl);
      r.state_bytes = state_step_bytes * npl;
      // Bytes per step, all sequences: the dense layers' (or every layer's) KV plus what the
      // sparse attentions read (selected KV, sketches).
      double kv = 0;
      for (int i = 0; i < o.batched_gen; ++i) {
        const int32_t n_keys = npp + i + 1;
        kv += dense_kv_bytes(c, m->kv->geometry(), n_keys,
                             [&](int l) { return rt && rt->layer_sparse(l) && rt->use_sparse(n_keys); });
      }
      const double steps = static_cast<double>(o.batched_gen) * o.repetitions;
      r.kv_bytes = kv / o.batched_gen * npl + sum.kv_bytes / steps;
      r.set_sparse_figures(sum, steps, rt != nullptr);
      results.push_back(r);
    }
    set_sparse(*m, sparse);
  }

  // Roofline from the peaks measured now, on this device.
  std::optional<DevicePeaks> peaks;
  if (o.peaks && model.device() != Device::kCpu) {
    auto p = model.backend().measure_peaks();
    if (p.is_ok()) peaks = *p;
    else fmt::print(stderr, "warning: no roofline: {}\n", p.status().message());
  }
  if (peaks)
    for (auto& r : results) {
      const bool decode = r.test.rfind("pp", 0) != 0;
      if (decode) {  // one step: every sequence one token
        r.ideal_tps =
            r.n_seqs * peaks->memory_bytes_per_s / (r.weight_bytes + r.score_bytes + r.kv_bytes + r.state_bytes);
        r.bound = "memory";
      } else {
        r.ideal_tps = r.n_tokens * peaks->matmul_flops_per_s / step_flops(c, r.n_tokens, 1, 0);
        r.bound = "matmul";
      }
    }

  const std::string backend = model.backend().name();
  const bool on_cpu = model.device() == Device::kCpu;
  // What the synthetic context is (fill_random leaves a device backend's pages zeroed).
  const std::string kv_values = on_cpu                          ? "random KV"
                                : o.model.kv_tier == "host" ? "KV left zeroed in the pinned host pages"
                                                            : "KV left zeroed on the device";
  const std::string depth_context =
      m->hybrid ? fmt::format("synthetic, no D-token prefill: {} on the {} full-attention layers, and the recurrent "
                              "state of the {} linear layers restored from one real {}-token prefill",
                              kv_values, c.n_attn_layers(), c.n_layer - c.n_attn_layers(), kSeedStateTokens)
                : fmt::format("synthetic, no D-token prefill: {}", kv_values);
  fmt::print("\nbackend: {}\n", backend);
  if (peaks)
    fmt::print("peaks (measured now): memory {:.0f} GB/s, 16-bit matmul {:.0f} TFLOP/s ({})\n",
               peaks->memory_bytes_per_s / 1e9, peaks->matmul_flops_per_s / 1e12, peaks->how);
  fmt::print("depth context (tg @ d, synthetic batched): {}\n", depth_context);
  // The CUDA host tier's knob for the hit rate (zeroed synthetic KV makes every step select the
  // same chunks: a best case), so a run says which hit rate it imposed.
  const char* forced = o.model.kv_tier == "host" ? std::getenv("HS_CUDA_HOT_FORCE_MISS") : nullptr;
  if (forced) fmt::print("forced misses: HS_CUDA_HOT_FORCE_MISS={} of the selected pieces\n", forced);
  if (m->hybrid)
    fmt::print("recurrent state: {:.2f} MiB per sequence, read and written once per decode step{}\n",
               recurrent_state_bytes(c) / 1048576.0,
               c.is_moe() ? "; MB/step weights: the routed experts' expected share (uniform routing)" : "");
  // A device that selects itself (CUDA): what it keeps for the sparse path, against the dense
  // bf16 KV of the whole pool those sketches cover (the "device KV <= 10 % of dense").
  nlohmann::ordered_json device_sparse_memory;
  if (const SparseRuntime* sp = sparse_of(*m); sp && sp->device_sketch_bytes() > 0) {
    const KvGeometry& kg = m->kv->geometry();
    const int64_t pool_tokens = static_cast<int64_t>(m->kv->pool().n_blocks()) * kg.page_tokens;
    const double dense_bf16 = static_cast<double>(pool_tokens) * kg.n_layer * kg.n_kv_heads * kg.head_dim * 2 * 2;
    const double dev = static_cast<double>(sp->device_sketch_bytes() + sp->device_hot_set_bytes());
    fmt::print("device sparse memory: sketches {:.2f} GiB + hot set {:.2f} GiB = {:.2f} GiB for a KV pool of {} tokens "
               "(dense bf16 KV {:.2f} GiB): {:.1f} %\n",
               sp->device_sketch_bytes() / 1073741824.0, sp->device_hot_set_bytes() / 1073741824.0, dev / 1073741824.0,
               pool_tokens, dense_bf16 / 1073741824.0, 100.0 * dev / dense_bf16);
    device_sparse_memory = {{"sketch_bytes", sp->device_sketch_bytes()},
                            {"hot_set_bytes", sp->device_hot_set_bytes()},
                            {"pool_tokens", pool_tokens},
                            {"dense_bf16_kv_bytes", dense_bf16},
                            {"fraction_of_dense_bf16", dev / dense_bf16}};
  }
  fmt::print("\n| model | size | device | threads | simd | matmul | kv | test | attention | t/s | roofline | "
             "MB/step weights | MB/step sketch | MB/step KV | MB/step state | fetch MB/step | hit rate |\n"
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  // "cuda x2": the model split over two ranks (--tensor-parallel-size).
  const std::string device_label = model.tensor_parallel_size() == 1
                                       ? std::string(device_name(model.device()))
                                       : fmt::format("{} x{}", device_name(model.device()), model.tensor_parallel_size());
  nlohmann::ordered_json j;
  j["model"] = model_display_name(o.model);
  j["arch"] = c.arch_name;
  j["weight_bytes"] = weight_bytes;
  j["device"] = device_name(model.device());
  j["tensor_parallel"] = model.tensor_parallel_size();
  j["backend"] = backend;
  j["threads"] = m->pool->n_threads();
  j["simd"] = cpu::simd_level();
  j["matmul"] = on_cpu ? o.matmul : "16-bit (f16 for GGUF blocks)";
  j["kv_cache_dtype"] = kv_dtype_name(m->kv->geometry().dtype);
  j["kv_tier"] = o.model.kv_tier;
  if (!device_sparse_memory.is_null()) j["device_sparse_memory"] = device_sparse_memory;
  if (forced) j["forced_miss_fraction"] = std::strtod(forced, nullptr);
  if (const HotChunks* hot = model.hot_chunks())
    j["device_tier"] = {{"budget_bytes", o.model.device_kv_budget}, {"bytes", hot->bytes()},
                        {"slots_per_layer_head", hot->slots_per_set()}, {"piece_bytes", hot->piece_bytes()}};
  j["depth_context"] = depth_context;
  if (m->hybrid) {
    j["state_bytes_per_sequence"] = recurrent_state_bytes(c);
    j["kv_layers"] = c.n_attn_layers();
  }
  if (c.is_moe())
    j["expert_weight_bytes"] = expert_bytes;  // bytes_per_step.weights: the rest + their routed share
  if (peaks)
    j["peaks"] = {{"memory_bytes_per_second", peaks->memory_bytes_per_s},
                  {"matmul_flops_per_second", peaks->matmul_flops_per_s}, {"how", peaks->how}};
  j["results"] = nlohmann::ordered_json::array();
  for (const auto& r : results) {
    const bool decode = r.test.rfind("pp", 0) != 0;
    const std::string roof =
        r.ideal_tps > 0 ? fmt::format("{:.0f} % of {:.0f} ({})", 100.0 * r.mean() / r.ideal_tps, r.ideal_tps, r.bound)
                        : std::string("-");
    const std::string test = r.n_seqs > 1 || r.test.rfind("batched", 0) == 0
                                 ? fmt::format("{}{}", r.test, r.prefill_tps > 0 ? fmt::format(" (prefill {:.0f} t/s)", r.prefill_tps)
                                                                                  : std::string(" (synthetic context)"))
                             : r.depth > 0 ? r.test + " (synthetic context)"
                                           : r.test;
    fmt::print("| {} | {:.1f} MiB | {} | {} | {} | {} | {} | {} | {} | {:.2f} ± {:.2f} | {} | {} | {} | {} | {} | {} | {} |\n",
               c.arch_name, weight_bytes / 1048576.0, device_label, m->pool->n_threads(),
               on_cpu ? cpu::simd_level() : "-", on_cpu ? o.matmul : "f16/bf16",
               kv_dtype_name(m->kv->geometry().dtype), test, r.attention, r.mean(), r.stddev(), roof,
               decode ? fmt::format("{:.1f}", r.weight_bytes / 1e6) : "-",
               decode ? fmt::format("{:.1f}", r.score_bytes / 1e6) : "-",
               decode ? fmt::format("{:.1f}", r.kv_bytes / 1e6) : "-",
               decode && m->hybrid ? fmt::format("{:.1f}", r.state_bytes / 1e6) : "-",
               r.tiered ? fmt::format("{:.2f}", r.fetch_bytes / 1e6) : "-",
               r.tiered ? fmt::format("{:.3f}", r.hit_rate()) : "-");
    nlohmann::ordered_json jr{{"test", r.test}, {"n_tokens", r.n_tokens}, {"depth", r.depth},
                              {"attention", r.attention}, {"tokens_per_second", r.mean()}, {"stddev", r.stddev()},
                              {"samples", r.tps}, {"bytes_per_step", {{"weights", r.weight_bytes},
                                                                      {"sketch", r.score_bytes},
                                                                      {"kv", r.kv_bytes},
                                                                      {"state", r.state_bytes},
                                                                      {"fetch", r.fetch_bytes}}},
                              {"keys_selected_share", r.keys_selected_share}};
    if (r.test.rfind("batched", 0) == 0) {
      jr["sequences"] = r.n_seqs;
      jr["prefill_tokens_per_second"] = r.prefill_tps > 0 ? nlohmann::ordered_json(r.prefill_tps) : nlohmann::ordered_json();
      jr["context"] = r.prefill_tps > 0 ? "prefilled" : "synthetic";
    }
    if (r.ideal_tps > 0)
      jr["roofline"] = {{"bound", r.bound}, {"ideal_tokens_per_second", r.ideal_tps},
                        {"fraction", r.mean() / r.ideal_tps}};
    if (r.tiered)
      jr["device_tier"] = {{"hits", r.fetch_hits}, {"misses", r.fetch_misses}, {"evictions", r.fetch_evictions},
                           {"refused", r.fetch_refused}, {"hit_rate", r.hit_rate()},
                           {"fetch_bytes_per_step", r.fetch_bytes},
                           {"resident_bytes_per_step", r.resident_bytes}};
    j["results"].push_back(jr);
  }
  if (const std::string prof = model.backend().profile_report(); !prof.empty()) fmt::print("\n{}", prof);
  fmt::print("\n{}\n", j.dump());
  if (!o.json_path.empty()) std::ofstream(o.json_path) << j.dump(2) << "\n";
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "In-process speed test (llama-bench style: ppN, tgN, tgN @ depth)");
  add_model_options(cmd, o->model);
  cmd->add_option("-p,--n-prompt", o->pp, "Prefill test sizes")->capture_default_str();
  cmd->add_option("-n,--n-gen", o->tg, "Decode test sizes")->capture_default_str();
  cmd->add_option("-d,--n-depth", o->depths, "Context depths for the decode tests")->capture_default_str();
  cmd->add_option("-r,--repetitions", o->repetitions, "Repetitions per test")->check(CLI::Range(1, 100));
  cmd->add_option("--json", o->json_path, "Also write the JSON result to this file");
  cmd->add_option("--matmul", o->matmul,
                  "Activation precision: exact (float32), int8x2 (8-bit + residual), int8 (llama.cpp style)")
      ->check(CLI::IsMember({"exact", "int8x2", "int8"}))
      ->capture_default_str();
  cmd->add_option("--batched", o->batched,
                  "Aggregate decode tests NPL:NPP (llama-batched-bench): NPL sequences of NPP prompt tokens, then "
                  "--batched-gen tokens each, decoded together (repeatable, e.g. --batched 1:512 --batched 64:512)");
  cmd->add_option("--batched-gen", o->batched_gen, "Tokens each sequence decodes in a --batched test")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--batched-synthetic-above", o->batched_synthetic_above,
                  "--batched prompts longer than this are synthetic context (random KV; hybrids: and a seed "
                  "recurrent state), not prefilled")
      ->capture_default_str();
  cmd->add_option("--ubatch", o->ubatch, "Most tokens per prefill step of a --batched test")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("!--no-peaks", o->peaks, "Skip measuring the device's copy and matmul rates (no roofline column)");
  cmd->add_flag("--sparse-compare", o->sparse_compare,
                "Run each decode test dense and then sparse (needs --sparse sketch|quest or a sketch file)");
  cmd->callback([o, &run] { run = [o] { return run_bench(*o); }; });
}

}  // namespace hs::app
