// backend/cuda/cuda_hybrid.cpp — CudaBackend's hybrid (Gated DeltaNet) and mixture-of-experts
// ops: the host checks of every operand (device, dtype, shape, strides, the plan's state slots),
// then one launcher of hybrid_kernels.h on the backend's stream. The per-sequence ops (conv,
// delta rule) read the step's active-sequence tables that begin_step copied with the others, so
// a decode step of a hybrid model is graph-capturable like any other: their launches depend on
// the token count only. Semantics are the CPU backend's (cpu_backend_hybrid.cpp,
// cpu_backend_moe.cpp); tests/ops/test_hybrid_ops.cpp compares them on random inputs.
// Cost: the kernels' (hybrid_kernels.h); moe_experts grows one scratch of n · n_used · n_ff floats.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/hybrid_kernels.h"

namespace hs::cuda {
namespace {

Status check_vector(const Tensor& t, int64_t n, const char* op, const char* what) {
  HS_RETURN_IF_ERROR(check_f32(t, op, what));
  if (t.rows * t.cols != n || (t.rows > 1 && !t.contiguous()))
    return make_error(StatusCode::kInvalidArgument, "cuda {}: {} must be {} f32 values (got {})", op, what, n, shape(t));
  return Status::ok();
}

Status check_contiguous(const Tensor& t, DType type, int64_t rows, int64_t cols, const char* op, const char* what) {
  HS_RETURN_IF_ERROR(check_on_device(t, op, what));
  if (t.dtype != type || t.rows != rows || t.cols != cols || !t.contiguous())
    return make_error(StatusCode::kInvalidArgument, "cuda {}: {} must be contiguous {} [{}][{}] (got {})", op, what,
                      dtype_name(type), rows, cols, shape(t));
  return Status::ok();
}

Result<ExpertWeights> expert_weights(const Tensor& w, int64_t rows_per_expert, int64_t cols, const char* op,
                                     const char* what) {
  HS_RETURN_IF_ERROR(check_on_device(w, op, what));
  if (w.dtype != DType::BF16 && w.dtype != DType::F16)
    return make_error(StatusCode::kUnsupported,
                      "cuda {}: {} are {}; the CUDA experts read 16-bit (bf16 / f16) weights (HS_CUDA_QUANT=0 loads a "
                      "quantized GGUF's as f16)",
                      op, what, dtype_name(w.dtype));
  if (w.cols != cols || w.row_stride % 2 != 0)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: {} are {}, want rows of {}", op, what, shape(w), cols);
  return ExpertWeights{w.as<const uint16_t>(), w.row_stride / 2, rows_per_expert, w.dtype == DType::BF16};
}

}  // namespace

Status CudaBackend::check_state(const Tensor& state, int64_t slot_floats, const char* op) const {
  HS_RETURN_IF_ERROR(need_step(op));
  HS_RETURN_IF_ERROR(check_f32(state, op, "state"));
  const ForwardPlan& p = *plan_;
  if (state.cols != slot_floats || !state.contiguous())
    return make_error(StatusCode::kInvalidArgument, "cuda {}: state must be contiguous f32 [slots][{}] (got {})", op,
                      slot_floats, shape(state));
  if (p.state_slots.size() != p.seqs.size() || static_cast<int64_t>(p.seq_index.size()) != p.n_tokens())
    return make_error(StatusCode::kInvalidArgument, "cuda {}: the plan has {} state slots and {} sequence indices for {} "
                      "sequences and {} tokens", op, p.state_slots.size(), p.seq_index.size(), p.seqs.size(), p.n_tokens());
  for (size_t s = 0; s < p.state_slots.size(); ++s)
    if (p.state_slots[s] < 0 || p.state_slots[s] >= state.rows)
      return make_error(StatusCode::kInvalidArgument, "cuda {}: sequence {} has state slot {} of {}", op, s,
                        p.state_slots[s], state.rows);
  // A replayed graph skips these checks: begin_step holds later plans to the fewest slots seen.
  state_rows_seen_ = std::min(state_rows_seen_, state.rows);
  return Status::ok();
}

SeqTables CudaBackend::seq_tables() const {
  return SeqTables{d_act_indptr_, d_act_rows_, d_act_slot_, d_act_fresh_, plan_ ? plan_->n_tokens() : 0};
}

Status CudaBackend::conv1d_causal(const Tensor& x, const Tensor& w, int kernel, Tensor state, Tensor out) {
  const char* op = "conv1d_causal";
  OpProfile::Scope prof(&profile_, op, stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(need_step(op));
  HS_RETURN_IF_ERROR(check_f32(x, op, "x"));
  HS_RETURN_IF_ERROR(check_f32(out, op, "out"));
  HS_RETURN_IF_ERROR(check_rows(x, plan_->n_tokens(), op, "x"));
  HS_RETURN_IF_ERROR(check_same_shape(x, out, op, "x", "out"));
  if (kernel < 1 || kernel > kMaxConvKernel || x.data == out.data)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: kernel {} (1..{}), out {} x", op, kernel, kMaxConvKernel,
                      x.data == out.data ? "aliases" : "is apart from");
  HS_RETURN_IF_ERROR(check_vector(w, x.cols * kernel, op, "w"));
  HS_RETURN_IF_ERROR(check_state(state, (kernel - 1) * x.cols, op));
  return launched(launch_conv1d_causal(crows_of(x), w.f32(), kernel, state.f32(), state.cols, rows_of(out), seq_tables(),
                                       stream_),
                  op);
}

Status CudaBackend::gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                     const Tensor& beta, Tensor state, Tensor out, const DeltaRuleParams& dp) {
  const char* op = "gated_delta_rule";
  OpProfile::Scope prof(&profile_, op, stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(need_step(op));
  for (const auto& [t, what] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&g, "g"}, {&beta, "beta"}, {&out, "out"}}) {
    HS_RETURN_IF_ERROR(check_f32(*t, op, what));
    HS_RETURN_IF_ERROR(check_rows(*t, plan_->n_tokens(), op, what));
  }
  if (dp.n_k_heads <= 0 || dp.k_dim <= 0 || dp.v_dim <= 0 || dp.n_v_heads % dp.n_k_heads != 0 ||
      q.cols != int64_t{dp.n_k_heads} * dp.k_dim || k.cols != q.cols || v.cols != int64_t{dp.n_v_heads} * dp.v_dim ||
      out.cols != v.cols || g.cols != dp.n_v_heads || beta.cols != dp.n_v_heads)
    return make_error(StatusCode::kInvalidArgument,
                      "cuda {}: q {} k {} v {} g {} beta {} out {} for {} k heads x {} / {} v heads x {}", op, shape(q),
                      shape(k), shape(v), shape(g), shape(beta), shape(out), dp.n_k_heads, dp.k_dim, dp.n_v_heads, dp.v_dim);
  if (dp.k_dim > kMaxDeltaKDim)
    return make_error(StatusCode::kUnsupported, "cuda {}: key heads of {} exceed the {} the kernel holds in registers",
                      op, dp.k_dim, kMaxDeltaKDim);
  HS_RETURN_IF_ERROR(check_state(state, int64_t{dp.n_v_heads} * dp.k_dim * dp.v_dim, op));
  DeltaArgs a{dp.n_k_heads, dp.n_v_heads, dp.k_dim, dp.v_dim, dp.v_tiled};
  const DeltaPrologue* pr = dp.prologue;
  if (pr && plan_->n_tokens() > delta_fused_max_) {
    // Prefill-sized steps: the norms and gates as their own (parallel) launches, then the plain
    // rule. Fused, every token of a sequence pays the norms' reductions on the rule's serial
    // chain (measured: 27B pp512 3,845 -> 3,173 t/s fused, decode 132.9 -> 138.9). Keyed on the
    // token count only, as CUDA graphs are.
    Tensor qm = q, km = k, gm = g, bm = beta;
    HS_RETURN_IF_ERROR(l2_norm(qm, dp.k_dim, pr->l2_eps, pr->q_scale));
    HS_RETURN_IF_ERROR(l2_norm(km, dp.k_dim, pr->l2_eps, 1.0f));
    HS_RETURN_IF_ERROR(delta_gates(gm, bm, pr->ssm_a, pr->dt_bias));
    pr = nullptr;
  }
  if (pr) {
    HS_RETURN_IF_ERROR(check_vector(pr->ssm_a, dp.n_v_heads, op, "ssm_a"));
    HS_RETURN_IF_ERROR(check_vector(pr->dt_bias, dp.n_v_heads, op, "dt_bias"));
    a.ssm_a = pr->ssm_a.f32();
    a.dt_bias = pr->dt_bias.f32();
    a.l2_eps = pr->l2_eps;
    a.q_scale = pr->q_scale;
  }
  return launched(launch_gated_delta_rule(crows_of(q), crows_of(k), crows_of(v), crows_of(g), crows_of(beta), state.f32(),
                                          state.cols, rows_of(out), a, seq_tables(), stream_),
                  op);
}

