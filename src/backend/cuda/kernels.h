// backend/cuda/kernels.h — launchers of the CUDA backend's kernels (internal to backend/cuda).
//
// The kernels live in elementwise.cu and attention.cu (nvcc, C++17); the backend class that
// calls them is host C++20 (cuda_backend.cpp and cuda_ops.cpp include backend.h: std::span
// and the defaulted comparisons of kv/ do not compile under nvcc's C++17, and nvcc's C++20
// mode rejects fmt 9). So this header is the seam: plain structs of pointers and sizes, no fmt,
// no std::span, only <cuda_runtime_api.h> (a C header). Every launcher enqueues on `s`,
// launches nothing for an empty shape, and returns cudaGetLastError() after its launches
// (configuration errors; execution errors surface at the next synchronisation).
// Cost: one call per op, nothing allocated; bf16 travels as uint16_t bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace hs::cuda {

// A strided f32 matrix in device memory: rows of `cols` floats, `stride` floats apart.
struct Rows {
  float* p = nullptr;
  int64_t rows = 0, cols = 0, stride = 0;  // stride in elements (>= cols)
};
struct CRows {
  const float* p = nullptr;
  int64_t rows = 0, cols = 0, stride = 0;
};
inline CRows as_const(const Rows& r) { return CRows{r.p, r.rows, r.cols, r.stride}; }

// ---- device_info.cu ----------------------------------------------------------------------
// Multiprocessors of the current device, cached per device (132 when the runtime cannot say):
// what the launchers size their grids by.
int current_device_sm_count();

// ---- elementwise.cu ----------------------------------------------------------------------
// out[i][:] = float(table[tokens[i]][:]); table: [vocab][cols] bf16 bits (or f32), rows
// table_stride elements apart; tokens: [out.rows] device ids (validated by the caller).
cudaError_t launch_embedding_bf16(const uint16_t* table, int64_t table_stride, const int32_t* tokens, Rows out,
                                  cudaStream_t s);
cudaError_t launch_embedding_f32(const float* table, int64_t table_stride, const int32_t* tokens, Rows out,
                                 cudaStream_t s);
// out = x * (1 / sqrt(mean(x^2) + eps)) * w per row (sum of squares in double, as the CPU);
// w: [x.cols] or null (no scale). out may alias x.
cudaError_t launch_rms_norm(CRows x, const float* w, float eps, Rows out, cudaStream_t s);
// A 16-bit copy of an op's f32 output for the next matmul: [rows][cols] contiguous, bf16 or f16
// with the matmul input conversion's exact rounding (launch_f32_to_bf16 / _f16).
struct Out16 {
  uint16_t* p = nullptr;
  bool bf16 = true;
};
// The quantized batch-1/2 GEMV's x records (quant_x.cuh, gemv_quant_warp.h) of an op's f32
// output, written beside it for the GEMV after it: s = null for none; kind a QuantKind value;
// s holds >= gemv_quant_warp_scratch_bytes(cols, rows) bytes, 16-byte aligned; rows <= 2.
struct OutQ {
  uint8_t* s = nullptr;
  int kind = 0;
};
// Widest rows an op writes OutQ records for (the norm stages a row in 48 KB of shared memory).
constexpr int64_t kMaxOutQCols = 12288;
// launch_rms_norm / launch_add_rms_norm that also write out16 (8-byte aligned) and / or outq
// (cols <= kMaxOutQCols, a multiple of the kind's block): false, launching nothing, for rows the
// one-pass kernel does not take (the caller runs the plain op).
bool launch_rms_norm16(CRows x, const float* w, float eps, Rows out, Out16 out16, cudaStream_t s, OutQ outq = OutQ{});
bool launch_add_rms_norm16(Rows x, CRows y, const float* w, float eps, Rows out, Out16 out16, cudaStream_t s,
                           OutQ outq = OutQ{});
