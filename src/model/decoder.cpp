// model/decoder.cpp — forward pass of the llama/gemma3 decoder (see decoder.h).
#include "model/decoder.h"

#include <algorithm>
#include <cstring>
#include <cmath>

#include "backend/cpu/attention.h"
#include "backend/cpu/matmul_exact.h"
#include "backend/cpu/ops.h"

namespace hs {

int64_t Decoder::weight_bytes() const {
  int64_t n = 0;
  for (const auto& t : file_->tensors()) n += static_cast<int64_t>(t.n_bytes);
  return n;
}

Result<std::unique_ptr<Decoder>> Decoder::load(const std::string& path) {
  std::unique_ptr<Decoder> d(new Decoder());
  HS_ASSIGN_OR_RETURN(d->file_, gguf::File::open(path));
  HS_ASSIGN_OR_RETURN(d->config_, load_model_config(*d->file_));
  HS_ASSIGN_OR_RETURN(d->weights_, load_weights(*d->file_, d->config_));
  return d;
}

namespace {

void grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
}

// Per-row RMSNorm over n rows of width `width`.
void rms_norm_rows(const float* x, const std::vector<float>& w, int64_t n, int width, float eps, float* out) {
  for (int64_t t = 0; t < n; ++t) cpu::rms_norm(x + t * width, w.data(), width, eps, out + t * width);
}

}  // namespace

const char* matmul_precision_name(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::kExact: return "exact";
    case MatmulPrecision::kInt8x2: return "int8x2";
    case MatmulPrecision::kInt8: return "int8";
  }
  return "?";
}

Result<MatmulPrecision> parse_matmul_precision(std::string_view name) {
  for (auto p : {MatmulPrecision::kExact, MatmulPrecision::kInt8x2, MatmulPrecision::kInt8})
    if (name == matmul_precision_name(p)) return p;
  return make_error(StatusCode::kInvalidArgument, "unknown matmul precision '{}' (exact, int8x2, int8)", name);
}

Status Decoder::mm(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool& pool) const {
  switch (precision_) {
    case MatmulPrecision::kExact: return cpu::matmul_exact(w, x, n, y, pool);
    case MatmulPrecision::kInt8x2: return cpu::matmul(w, x, n, y, pool, cpu::ActPrecision::kInt8x2);
    case MatmulPrecision::kInt8: return cpu::matmul(w, x, n, y, pool, cpu::ActPrecision::kInt8);
  }
  return make_error(StatusCode::kInternal, "bad matmul precision");
}

Status Decoder::mm_multi(std::span<const WeightView> ws, const float* x, int64_t n, std::span<float* const> ys,
                         ThreadPool& pool) const {
  switch (precision_) {
    case MatmulPrecision::kExact:
      for (size_t i = 0; i < ws.size(); ++i) HS_RETURN_IF_ERROR(cpu::matmul_exact(ws[i], x, n, ys[i], pool));
      return Status::ok();
    case MatmulPrecision::kInt8x2: return cpu::matmul_multi(ws, x, n, ys, pool, cpu::ActPrecision::kInt8x2);
    case MatmulPrecision::kInt8: return cpu::matmul_multi(ws, x, n, ys, pool, cpu::ActPrecision::kInt8);
  }
  return make_error(StatusCode::kInternal, "bad matmul precision");
}