Status CudaBackend::l2_norm(Tensor x, int head_dim, float eps, float scale) {
  const char* op = "l2_norm";
  OpProfile::Scope prof(&profile_, op, stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_f32(x, op, "x"));
  if (head_dim <= 0 || x.cols % head_dim)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: rows of {} in heads of {}", op, x.cols, head_dim);
  return launched(launch_l2_norm(rows_of(x), head_dim, eps, scale, stream_), op);
}

Status CudaBackend::rms_norm_gated(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor out) {
  const char* op = "rms_norm_gated";
  OpProfile::Scope prof(&profile_, op, stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_f32(x, op, "x"));
  HS_RETURN_IF_ERROR(check_f32(z, op, "z"));
  HS_RETURN_IF_ERROR(check_f32(out, op, "out"));
  HS_RETURN_IF_ERROR(check_same_shape(x, z, op, "x", "z"));
  HS_RETURN_IF_ERROR(check_same_shape(x, out, op, "x", "out"));
  const int64_t hd = w.rows * w.cols;
  if (hd <= 0 || x.cols % hd)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: rows of {} in groups of the weight's {}", op, x.cols, hd);
  HS_RETURN_IF_ERROR(check_vector(w, hd, op, "w"));
  HS_ASSIGN_OR_RETURN(const OutQ oq, outq_for(out));
  if (oq.s) {  // batch 1-2 before a quantized GEMV: the output and its records in one pass
    const cudaError_t e =
        launch_rms_norm_gated(crows_of(x), crows_of(z), w.f32(), static_cast<int>(hd), eps, rows_of(out), stream_, oq);
    if (e != cudaErrorInvalidValue) {
      HS_RETURN_IF_ERROR(launched(e, op));
      set_quant_tag(out, *quant_in_);
      return Status::ok();
    }
  }
  return launched(launch_rms_norm_gated(crows_of(x), crows_of(z), w.f32(), static_cast<int>(hd), eps, rows_of(out), stream_),
                  op);
}

