// model/hybrid_decoder.cpp — the qwen35 / qwen3next forward pass over the Backend (hybrid_decoder.h).
#include "model/hybrid_decoder.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "model/forward_plan.h"
#include "model/weight_prep.h"
#include "model/hf_model.h"

namespace hs {
namespace {

constexpr int64_t kDefaultWorkspaceTokens = 512;
constexpr float kL2NormEps = 1e-6f;  // transformers' l2norm in the delta rule


// Columns [col, col + cols) of rows [n][width] f32.
Tensor columns(const Tensor& t, int64_t col, int64_t cols) {
  Tensor v = t;
  v.data = t.f32() + col;
  v.cols = cols;
  return v;
}

}  // namespace

Result<std::unique_ptr<HybridDecoder>> HybridDecoder::load(const std::string& path, Device device) {
  HS_ASSIGN_OR_RETURN(auto file, gguf::File::open(path));
  return create(std::move(file), device);
}

Result<std::unique_ptr<HybridDecoder>> HybridDecoder::load_hf(const std::string& dir, Device device) {
  HS_ASSIGN_OR_RETURN(auto file, load_hf_model(dir));
  return create(std::move(file), device);
}

Result<std::unique_ptr<HybridDecoder>> HybridDecoder::create(std::unique_ptr<gguf::File> file, Device device) {
  std::unique_ptr<HybridDecoder> d(new HybridDecoder());
  d->file_ = std::move(file);
  HS_ASSIGN_OR_RETURN(d->config_, load_model_config(*d->file_));
  if (!d->config_.is_hybrid())
    return make_error(StatusCode::kInvalidArgument, "{} is not a hybrid model (load it with Decoder)",
                      d->config_.arch_name);
  HS_ASSIGN_OR_RETURN(d->weights_, load_weights(*d->file_, d->config_));
  HS_ASSIGN_OR_RETURN(d->backend_, make_backend(device));
  HS_RETURN_IF_ERROR(d->prepare_weights());
  HS_RETURN_IF_ERROR(d->reserve(kDefaultWorkspaceTokens));
  return d;
}

KvGeometry HybridDecoder::kv_geometry(int page_tokens, KvDtype dtype) const {
  return KvGeometry{config_.n_attn_layers(), config_.n_head_kv, config_.head_dim, page_tokens, dtype};
}

int64_t HybridDecoder::weight_bytes() const {
  int64_t n = 0;
  for (const auto& t : file_->tensors()) n += static_cast<int64_t>(t.n_bytes);
  return n;
}

Status HybridDecoder::set_states(RecurrentPool* states) {
  if (states_ && states_ != states) states_->set_copier({});
  states_ = states;
  if (!states) return Status::ok();
  HS_RETURN_IF_ERROR(reserve_states(states->n_total()));
  states->set_copier([this](int32_t src, int32_t dst) { return copy_state(src, dst); });
  return Status::ok();
}

Status HybridDecoder::copy_state(int32_t src, int32_t dst) {
  if (src < 0 || dst < 0 || src >= state_slots_ || dst >= state_slots_)
    return make_error(StatusCode::kInvalidArgument, "recurrent state copy {} -> {} outside the {} slots", src, dst,
                      state_slots_);
  if (src == dst) return Status::ok();
  for (size_t i = 0; i < conv_state_.size(); ++i) {
    HS_RETURN_IF_ERROR(backend_->copy(conv_state_[i].slice_rows(src, src + 1), conv_state_[i].slice_rows(dst, dst + 1)));
    HS_RETURN_IF_ERROR(backend_->copy(delta_state_[i].slice_rows(src, src + 1), delta_state_[i].slice_rows(dst, dst + 1)));
  }
  return Status::ok();
}

Result<std::span<float>> HybridDecoder::forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv,
                                                ThreadPool& pool) {
  if (!states_)
    return make_error(StatusCode::kInvalidArgument, "hybrid forward: no recurrent-state pool attached (set_states)");
  return forward(batch, seqs, kv, *states_, pool);
}

int64_t HybridDecoder::state_bytes_per_slot() const {
  const ModelConfig& c = config_;
  const int64_t per_layer = int64_t{c.ssm_conv_kernel - 1} * c.ssm_conv_dim() +
                            int64_t{c.ssm_n_v_heads} * c.ssm_k_dim * c.ssm_v_dim;
  return (c.n_layer - c.n_attn_layers()) * per_layer * 4;
}

