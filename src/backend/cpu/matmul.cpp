// backend/cpu/matmul.cpp — the matmul driver: validation, SIMD dispatch, activation
// quantization, and the split of the output into per-thread rectangles; plus get_rows.
//
// Work split: a task is one (row chunk, token chunk) rectangle. Matvec: one big contiguous
// row chunk per thread (7/8 of the rows) plus small ones for balance, so each thread reads
// one long stream. Several tokens: row chunks of ~64 KiB of weight x token chunks of 64,
// numbered row-chunk-major so a thread claiming consecutive tasks keeps its row chunk in
// L2 while it walks the token chunks. matmul_multi concatenates the task lists of weights
// that share one input: one quantization per activation format and one dispatch in all.
// Cost besides the kernels: quantizing n_tokens rows (in parallel when large) and at most
// two pool dispatches.
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "backend/cpu/matmul_kernels.h"
#include "core/quant.h"

namespace hs::cpu {
namespace {

using detail::KernelSet;
using detail::TileArgs;
using detail::TileFn;

enum class ActKind { kFloat, kQ8, kQ8K, kQ8x4 };

bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
}

bool cpu_has_avx512() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
}

struct KernelTables {
  KernelSet level[3];  // indexed by SimdLevel
  KernelTables() {
    detail::fill_kernels_scalar(level[0]);
    level[1] = level[0];
    detail::fill_kernels_avx2_q32(level[1]);
    detail::fill_kernels_avx2_qk(level[1]);
    level[2] = level[1];
    detail::fill_kernels_avx512_q32(level[2]);
    detail::fill_kernels_avx512_qk(level[2]);
  }
};

const KernelTables& tables() {
  static const KernelTables t;
  return t;
}

SimdLevel pick_level() {
  SimdLevel best = SimdLevel::kScalar;
  if (cpu_has_avx512()) best = SimdLevel::kAvx512;
  else if (cpu_has_avx2()) best = SimdLevel::kAvx2;
  const char* env = std::getenv("HS_SIMD");
  if (env == nullptr || *env == '\0') return best;
  const std::string_view v(env);
  SimdLevel want;
  if (v == "scalar") want = SimdLevel::kScalar;
  else if (v == "avx2") want = SimdLevel::kAvx2;
  else if (v == "avx512") want = SimdLevel::kAvx512;
  else {
    std::fprintf(stderr, "hindsight: ignoring HS_SIMD=%s (want scalar, avx2 or avx512)\n", env);
    return best;
  }
  if (static_cast<int>(want) > static_cast<int>(best)) {
    std::fprintf(stderr, "hindsight: HS_SIMD=%s is not available on this CPU, using %s\n", env,
                 simd_level_name(best));
    return best;
  }
  return want;
}

struct TypeEntry {
  TileFn tile;
  ActKind act;
};

// The kernel and activation format for `type`, or tile == nullptr when unsupported.
TypeEntry entry_for(const KernelSet& ks, DType type) {
  switch (type) {
    case DType::F32: return {ks.f32, ActKind::kFloat};
    case DType::F16: return {ks.f16, ActKind::kFloat};
    case DType::BF16: return {ks.bf16, ActKind::kFloat};
    case DType::Q4_0: return {ks.q4_0, ks.nibble_x4 ? ActKind::kQ8x4 : ActKind::kQ8};
    case DType::Q4_1: return {ks.q4_1, ks.nibble_x4 ? ActKind::kQ8x4 : ActKind::kQ8};
    case DType::Q5_0: return {ks.q5_0, ks.nibble_x4 ? ActKind::kQ8x4 : ActKind::kQ8};
    case DType::Q5_1: return {ks.q5_1, ks.nibble_x4 ? ActKind::kQ8x4 : ActKind::kQ8};
    case DType::Q8_0: return {ks.q8_0, ActKind::kQ8};
    case DType::Q4_K: return {ks.q4_k, ActKind::kQ8K};
    case DType::Q5_K: return {ks.q5_k, ActKind::kQ8K};
    case DType::Q6_K: return {ks.q6_k, ActKind::kQ8K};
    default: return {nullptr, ActKind::kFloat};
  }
}

Status validate(const WeightView& w, std::string_view op) {
  const auto info = dtype_info(w.type);
  if (!info) {
    return make_error(StatusCode::kUnsupported, "{}: unknown weight type id {}", op,
                      static_cast<uint32_t>(w.type));
  }
  if (entry_for(tables().level[0], w.type).tile == nullptr) {
    return make_error(StatusCode::kUnsupported, "{}: weight type {} is not supported", op,
                      info->name);
  }
  if (w.n_in <= 0 || w.n_out <= 0) {
    return make_error(StatusCode::kInvalidArgument, "{}: bad weight shape n_in={} n_out={}",
                      op, w.n_in, w.n_out);
  }
  if (w.n_in % info->block_elems != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "{}: n_in={} is not a multiple of the {} block size {}", op, w.n_in,
                      info->name, info->block_elems);
  }
  if (w.data == nullptr) {
    return make_error(StatusCode::kInvalidArgument, "{}: weight data is null", op);
  }
  return Status::ok();
}

