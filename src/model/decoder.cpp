// model/decoder.cpp — forward pass of the llama/gemma3/qwen2 decoder over the Backend (decoder.h),
// on one rank or several in lockstep (tensor parallelism).
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

Result<std::unique_ptr<Decoder>> Decoder::load(const std::string& path, Device device, int tensor_parallel) {
  HS_ASSIGN_OR_RETURN(auto file, gguf::File::open(path));
  return create(std::move(file), device, tensor_parallel);
}

Result<std::unique_ptr<Decoder>> Decoder::create(std::unique_ptr<gguf::File> file, Device device,
                                                 int tensor_parallel) {
  std::unique_ptr<Decoder> d(new Decoder());
  d->file_ = std::move(file);
  HS_ASSIGN_OR_RETURN(d->config_, load_model_config(*d->file_));
  if (d->config_.is_hybrid())
    return make_error(StatusCode::kUnsupported,
                      "{} is a hybrid (Gated-DeltaNet) model: load it with HybridDecoder (app/loaded_model.h picks "
                      "the right one)", d->config_.arch_name);
  HS_ASSIGN_OR_RETURN(d->weights_, load_weights(*d->file_, d->config_));
  const int64_t down_block =
      d->weights_.layers.empty() ? 1 : dtype_info(d->weights_.layers[0].w_down.type).value_or(DTypeInfo{}).block_elems;
  HS_ASSIGN_OR_RETURN(std::vector<TpSlice> slices, plan_tensor_parallel(d->config_, tensor_parallel, down_block));
  Decoder* dp = d.get();
  HS_RETURN_IF_ERROR(d->ranks_.create(device, slices, [dp](Rank& R) { return dp->prepare_weights(R); }));
  HS_RETURN_IF_ERROR(d->reserve(kDefaultWorkspaceTokens));
  return d;
}

