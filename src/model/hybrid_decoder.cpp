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

Result<std::unique_ptr<HybridDecoder>> HybridDecoder::load(const std::string& path, Device device,
                                                           int tensor_parallel) {
  HS_ASSIGN_OR_RETURN(auto file, gguf::File::open(path));
  return create(std::move(file), device, tensor_parallel);
}

Result<std::unique_ptr<HybridDecoder>> HybridDecoder::load_hf(const std::string& dir, Device device,
                                                              int tensor_parallel) {
  HS_ASSIGN_OR_RETURN(auto file, load_hf_model(dir));
  return create(std::move(file), device, tensor_parallel);
}

Result<std::unique_ptr<HybridDecoder>> HybridDecoder::create(std::unique_ptr<gguf::File> file, Device device,
                                                             int tensor_parallel) {
  std::unique_ptr<HybridDecoder> d(new HybridDecoder());
  d->file_ = std::move(file);
  HS_ASSIGN_OR_RETURN(d->config_, load_model_config(*d->file_));
  if (!d->config_.is_hybrid())
    return make_error(StatusCode::kInvalidArgument, "{} is not a hybrid model (load it with Decoder)",
                      d->config_.arch_name);
  HS_ASSIGN_OR_RETURN(d->weights_, load_weights(*d->file_, d->config_));
  const ModelConfig& c = d->config_;
  const WeightView* down = nullptr;  // the FFN's (experts') down projection of the first layer: its block size
  if (!d->weights_.layers.empty())
    down = c.is_moe() ? &d->weights_.layers[0].ffn_down_exps : &d->weights_.layers[0].w_down;
  const int64_t down_block = down ? dtype_info(down->type).value_or(DTypeInfo{}).block_elems : 1;
  HS_ASSIGN_OR_RETURN(std::vector<TpSlice> slices, plan_tensor_parallel(c, tensor_parallel, down_block));
  HybridDecoder* dp = d.get();
  HS_RETURN_IF_ERROR(d->ranks_.create(device, slices, [dp](Rank& R) {
    R.cfg = rank_config(dp->config_, R.slice);
    return dp->prepare_weights(R);
  }));
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
  return ranks_.each([&](Rank& R) -> Status {
    for (size_t i = 0; i < R.conv_state.size(); ++i) {
      const Tensor& cs = R.conv_state[i];
      const Tensor& ds = R.delta_state[i];
      HS_RETURN_IF_ERROR(R.backend->copy(cs.slice_rows(src, src + 1), cs.slice_rows(dst, dst + 1)));
      HS_RETURN_IF_ERROR(R.backend->copy(ds.slice_rows(src, src + 1), ds.slice_rows(dst, dst + 1)));
    }
    return Status::ok();
  });
}

Result<std::span<float>> HybridDecoder::forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv,
                                                ThreadPool& pool) {
  if (!states_)
    return make_error(StatusCode::kInvalidArgument, "hybrid forward: no recurrent-state pool attached (set_states)");
  return forward(batch, seqs, kv, *states_, pool);
}

int64_t HybridDecoder::state_bytes(const ModelConfig& c) {
  const int64_t per_layer = int64_t{c.ssm_conv_kernel - 1} * c.ssm_conv_dim() +
                            int64_t{c.ssm_n_v_heads} * c.ssm_k_dim * c.ssm_v_dim;
  return (c.n_layer - c.n_attn_layers()) * per_layer * 4;
}

int64_t HybridDecoder::state_bytes_per_slot() const {
  int64_t n = 0;
  for (int r = 0; r < ranks_.size(); ++r) n += state_bytes(ranks_[r].cfg);
  return n;
}