Status HybridDecoder::prepare_weights() {
  Backend& b = *backend_;
  const ModelConfig& c = config_;
  auto mat = [&](const WeightView& w, const std::string& name, Tensor& out) { return prepare_matrix(b, w, name, out); };
  auto group = [&](std::initializer_list<const WeightView*> w, std::initializer_list<std::string> names,
                   std::initializer_list<Tensor*> out) { return prepare_group(b, w, names, out); };
  auto vec = [&](const std::vector<float>& v, const std::string& name, Tensor& out) -> Status {
    HS_ASSIGN_OR_RETURN(out, b.prepare_vector(v, name));
    return Status::ok();
  };
  HS_RETURN_IF_ERROR(mat(weights_.token_embd, "token_embd.weight", token_embd_));
  HS_RETURN_IF_ERROR(mat(weights_.output, c.tied_output ? "token_embd.weight" : "output.weight", output_));
  HS_RETURN_IF_ERROR(vec(weights_.output_norm, "output_norm.weight", output_norm_));
  layers_.resize(c.n_layer);
  int n_kv = 0, n_state = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = weights_.layers[il];
    LayerTensors& T = layers_[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    HS_RETURN_IF_ERROR(vec(L.attn_norm, p + "attn_norm.weight", T.attn_norm));
    HS_RETURN_IF_ERROR(vec(L.ffn_norm, p + "post_attention_norm.weight", T.ffn_norm));
    if (c.is_moe()) {
      HS_RETURN_IF_ERROR(mat(L.ffn_gate_inp, p + "ffn_gate_inp.weight", T.ffn_gate_inp));
      HS_RETURN_IF_ERROR(mat(L.ffn_gate_exps, p + "ffn_gate_exps.weight", T.gate_exps));
      HS_RETURN_IF_ERROR(mat(L.ffn_up_exps, p + "ffn_up_exps.weight", T.up_exps));
      HS_RETURN_IF_ERROR(mat(L.ffn_down_exps, p + "ffn_down_exps.weight", T.down_exps));
      HS_RETURN_IF_ERROR(group({&L.ffn_gate_shexp, &L.ffn_up_shexp, &L.ffn_gate_inp_shexp},
                               {p + "ffn_gate_shexp.weight", p + "ffn_up_shexp.weight", p + "ffn_gate_inp_shexp.weight"},
                               {&T.gate_shexp, &T.up_shexp, &T.gate_inp_shexp}));
      HS_RETURN_IF_ERROR(mat(L.ffn_down_shexp, p + "ffn_down_shexp.weight", T.down_shexp));
    } else {
      HS_RETURN_IF_ERROR(group({&L.w_gate, &L.w_up}, {p + "ffn_gate.weight", p + "ffn_up.weight"}, {&T.w_gate, &T.w_up}));
      HS_RETURN_IF_ERROR(mat(L.w_down, p + "ffn_down.weight", T.w_down));
    }
    if (!c.layer_is_linear[il]) {
      T.kv_layer = n_kv++;
      HS_RETURN_IF_ERROR(group({&L.wq, &L.wk, &L.wv}, {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"},
                               {&T.wq, &T.wk, &T.wv}));
      HS_RETURN_IF_ERROR(mat(L.wo, p + "attn_output.weight", T.wo));
      HS_RETURN_IF_ERROR(vec(L.q_norm, p + "attn_q_norm.weight", T.q_norm));
      HS_RETURN_IF_ERROR(vec(L.k_norm, p + "attn_k_norm.weight", T.k_norm));
      continue;
    }
    T.state_layer = n_state++;
    if (c.ssm_fused_ba)
      HS_RETURN_IF_ERROR(group({&L.ssm_qkv, &L.ssm_z, &L.ssm_ba},
                               {p + "attn_qkv.weight", p + "attn_gate.weight", p + "ssm_ba.weight"},
                               {&T.ssm_qkv, &T.ssm_z, &T.ssm_ba}));
    else
      HS_RETURN_IF_ERROR(group({&L.ssm_qkv, &L.ssm_z, &L.ssm_beta, &L.ssm_alpha},
                               {p + "attn_qkv.weight", p + "attn_gate.weight", p + "ssm_beta.weight", p + "ssm_alpha.weight"},
                               {&T.ssm_qkv, &T.ssm_z, &T.ssm_beta, &T.ssm_alpha}));
    HS_RETURN_IF_ERROR(mat(L.ssm_out, p + "ssm_out.weight", T.ssm_out));
    HS_RETURN_IF_ERROR(vec(L.ssm_conv, p + "ssm_conv1d.weight", T.ssm_conv));
    HS_RETURN_IF_ERROR(vec(L.ssm_a, p + "ssm_a", T.ssm_a));
    HS_RETURN_IF_ERROR(vec(L.ssm_dt_bias, p + "ssm_dt.bias", T.ssm_dt_bias));
    HS_RETURN_IF_ERROR(vec(L.ssm_norm, p + "ssm_norm.weight", T.ssm_norm));
  }
  return Status::ok();
}

Status HybridDecoder::reserve(int64_t max_tokens) {
  if (max_tokens <= ws_.capacity) return Status::ok();
  const ModelConfig& c = config_;
  const int64_t d = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.is_moe() ? c.n_ff_shexp : c.n_ff,
                cd = c.ssm_conv_dim(), vd = c.ssm_value_dim(), nv = c.ssm_n_v_heads;
  // MoE-only buffers get width 1 in a dense model (carve_activations wants positive widths).
  const int64_t E = std::max(1, c.n_expert), k = std::max(1, c.n_expert_used), dm = c.is_moe() ? d : 1;
  Tensor* slots[] = {&ws_.x,    &ws_.h,          &ws_.o,      &ws_.qg,    &ws_.q,     &ws_.att,
                     &ws_.k,    &ws_.v,          &ws_.k_pre,  &ws_.ffn_gate, &ws_.ffn_up, &ws_.qkv,  &ws_.conv,
                     &ws_.z,    &ws_.core,       &ws_.ssm_b,  &ws_.ssm_a,  &ws_.ssm_ba, &ws_.shexp, &ws_.shexp_gate,
                     &ws_.router, &ws_.moe_w,    &ws_.moe_ids};
  const int64_t widths[] = {d, d, d, 2 * qd, qd, qd, kvd, kvd, kvd, ff, ff, cd, cd, vd, vd, nv, nv, 2 * nv, dm, 1, E, k, k};
  static_assert(std::size(slots) == std::size(widths));
  HS_RETURN_IF_ERROR(carve_activations(*backend_, max_tokens, widths, slots, "the hybrid activation workspace", ws_.mem));
  ws_.moe_ids.dtype = DType::I32;  // carved as f32 rows of the same 4-byte width
  ws_.capacity = max_tokens;
  return Status::ok();
}

Status HybridDecoder::reserve_logits(int64_t rows) {
  return ws_.out.reserve(*backend_, config_.n_embd, config_.n_vocab, rows);
}

Status HybridDecoder::reserve_states(int32_t n_slots) {
  const ModelConfig& c = config_;
  const int n_linear = c.n_layer - c.n_attn_layers();
  const int64_t conv_floats = int64_t{c.ssm_conv_kernel - 1} * c.ssm_conv_dim();
  const int64_t delta_floats = int64_t{c.ssm_n_v_heads} * c.ssm_k_dim * c.ssm_v_dim;
  state_mem_.reset();
  conv_state_.clear();
  delta_state_.clear();
  HS_ASSIGN_OR_RETURN(state_mem_, backend_->alloc(static_cast<size_t>(state_bytes_per_slot()) * n_slots,
                                                  "the recurrent state slots"));
  float* p = static_cast<float*>(state_mem_.data());
  for (int i = 0; i < n_linear; ++i) {
    conv_state_.push_back(Tensor::matrix(p, DType::F32, n_slots, conv_floats, backend_->device()));
    p += n_slots * conv_floats;
    delta_state_.push_back(Tensor::matrix(p, DType::F32, n_slots, delta_floats, backend_->device()));
    p += n_slots * delta_floats;
  }
  state_slots_ = n_slots;
  return Status::ok();
}

Result<std::span<float>> HybridDecoder::forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv,
                                                RecurrentPool& states, ThreadPool& pool) {
  const int64_t n = batch.size();
  if (n == 0) return std::span<float>();
  HS_RETURN_IF_ERROR(sparse_ready());
  if (&states.kv() != &kv)
    return make_error(StatusCode::kInvalidArgument, "hybrid forward: the recurrent pool is not over this KV cache");
  if (kv.geometry().n_layer != config_.n_attn_layers())
    return make_error(StatusCode::kInvalidArgument, "hybrid forward: the KV cache has {} layers, the model {} attention layers",
                      kv.geometry().n_layer, config_.n_attn_layers());
  if (state_slots_ < states.n_total()) {
    if (state_slots_ > 0 && states.n_used() > 0)
      return make_error(StatusCode::kInvalidArgument,
                        "hybrid forward: a pool of {} slots for state memory of {} (call reserve_states first)",
                        states.n_total(), state_slots_);
    HS_RETURN_IF_ERROR(reserve_states(states.n_total()));
  }
  HS_RETURN_IF_ERROR(build_forward_plan(batch, seqs, kv, pool, config_.n_vocab, plan_, next_pos_));
  plan_.state_slots.resize(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) {
    bool fresh = false;
    HS_ASSIGN_OR_RETURN(plan_.state_slots[s], states.slot(*seqs[s], &fresh));
    if (fresh && seqs[s]->n_tokens > 0)
      return make_error(StatusCode::kUnsupported,
                        "hybrid forward: sequence {} resumes at position {} without its recurrent state (no "
                        "checkpoint of it was restored)",
                        s, seqs[s]->n_tokens);
  }
  HS_RETURN_IF_ERROR(reserve(n));
  HS_RETURN_IF_ERROR(reserve_logits(static_cast<int64_t>(plan_.logit_rows.size())));
  HS_RETURN_IF_ERROR(backend_->begin_step(plan_));
  Status st = backend_->run_step([&] { return run_layers(n); });
  Status end = backend_->end_step();
  if (!st.is_ok()) return st;
  HS_RETURN_IF_ERROR(end);
  for (size_t s = 0; s < seqs.size(); ++s) seqs[s]->n_tokens = next_pos_[s];
  const int64_t n_out = static_cast<int64_t>(plan_.logit_rows.size());
  const size_t n_floats = static_cast<size_t>(n_out * config_.n_vocab);
  if (n_out == 0) return std::span<float>();
  if (backend_->device() == Device::kCpu) return std::span<float>(ws_.out.logits.f32(), n_floats);
  float* host = static_cast<float*>(ws_.out.host.data());
  HS_RETURN_IF_ERROR(backend_->to_host(ws_.out.logits.slice_rows(0, n_out), host));
  return std::span<float>(host, n_floats);
}