// Rank R's share of every weight (model/tensor_parallel.h); one rank gets the file's views whole.
Status Decoder::prepare_weights(Rank& R) {
  Backend& b = *R.backend;
  const ModelConfig& c = config_;
  const TpSlice& s = R.slice;
  const int64_t hd = c.head_dim;
  const int64_t q0 = s.q_head0 * hd, nq = s.n_q_heads * hd, k0 = s.kv_head0 * hd, nk = s.n_kv_heads * hd;
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
  // A slice of a per-feature vector (q/k/v biases); the whole vector for one rank.
  auto part = [&](const std::vector<float>& v, int64_t off, int64_t n) -> const std::vector<float>& {
    return s.size == 1 ? v : shards_.sub(v, off, n);
  };
  HS_RETURN_IF_ERROR(mat(weights_.token_embd, "token_embd.weight", R.token_embd));
  HS_RETURN_IF_ERROR(mat(ShardStore::rows(weights_.output, s.vocab0, s.n_vocab),
                         c.tied_output ? "token_embd.weight" : "output.weight", R.output));
  HS_RETURN_IF_ERROR(vec(weights_.output_norm, "output_norm.weight", R.output_norm));
  R.layers.resize(c.n_layer);
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = weights_.layers[il];
    LayerTensors& T = R.layers[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    const WeightView wq = ShardStore::rows(L.wq, q0, nq), wk = ShardStore::rows(L.wk, k0, nk),
                     wv = ShardStore::rows(L.wv, k0, nk);
    const WeightView gate = ShardStore::rows(L.w_gate, s.ff0, s.n_ff), up = ShardStore::rows(L.w_up, s.ff0, s.n_ff);
    HS_ASSIGN_OR_RETURN(const WeightView wo, shards_.cols(L.wo, q0, nq));
    HS_ASSIGN_OR_RETURN(const WeightView down, shards_.cols(L.w_down, s.ff0, s.n_ff));
    HS_RETURN_IF_ERROR(vec(L.attn_norm, p + "attn_norm.weight", T.attn_norm));
    HS_RETURN_IF_ERROR(group({&wq, &wk, &wv}, {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"},
                             {&T.wq, &T.wk, &T.wv}));
    HS_RETURN_IF_ERROR(mat(wo, p + "attn_output.weight", T.wo));
    HS_RETURN_IF_ERROR(vec(part(L.bq, q0, nq), p + "attn_q.bias", T.bq));
    HS_RETURN_IF_ERROR(vec(part(L.bk, k0, nk), p + "attn_k.bias", T.bk));
    HS_RETURN_IF_ERROR(vec(part(L.bv, k0, nk), p + "attn_v.bias", T.bv));
    HS_RETURN_IF_ERROR(vec(L.q_norm, p + "attn_q_norm.weight", T.q_norm));
    HS_RETURN_IF_ERROR(vec(L.k_norm, p + "attn_k_norm.weight", T.k_norm));
    HS_RETURN_IF_ERROR(vec(L.post_attn_norm, p + "post_attention_norm.weight", T.post_attn_norm));
    HS_RETURN_IF_ERROR(vec(L.ffn_norm, p + "ffn_norm.weight", T.ffn_norm));
    HS_RETURN_IF_ERROR(group({&gate, &up}, {p + "ffn_gate.weight", p + "ffn_up.weight"}, {&T.w_gate, &T.w_up}));
    HS_RETURN_IF_ERROR(mat(down, p + "ffn_down.weight", T.w_down));
    HS_RETURN_IF_ERROR(vec(L.post_ffn_norm, p + "post_ffw_norm.weight", T.post_ffn_norm));
  }
  return Status::ok();
}

Status Decoder::reserve(int64_t max_tokens) {
  for (Rank& R : ranks_.ranks()) {
    if (max_tokens <= R.ws.capacity) continue;
    const ModelConfig& c = config_;
    const TpSlice& s = R.slice;
    const int64_t q = static_cast<int64_t>(s.n_q_heads) * c.head_dim, kv = static_cast<int64_t>(s.n_kv_heads) * c.head_dim;
    const int64_t widths[] = {c.n_embd, c.n_embd, c.n_embd, q, q, kv, kv, kv, s.n_ff, s.n_ff};
    Workspace& w = R.ws;
    Tensor* slots[] = {&w.x, &w.h, &w.o, &w.q, &w.att, &w.k, &w.v, &w.k_pre, &w.gate, &w.up};
    HS_RETURN_IF_ERROR(ranks_.make_current(R));
    HS_RETURN_IF_ERROR(carve_activations(*R.backend, max_tokens, widths, slots, "the activation workspace", w.mem));
    w.capacity = max_tokens;
  }
  return Status::ok();
}

Status Decoder::reserve_logits(int64_t rows) {
  HS_RETURN_IF_ERROR(
      ranks_.each([&](Rank& R) { return R.ws.out.reserve(*R.backend, config_.n_embd, R.slice.n_vocab, rows); }));
  return ranks_.reserve_gathered(config_.n_embd, config_.n_vocab, rows);
}

std::vector<bool> Decoder::sparse_kv_layers() const {
  std::vector<bool> full(config_.n_layer);
  for (int l = 0; l < config_.n_layer; ++l) full[l] = !(config_.layer_is_swa[l] && config_.sliding_window > 0);
  return full;
}

Status Decoder::bind_sparse() {
  if (!ranks_.split()) return LanguageModel::bind_sparse();
  return rank_detail::check_sparse(ranks_.size(), hot_ != nullptr, sparse_, config_.n_head_kv);
}

Status Decoder::rebuild_sparse_metadata(KvCache& kv, const SeqKv& seq, int32_t n_tokens) {
  if (!ranks_.split()) return LanguageModel::rebuild_sparse_metadata(kv, seq, n_tokens);
  HS_RETURN_IF_ERROR(sparse_ready());
  return ranks_.rebuild_sparse_metadata(kv, seq, n_tokens, sparse_, [this] { return sparse_kv_layers(); },
                                        config_.attn_scale);
}

Status Decoder::set_kv_tier(const Backend::KvTier& t) { return ranks_.set_kv_tier(t); }

Status Decoder::all_reduce(Tensor Workspace::*which, int64_t n) {
  return ranks_.all_reduce([&](Rank& R) { return (R.ws.*which).slice_rows(0, n); });
}

Result<std::span<float>> Decoder::forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv,
                                                ThreadPool& pool) {
  const int64_t n = batch.size();
  if (n == 0) return std::span<float>();
  HS_RETURN_IF_ERROR(sparse_ready());
  if (ranks_.split() && key_observer_)
    return make_error(StatusCode::kUnsupported,
                      "the key observer (fit-sketch, eval recall) does not run with --tensor-parallel-size {} (run it "
                      "on one rank)", ranks_.size());
  HS_RETURN_IF_ERROR(build_forward_plan(batch, seqs, kv, pool, config_.n_vocab, plan_, next_pos_));
  HS_RETURN_IF_ERROR(ranks_.copy_plans(kv, plan_, sparse_, [this] { return sparse_kv_layers(); }, config_.attn_scale));
  HS_RETURN_IF_ERROR(reserve(n));
  HS_RETURN_IF_ERROR(reserve_logits(static_cast<int64_t>(plan_.logit_rows.size())));
  // The step ends however it ends (the CPU's device-tier pins are dropped, a device syncs).
  HS_RETURN_IF_ERROR(ranks_.step(plan_, sparse_, [&] { return run_layers(n); }));
  for (size_t s = 0; s < seqs.size(); ++s) seqs[s]->n_tokens = next_pos_[s];
  const int64_t n_out = static_cast<int64_t>(plan_.logit_rows.size());
  const size_t n_floats = static_cast<size_t>(n_out * config_.n_vocab);
  if (n_out == 0) return std::span<float>();
  LogitRows& out = ranks_.split() ? ranks_.gathered() : ranks_.front().ws.out;
  if (backend().device() == Device::kCpu) return std::span<float>(out.logits.f32(), n_floats);
  float* host = static_cast<float*>(out.host.data());
  HS_RETURN_IF_ERROR(ranks_.make_current(ranks_.front()));
  HS_RETURN_IF_ERROR(backend().to_host(out.logits.slice_rows(0, n_out), host));
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
  HS_RETURN_IF_ERROR(ranks_.each([&](Rank& R) -> Status {
    Backend& b = *R.backend;
    const Tensor x = R.ws.x.slice_rows(0, n), h = R.ws.h.slice_rows(0, n);
    HS_RETURN_IF_ERROR(b.embedding(R.token_embd, x));
    if (c.embed_scale != 1.0f) HS_RETURN_IF_ERROR(b.scale(x, c.embed_scale));
    // Each residual add is fused with the norm that reads its sum next (add_rms_norm); the last
    // layer's FFN add stands alone (the final norm runs on the logit rows only).
    if (c.n_layer > 0) HS_RETURN_IF_ERROR(b.rms_norm(x, R.layers[0].attn_norm, c.rms_eps, h));
    return Status::ok();
  }));
  for (int il = 0; il < c.n_layer; ++il) {
    HS_RETURN_IF_ERROR(ranks_.each([&](Rank& R) { return attention_block(R, il, n); }));
    HS_RETURN_IF_ERROR(all_reduce(&Workspace::o, n));
    HS_RETURN_IF_ERROR(ranks_.each([&](Rank& R) { return ffn_block(R, il, n); }));
    HS_RETURN_IF_ERROR(all_reduce(&Workspace::o, n));
    HS_RETURN_IF_ERROR(ranks_.each([&](Rank& R) { return close_layer(R, il, n); }));
  }

  // Final norm + output projection for the rows that want logits: each rank its vocabulary rows,
  // gathered side by side on rank 0 when there are several.
  const int64_t n_out = static_cast<int64_t>(plan_.logit_rows.size());
  if (n_out == 0) return Status::ok();
  HS_RETURN_IF_ERROR(ranks_.each([&](Rank& R) { return output_rows(R, n_out); }));
  HS_ASSIGN_OR_RETURN(const Tensor lg,
                      ranks_.gather_logits(n_out, [&](Rank& R) { return R.ws.out.logits.slice_rows(0, n_out); }));
  if (c.final_logit_softcap > 0) HS_RETURN_IF_ERROR(backend().softcap(lg, c.final_logit_softcap));
  return Status::ok();
}