Status CudaBackend::sigmoid_mul(Tensor x, const Tensor& gate) {
  const char* op = "sigmoid_mul";
  OpProfile::Scope prof(&profile_, op, stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_f32(x, op, "x"));
  HS_RETURN_IF_ERROR(check_f32(gate, op, "gate"));
  HS_RETURN_IF_ERROR(check_same_shape(x, gate, op, "x", "gate"));
  return launched(launch_sigmoid_mul(rows_of(x), crows_of(gate), stream_), op);
}

Status CudaBackend::delta_gates(Tensor a, Tensor b, const Tensor& ssm_a, const Tensor& dt_bias) {
  const char* op = "delta_gates";
  OpProfile::Scope prof(&profile_, op, stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_f32(a, op, "a"));
  HS_RETURN_IF_ERROR(check_f32(b, op, "b"));
  HS_RETURN_IF_ERROR(check_same_shape(a, b, op, "a", "b"));
  HS_RETURN_IF_ERROR(check_vector(ssm_a, a.cols, op, "ssm_a"));
  HS_RETURN_IF_ERROR(check_vector(dt_bias, a.cols, op, "dt_bias"));
  return launched(launch_delta_gates(rows_of(a), rows_of(b), ssm_a.f32(), dt_bias.f32(), stream_), op);
}

