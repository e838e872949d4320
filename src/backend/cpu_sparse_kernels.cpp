// backend/cpu_sparse_kernels.cpp — see cpu_sparse_kernels.h.
#include "backend/cpu_sparse_kernels.h"

#include "backend/cpu/attention.h"
#include "backend/cpu/sketch_score.h"

namespace hs {
namespace {

class CpuSparseKernels final : public SparseKernels {
 public:
  void sketch_encode(SketchElem e, const float* s, int rank, int page_tokens, int lane,
                     uint8_t* head_block) const override {
    cpu::sketch_encode(e, s, rank, page_tokens, lane, head_block);
  }
  void sketch_decode(SketchElem e, const uint8_t* head_block, int rank, int page_tokens, int lane,
                     float* s) const override {
    cpu::sketch_decode(e, head_block, rank, page_tokens, lane, s);
  }
  void sketch_project_queries(const float* q, int n_q, const float* basis, const float* mean, int head_dim, int rank,
                              float* q_hat, float* bias) const override {
    cpu::sketch_project_queries(q, n_q, basis, mean, head_dim, rank, q_hat, bias);
  }
  void sketch_score(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                    int32_t begin, int32_t end, float* scores) const override {
    cpu::sketch_score(q_hat, bias, n_q, v, kv_head, begin, end, scores);
  }
  void sketch_chunk_max(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                        int32_t n_tokens, int chunk_tokens, int32_t chunk_begin, int32_t chunk_end,
                        float* chunk_max) const override {
    cpu::sketch_chunk_max(q_hat, bias, n_q, v, kv_head, n_tokens, chunk_tokens, chunk_begin, chunk_end, chunk_max);
  }
  void sketch_chunk_head_mass(const float* q_hat, const float* bias, int n_q, const PagedSketchView& v, int kv_head,
                              int32_t n_tokens, int chunk_tokens, int32_t chunk_begin, int32_t chunk_end, float alpha,
                              float* out) const override {
    cpu::sketch_chunk_head_mass(q_hat, bias, n_q, v, kv_head, n_tokens, chunk_tokens, chunk_begin, chunk_end, alpha,
                                out);
  }
  void chunk_log_mass(const float* q, int n_q, const PagedKvView& kv, int kv_head, const int32_t* chunk_ids,
                      int n_chunks, int chunk_tokens, int32_t n_tokens, float scale, float* out) const override {
    cpu::chunk_log_mass(q, n_q, kv, kv_head, chunk_ids, n_chunks, chunk_tokens, n_tokens, scale, out);
  }
};

}  // namespace

const SparseKernels& cpu_sparse_kernels() {
  static const CpuSparseKernels k;
  return k;
}

}  // namespace hs