// q/k/v of the rank's heads, RoPE and the KV write, attention, o = att · wo (this rank's columns:
// a partial sum of the layer's output when the model is split).
Status Decoder::attention_block(Rank& R, int il, int64_t n) {
  const ModelConfig& c = config_;
  Backend& b = *R.backend;
  const LayerTensors& L = R.layers[il];
  const int hd = c.head_dim;
  const bool swa = c.layer_is_swa[il];
  const Tensor h = R.ws.h.slice_rows(0, n), o = R.ws.o.slice_rows(0, n);
  const Tensor q = R.ws.q.slice_rows(0, n), att = R.ws.att.slice_rows(0, n);
  const Tensor k = R.ws.k.slice_rows(0, n), v = R.ws.v.slice_rows(0, n);
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
  const Tensor k_pre = R.ws.k_pre.slice_rows(0, n);
  if (key_observer_) HS_RETURN_IF_ERROR(b.copy(k, k_pre));
  const float theta = swa ? c.rope_theta_local : c.rope_theta;
  HS_RETURN_IF_ERROR(b.rope_qk_kv_write(il, q, k, v, hd, theta, c.rope_style == RopeStyle::kNeox));
  if (key_observer_) key_observer_(il, k_pre.f32(), k.f32(), q.f32(), v.f32(), n);
  AttentionParams ap{R.slice.n_q_heads, R.slice.n_kv_heads, hd, c.attn_scale,
                     swa && c.sliding_window > 0 ? c.sliding_window : 0};
  HS_RETURN_IF_ERROR(b.attention(il, q, att, ap));
  return b.matmul(L.wo, att, o);  // [n][d]
}