Status Decoder::forward(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, ThreadPool& pool,
                        std::vector<float>& logits) {
  const ModelConfig& c = config_;
  const int64_t n = batch.size();
  if (n == 0) return Status::ok();
  const int d = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;

  // Validate the batch and reserve pages before touching any state.
  for (int64_t t = 0; t < n; ++t) {
    const int32_t s = batch.seq_index[t];
    if (s < 0 || s >= static_cast<int32_t>(seqs.size()))
      return make_error(StatusCode::kInvalidArgument, "forward: token {} has sequence index {} of {}", t, s,
                        seqs.size());
    if (batch.tokens[t] < 0 || batch.tokens[t] >= c.n_vocab)
      return make_error(StatusCode::kInvalidArgument, "forward: token id {} outside the vocabulary ({})",
                        batch.tokens[t], c.n_vocab);
  }
  std::vector<int32_t> next_pos(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) next_pos[s] = seqs[s]->n_tokens;
  for (int64_t t = 0; t < n; ++t) {
    int32_t& np = next_pos[batch.seq_index[t]];
    if (batch.positions[t] != np)
      return make_error(StatusCode::kInvalidArgument, "forward: token {} at position {}, sequence expects {}", t,
                        batch.positions[t], np);
    ++np;
  }
  for (size_t s = 0; s < seqs.size(); ++s) HS_RETURN_IF_ERROR(kv.reserve(*seqs[s], next_pos[s]));
  seq_tokens_.assign(seqs.size(), 0);
  for (int64_t t = 0; t < n; ++t) ++seq_tokens_[batch.seq_index[t]];

  grow(x_, n * d); grow(h_, n * d); grow(o_, n * d);
  grow(q_, n * qd); grow(att_, n * qd);
  grow(k_, n * kvd); grow(v_, n * kvd);
  grow(gate_, n * c.n_ff); grow(up_, n * c.n_ff);
  float* x = x_.data();  // [n][d] residual stream
  float* h = h_.data();  // [n][d]

  // RoPE cos/sin per token, once per step for each base (global layers, sliding-window
  // layers), shared by every layer and by Q and K.
  const int half = hd / 2;
  grow(rope_global_, n * 2 * half);
  if (c.rope_theta_local != c.rope_theta) grow(rope_local_, n * 2 * half);
  for (int64_t t = 0; t < n; ++t) {
    float* g = rope_global_.data() + t * 2 * half;
    cpu::rope_table(batch.positions[t], c.rope_theta, hd, g, g + half);
    if (c.rope_theta_local != c.rope_theta) {
      float* l = rope_local_.data() + t * 2 * half;
      cpu::rope_table(batch.positions[t], c.rope_theta_local, hd, l, l + half);
    }
  }

  // Device tier: pins taken by this step's fetches are dropped when the step ends, however
  // it ends; the step's counters go to the sparse runtime.
  struct EndFetchStep {
    Decoder& d;
    ~EndFetchStep() {
      if (!d.hot_used_) return;
      d.hot_used_ = false;
      const HotChunkStats st = d.hot_->end_step();
      if (d.sparse_) d.sparse_->count_fetch(st);
    }
  } end_fetch_step{*this};

  HS_RETURN_IF_ERROR(cpu::get_rows(weights_.token_embd, batch.tokens.data(), n, x));
  if (c.embed_scale != 1.0f) cpu::scale_inplace(x, c.embed_scale, n * d);

  for (int il = 0; il < c.n_layer; ++il) {
    const LayerWeights& L = weights_.layers[il];
    const bool swa = c.layer_is_swa[il];
    rms_norm_rows(x, L.attn_norm, n, d, c.rms_eps, h);
    {  // q [n][q_dim], k [n][kv_dim], v [n][kv_dim] in one dispatch
      const WeightView ws[] = {L.wq, L.wk, L.wv};
      float* const ys[] = {q_.data(), k_.data(), v_.data()};
      HS_RETURN_IF_ERROR(mm_multi(ws, h, n, ys, pool));
    }
    const std::vector<float>& rope_tab =
        swa && c.rope_theta_local != c.rope_theta ? rope_local_ : rope_global_;  // [n][cos | sin]
    const bool neox = c.rope_style == RopeStyle::kNeox;
    if (key_observer_) grow(k_pre_, n * kvd);
    for (int64_t t = 0; t < n; ++t) {
      float* qt = q_.data() + t * qd;
      float* kt = k_.data() + t * kvd;
      if (c.qk_norm) {
        for (int hh = 0; hh < c.n_head; ++hh) cpu::rms_norm(qt + hh * hd, L.q_norm.data(), hd, c.rms_eps, qt + hh * hd);
        for (int hh = 0; hh < c.n_head_kv; ++hh) cpu::rms_norm(kt + hh * hd, L.k_norm.data(), hd, c.rms_eps, kt + hh * hd);
      }
      if (key_observer_) std::copy(kt, kt + kvd, k_pre_.data() + t * kvd);
      const float* cs = rope_tab.data() + t * 2 * half;
      cpu::rope_apply(qt, c.n_head, hd, cs, cs + half, neox);
      cpu::rope_apply(kt, c.n_head_kv, hd, cs, cs + half, neox);
      // Store K and V into the sequence's page: [head][token][K | V][head_dim].
      const SeqKv& seq = *seqs[batch.seq_index[t]];
      for (int hh = 0; hh < c.n_head_kv; ++hh) {
        kv.write(seq, il, hh, batch.positions[t], kt + hh * hd, v_.data() + t * kvd + hh * hd);
        if (sparse_) sparse_->on_key(seq.blocks, il, hh, batch.positions[t], kt + hh * hd, v_.data() + t * kvd + hh * hd);
      }
    }
    if (key_observer_) key_observer_(il, k_pre_.data(), k_.data(), q_.data(), v_.data(), n);
    attention(batch, seqs, kv, il, pool);
    HS_RETURN_IF_ERROR(mm(L.wo, att_.data(), n, o_.data(), pool));  // [n][d]
    if (c.post_norms) rms_norm_rows(o_.data(), L.post_attn_norm, n, d, c.rms_eps, o_.data());
    cpu::add_inplace(x, o_.data(), n * d);

    rms_norm_rows(x, L.ffn_norm, n, d, c.rms_eps, h);
    {  // gate, up [n][n_ff] in one dispatch
      const WeightView ws[] = {L.w_gate, L.w_up};
      float* const ys[] = {gate_.data(), up_.data()};
      HS_RETURN_IF_ERROR(mm_multi(ws, h, n, ys, pool));
    }
    if (c.ffn_act == FfnActivation::kSilu)
      cpu::silu_mul(gate_.data(), up_.data(), n * c.n_ff, gate_.data());
    else
      cpu::gelu_tanh_mul(gate_.data(), up_.data(), n * c.n_ff, gate_.data());
    HS_RETURN_IF_ERROR(mm(L.w_down, gate_.data(), n, o_.data(), pool));  // [n][d]
    if (c.post_norms) rms_norm_rows(o_.data(), L.post_ffn_norm, n, d, c.rms_eps, o_.data());
    cpu::add_inplace(x, o_.data(), n * d);
  }
  for (size_t s = 0; s < seqs.size(); ++s) seqs[s]->n_tokens = next_pos[s];

  // Final norm + output projection for the rows that want logits.
  int64_t n_out = 0;
  for (int64_t t = 0; t < n; ++t)
    if (batch.want_logits[t]) cpu::rms_norm(x + t * d, weights_.output_norm.data(), d, c.rms_eps, h + (n_out++) * d);
  logits.resize(static_cast<size_t>(n_out) * c.n_vocab);
  if (n_out == 0) return Status::ok();
  HS_RETURN_IF_ERROR(mm(weights_.output, h, n_out, logits.data(), pool));
  if (c.final_logit_softcap > 0) {
    const float cap = c.final_logit_softcap;
    for (float& l : logits) l = cap * std::tanh(l / cap);
  }
  return Status::ok();
}