Status HybridDecoder::forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, RecurrentPool& states,
                              ThreadPool& pool, std::vector<float>& logits) {
  HS_ASSIGN_OR_RETURN(std::span<float> rows, forward(batch, seqs, kv, states, pool));
  logits.assign(rows.begin(), rows.end());
  return Status::ok();
}

Status HybridDecoder::linear_mixer(int il, int64_t n) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const LayerTensors& L = layers_[il];
  const Tensor h = ws_.h.slice_rows(0, n), o = ws_.o.slice_rows(0, n);
  const Tensor qkv = ws_.qkv.slice_rows(0, n), conv = ws_.conv.slice_rows(0, n);
  const Tensor z = ws_.z.slice_rows(0, n), core = ws_.core.slice_rows(0, n);
  const Tensor beta = ws_.ssm_b.slice_rows(0, n), g = ws_.ssm_a.slice_rows(0, n);
  if (c.ssm_fused_ba) {
    // ssm_ba rows per key head: [b of its r v-heads | a of them] (r = n_v / n_k): [n][n_k][2r]
    // split into beta [n][n_v] and a [n][n_v], v-head g · r + i.
    const Tensor ba = ws_.ssm_ba.slice_rows(0, n);
    const Tensor ws[] = {L.ssm_qkv, L.ssm_z, L.ssm_ba};
    const Tensor ys[] = {qkv, z, ba};
    HS_RETURN_IF_ERROR(b.matmul_multi(ws, h, ys));
    const int64_t r = c.ssm_n_v_heads / c.ssm_n_k_heads;
    const Tensor per_k = ba.reshaped(2 * r);  // [n · n_k][2r]
    HS_RETURN_IF_ERROR(b.copy(columns(per_k, 0, r), beta.reshaped(r)));
    HS_RETURN_IF_ERROR(b.copy(columns(per_k, r, r), g.reshaped(r)));
  } else {
    const Tensor ws[] = {L.ssm_qkv, L.ssm_z, L.ssm_beta, L.ssm_alpha};
    const Tensor ys[] = {qkv, z, beta, g};
    HS_RETURN_IF_ERROR(b.matmul_multi(ws, h, ys));
  }
  HS_RETURN_IF_ERROR(b.conv1d_causal(qkv, L.ssm_conv, c.ssm_conv_kernel, conv_state_[L.state_layer], conv));
  const int64_t kd = c.ssm_key_dim();
  const Tensor q = columns(conv, 0, kd), k = columns(conv, kd, kd), v = columns(conv, 2 * kd, c.ssm_value_dim());
  // q, k L2-normalised (q scaled) and the gates, inside the rule (one kernel on CUDA).
  const DeltaPrologue pro{kL2NormEps, 1.0f / std::sqrt(static_cast<float>(c.ssm_k_dim)), L.ssm_a, L.ssm_dt_bias};
  DeltaRuleParams dp{c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_k_dim, c.ssm_v_dim, c.ssm_v_tiled};
  dp.prologue = &pro;
  HS_RETURN_IF_ERROR(b.gated_delta_rule(q, k, v, g, beta, delta_state_[L.state_layer], core, dp));
  HS_RETURN_IF_ERROR(b.rms_norm_gated(core, z, L.ssm_norm, c.rms_eps, core));
  return b.matmul(L.ssm_out, core, o);
}