namespace {

// Spans of `n` consecutive units (rows, columns, entries) for each index of `idx`, starting at
// `base` + index · n; consecutive indices merge into one span.
// s appended to spans, merged into the last span when it continues it.
void append_span(std::vector<IndexSpan>& spans, IndexSpan s) {
  if (!spans.empty() && spans.back().begin + spans.back().n == s.begin)
    spans.back().n += s.n;
  else
    spans.push_back(s);
}

std::vector<IndexSpan> unit_spans(const std::vector<int>& idx, int64_t n, int64_t base = 0) {
  std::vector<IndexSpan> out;
  for (int i : idx) append_span(out, {base + int64_t{i} * n, n});
  return out;
}

std::vector<IndexSpan> concat(std::vector<IndexSpan> a, const std::vector<IndexSpan>& b) {
  for (const IndexSpan& s : b) append_span(a, s);
  return a;
}

}  // namespace

// Rank R's share of every weight (tensor_parallel.h); one rank gets the file's views whole.
Status HybridDecoder::prepare_weights(Rank& R) {
  Backend& b = *R.backend;
  const ModelConfig& c = config_;
  const TpSlice& s = R.slice;
  const bool split = s.size > 1;
  auto mat = [&](const WeightView& w, const std::string& name, Tensor& out) { return prepare_matrix(b, w, name, out); };
  auto group = [&](std::initializer_list<const WeightView*> w, std::initializer_list<std::string> names,
                   std::initializer_list<Tensor*> out) { return prepare_group(b, w, names, out); };
  auto vec = [&](const std::vector<float>& v, const std::string& name, Tensor& out) -> Status {
    HS_ASSIGN_OR_RETURN(out, b.prepare_vector(v, name));
    return Status::ok();
  };
  // The rank's rows / columns / entries of a weight (the whole weight for one rank).
  auto rows = [&](const WeightView& w, const std::vector<IndexSpan>& sp) -> Result<WeightView> {
    return split ? shards_.rows(w, sp) : Result<WeightView>(w);
  };
  auto cols = [&](const WeightView& w, const std::vector<IndexSpan>& sp) -> Result<WeightView> {
    return split ? shards_.cols(w, sp) : Result<WeightView>(w);
  };
  auto part = [&](const std::vector<float>& v, const std::vector<IndexSpan>& sp) -> const std::vector<float>& {
    return split ? shards_.sub(v, sp) : v;
  };
  const int64_t hd = c.head_dim;
  // Attention: q | gate rows per head (2 hd), k / v rows per kv head, o columns per head.
  const std::vector<IndexSpan> q_rows{{s.q_head0 * 2 * hd, s.n_q_heads * 2 * hd}},
      kv_rows{{s.kv_head0 * hd, s.n_kv_heads * hd}}, o_cols{{s.q_head0 * hd, s.n_q_heads * hd}};
  // Linear layers: the key heads' q and k channels and the value heads' v channels of qkv / conv,
  // the value heads' z rows, beta / alpha rows, gates and out-projection columns.
  const int64_t kd = c.ssm_k_dim, vd = c.ssm_v_dim, key_dim = c.ssm_key_dim();
  const std::vector<int> vh = ssm_v_heads(c, s);
  const std::vector<IndexSpan> qk_ch{{s.ssm_k_head0 * kd, s.n_ssm_k_heads * kd}};
  const std::vector<IndexSpan> conv_ch =
      concat(concat(qk_ch, {{key_dim + s.ssm_k_head0 * kd, s.n_ssm_k_heads * kd}}), unit_spans(vh, vd, 2 * key_dim));
  const std::vector<IndexSpan> v_rows = unit_spans(vh, vd), v_heads = unit_spans(vh, 1);
  const std::vector<IndexSpan> ff_rows{{s.ff0, s.n_ff}};
  HS_RETURN_IF_ERROR(mat(weights_.token_embd, "token_embd.weight", R.token_embd));
  HS_RETURN_IF_ERROR(mat(ShardStore::rows(weights_.output, s.vocab0, s.n_vocab),
                         c.tied_output ? "token_embd.weight" : "output.weight", R.output));
  HS_RETURN_IF_ERROR(vec(weights_.output_norm, "output_norm.weight", R.output_norm));
  R.layers.resize(c.n_layer);
  int n_kv = 0, n_state = 0;
  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = weights_.layers[il];
    LayerTensors& T = R.layers[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    HS_RETURN_IF_ERROR(vec(L.attn_norm, p + "attn_norm.weight", T.attn_norm));
    HS_RETURN_IF_ERROR(vec(L.ffn_norm, p + "post_attention_norm.weight", T.ffn_norm));
    if (c.is_moe()) {
      // Every expert's rows [ffe0, + n_ffe) of gate / up (experts stacked: expert e's at e · n_ff_exp),
      // the same columns of every expert's down; the shared expert as a dense FFN; router and
      // shared-expert gate whole.
      std::vector<IndexSpan> exp_rows;
      for (int e = 0; e < c.n_expert; ++e) exp_rows.push_back({int64_t{e} * c.n_ff_exp + s.ffe0, s.n_ffe});
      const std::vector<IndexSpan> sh_rows{{s.shexp0, s.n_shexp}};
      HS_ASSIGN_OR_RETURN(const WeightView gate_e, rows(L.ffn_gate_exps, exp_rows));
      HS_ASSIGN_OR_RETURN(const WeightView up_e, rows(L.ffn_up_exps, exp_rows));
      HS_ASSIGN_OR_RETURN(const WeightView down_e, cols(L.ffn_down_exps, {{s.ffe0, s.n_ffe}}));
      HS_ASSIGN_OR_RETURN(const WeightView gate_sh, rows(L.ffn_gate_shexp, sh_rows));
      HS_ASSIGN_OR_RETURN(const WeightView up_sh, rows(L.ffn_up_shexp, sh_rows));
      HS_ASSIGN_OR_RETURN(const WeightView down_sh, cols(L.ffn_down_shexp, sh_rows));
      HS_RETURN_IF_ERROR(mat(L.ffn_gate_inp, p + "ffn_gate_inp.weight", T.ffn_gate_inp));
      HS_RETURN_IF_ERROR(mat(gate_e, p + "ffn_gate_exps.weight", T.gate_exps));
      HS_RETURN_IF_ERROR(mat(up_e, p + "ffn_up_exps.weight", T.up_exps));
      HS_RETURN_IF_ERROR(mat(down_e, p + "ffn_down_exps.weight", T.down_exps));
      HS_RETURN_IF_ERROR(group({&gate_sh, &up_sh, &L.ffn_gate_inp_shexp},
                               {p + "ffn_gate_shexp.weight", p + "ffn_up_shexp.weight", p + "ffn_gate_inp_shexp.weight"},
                               {&T.gate_shexp, &T.up_shexp, &T.gate_inp_shexp}));
      HS_RETURN_IF_ERROR(mat(down_sh, p + "ffn_down_shexp.weight", T.down_shexp));
    } else {
      HS_ASSIGN_OR_RETURN(const WeightView gate, rows(L.w_gate, ff_rows));
      HS_ASSIGN_OR_RETURN(const WeightView up, rows(L.w_up, ff_rows));
      HS_ASSIGN_OR_RETURN(const WeightView down, cols(L.w_down, ff_rows));
      HS_RETURN_IF_ERROR(group({&gate, &up}, {p + "ffn_gate.weight", p + "ffn_up.weight"}, {&T.w_gate, &T.w_up}));
      HS_RETURN_IF_ERROR(mat(down, p + "ffn_down.weight", T.w_down));
    }
    if (!c.layer_is_linear[il]) {
      T.kv_layer = n_kv++;
      HS_ASSIGN_OR_RETURN(const WeightView wq, rows(L.wq, q_rows));
      HS_ASSIGN_OR_RETURN(const WeightView wk, rows(L.wk, kv_rows));
      HS_ASSIGN_OR_RETURN(const WeightView wv, rows(L.wv, kv_rows));
      HS_ASSIGN_OR_RETURN(const WeightView wo, cols(L.wo, o_cols));
      HS_RETURN_IF_ERROR(group({&wq, &wk, &wv}, {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"},
                               {&T.wq, &T.wk, &T.wv}));
      HS_RETURN_IF_ERROR(mat(wo, p + "attn_output.weight", T.wo));
      HS_RETURN_IF_ERROR(vec(L.q_norm, p + "attn_q_norm.weight", T.q_norm));
      HS_RETURN_IF_ERROR(vec(L.k_norm, p + "attn_k_norm.weight", T.k_norm));
      continue;
    }
    T.state_layer = n_state++;
    HS_ASSIGN_OR_RETURN(const WeightView qkv, rows(L.ssm_qkv, conv_ch));
    HS_ASSIGN_OR_RETURN(const WeightView z, rows(L.ssm_z, v_rows));
    if (c.ssm_fused_ba) {  // rows per key head [b of its value heads | a of them]
      const int64_t per_k = 2 * (c.ssm_n_v_heads / c.ssm_n_k_heads);
      HS_ASSIGN_OR_RETURN(const WeightView ba, rows(L.ssm_ba, {{s.ssm_k_head0 * per_k, s.n_ssm_k_heads * per_k}}));
      HS_RETURN_IF_ERROR(group({&qkv, &z, &ba}, {p + "attn_qkv.weight", p + "attn_gate.weight", p + "ssm_ba.weight"},
                               {&T.ssm_qkv, &T.ssm_z, &T.ssm_ba}));
    } else {
      HS_ASSIGN_OR_RETURN(const WeightView beta, rows(L.ssm_beta, v_heads));
      HS_ASSIGN_OR_RETURN(const WeightView alpha, rows(L.ssm_alpha, v_heads));
      HS_RETURN_IF_ERROR(group({&qkv, &z, &beta, &alpha},
                               {p + "attn_qkv.weight", p + "attn_gate.weight", p + "ssm_beta.weight", p + "ssm_alpha.weight"},
                               {&T.ssm_qkv, &T.ssm_z, &T.ssm_beta, &T.ssm_alpha}));
    }
    HS_ASSIGN_OR_RETURN(const WeightView out, cols(L.ssm_out, v_rows));
    HS_RETURN_IF_ERROR(mat(out, p + "ssm_out.weight", T.ssm_out));
    // The depthwise conv's weights [conv_dim][kernel]: the rank's channels.
    std::vector<IndexSpan> conv_w;
    for (const IndexSpan& ch : conv_ch) conv_w.push_back({ch.begin * c.ssm_conv_kernel, ch.n * c.ssm_conv_kernel});
    HS_RETURN_IF_ERROR(vec(part(L.ssm_conv, conv_w), p + "ssm_conv1d.weight", T.ssm_conv));
    HS_RETURN_IF_ERROR(vec(part(L.ssm_a, v_heads), p + "ssm_a", T.ssm_a));
    HS_RETURN_IF_ERROR(vec(part(L.ssm_dt_bias, v_heads), p + "ssm_dt.bias", T.ssm_dt_bias));
    HS_RETURN_IF_ERROR(vec(L.ssm_norm, p + "ssm_norm.weight", T.ssm_norm));
  }
  return Status::ok();
}

Status HybridDecoder::reserve(int64_t max_tokens) {
  return ranks_.each([&](Rank& R) -> Status {
    if (max_tokens <= R.ws.capacity) return Status::ok();
    const ModelConfig& c = R.cfg;
    const int64_t d = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.is_moe() ? c.n_ff_shexp : c.n_ff,
                  cd = c.ssm_conv_dim(), vd = c.ssm_value_dim(), nv = c.ssm_n_v_heads;
    // MoE-only buffers get width 1 in a dense model (carve_activations wants positive widths).
    const int64_t E = std::max(1, c.n_expert), k = std::max(1, c.n_expert_used), dm = c.is_moe() ? d : 1;
    Workspace& w = R.ws;
    Tensor* slots[] = {&w.x,      &w.h,     &w.o,     &w.qg,       &w.q,     &w.att,   &w.k,
                       &w.v,      &w.k_pre, &w.ffn_gate, &w.ffn_up, &w.qkv,   &w.conv,  &w.z,
                       &w.core,   &w.ssm_b, &w.ssm_a, &w.ssm_ba,   &w.shexp, &w.shexp_gate,
                       &w.router, &w.moe_w, &w.moe_ids};
    const int64_t widths[] = {d, d, d, 2 * qd, qd, qd, kvd, kvd, kvd, ff, ff, cd, cd, vd, vd, nv, nv, 2 * nv, dm, 1, E, k, k};
    static_assert(std::size(slots) == std::size(widths));
    HS_RETURN_IF_ERROR(carve_activations(*R.backend, max_tokens, widths, slots, "the hybrid activation workspace", w.mem));
    w.moe_ids.dtype = DType::I32;  // carved as f32 rows of the same 4-byte width
    w.capacity = max_tokens;
    return Status::ok();
  });
}

Status HybridDecoder::reserve_logits(int64_t rows) {
  HS_RETURN_IF_ERROR(
      ranks_.each([&](Rank& R) { return R.ws.out.reserve(*R.backend, config_.n_embd, R.slice.n_vocab, rows); }));
  return ranks_.reserve_gathered(config_.n_embd, config_.n_vocab, rows);
}

Status HybridDecoder::reserve_states(int32_t n_slots) {
  state_slots_ = 0;
  HS_RETURN_IF_ERROR(ranks_.each([&](Rank& R) -> Status {
    const ModelConfig& c = R.cfg;
    const int n_linear = c.n_layer - c.n_attn_layers();
    const int64_t conv_floats = int64_t{c.ssm_conv_kernel - 1} * c.ssm_conv_dim();
    const int64_t delta_floats = int64_t{c.ssm_n_v_heads} * c.ssm_k_dim * c.ssm_v_dim;
    R.state_mem.reset();
    R.conv_state.clear();
    R.delta_state.clear();
    HS_ASSIGN_OR_RETURN(R.state_mem, R.backend->alloc(static_cast<size_t>(state_bytes(c)) * n_slots,
                                                      "the recurrent state slots"));
    float* p = static_cast<float*>(R.state_mem.data());
    for (int i = 0; i < n_linear; ++i) {
      R.conv_state.push_back(Tensor::matrix(p, DType::F32, n_slots, conv_floats, R.backend->device()));
      p += n_slots * conv_floats;
      R.delta_state.push_back(Tensor::matrix(p, DType::F32, n_slots, delta_floats, R.backend->device()));
      p += n_slots * delta_floats;
    }
    return Status::ok();
  }));
  state_slots_ = n_slots;
  return Status::ok();
}

Status HybridDecoder::bind_sparse() {
  if (!ranks_.split()) return LanguageModel::bind_sparse();
  return rank_detail::check_sparse(ranks_.size(), hot_ != nullptr, sparse_, config_.n_head_kv);
}

Status HybridDecoder::rebuild_sparse_metadata(KvCache& kv, const SeqKv& seq, int32_t n_tokens) {
  if (!ranks_.split()) return LanguageModel::rebuild_sparse_metadata(kv, seq, n_tokens);
  HS_RETURN_IF_ERROR(sparse_ready());
  return ranks_.rebuild_sparse_metadata(kv, seq, n_tokens, sparse_, [this] { return sparse_kv_layers(); },
                                        config_.attn_scale);
}

Status HybridDecoder::set_kv_tier(const Backend::KvTier& t) { return ranks_.set_kv_tier(t); }

Result<std::span<float>> HybridDecoder::forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv,
                                                RecurrentPool& states, ThreadPool& pool) {
  const int64_t n = batch.size();
  if (n == 0) return std::span<float>();
  HS_RETURN_IF_ERROR(sparse_ready());
  if (ranks_.split() && key_observer_)
    return make_error(StatusCode::kUnsupported,
                      "the key observer (fit-sketch, eval recall) does not run with --tensor-parallel-size {} (run it "
                      "on one rank)", ranks_.size());
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
  HS_RETURN_IF_ERROR(ranks_.copy_plans(kv, plan_, sparse_, [this] { return sparse_kv_layers(); }, config_.attn_scale));
  HS_RETURN_IF_ERROR(reserve(n));
  HS_RETURN_IF_ERROR(reserve_logits(static_cast<int64_t>(plan_.logit_rows.size())));
  // The step ends however it ends (a device syncs).
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

Status HybridDecoder::forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, RecurrentPool& states,
                              ThreadPool& pool, std::vector<float>& logits) {
  HS_ASSIGN_OR_RETURN(std::span<float> rows, forward(batch, seqs, kv, states, pool));
  logits.assign(rows.begin(), rows.end());
  return Status::ok();
}