Status CudaBackend::rope_partial(Tensor x, int head_dim, int rot_dims, float theta, bool neox) {
  if (rot_dims == head_dim) return rope(x, head_dim, theta, neox);
  const char* op = "rope_partial";
  OpProfile::Scope prof(&profile_, op, stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_rope(x, head_dim, op));
  if (rot_dims <= 0 || rot_dims % 2 || rot_dims > head_dim)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: {} of head_dim {} rotated", op, rot_dims, head_dim);
  return launched(launch_rope_partial(rows_of(x), head_dim, rot_dims, theta, neox, d_positions_, stream_), op);
}

// One kernel on plain and scaled (fp8 / int8 / int4) KV pages (HS_CUDA_ROPE_KV=0, as for
// rope_qk_kv_write: the ops one by one, the base class's composition).
Status CudaBackend::qk_norm_rope_kv_write(int layer, const Tensor& q_src, Tensor q, Tensor k, const Tensor& v,
                                          const Tensor& q_norm, const Tensor& k_norm, float eps, int head_dim,
                                          int rot_dims, float theta, bool neox) {
  const char* op = "qk_norm_rope_kv_write";
  if (rope_kv_fused_ && head_dim > 0 && q.cols % head_dim == 0 && k.cols % head_dim == 0) {
    OpProfile::Scope prof(&profile_, op, stream_);
    clear_input_tag();
    HS_ASSIGN_OR_RETURN(const float* qw, check_rms_norm(q_src, q_norm, q.reshaped(head_dim), op));
    HS_ASSIGN_OR_RETURN(const float* kw, check_rms_norm(k.reshaped(head_dim), k_norm, k.reshaped(head_dim), op));
    HS_RETURN_IF_ERROR(check_rope(q, head_dim, op));
    HS_RETURN_IF_ERROR(check_rope(k, head_dim, op));
    if (rot_dims <= 0 || rot_dims % 2 || rot_dims > head_dim)
      return make_error(StatusCode::kInvalidArgument, "cuda {}: {} of head_dim {} rotated", op, rot_dims, head_dim);
    HS_ASSIGN_OR_RETURN(const KvLayerView view, kv_write_view(layer, k, v, op));
    const StepTables t{d_positions_, d_seq_index_, d_page_indptr_, d_page_indices_};
    const cudaError_t e = launch_qk_norm_rope_kv_write(crows_of(q_src), rows_of(q), rows_of(k), crows_of(v), qw, kw,
                                                       eps, head_dim, rot_dims, theta, neox, view, t, stream_);
    if (e != cudaErrorInvalidValue) {
      HS_RETURN_IF_ERROR(launched(e, op));
      note_hot_kv(layer, k, v);
      return write_sketches(layer, k);
    }
  }
  return Backend::qk_norm_rope_kv_write(layer, q_src, q, k, v, q_norm, k_norm, eps, head_dim, rot_dims, theta, neox);
}

Status CudaBackend::moe_route(const Tensor& logits, Tensor ids, Tensor weights, const MoeParams& p) {
  const char* op = "moe_route";
  OpProfile::Scope prof(&profile_, op, stream_);
  clear_input_tag();
  if (p.n_experts <= 0 || p.n_used <= 0 || p.n_used > p.n_experts || p.n_used > 32)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: {} of {} experts (at most 32 per token)", op, p.n_used,
                      p.n_experts);
  const int64_t n = logits.rows;
  HS_RETURN_IF_ERROR(check_f32(logits, op, "logits"));
  if (logits.cols != p.n_experts)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: logits {} for {} experts", op, shape(logits), p.n_experts);
  HS_RETURN_IF_ERROR(check_contiguous(ids, DType::I32, n, p.n_used, op, "ids"));
  HS_RETURN_IF_ERROR(check_contiguous(weights, DType::F32, n, p.n_used, op, "weights"));
  return launched(launch_moe_route(crows_of(logits), p.n_used, p.norm_topk, ids.as<int32_t>(), weights.f32(), stream_), op);
}