// The attention output (summed over the ranks) into the residual, then the FFN over the rank's
// columns: o = act · down, a partial sum when split.
Status Decoder::ffn_block(Rank& R, int il, int64_t n) {
  const ModelConfig& c = config_;
  Backend& b = *R.backend;
  const LayerTensors& L = R.layers[il];
  const Tensor x = R.ws.x.slice_rows(0, n), h = R.ws.h.slice_rows(0, n), o = R.ws.o.slice_rows(0, n);
  const Tensor gate = R.ws.gate.slice_rows(0, n), up = R.ws.up.slice_rows(0, n);
  if (c.post_norms) HS_RETURN_IF_ERROR(b.rms_norm(o, L.post_attn_norm, c.rms_eps, o));
  HS_RETURN_IF_ERROR(b.add_rms_norm(x, o, L.ffn_norm, c.rms_eps, h));
  {  // gate, up [n][n_ff] in one dispatch
    const Tensor ws[] = {L.w_gate, L.w_up};
    const Tensor ys[] = {gate, up};
    HS_RETURN_IF_ERROR(b.matmul_multi(ws, h, ys));
  }
  HS_RETURN_IF_ERROR(b.glu(c.ffn_act == FfnActivation::kSilu ? GluKind::kSilu : GluKind::kGeluTanh, gate, up, gate));
  return b.matmul(L.w_down, gate, o);  // [n][d]
}

// The FFN output (summed over the ranks) into the residual, fused with the next layer's norm.
Status Decoder::close_layer(Rank& R, int il, int64_t n) {
  const ModelConfig& c = config_;
  Backend& b = *R.backend;
  const Tensor x = R.ws.x.slice_rows(0, n), h = R.ws.h.slice_rows(0, n), o = R.ws.o.slice_rows(0, n);
  if (c.post_norms) HS_RETURN_IF_ERROR(b.rms_norm(o, R.layers[il].post_ffn_norm, c.rms_eps, o));
  if (il + 1 < c.n_layer) return b.add_rms_norm(x, o, R.layers[il + 1].attn_norm, c.rms_eps, h);
  return b.add(x, o);
}

// The logit rows' final norm and this rank's vocabulary rows of the output layer.
Status Decoder::output_rows(Rank& R, int64_t n_out) {
  Backend& b = *R.backend;
  const Tensor hsel = R.ws.out.hsel.slice_rows(0, n_out), lg = R.ws.out.logits.slice_rows(0, n_out);
  HS_RETURN_IF_ERROR(b.logit_rows(R.ws.x.slice_rows(0, plan_.n_tokens()), hsel));
  HS_RETURN_IF_ERROR(b.rms_norm(hsel, R.output_norm, config_.rms_eps, hsel));
  return b.matmul(R.output, hsel, lg);
}

}  // namespace hs