// Per-thread scratch for the quantized activations of one call (grown, never shrunk).
struct ActScratch {
  std::vector<int8_t> qs;      // [n_tokens][n_in]
  std::vector<float> d;        // [n_tokens][n_in / block]
  std::vector<float> s;        // [n_tokens][n_in / 32]     (32-wide types)
  std::vector<int16_t> bsums;  // [n_tokens][n_in / 16]     (K-quants)
};

template <typename T>
T* grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// Quantizes x [n_tokens][n_in] into `sc`, fills the activation pointers of `args`. With
// mult = 2 (kInt8x2) token t becomes two rows: 2t = q(x_t), 2t+1 = the residual
// x_t - dequant(row 2t) quantized with the scales of row 2t divided by 256.
void quantize_acts(const KernelSet& ks, ActKind kind, const float* x, int64_t n_in,
                   int64_t n_tokens, int mult, ActScratch& sc, TileArgs& args,
                   ThreadPool& pool) {
  if (kind == ActKind::kFloat) {
    args.x = x;
    return;
  }
  const bool k = kind == ActKind::kQ8K;
  const int64_t nb = n_in / (k ? detail::kQ8KBlock : detail::kQ8Block);
  const int64_t n_rows = n_tokens * mult;
  int8_t* qs = grow(sc.qs, n_rows * n_in);
  float* d = grow(sc.d, n_rows * nb);
  float* s = k ? nullptr : grow(sc.s, n_rows * nb);
  int16_t* bsums = k ? grow(sc.bsums, n_rows * (n_in / detail::kQ8KSub)) : nullptr;
  // parent: the row whose scales / 256 a residual row uses (null for a first row).
  auto quantize_row = [&](const float* xr, int64_t row, float* resid, const float* parent) {
    if (k) {
      ks.quantize_q8k(xr, n_in, qs + row * n_in, d + row * nb,
                      bsums + row * (n_in / detail::kQ8KSub), resid, parent);
    } else if (kind == ActKind::kQ8x4) {
      ks.quantize_q8_x4(xr, n_in, qs + row * n_in, d + row * nb, s + row * nb, resid, parent);
    } else {
      ks.quantize_q8(xr, n_in, qs + row * n_in, d + row * nb, s + row * nb, resid, parent);
    }
  };
  auto run = [&](int64_t t0, int64_t t1, int) {
    thread_local std::vector<float> resid;  // [n_in]
    float* r = mult == 2 ? grow(resid, n_in) : nullptr;
    for (int64_t t = t0; t < t1; ++t) {
      quantize_row(x + t * n_in, t * mult, r, nullptr);
      if (mult == 2) quantize_row(r, 2 * t + 1, nullptr, d + 2 * t * nb);
    }
  };
  // Quantizing costs ~1 ns per element; below ~64K elements a dispatch is not worth it.
  if (n_tokens * n_in < (int64_t{1} << 16)) {
    run(0, n_tokens, 0);
  } else {
    pool.parallel_for(n_tokens, run);
  }
  args.qs = qs;
  args.d = d;
  args.s = s;
  args.bsums = bsums;
}

// One weight's share of a (multi-)matmul: its kernel, arguments and chunking.
struct Part {
  TileFn tile = nullptr;
  TileArgs args;
  // Row chunks: n_big chunks of big_rows, then chunks of row_chunk rows (the last shorter).
  int64_t n_big = 0, big_rows = 0, row_chunk = 0, n_row_chunks = 0;
  int64_t tok_chunk = 0, n_tok_chunks = 0;
  int64_t first_task = 0;  // tasks [first_task, first_task + n_row_chunks * n_tok_chunks)

  int64_t row_begin(int64_t c) const {
    const int64_t r = c < n_big ? c * big_rows : n_big * big_rows + (c - n_big) * row_chunk;
    return std::min(r, args.n_out);
  }
};

constexpr int kMaxParts = 8;

