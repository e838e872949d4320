// backend/cpu/matmul_exact.cpp — dispatch and threading for matmul_exact (see the header).
//
// Work split: output rows in chunks of kRows·8 across threads, tokens in tiles of 64 so a
// tile's activations stay in L2 while each dequantized row piece is reused from L1.
#include "backend/cpu/matmul_exact.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/matmul_exact_kernel.h"

namespace hs::cpu {
namespace detail {
void exact_tile_avx2(const WeightView&, int64_t, const float*, int64_t, int64_t, int64_t, int64_t, float*, float*);
void exact_tile_avx512(const WeightView&, int64_t, const float*, int64_t, int64_t, int64_t, int64_t, float*, float*);
void dequant_avx2(DType, const uint8_t*, int64_t, float*);
void dequant_avx512(DType, const uint8_t*, int64_t, float*);
void fused_tile_avx2(const WeightView&, int64_t, const float*, const float*, int64_t, int64_t, int64_t, int64_t, float*);
void fused_tile_avx512(const WeightView&, int64_t, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                       float*);
void sums16_avx2(const float*, int64_t, float*);
void sums16_avx512(const float*, int64_t, float*);
}  // namespace detail

namespace {

using TileFn = void (*)(const WeightView&, int64_t, const float*, int64_t, int64_t, int64_t, int64_t, float*, float*);
using DequantFn = void (*)(DType, const uint8_t*, int64_t, float*);
using FusedFn = void (*)(const WeightView&, int64_t, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                         float*);
using SumsFn = void (*)(const float*, int64_t, float*);
struct Dispatch {
  TileFn tile;
  DequantFn dequant;
  FusedFn fused;
  SumsFn sums16;
  const char* name;
};

Dispatch pick() {
  const char* force = std::getenv("HS_SIMD");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const Dispatch scalar{detail::exact_tile, detail::dequant, detail::fused_tile, detail::sums16, "scalar"};
  if (force && std::strcmp(force, "scalar") == 0) return scalar;
  if (avx512 && !(force && std::strcmp(force, "avx2") == 0))
    return {detail::exact_tile_avx512, detail::dequant_avx512, detail::fused_tile_avx512, detail::sums16_avx512,
            "avx512"};
  if (avx2) return {detail::exact_tile_avx2, detail::dequant_avx2, detail::fused_tile_avx2, detail::sums16_avx2, "avx2"};
  return scalar;
}

const Dispatch& dispatch() {
  static const Dispatch d = pick();
  return d;
}

constexpr int64_t kTokenTile = 64;
constexpr int64_t kFusedMaxTokens = 4;  // up to this many tokens: fused in-register dots
constexpr int64_t kFusedRows = 16;      // rows per parallel task on the fused path
constexpr int64_t kRowChunk = detail::kRows * 8;

}  // namespace

Status matmul_exact(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  auto info = dtype_info(w.type);
  const bool ok_type = info && (w.type == DType::F32 || w.type == DType::F16 || w.type == DType::BF16 ||
                                w.type == DType::Q4_0 || w.type == DType::Q4_1 || w.type == DType::Q5_0 ||
                                w.type == DType::Q5_1 || w.type == DType::Q8_0 || w.type == DType::Q4_K ||
                                w.type == DType::Q5_K || w.type == DType::Q6_K);
  if (!ok_type)
    return make_error(StatusCode::kUnsupported, "matmul: weight type {} is not supported", dtype_name(w.type));
  if (w.n_in <= 0 || w.n_out <= 0 || n_tokens < 0 || w.n_in % info->block_elems != 0)
    return make_error(StatusCode::kInvalidArgument, "matmul: bad shape n_in={} n_out={} n_tokens={} for {}", w.n_in,
                      w.n_out, n_tokens, info->name);
  if (!w.data || !x || !y) return make_error(StatusCode::kInvalidArgument, "matmul: null pointer");
  if (n_tokens == 0) return Status::ok();
  const int64_t row_bytes = static_cast<int64_t>(dtype_row_bytes(*info, w.n_in));
  const Dispatch& dsp = dispatch();
  if (n_tokens <= kFusedMaxTokens && detail::has_fused(w.type)) {
    // Decode: unpack weights in registers, one pass over the weight (memory-bound).
    std::vector<float> xs16(n_tokens * (w.n_in / 16));  // [n_tokens][n_in / 16]
    for (int64_t t = 0; t < n_tokens; ++t) dsp.sums16(x + t * w.n_in, w.n_in, xs16.data() + t * (w.n_in / 16));
    const float* sums = xs16.data();
    const int64_t n_chunks = (w.n_out + kFusedRows - 1) / kFusedRows;
    pool.parallel_for(n_chunks, [&](int64_t begin, int64_t end, int) {
      const int64_t r0 = begin * kFusedRows, r1 = end * kFusedRows < w.n_out ? end * kFusedRows : w.n_out;
      dsp.fused(w, row_bytes, x, sums, r0, r1, 0, n_tokens, y);
    });
    return Status::ok();
  }
  const TileFn tile = dsp.tile;
  const int64_t n_chunks = (w.n_out + kRowChunk - 1) / kRowChunk;
  const int64_t n_tiles = (n_tokens + kTokenTile - 1) / kTokenTile;
  // Scratch: kRows dequantized rows per thread.
  std::vector<float> scratch(static_cast<size_t>(pool.n_threads()) * detail::kRows * w.n_in);  // [threads][kRows][n_in]
  pool.parallel_for(n_chunks * n_tiles, [&](int64_t begin, int64_t end, int thread) {
    float* buf = scratch.data() + static_cast<size_t>(thread) * detail::kRows * w.n_in;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t chunk = task % n_chunks, tt = task / n_chunks;
      const int64_t r0 = chunk * kRowChunk, r1 = r0 + kRowChunk < w.n_out ? r0 + kRowChunk : w.n_out;
      const int64_t t0 = tt * kTokenTile, t1 = t0 + kTokenTile < n_tokens ? t0 + kTokenTile : n_tokens;
      tile(w, row_bytes, x, r0, r1, t0, t1, y, buf);
    }
  });
  return Status::ok();
}

const char* matmul_exact_simd_level() { return dispatch().name; }

namespace detail {
void dequant_blocks_for_test(DType type, const void* src, int64_t n_elems, float* dst) {
  dispatch().dequant(type, static_cast<const uint8_t*>(src), n_elems, dst);
}
}  // namespace detail

}  // namespace hs::cpu