Status HybridDecoder::attention_mixer(int il, int64_t n) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const LayerTensors& L = layers_[il];
  const int hd = c.head_dim;
  const Tensor h = ws_.h.slice_rows(0, n), o = ws_.o.slice_rows(0, n), qg = ws_.qg.slice_rows(0, n);
  const Tensor q = ws_.q.slice_rows(0, n), att = ws_.att.slice_rows(0, n);
  const Tensor k = ws_.k.slice_rows(0, n), v = ws_.v.slice_rows(0, n);
  {
    const Tensor ws[] = {L.wq, L.wk, L.wv};
    const Tensor ys[] = {qg, k, v};
    HS_RETURN_IF_ERROR(b.matmul_multi(ws, h, ys));
  }
  // [n][heads][q | gate]: q's norm reads its half of each head's row and writes q [n][heads · hd];
  // the output gate is read in place (its half, strided) after attention. No copies.
  const Tensor per_head = qg.reshaped(2 * hd);  // [n · heads][2 · hd]
  if (key_observer_) {  // the eval's observer also sees the keys before RoPE: the ops one by one
    HS_RETURN_IF_ERROR(b.rms_norm(columns(per_head, 0, hd), L.q_norm, c.rms_eps, q.reshaped(hd)));
    HS_RETURN_IF_ERROR(b.rms_norm(k.reshaped(hd), L.k_norm, c.rms_eps, k.reshaped(hd)));
    const Tensor k_pre = ws_.k_pre.slice_rows(0, n);
    HS_RETURN_IF_ERROR(b.copy(k, k_pre));
    HS_RETURN_IF_ERROR(b.rope_partial(q, hd, c.rope_dims, c.rope_theta, /*neox=*/true));
    HS_RETURN_IF_ERROR(b.rope_partial(k, hd, c.rope_dims, c.rope_theta, /*neox=*/true));
    key_observer_(L.kv_layer, k_pre.f32(), k.f32(), q.f32(), v.f32(), n);
    HS_RETURN_IF_ERROR(b.kv_write(L.kv_layer, k, v));
  } else {
    HS_RETURN_IF_ERROR(b.qk_norm_rope_kv_write(L.kv_layer, columns(per_head, 0, hd), q, k, v, L.q_norm, L.k_norm,
                                               c.rms_eps, hd, c.rope_dims, c.rope_theta, /*neox=*/true));
  }
  const AttentionParams ap{c.n_head, c.n_head_kv, hd, c.attn_scale, 0};
  HS_RETURN_IF_ERROR(b.attention(L.kv_layer, q, att, ap));
  HS_RETURN_IF_ERROR(b.sigmoid_mul(att.reshaped(hd), columns(per_head, hd, hd)));
  return b.matmul(L.wo, att, o);
}