// In place: row r of x ([n_heads * head_dim]) rotated at positions[r] (device [x.rows]);
// cos/sin of pos * theta^(-2i/head_dim) computed in double as backend/cpu/ops.cpp does.
cudaError_t launch_rope(Rows x, int head_dim, float theta, bool neox, const int32_t* positions, cudaStream_t s);
// launch_rope of q and of k (same rows, same positions) in one launch.
cudaError_t launch_rope_qk(Rows q, Rows k, int head_dim, float theta, bool neox, const int32_t* positions,
                           cudaStream_t s);
// dst[i] = columns [sum of dst[<i].cols, + dst[i].cols) of src (1..3 outputs covering src's
// columns, src.rows rows each): a fused projection's output split into its parts.
cudaError_t launch_split_cols(CRows src, int n_dst, const Rows* dst, cudaStream_t s);
// x += y, then out = rms_norm(x) * w: bitwise add then rms_norm, in one pass over x where rows
// are float4-aligned (else the two kernels).
cudaError_t launch_add_rms_norm(Rows x, CRows y, const float* w, float eps, Rows out, cudaStream_t s);
// out = act(gate) * up; kind 0: silu, 1: gelu (tanh form, written as g * sigmoid(2u)).
cudaError_t launch_glu(int kind, CRows gate, CRows up, Rows out, cudaStream_t s, Out16 out16 = Out16{});
// launch_glu that also writes outq (out.rows <= 2, cols a multiple of the kind's block): one warp
// per 32 columns and row; the f32 out is bitwise launch_glu's.
cudaError_t launch_glu_q(int kind, CRows gate, CRows up, Rows out, OutQ outq, cudaStream_t s);
cudaError_t launch_add(Rows x, CRows y, cudaStream_t s);             // x += y
cudaError_t launch_scale(Rows x, float v, cudaStream_t s);           // x *= v
cudaError_t launch_softcap(Rows x, float cap, cudaStream_t s);       // x = cap * tanh(x / cap)
// dst[j][:] = src[rows[j]][:], rows: [dst.rows] device indices into src.
cudaError_t launch_gather_rows(CRows src, const int32_t* rows, Rows dst, cudaStream_t s);
// out [x.rows][x.cols] contiguous bf16 bits = round-to-nearest-even(x).
cudaError_t launch_f32_to_bf16(CRows x, uint16_t* out, cudaStream_t s);
// x = hi + lo as two dense [rows][cols] 16-bit matrices (bf16, or f16 saturating), each rounded
// to nearest even: a GEMM over each, summed, sees x to ~16 bits of mantissa (precise matmuls).
cudaError_t launch_f32_split16(CRows x, uint16_t* hi, uint16_t* lo, bool bf16, cudaStream_t s);
// f32 -> f16 bits, round to nearest, saturating at +-65504. out: [rows][cols] dense.
cudaError_t launch_f32_to_f16(CRows x, uint16_t* out, cudaStream_t s);
// out[i] = f16 table row tokens[i] as f32.
cudaError_t launch_embedding_f16(const uint16_t* table, int64_t table_stride, const int32_t* tokens, Rows out,
                                 cudaStream_t s);

// out[0..n) = uniform(-1, 1) bf16 from a counter hash of (seed, i): the peaks probe's operands.
cudaError_t launch_fill_random_bf16(uint16_t* out, int64_t n, uint64_t seed, cudaStream_t s);