bool Decoder::tiered(int layer) const {
  const int group = config_.n_head / config_.n_head_kv;
  return hot_ && sparse_ && hot_->chunk_tokens() == sparse_->config().chunk_tokens &&
         group <= kPieceAttnMaxGroup && hot_->hot_set(layer, 0) != nullptr;
}

void Decoder::fetch_chunks(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, int layer,
                           ThreadPool& pool) {
  const ModelConfig& c = config_;
  const SparseConfig& cfg = sparse_->config();
  const int C = cfg.chunk_tokens;
  const int64_t n_sel = static_cast<int64_t>(sel_items_.size());
  if (static_cast<int64_t>(sel_slots_.size()) < n_sel) sel_slots_.resize(n_sel);
  if (static_cast<int64_t>(sel_copies_.size()) < n_sel) sel_copies_.resize(n_sel);
  sel_resident_.assign(n_sel, 0);
  sel_hot_.assign(n_sel, {0, 0});
  for (int64_t i = 0; i < n_sel; ++i) {
    const int64_t t = sel_items_[i] / c.n_head_kv;
    SeqKv& seq = *seqs[batch.seq_index[t]];
    const std::vector<int32_t>& chunks = selected_[i];  // ascending
    sel_slots_[i].assign(chunks.size(), -1);
    sel_copies_[i].clear();
    if (!kv.lease(seq).is_ok()) continue;  // every lease in use: this one reads the pages
    sel_resident_[i] = hot_->acquire_resident(seq);  // sinks + window ring (else read from the pages)
    // Fetched: the chunks between the sinks and the window that are full (not being filled).
    const int32_t n_keys = batch.positions[t] + 1;
    const auto [first, last] = candidate_range(n_keys, cfg);
    const int32_t end = std::min(last, n_keys / C);
    const auto b = std::lower_bound(chunks.begin(), chunks.end(), first) - chunks.begin();
    const auto e = std::lower_bound(chunks.begin(), chunks.end(), end) - chunks.begin();
    if (e > b) sel_hot_[i] = {static_cast<int32_t>(b), static_cast<int32_t>(e)};
  }
  hot_used_ = true;
  pool.parallel_for(c.n_head_kv, 1, [&](int64_t head_begin, int64_t head_end, int) {
    for (int64_t i = 0; i < n_sel; ++i) {
      const int kvh = static_cast<int>(sel_items_[i] % c.n_head_kv);
      const auto [b, e] = sel_hot_[i];
      if (kvh < head_begin || kvh >= head_end) continue;
      const SeqKv& seq = *seqs[batch.seq_index[sel_items_[i] / c.n_head_kv]];
      if (sel_resident_[i]) hot_->sync_resident(seq, layer, kvh, batch.positions[sel_items_[i] / c.n_head_kv] + 1);
      if (b == e) continue;
      // The misses' copies run in the attention task that reads them (see attention()).
      hot_->fetch(seq, layer, kvh, std::span<const int32_t>(selected_[i].data() + b, e - b),
                  std::span<int32_t>(sel_slots_[i].data() + b, e - b), &sel_copies_[i]);
    }
  });
}