Status CudaBackend::moe_experts(const Tensor& x, const Tensor& gate_exps, const Tensor& up_exps, const Tensor& down_exps,
                                const Tensor& ids, const Tensor& weights, Tensor out, const MoeParams& p) {
  const char* op = "moe_experts";
  OpProfile::Scope prof(&profile_, op, stream_);
  clear_input_tag();
  const int64_t n = x.rows, H = x.cols, E = p.n_experts, k = p.n_used;
  if (E <= 0 || k <= 0 || k > E || gate_exps.rows % E != 0)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: {} of {} experts over gate weights of {} rows", op, k, E,
                      gate_exps.rows);
  const int64_t F = gate_exps.rows / E;
  if (up_exps.rows != E * F || down_exps.rows != E * H)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: gate {}, up {}, down {} for {} experts of {} x {}", op,
                      shape(gate_exps), shape(up_exps), shape(down_exps), E, F, H);
  HS_ASSIGN_OR_RETURN(const ExpertWeights gw, expert_weights(gate_exps, F, H, op, "gate experts"));
  HS_ASSIGN_OR_RETURN(const ExpertWeights uw, expert_weights(up_exps, F, H, op, "up experts"));
  HS_ASSIGN_OR_RETURN(const ExpertWeights dw, expert_weights(down_exps, H, F, op, "down experts"));
  if (gw.bf16 != uw.bf16)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: gate experts are {}, up experts {}", op,
                      dtype_name(gate_exps.dtype), dtype_name(up_exps.dtype));
  HS_RETURN_IF_ERROR(check_f32(x, op, "x"));
  HS_RETURN_IF_ERROR(check_f32(out, op, "out"));
  HS_RETURN_IF_ERROR(check_same_shape(x, out, op, "x", "out"));
  HS_RETURN_IF_ERROR(check_contiguous(ids, DType::I32, n, k, op, "ids"));
  HS_RETURN_IF_ERROR(check_contiguous(weights, DType::F32, n, k, op, "weights"));
  if (x.data == out.data) return make_error(StatusCode::kInvalidArgument, "cuda {}: out aliases x", op);
  HS_RETURN_IF_ERROR(grow(moe_h_, static_cast<size_t>(n * k * F) * sizeof(float), "the routed experts' hidden rows"));
  float* h = static_cast<float*>(moe_h_.ptr);
  HS_RETURN_IF_ERROR(launched(
      launch_moe_gate_up(crows_of(x), gw, uw, ids.as<const int32_t>(), static_cast<int>(k), static_cast<int>(E), h, stream_),
      op));
  return launched(launch_moe_down(h, F, dw, ids.as<const int32_t>(), weights.f32(), static_cast<int>(k),
                                  static_cast<int>(E), rows_of(out), stream_),
                  op);
}

Status CudaBackend::add_sigmoid_gated(Tensor x, const Tensor& y, const Tensor& gate) {
  const char* op = "add_sigmoid_gated";
  OpProfile::Scope prof(&profile_, op, stream_);
  clear_input_tag();
  HS_RETURN_IF_ERROR(check_f32(x, op, "x"));
  HS_RETURN_IF_ERROR(check_f32(y, op, "y"));
  HS_RETURN_IF_ERROR(check_f32(gate, op, "gate"));
  HS_RETURN_IF_ERROR(check_same_shape(x, y, op, "x", "y"));
  if (gate.rows != x.rows || gate.cols != 1)
    return make_error(StatusCode::kInvalidArgument, "cuda {}: gate {} for x {}", op, shape(gate), shape(x));
  return launched(launch_add_sigmoid_gated(rows_of(x), crows_of(y), crows_of(gate), stream_), op);
}

}  // namespace hs::cuda