// ---- attention.cu ------------------------------------------------------------------------
enum class KvElem : int { kF32 = 0, kF16 = 1, kBF16 = 2, kFp8 = 3, kInt8 = 4, kInt4 = 5 };
// Scaled dtypes (fp8, int8, int4): kv/kv_quant.h's rows + per-token-per-head scales.
inline constexpr bool kv_elem_scaled(KvElem e) { return e == KvElem::kFp8 || e == KvElem::kInt8 || e == KvElem::kInt4; }
// The unit of KvLayerView::page_elems: bytes for scaled dtypes, elements for plain ones.
inline constexpr int kv_elem_unit_bytes(KvElem e) { return e == KvElem::kF32 ? 4 : kv_elem_scaled(e) ? 1 : 2; }
// Bytes of one K or V row of head_dim values, and of one row's scales.
inline constexpr int64_t kv_elem_row_bytes(KvElem e, int head_dim) {
  return e == KvElem::kInt4 ? head_dim / 2 : int64_t{head_dim} * (e == KvElem::kF32 ? 4 : kv_elem_scaled(e) ? 1 : 2);
}
inline constexpr int kv_elem_scale_bytes(KvElem e) { return e == KvElem::kInt4 ? 4 : kv_elem_scaled(e) ? 2 : 0; }

// One layer of the device KV copy: page b at base + b * page_elems elements.
//   f32 / f16 / bf16 (plain): inside a page kv head h at h * P * 2 * head_dim, token t of the
//     page at t * 2 * head_dim, K then V.
//   fp8 / int8 / int4 (kv/kv_quant.h's scaled layout, byte-identical to the host KvCache's
//     pages): page_elems counts bytes; kv head h's block (a PieceLayout piece of C = P tokens)
//     at h * head_stride, holding rows [P][K|V][row_bytes] at 0 (e4m3 / int8 bytes, or int4
//     nibble pairs) and their scales [P][K|V][scale_bytes] at scales_offset (f16 d; int4: f16
//     d, f16 m).
struct KvLayerView {
  void* base = nullptr;
  int64_t page_elems = 0;  // n_kv_heads * P * 2 * head_dim (scaled: n_kv_heads * head_stride bytes)
  int page_tokens = 16;    // P
  int n_kv_heads = 0;
  int head_dim = 0;
  KvElem elem = KvElem::kF16;
  int64_t head_stride = 0;    // scaled: bytes between kv heads' blocks (a multiple of 16)
  int64_t scales_offset = 0;  // scaled: 2 * P * row_bytes, where a block's scales start
};

// A scaled layer view (fp8 / int8 / int4) as kv/kv_quant.h lays a head's block out: rows
// [P][K|V][row_bytes], then scales [P][K|V][scale_bytes], 16-byte aligned blocks.
inline bool kv_scaled_layout_ok(const KvLayerView& kv) {
  const int64_t row = kv_elem_row_bytes(kv.elem, kv.head_dim), scale = kv_elem_scale_bytes(kv.elem);
  return kv.head_stride % 16 == 0 && kv.scales_offset == 2LL * kv.page_tokens * row &&
         kv.head_stride >= kv.scales_offset + 2LL * kv.page_tokens * scale && (kv.elem != KvElem::kInt4 || kv.head_dim % 2 == 0);
}

// The step's device tables (begin_step): token i is at positions[i] of sequence
// seq_index[i], whose pages are page_indices[page_indptr[s] .. page_indptr[s + 1]).
struct StepTables {
  const int32_t* positions = nullptr;     // [n]
  const int32_t* seq_index = nullptr;     // [n]
  const int32_t* page_indptr = nullptr;   // [n_seqs + 1]
  const int32_t* page_indices = nullptr;  // [total pages]
};

// K and V rows of every token ([n][n_kv_heads * head_dim] f32) into their page slots; fp8
// encodes each row as kv/kv_quant.h does on the host, to the same bytes.
cudaError_t launch_kv_write(KvLayerView kv, StepTables t, CRows k, CRows v, cudaStream_t s);
// launch_rope_qk(q, k) then launch_kv_write(k, v) in one launch, to the same bits, for plain
// (f32 / f16 / bf16) pages: cudaErrorInvalidValue, launching nothing, for fp8 pages or shapes it
// does not take (head_dim != kv.head_dim, k / v not n_kv_heads x head_dim, rows unequal).
cudaError_t launch_rope_kv_write(Rows q, Rows k, CRows v, int head_dim, float theta, bool neox, KvLayerView kv,
                                 StepTables t, cudaStream_t s);