Status HybridDecoder::dense_ffn(int il, int64_t n) {
  Backend& b = *backend_;
  const LayerTensors& L = layers_[il];
  const Tensor h = ws_.h.slice_rows(0, n), o = ws_.o.slice_rows(0, n);
  const Tensor fg = ws_.ffn_gate.slice_rows(0, n), fu = ws_.ffn_up.slice_rows(0, n);
  const Tensor ws[] = {L.w_gate, L.w_up};
  const Tensor ys[] = {fg, fu};
  HS_RETURN_IF_ERROR(b.matmul_multi(ws, h, ys));
  HS_RETURN_IF_ERROR(b.glu(GluKind::kSilu, fg, fu, fg));
  return b.matmul(L.w_down, fg, o);
}

// o = routed experts + sigmoid(h · gate_inp_shexp) · shared expert (transformers'
// Qwen3NextSparseMoeBlock; llama.cpp's qwen3next build_layer_ffn).
Status HybridDecoder::moe_ffn(int il, int64_t n) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const LayerTensors& L = layers_[il];
  const Tensor h = ws_.h.slice_rows(0, n), o = ws_.o.slice_rows(0, n);
  const Tensor fg = ws_.ffn_gate.slice_rows(0, n), fu = ws_.ffn_up.slice_rows(0, n);
  const Tensor router = ws_.router.slice_rows(0, n), ids = ws_.moe_ids.slice_rows(0, n), w = ws_.moe_w.slice_rows(0, n);
  const Tensor sh = ws_.shexp.slice_rows(0, n), shg = ws_.shexp_gate.slice_rows(0, n);
  const MoeParams mp{c.n_expert, c.n_expert_used, c.expert_norm_topk};
  HS_RETURN_IF_ERROR(b.matmul(L.ffn_gate_inp, h, router));
  HS_RETURN_IF_ERROR(b.moe_route(router, ids, w, mp));
  HS_RETURN_IF_ERROR(b.moe_experts(h, L.gate_exps, L.up_exps, L.down_exps, ids, w, o, mp));
  {
    const Tensor ws[] = {L.gate_shexp, L.up_shexp, L.gate_inp_shexp};
    const Tensor ys[] = {fg, fu, shg};
    HS_RETURN_IF_ERROR(b.matmul_multi(ws, h, ys));
  }
  HS_RETURN_IF_ERROR(b.glu(GluKind::kSilu, fg, fu, fg));
  HS_RETURN_IF_ERROR(b.matmul(L.down_shexp, fg, sh));
  return b.add_sigmoid_gated(o, sh, shg);
}