Status HybridDecoder::linear_mixer(Rank& R, int il, int64_t n) {
  const ModelConfig& c = R.cfg;
  Backend& b = *R.backend;
  const LayerTensors& L = R.layers[il];
  const Tensor h = R.ws.h.slice_rows(0, n), o = R.ws.o.slice_rows(0, n);
  const Tensor qkv = R.ws.qkv.slice_rows(0, n), conv = R.ws.conv.slice_rows(0, n);
  const Tensor z = R.ws.z.slice_rows(0, n), core = R.ws.core.slice_rows(0, n);
  const Tensor beta = R.ws.ssm_b.slice_rows(0, n), g = R.ws.ssm_a.slice_rows(0, n);
  if (c.ssm_fused_ba) {
    // ssm_ba rows per key head: [b of its r v-heads | a of them] (r = n_v / n_k): [n][n_k][2r]
    // split into beta [n][n_v] and a [n][n_v], v-head g · r + i.
    const Tensor ba = R.ws.ssm_ba.slice_rows(0, n);
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
  HS_RETURN_IF_ERROR(b.conv1d_causal(qkv, L.ssm_conv, c.ssm_conv_kernel, R.conv_state[L.state_layer], conv));
  const int64_t kd = c.ssm_key_dim();
  const Tensor q = columns(conv, 0, kd), k = columns(conv, kd, kd), v = columns(conv, 2 * kd, c.ssm_value_dim());
  // q, k L2-normalised (q scaled) and the gates, inside the rule (one kernel on CUDA).
  const DeltaPrologue pro{kL2NormEps, 1.0f / std::sqrt(static_cast<float>(c.ssm_k_dim)), L.ssm_a, L.ssm_dt_bias};
  DeltaRuleParams dp{c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_k_dim, c.ssm_v_dim, c.ssm_v_tiled};
  dp.prologue = &pro;
  HS_RETURN_IF_ERROR(b.gated_delta_rule(q, k, v, g, beta, R.delta_state[L.state_layer], core, dp));
  HS_RETURN_IF_ERROR(b.rms_norm_gated(core, z, L.ssm_norm, c.rms_eps, core));
  return b.matmul(L.ssm_out, core, o);
}

Status HybridDecoder::attention_mixer(Rank& R, int il, int64_t n) {
  const ModelConfig& c = R.cfg;
  Backend& b = *R.backend;
  const LayerTensors& L = R.layers[il];
  const int hd = c.head_dim;
  const Tensor h = R.ws.h.slice_rows(0, n), o = R.ws.o.slice_rows(0, n), qg = R.ws.qg.slice_rows(0, n);
  const Tensor q = R.ws.q.slice_rows(0, n), att = R.ws.att.slice_rows(0, n);
  const Tensor k = R.ws.k.slice_rows(0, n), v = R.ws.v.slice_rows(0, n);
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
    const Tensor k_pre = R.ws.k_pre.slice_rows(0, n);
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

Status HybridDecoder::dense_ffn(Rank& R, int il, int64_t n) {
  Backend& b = *R.backend;
  const LayerTensors& L = R.layers[il];
  const Tensor h = R.ws.h.slice_rows(0, n), o = R.ws.o.slice_rows(0, n);
  const Tensor fg = R.ws.ffn_gate.slice_rows(0, n), fu = R.ws.ffn_up.slice_rows(0, n);
  const Tensor ws[] = {L.w_gate, L.w_up};
  const Tensor ys[] = {fg, fu};
  HS_RETURN_IF_ERROR(b.matmul_multi(ws, h, ys));
  HS_RETURN_IF_ERROR(b.glu(GluKind::kSilu, fg, fu, fg));
  return b.matmul(L.w_down, fg, o);
}

// o = routed experts + sigmoid(h · gate_inp_shexp) · shared expert (transformers'
// Qwen3NextSparseMoeBlock; llama.cpp's qwen3next build_layer_ffn).
Status HybridDecoder::moe_ffn(Rank& R, int il, int64_t n) {
  const ModelConfig& c = R.cfg;
  Backend& b = *R.backend;
  const LayerTensors& L = R.layers[il];
  const Tensor h = R.ws.h.slice_rows(0, n), o = R.ws.o.slice_rows(0, n);
  const Tensor fg = R.ws.ffn_gate.slice_rows(0, n), fu = R.ws.ffn_up.slice_rows(0, n);
  const Tensor router = R.ws.router.slice_rows(0, n), ids = R.ws.moe_ids.slice_rows(0, n), w = R.ws.moe_w.slice_rows(0, n);
  const Tensor sh = R.ws.shexp.slice_rows(0, n), shg = R.ws.shexp_gate.slice_rows(0, n);
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

Status HybridDecoder::all_reduce_o(int64_t n) {
  return ranks_.all_reduce([&](Rank& R) { return R.ws.o.slice_rows(0, n); });
}

Status HybridDecoder::run_layers(int64_t n) {
  const ModelConfig& c = config_;
  HS_RETURN_IF_ERROR(ranks_.each([&](Rank& R) -> Status {
    const Tensor x = R.ws.x.slice_rows(0, n), h = R.ws.h.slice_rows(0, n);
    HS_RETURN_IF_ERROR(R.backend->embedding(R.token_embd, x));
    return R.backend->rms_norm(x, R.layers[0].attn_norm, c.rms_eps, h);
  }));
  for (int il = 0; il < c.n_layer; ++il) {
    // mixer -> o (a partial sum across ranks); x += o, h = ffn_norm(x); FFN -> o (partial);
    // x += o and the next layer's norm.
    HS_RETURN_IF_ERROR(ranks_.each([&](Rank& R) {
      return c.layer_is_linear[il] ? linear_mixer(R, il, n) : attention_mixer(R, il, n);
    }));
    HS_RETURN_IF_ERROR(all_reduce_o(n));
    HS_RETURN_IF_ERROR(ranks_.each([&](Rank& R) -> Status {
      const Tensor x = R.ws.x.slice_rows(0, n), h = R.ws.h.slice_rows(0, n), o = R.ws.o.slice_rows(0, n);
      HS_RETURN_IF_ERROR(R.backend->add_rms_norm(x, o, R.layers[il].ffn_norm, c.rms_eps, h));
      return c.is_moe() ? moe_ffn(R, il, n) : dense_ffn(R, il, n);
    }));
    HS_RETURN_IF_ERROR(all_reduce_o(n));
    HS_RETURN_IF_ERROR(ranks_.each([&](Rank& R) -> Status {
      const Tensor x = R.ws.x.slice_rows(0, n), h = R.ws.h.slice_rows(0, n), o = R.ws.o.slice_rows(0, n);
      if (il + 1 < c.n_layer) return R.backend->add_rms_norm(x, o, R.layers[il + 1].attn_norm, c.rms_eps, h);
      return R.backend->add(x, o);
    }));
  }
  // Final norm + output projection for the rows that want logits: each rank its vocabulary rows,
  // gathered side by side on rank 0 when there are several.
  const int64_t n_out = static_cast<int64_t>(plan_.logit_rows.size());
  if (n_out == 0) return Status::ok();
  HS_RETURN_IF_ERROR(ranks_.each([&](Rank& R) -> Status {
    Backend& b = *R.backend;
    const Tensor hsel = R.ws.out.hsel.slice_rows(0, n_out), lg = R.ws.out.logits.slice_rows(0, n_out);
    HS_RETURN_IF_ERROR(b.logit_rows(R.ws.x.slice_rows(0, n), hsel));
    HS_RETURN_IF_ERROR(b.rms_norm(hsel, R.output_norm, c.rms_eps, hsel));
    return b.matmul(R.output, hsel, lg);
  }));
  return ranks_.gather_logits(n_out, [&](Rank& R) { return R.ws.out.logits.slice_rows(0, n_out); }).status();
}

}  // namespace hs