void Decoder::attention(const Batch& batch, std::span<SeqKv* const> seqs, KvCache& kv, int layer,
                        ThreadPool& pool) {
  const ModelConfig& c = config_;
  const int64_t n = batch.size();
  const int hd = c.head_dim, group = c.n_head / c.n_head_kv;
  const bool swa = c.layer_is_swa[layer] && c.sliding_window > 0;
  const KvGeometry& g = kv.geometry();

  // One task per (token, kv head, key split). Splitting long ranges lets a single decode
  // step use every thread; partials are merged per (token, kv head) afterwards.
  constexpr int32_t kSplitKeys = 512;
  select_chunks(batch, seqs, kv, layer, pool);
  const bool tier = !sel_items_.empty() && tiered(layer);
  if (tier) fetch_chunks(batch, seqs, kv, layer, pool);
  tasks_.clear();
  spans_.clear();
  pieces_.clear();
  piece_src_.clear();
  // Keys [b, e) of (token t, kv head): a plain-dtype task reads the pages through
  // PagedKvView; a scaled dtype (bf16/int8/int4) reads them as pieces, one per page.
  const bool plain = kv_dtype_plain(g.dtype);
  auto push_range = [&](int64_t t, int kvh, int32_t b, int32_t e) {
    AttnTask task{static_cast<int32_t>(t), kvh, b, e};
    if (!plain) {
      const SeqKv& seq = *seqs[batch.seq_index[t]];
      const int P = g.page_tokens;
      task.piece_begin = static_cast<int32_t>(pieces_.size());
      for (int32_t x = b; x < e;) {
        const int32_t page = x / P, page_end = std::min(e, (page + 1) * P);
        pieces_.push_back({PieceView{kv.head_block(layer, seq.blocks[page], kvh), &kv.head_layout()},
                           page_end - page * P, x - page * P});
        piece_src_.push_back(nullptr);
        x = page_end;
      }
      task.piece_end = static_cast<int32_t>(pieces_.size());
    }
    tasks_.push_back(task);
  };
  for (int64_t t = 0; t < n; ++t) {
    const int32_t pos = batch.positions[t];
    // Sliding window: key j is visible iff pos - j < window (HF: kv_idx > q_idx - window).
    const int32_t first = swa ? std::max<int32_t>(0, pos - c.sliding_window + 1) : 0;
    for (int kvh = 0; kvh < c.n_head_kv; ++kvh) {
      spans_.push_back({static_cast<int32_t>(tasks_.size()), 0});
      const int32_t sel = sel_index_.empty() ? -1 : sel_index_[t * c.n_head_kv + kvh];
      if (sel >= 0 && tier) {  // sparse through the device tier: the same ranges, as pieces
        const int C = sparse_->config().chunk_tokens;
        const std::vector<int32_t>& chunks = selected_[sel];
        const std::vector<int32_t>& slots = sel_slots_[sel];  // [chunks.size()]
        const SeqKv& seq = *seqs[batch.seq_index[t]];
        chunk_ranges(chunks, C, pos + 1, kSplitKeys, ranges_);
        pending_.assign(chunks.size(), nullptr);  // [chunks] host piece of a miss not yet copied
        const int32_t hot_begin = sel_hot_[sel].first;
        for (const HotChunks::PendingCopy& pc : sel_copies_[sel]) pending_[hot_begin + pc.index] = pc.src;
        size_t k = 0;
        for (const KeyRange& r : ranges_) {
          AttnTask task{static_cast<int32_t>(t), kvh, r.begin, r.end, static_cast<int32_t>(pieces_.size()), 0};
          for (int32_t ch = r.begin / C; ch * C < r.end; ++ch) {
            while (chunks[k] < ch) ++k;  // ranges cover selected chunks only, in order
            const uint8_t* p = nullptr;
            if (slots[k] >= 0) p = hot_->slot_ptr(layer, kvh, slots[k]);                   // hot set
            else if (sel_resident_[sel]) p = hot_->resident_piece(seq, layer, kvh, ch);  // sinks / ring
            if (!p) p = hot_->host_piece(seq, layer, kvh, ch);                            // host pages
            pieces_.push_back({PieceView{p, &hot_->piece_layout()}, std::min(C, r.end - ch * C)});
            piece_src_.push_back(slots[k] >= 0 ? pending_[k] : nullptr);
          }
          task.piece_end = static_cast<int32_t>(pieces_.size());
          tasks_.push_back(task);
        }
      } else if (sel >= 0) {  // sparse: only the selected chunks
        chunk_ranges(selected_[sel], sparse_->config().chunk_tokens, pos + 1, kSplitKeys, ranges_);
        for (const KeyRange& r : ranges_) push_range(t, kvh, r.begin, r.end);
      } else {
        for (int32_t b = first; b <= pos; b += kSplitKeys) push_range(t, kvh, b, std::min(pos + 1, b + kSplitKeys));
      }
      // The unselected chunks' share, estimated (sparse/tail_estimate.h): one more partial.
      if (sel >= 0 && sparse_->tail_estimate()) {
        AttnTask task{static_cast<int32_t>(t), kvh, 0, 0};
        task.tail_sel = sel;
        tasks_.push_back(task);
      }
      spans_.back().second = static_cast<int32_t>(tasks_.size());
    }
  }
  const int64_t part_floats = static_cast<int64_t>(group) * (2 + hd);
  grow(partials_, static_cast<int64_t>(tasks_.size()) * part_floats);
  parts_.resize(tasks_.size());  // views into partials_, one per task
  for (size_t i = 0; i < tasks_.size(); ++i) {
    float* base = partials_.data() + static_cast<int64_t>(i) * part_floats;
    parts_[i] = cpu::AttnPartial{base, base + group, base + 2 * group};
  }
  const int64_t page_elems = plain ? g.page_elems() : 0;  // plain-dtype tasks read the pages by elements
  pool.parallel_for(static_cast<int64_t>(tasks_.size()), [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const AttnTask& task = tasks_[i];
      const float* q = q_.data() + task.token * c.q_dim() + task.kv_head * group * hd;  // [group][hd]
      if (task.tail_sel >= 0) {
        sparse_->tail_partial(sel_inputs_[task.tail_sel], sel_scratch_, task.tail_sel, selected_[task.tail_sel],
                              parts_[i]);
      } else if (task.piece_begin >= 0) {  // same float math as attention_partial over the same keys
        for (int32_t p = task.piece_begin; p < task.piece_end; ++p)  // this step's misses land in their slots
          if (piece_src_[p])
            std::memcpy(const_cast<uint8_t*>(pieces_[p].view.base), piece_src_[p],
                        static_cast<size_t>(hot_->piece_bytes()));
        kv_attend_pieces(q, group, pieces_.data() + task.piece_begin, task.piece_end - task.piece_begin,
                         c.attn_scale, parts_[i].max, parts_[i].sum, parts_[i].acc);
      } else {
        const SeqKv& seq = *seqs[batch.seq_index[task.token]];
        const cpu::PagedKvView view{kv.layer_base(layer), page_elems, seq.blocks.data(), g.page_tokens, hd,
                                    g.dtype == KvDtype::kF16};
        cpu::attention_partial(q, group, view, task.kv_head, task.begin, task.end, c.attn_scale, parts_[i]);
      }
    }
  });
  auto merge = [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const auto [first_task, last_task] = spans_[i];
      const int64_t t = i / c.n_head_kv;
      const int kvh = static_cast<int>(i % c.n_head_kv);
      float* out = att_.data() + t * c.q_dim() + kvh * group * hd;  // [group][hd]
      cpu::attention_merge(parts_.data() + first_task, last_task - first_task, group, hd, out);
    }
  };
  // A decode step of one sequence has n_kv_heads merges of a few partials: not worth a dispatch.
  if (spans_.size() <= 8)
    merge(0, static_cast<int64_t>(spans_.size()), 0);
  else
    pool.parallel_for(static_cast<int64_t>(spans_.size()), merge);
}