// Qwen3.5's q / k head norms (q from q_src [n * n_head][head_dim], strided, into q; k in place),
// their RoPE over the first rot_dims, then k and v into their page slots, in one launch, for plain
// pages (Backend::qk_norm_rope_kv_write); cudaErrorInvalidValue, launching nothing, for scaled
// pages or shapes it does not take (head_dim > 512 or != kv.head_dim, k / v not n_kv_heads x
// head_dim, q_src not n_head rows a token).
cudaError_t launch_qk_norm_rope_kv_write(CRows q_src, Rows q, Rows k, CRows v, const float* q_norm,
                                         const float* k_norm, float eps, int head_dim, int rot_dims, float theta,
                                         bool neox, KvLayerView kv, StepTables t, cudaStream_t s);

// How the keys are split (flash-decoding): each (token, kv head) runs n_splits blocks of
// split_len keys from its first visible key; n_splits == 1 writes `out` directly, more write
// partials that a merge kernel combines.
struct AttnSplit {
  int n_splits = 1;
  int split_len = 0;
};
// max_range: the longest key range of any token (window applied). Aims at ~4 blocks per SM
// and splits no finer than 64 keys; the partial scratch stays under ~2 * 4 * n_sm blocks.
AttnSplit plan_attention_split(int64_t n_tokens, int n_kv_heads, int32_t max_range, int n_sm);
// Floats of partial scratch a launch with this split needs (0 when n_splits == 1).
size_t attention_scratch_floats(int64_t n_tokens, int n_kv_heads, int group, int head_dim, AttnSplit split);
// head_dim in {64, 128, 256} and 1 <= group <= 8.
bool attention_shape_supported(int head_dim, int group);

struct AttnArgs {
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  float scale = 1.0f;
  int window = 0;        // > 0: key j visible to position p iff p - j < window
  AttnSplit split;
  float* scratch = nullptr;  // [attention_scratch_floats] when split.n_splits > 1
  // Sparse rows (sparse_kernels.h): row (token i, kv head h) = i * n_head_kv + h with
  // sp_len[row] >= 0 attends only keys [0, sp_len[row]) of the pages sp_pages[row * sp_stride ..]
  // (its selected chunks, C = P, in ascending order: all full but the last); -1 or null: dense.
  const int32_t* sp_pages = nullptr;
  const int32_t* sp_len = nullptr;
  int sp_stride = 0;
  // Host tier (hot_set.h): non-null, the sparse rows' sp_pages are slots of their kv head's hot
  // pool, slot s of head h at sp_base + h * sp_head_bytes + s * sp_page_bytes, laid out as one
  // head block of a page (plain: [P][K|V][head_dim]; fp8: the head_stride block with its scales).
  const void* sp_base = nullptr;
  int64_t sp_head_bytes = 0;
  int64_t sp_page_bytes = 0;
};
// The tensor-core decode attention (attention_mma.cu) for f16, int8 and fp8 pages of >= 16
// tokens, head_dim 64 / 128 / 256, up to 8 query heads a kv head. Mode 2 (auto, the default):
// launch_attention takes it for 8-bit pages, head_dim 256 or more than 4 query heads a kv head,
// where the CUDA-core kernel is issue-bound; 1: wherever it applies; 0: never. HS_CUDA_ATTN_MMA=1
// / 0 sets 1 / 0 for the process; set_attention_mma(0 / 1 / 2) overrides it (tests), -1 restores
// the environment's choice.
int attention_mma_mode();
void set_attention_mma(int mode);
// q, out: [n][n_head * head_dim] f32 (n = q.rows).
cudaError_t launch_attention(KvLayerView kv, StepTables t, CRows q, Rows out, const AttnArgs& a, cudaStream_t s);

}  // namespace hs::cuda