Status matmul_impl(SimdLevel level, ActPrecision precision, const WeightView* ws, int n_ws,
                   const float* x, int64_t n_tokens, float* const* ys, ThreadPool& pool) {
  if (n_ws < 1 || n_ws > kMaxParts) {
    return make_error(StatusCode::kInvalidArgument, "matmul: {} weights (want 1..{})", n_ws,
                      kMaxParts);
  }
  for (int i = 0; i < n_ws; ++i) {
    HS_RETURN_IF_ERROR(validate(ws[i], "matmul"));
    if (ws[i].n_in != ws[0].n_in) {
      return make_error(StatusCode::kInvalidArgument,
                        "matmul: weights sharing an input need one n_in ({} vs {})",
                        ws[i].n_in, ws[0].n_in);
    }
  }
  if (n_tokens < 0) {
    return make_error(StatusCode::kInvalidArgument, "matmul: negative n_tokens {}", n_tokens);
  }
  if (n_tokens == 0) return Status::ok();
  if (x == nullptr) return make_error(StatusCode::kInvalidArgument, "matmul: null activation");
  for (int i = 0; i < n_ws; ++i) {
    if (ys[i] == nullptr) return make_error(StatusCode::kInvalidArgument, "matmul: null output");
  }
  const KernelSet& ks = tables().level[static_cast<int>(level)];
  const int64_t n_in = ws[0].n_in;
  const int quant_mult = precision == ActPrecision::kInt8x2 ? 2 : 1;

  // Quantize x once per activation format the weights need.
  thread_local ActScratch scratch[4];  // by ActKind (kFloat unused)
  TileArgs acts[4];
  bool done[4] = {false, false, false, false};
  Part parts[kMaxParts];
  const int64_t n_threads = pool.n_threads();
  auto round4 = [](int64_t v) { return std::max<int64_t>(4, (v + 3) / 4 * 4); };
  int64_t n_tasks = 0;
  for (int i = 0; i < n_ws; ++i) {
    const TypeEntry e = entry_for(ks, ws[i].type);
    const int k = static_cast<int>(e.act);
    Part& p = parts[i];
    const int act_rows = e.act == ActKind::kFloat ? 1 : quant_mult;  // per token
    if (!done[k]) {
      quantize_acts(ks, e.act, x, n_in, n_tokens, act_rows, scratch[k], acts[k], pool);
      done[k] = true;
    }
    const int64_t n_out = ws[i].n_out;
    p.tile = e.tile;
    p.args = acts[k];
    p.args.w = static_cast<const uint8_t*>(ws[i].data);
    p.args.row_bytes = weight_row_bytes(ws[i].type, n_in);
    p.args.n_in = n_in;
    p.args.n_out = n_out;
    p.args.y = ys[i];
    p.args.x2 = act_rows == 2;
    p.args.stream = n_tokens <= 4;
    // Matvec: each thread first takes one big contiguous chunk (7/8 of the rows split
    // evenly: one unbroken stream per thread, which the prefetchers need to get near the
    // DRAM bandwidth; 8 interleaved chunks per thread measured 25-35% slower from DRAM),
    // the last 1/8 goes in small chunks to whoever is free (balance on a shared machine).
    // Several tokens: uniform chunks of ~64 KiB of weight, so a chunk stays in L2 across
    // the token chunks.
    if (n_tokens <= 4) {
      p.big_rows = round4(n_out * 7 / (8 * n_threads));
      p.n_big = std::min<int64_t>(n_threads, n_out / p.big_rows);
      p.row_chunk = round4((n_out - p.n_big * p.big_rows + 2 * n_threads - 1) / (2 * n_threads));
      p.tok_chunk = n_tokens;
    } else {
      p.row_chunk = round4((int64_t{64} << 10) / std::max<int64_t>(1, p.args.row_bytes));
      p.row_chunk = std::min(p.row_chunk, round4((n_out + 2 * n_threads - 1) / (2 * n_threads)));
      p.tok_chunk = 64;
    }
    p.n_row_chunks = p.n_big + (n_out - p.n_big * p.big_rows + p.row_chunk - 1) / p.row_chunk;
    p.n_tok_chunks = (n_tokens + p.tok_chunk - 1) / p.tok_chunk;
    p.first_task = n_tasks;
    n_tasks += p.n_row_chunks * p.n_tok_chunks;
  }

  pool.parallel_for(n_tasks, 1, [&](int64_t b, int64_t end, int) {
    int i = 0;
    for (int64_t task = b; task < end; ++task) {
      while (i + 1 < n_ws && task >= parts[i + 1].first_task) ++i;
      const Part& p = parts[i];
      const int64_t local = task - p.first_task;
      const int64_t rc = local / p.n_tok_chunks, tc = local % p.n_tok_chunks;
      const int64_t r0 = p.row_begin(rc), r1 = p.row_begin(rc + 1);
      const int64_t t0 = tc * p.tok_chunk;
      p.tile(p.args, r0, r1, t0, std::min(n_tokens, t0 + p.tok_chunk));
    }
  });
  return Status::ok();
}