void Decoder::select_chunks(const Batch& batch, std::span<SeqKv* const> seqs, const KvCache& kv, int layer,
                            ThreadPool& pool) {
  sel_items_.clear();
  sel_index_.clear();
  const ModelConfig& c = config_;
  if (!sparse_ || !sparse_->layer_sparse(layer) || (c.layer_is_swa[layer] && c.sliding_window > 0)) return;
  const int64_t n = batch.size();
  const int group = c.n_head / c.n_head_kv, hd = c.head_dim;
  int64_t n_dense = 0;
  sel_index_.assign(n * c.n_head_kv, -1);
  for (int64_t t = 0; t < n; ++t) {
    // Decode tokens only (one token of its sequence in this batch): prefill stays dense.
    const bool decode = seq_tokens_[batch.seq_index[t]] == 1;
    if (!decode || !sparse_->use_sparse(batch.positions[t] + 1)) { n_dense += c.n_head_kv; continue; }
    for (int kvh = 0; kvh < c.n_head_kv; ++kvh) {
      sel_index_[t * c.n_head_kv + kvh] = static_cast<int32_t>(sel_items_.size());
      sel_items_.push_back(static_cast<int32_t>(t * c.n_head_kv + kvh));
    }
  }
  sparse_->count_dense(n_dense);
  if (sel_items_.empty()) return;
  const int64_t n_sel = static_cast<int64_t>(sel_items_.size());
  if (static_cast<int64_t>(selected_.size()) < n_sel) selected_.resize(n_sel);
  sel_inputs_.resize(n_sel);
  for (int64_t i = 0; i < n_sel; ++i) {
    const int64_t t = sel_items_[i] / c.n_head_kv;
    SelectInput& in = sel_inputs_[i];
    in.layer = layer;
    in.kv_head = static_cast<int>(sel_items_[i] % c.n_head_kv);
    in.q = q_.data() + t * c.q_dim() + in.kv_head * group * hd;  // [group][hd]
    in.n_q = group;
    in.blocks = seqs[batch.seq_index[t]]->blocks;
    in.n_tokens = batch.positions[t] + 1;
  }
  sparse_->select_batch(sel_inputs_, std::span<std::vector<int32_t>>(selected_.data(), n_sel), sel_scratch_, &pool);
  if (!sparse_->measure_recall() || !kv_dtype_plain(kv.geometry().dtype)) return;  // recall reads plain rows
  const KvGeometry& g = kv.geometry();
  const int64_t page_elems = g.page_elems();
  pool.parallel_for(n_sel, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const SelectInput& in = sel_inputs_[i];
      const float* q = in.q;
      const int kvh = in.kv_head;
      const int32_t n_keys = in.n_tokens;
      const cpu::PagedKvView view{kv.layer_base(layer), page_elems, in.blocks.data(), g.page_tokens, hd,
                                  g.dtype == KvDtype::kF16};
      sparse_->add_recall(layer, attention_mass_recall(q, group, view, kvh, n_keys, c.attn_scale, selected_[i],
                                                       sparse_->config().chunk_tokens));
      sparse_->add_oracle_recall(layer, oracle_mass_recall(q, group, view, kvh, n_keys, c.attn_scale, sparse_->config()));
    }
  });
}

}  // namespace hs