Status HybridDecoder::run_layers(int64_t n) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const Tensor x = ws_.x.slice_rows(0, n), h = ws_.h.slice_rows(0, n), o = ws_.o.slice_rows(0, n);
  HS_RETURN_IF_ERROR(b.embedding(token_embd_, x));
  HS_RETURN_IF_ERROR(b.rms_norm(x, layers_[0].attn_norm, c.rms_eps, h));
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerTensors& L = layers_[il];
    HS_RETURN_IF_ERROR(c.layer_is_linear[il] ? linear_mixer(il, n) : attention_mixer(il, n));
    HS_RETURN_IF_ERROR(b.add_rms_norm(x, o, L.ffn_norm, c.rms_eps, h));
    HS_RETURN_IF_ERROR(c.is_moe() ? moe_ffn(il, n) : dense_ffn(il, n));
    if (il + 1 < c.n_layer) HS_RETURN_IF_ERROR(b.add_rms_norm(x, o, layers_[il + 1].attn_norm, c.rms_eps, h));
    else HS_RETURN_IF_ERROR(b.add(x, o));
  }
  const int64_t n_out = static_cast<int64_t>(plan_.logit_rows.size());
  if (n_out == 0) return Status::ok();
  const Tensor hsel = ws_.out.hsel.slice_rows(0, n_out), lg = ws_.out.logits.slice_rows(0, n_out);
  HS_RETURN_IF_ERROR(b.logit_rows(x, hsel));
  HS_RETURN_IF_ERROR(b.rms_norm(hsel, output_norm_, c.rms_eps, hsel));
  return b.matmul(output_, hsel, lg);
}

}  // namespace hs