std::atomic<int> g_default_precision{-1};  // -1: not chosen yet

ActPrecision precision_from_env() {
  const char* env = std::getenv("HS_MATMUL_PRECISION");
  if (env != nullptr && std::string_view(env) == "int8") return ActPrecision::kInt8;
  if (env != nullptr && *env != '\0' && std::string_view(env) != "int8x2") {
    std::fprintf(stderr, "hindsight: ignoring HS_MATMUL_PRECISION=%s (want int8 or int8x2)\n", env);
  }
  return ActPrecision::kInt8x2;
}

}  // namespace

int64_t weight_row_bytes(DType type, int64_t n_in) {
  const auto info = dtype_info(type);
  if (!info || n_in < 0) return 0;
  return static_cast<int64_t>(dtype_row_bytes(*info, static_cast<uint64_t>(n_in)));
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512: return "avx512";
    case SimdLevel::kAvx2: return "avx2";
    default: return "scalar";
  }
}

bool simd_level_available(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar: return true;
    case SimdLevel::kAvx2: return cpu_has_avx2();
    case SimdLevel::kAvx512: return cpu_has_avx512();
  }
  return false;
}

SimdLevel active_simd_level() {
  static const SimdLevel level = pick_level();
  return level;
}

const char* simd_level() { return simd_level_name(active_simd_level()); }

ActPrecision default_act_precision() {
  int v = g_default_precision.load(std::memory_order_relaxed);
  if (v < 0) {
    int expected = -1;
    g_default_precision.compare_exchange_strong(expected, static_cast<int>(precision_from_env()));
    v = g_default_precision.load(std::memory_order_relaxed);
  }
  return static_cast<ActPrecision>(v);
}

void set_default_act_precision(ActPrecision p) {
  g_default_precision.store(static_cast<int>(p), std::memory_order_relaxed);
}

const char* act_precision_name(ActPrecision p) {
  return p == ActPrecision::kInt8 ? "int8" : "int8x2";
}

Status matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y,
              ThreadPool& pool) {
  return matmul_impl(active_simd_level(), default_act_precision(), &w, 1, x, n_tokens, &y, pool);
}

Status matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
              ActPrecision precision) {
  return matmul_impl(active_simd_level(), precision, &w, 1, x, n_tokens, &y, pool);
}

Status matmul_multi(std::span<const WeightView> ws, const float* x, int64_t n_tokens,
                    std::span<float* const> ys, ThreadPool& pool) {
  return matmul_multi(ws, x, n_tokens, ys, pool, default_act_precision());
}

Status matmul_multi(std::span<const WeightView> ws, const float* x, int64_t n_tokens,
                    std::span<float* const> ys, ThreadPool& pool, ActPrecision precision) {
  if (ws.size() != ys.size()) {
    return make_error(StatusCode::kInvalidArgument, "matmul_multi: {} weights but {} outputs",
                      ws.size(), ys.size());
  }
  return matmul_impl(active_simd_level(), precision, ws.data(), static_cast<int>(ws.size()), x,
                     n_tokens, ys.data(), pool);
}

Status matmul_at(SimdLevel level, const WeightView& w, const float* x, int64_t n_tokens,
                 float* y, ThreadPool& pool, ActPrecision precision) {
  if (!simd_level_available(level)) {
    return make_error(StatusCode::kUnsupported, "matmul: SIMD level {} is not available here",
                      simd_level_name(level));
  }
  return matmul_impl(level, precision, &w, 1, x, n_tokens, &y, pool);
}

Status get_rows(const WeightView& w, const int32_t* ids, int64_t n_ids, float* out) {
  HS_RETURN_IF_ERROR(validate(w, "get_rows"));
  if (n_ids < 0) {
    return make_error(StatusCode::kInvalidArgument, "get_rows: negative n_ids {}", n_ids);
  }
  if (n_ids > 0 && (ids == nullptr || out == nullptr)) {
    return make_error(StatusCode::kInvalidArgument, "get_rows: null ids or output");
  }
  const int64_t row_bytes = weight_row_bytes(w.type, w.n_in);
  const auto* base = static_cast<const uint8_t*>(w.data);  // [n_out][row_bytes]
  for (int64_t t = 0; t < n_ids; ++t) {
    const int64_t id = ids[t];
    if (id < 0 || id >= w.n_out) {
      return make_error(StatusCode::kInvalidArgument, "get_rows: id {} at position {} is "
                        "outside [0, {})", id, t, w.n_out);
    }
    HS_RETURN_IF_ERROR(dequantize_row(w.type, base + id * row_bytes,
                                      static_cast<size_t>(row_bytes), out + t * w.n_in,
                                      w.n_in));
  }
  return Status::ok();
}

}  // namespace hs::cpu
