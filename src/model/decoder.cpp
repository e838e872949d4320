// model/decoder.cpp — forward pass of the llama/gemma3/qwen2 decoder over the Backend (decoder.h).
#include "model/decoder.h"

#include <algorithm>
#include <initializer_list>

#include "model/forward_plan.h"
#include "model/weight_prep.h"

namespace hs {

int64_t Decoder::weight_bytes() const {
  int64_t n = 0;
  for (const auto& t : file_->tensors()) n += static_cast<int64_t>(t.n_bytes);
  return n;
}

namespace {

constexpr int64_t kDefaultWorkspaceTokens = 512;


}  // namespace

Result<std::unique_ptr<Decoder>> Decoder::load(const std::string& path, Device device) {
  HS_ASSIGN_OR_RETURN(auto file, gguf::File::open(path));
  return create(std::move(file), device);
}

Result<std::unique_ptr<Decoder>> Decoder::create(std::unique_ptr<gguf::File> file, Device device) {
  std::unique_ptr<Decoder> d(new Decoder());
  d->file_ = std::move(file);
  HS_ASSIGN_OR_RETURN(d->config_, load_model_config(*d->file_));
  if (d->config_.is_hybrid())
    return make_error(StatusCode::kUnsupported,
                      "{} is a hybrid (Gated-DeltaNet) model: load it with HybridDecoder (app/loaded_model.h picks "
                      "the right one)", d->config_.arch_name);
  HS_ASSIGN_OR_RETURN(d->weights_, load_weights(*d->file_, d->config_));
  HS_ASSIGN_OR_RETURN(d->backend_, make_backend(device));
  HS_RETURN_IF_ERROR(d->prepare_weights());
  HS_RETURN_IF_ERROR(d->reserve(kDefaultWorkspaceTokens));
  return d;
}

Status Decoder::prepare_weights() {
  Backend& b = *backend_;
  const ModelConfig& c = config_;
  auto mat = [&](const WeightView& w, const std::string& name, Tensor& out) { return prepare_matrix(b, w, name, out); };
  // Weights that share an input (one matmul_multi) are prepared together (a device may place them
  // back to back).
  auto group = [&](std::initializer_list<const WeightView*> w, std::initializer_list<std::string> names,
                   std::initializer_list<Tensor*> out) { return prepare_group(b, w, names, out); };
  auto vec = [&](const std::vector<float>& v, const std::string& name, Tensor& out) -> Status {
    if (v.empty()) return Status::ok();
    HS_ASSIGN_OR_RETURN(out, b.prepare_vector(v, name));
    return Status::ok();
  };
  HS_RETURN_IF_ERROR(mat(weights_.token_embd, "token_embd.weight", token_embd_));
  HS_RETURN_IF_ERROR(mat(weights_.output, c.tied_output ? "token_embd.weight" : "output.weight", output_));
  HS_RETURN_IF_ERROR(vec(weights_.output_norm, "output_norm.weight", output_norm_));
  layers_.resize(c.n_layer);
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = weights_.layers[il];
    LayerTensors& T = layers_[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    HS_RETURN_IF_ERROR(vec(L.attn_norm, p + "attn_norm.weight", T.attn_norm));
    HS_RETURN_IF_ERROR(group({&L.wq, &L.wk, &L.wv}, {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"},
                             {&T.wq, &T.wk, &T.wv}));
    HS_RETURN_IF_ERROR(mat(L.wo, p + "attn_output.weight", T.wo));
    HS_RETURN_IF_ERROR(vec(L.bq, p + "attn_q.bias", T.bq));
    HS_RETURN_IF_ERROR(vec(L.bk, p + "attn_k.bias", T.bk));
    HS_RETURN_IF_ERROR(vec(L.bv, p + "attn_v.bias", T.bv));
    HS_RETURN_IF_ERROR(vec(L.q_norm, p + "attn_q_norm.weight", T.q_norm));
    HS_RETURN_IF_ERROR(vec(L.k_norm, p + "attn_k_norm.weight", T.k_norm));
    HS_RETURN_IF_ERROR(vec(L.post_attn_norm, p + "post_attention_norm.weight", T.post_attn_norm));
    HS_RETURN_IF_ERROR(vec(L.ffn_norm, p + "ffn_norm.weight", T.ffn_norm));
    HS_RETURN_IF_ERROR(group({&L.w_gate, &L.w_up}, {p + "ffn_gate.weight", p + "ffn_up.weight"}, {&T.w_gate, &T.w_up}));
    HS_RETURN_IF_ERROR(mat(L.w_down, p + "ffn_down.weight", T.w_down));
    HS_RETURN_IF_ERROR(vec(L.post_ffn_norm, p + "post_ffw_norm.weight", T.post_ffn_norm));
  }
  return Status::ok();
}

Status Decoder::reserve(int64_t max_tokens) {
  if (max_tokens <= ws_.capacity) return Status::ok();
  const ModelConfig& c = config_;
  const int64_t widths[] = {c.n_embd, c.n_embd, c.n_embd, c.q_dim(), c.q_dim(), c.kv_dim(), c.kv_dim(), c.kv_dim(),
                            c.n_ff, c.n_ff};
  Tensor* slots[] = {&ws_.x, &ws_.h, &ws_.o, &ws_.q, &ws_.att, &ws_.k, &ws_.v, &ws_.k_pre, &ws_.gate, &ws_.up};
  HS_RETURN_IF_ERROR(carve_activations(*backend_, max_tokens, widths, slots, "the activation workspace", ws_.mem));
  ws_.capacity = max_tokens;
  return Status::ok();
}

Status Decoder::reserve_logits(int64_t rows) {
  return ws_.out.reserve(*backend_, config_.n_embd, config_.n_vocab, rows);
}

std::vector<bool> Decoder::sparse_kv_layers() const {
  std::vector<bool> full(config_.n_layer);
  for (int l = 0; l < config_.n_layer; ++l) full[l] = !(config_.layer_is_swa[l] && config_.sliding_window > 0);
  return full;
}

Result<std::span<float>> Decoder::forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv,
                                                ThreadPool& pool) {
  const int64_t n = batch.size();
  if (n == 0) return std::span<float>();
  HS_RETURN_IF_ERROR(sparse_ready());
  HS_RETURN_IF_ERROR(build_forward_plan(batch, seqs, kv, pool, config_.n_vocab, plan_, next_pos_));
  HS_RETURN_IF_ERROR(reserve(n));
  HS_RETURN_IF_ERROR(reserve_logits(static_cast<int64_t>(plan_.logit_rows.size())));
  HS_RETURN_IF_ERROR(backend_->begin_step(plan_));
  // The step ends however it ends (the CPU's device-tier pins are dropped, a device syncs).
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

Status Decoder::forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, ThreadPool& pool,
                        std::vector<float>& logits) {
  HS_ASSIGN_OR_RETURN(std::span<float> rows, forward(batch, seqs, kv, pool));
  logits.assign(rows.begin(), rows.end());
  return Status::ok();
}

Status Decoder::run_layers(int64_t n) {
  const ModelConfig& c = config_;
  Backend& b = *backend_;
  const int hd = c.head_dim;
  const Tensor x = ws_.x.slice_rows(0, n), h = ws_.h.slice_rows(0, n), o = ws_.o.slice_rows(0, n);
  const Tensor q = ws_.q.slice_rows(0, n), att = ws_.att.slice_rows(0, n);
  const Tensor k = ws_.k.slice_rows(0, n), v = ws_.v.slice_rows(0, n);
  const Tensor gate = ws_.gate.slice_rows(0, n), up = ws_.up.slice_rows(0, n);
  const bool neox = c.rope_style == RopeStyle::kNeox;

  HS_RETURN_IF_ERROR(b.embedding(token_embd_, x));
  if (c.embed_scale != 1.0f) HS_RETURN_IF_ERROR(b.scale(x, c.embed_scale));
  // Each residual add is fused with the norm that reads its sum next (add_rms_norm); the last
  // layer's FFN add stands alone (the final norm runs on the logit rows only).
  if (c.n_layer > 0) HS_RETURN_IF_ERROR(b.rms_norm(x, layers_[0].attn_norm, c.rms_eps, h));
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerTensors& L = layers_[il];
    const bool swa = c.layer_is_swa[il];
    {  // q [n][q_dim], k [n][kv_dim], v [n][kv_dim] in one dispatch
      const Tensor ws[] = {L.wq, L.wk, L.wv};
      const Tensor ys[] = {q, k, v};
      HS_RETURN_IF_ERROR(b.matmul_multi(ws, h, ys));
    }
    if (!L.bq.empty()) HS_RETURN_IF_ERROR(b.add_bias(q, L.bq));  // qwen2
    if (!L.bk.empty()) HS_RETURN_IF_ERROR(b.add_bias(k, L.bk));
    if (!L.bv.empty()) HS_RETURN_IF_ERROR(b.add_bias(v, L.bv));
    if (c.qk_norm) {  // per head: rows of head_dim
      HS_RETURN_IF_ERROR(b.rms_norm(q.reshaped(hd), L.q_norm, c.rms_eps, q.reshaped(hd)));
      HS_RETURN_IF_ERROR(b.rms_norm(k.reshaped(hd), L.k_norm, c.rms_eps, k.reshaped(hd)));
    }
    const Tensor k_pre = ws_.k_pre.slice_rows(0, n);
    if (key_observer_) HS_RETURN_IF_ERROR(b.copy(k, k_pre));
    const float theta = swa ? c.rope_theta_local : c.rope_theta;
    HS_RETURN_IF_ERROR(b.rope_qk_kv_write(il, q, k, v, hd, theta, neox));
    if (key_observer_) key_observer_(il, k_pre.f32(), k.f32(), q.f32(), v.f32(), n);
    AttentionParams ap{c.n_head, c.n_head_kv, hd, c.attn_scale, swa && c.sliding_window > 0 ? c.sliding_window : 0};
    HS_RETURN_IF_ERROR(b.attention(il, q, att, ap));
    HS_RETURN_IF_ERROR(b.matmul(L.wo, att, o));  // [n][d]
    if (c.post_norms) HS_RETURN_IF_ERROR(b.rms_norm(o, L.post_attn_norm, c.rms_eps, o));
    HS_RETURN_IF_ERROR(b.add_rms_norm(x, o, L.ffn_norm, c.rms_eps, h));
    {  // gate, up [n][n_ff] in one dispatch
      const Tensor ws[] = {L.w_gate, L.w_up};
      const Tensor ys[] = {gate, up};
      HS_RETURN_IF_ERROR(b.matmul_multi(ws, h, ys));
    }
    HS_RETURN_IF_ERROR(b.glu(c.ffn_act == FfnActivation::kSilu ? GluKind::kSilu : GluKind::kGeluTanh, gate, up, gate));
    HS_RETURN_IF_ERROR(b.matmul(L.w_down, gate, o));  // [n][d]
    if (c.post_norms) HS_RETURN_IF_ERROR(b.rms_norm(o, L.post_ffn_norm, c.rms_eps, o));
    if (il + 1 < c.n_layer)
      HS_RETURN_IF_ERROR(b.add_rms_norm(x, o, layers_[il + 1].attn_norm, c.rms_eps, h));
    else
      HS_RETURN_IF_ERROR(b.add(x, o));
  }

  // Final norm + output projection for the rows that want logits.
  const int64_t n_out = static_cast<int64_t>(plan_.logit_rows.size());
  if (n_out == 0) return Status::ok();
  const Tensor hsel = ws_.out.hsel.slice_rows(0, n_out), lg = ws_.out.logits.slice_rows(0, n_out);
  HS_RETURN_IF_ERROR(b.logit_rows(x, hsel));
  HS_RETURN_IF_ERROR(b.rms_norm(hsel, output_norm_, c.rms_eps, hsel));
  HS_RETURN_IF_ERROR(b.matmul(output_, hsel, lg));
  if (c.final_logit_softcap > 0) HS_RETURN_IF_ERROR(b.softcap(lg, c.final_logit_softcap));
  return Status::ok();
}

}  // namespace hs
