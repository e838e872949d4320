// backend/cpu_attention.cpp — see cpu_attention.h.
#include "backend/cpu_attention.h"

#include <algorithm>
#include <cstring>

namespace hs {

namespace {
void grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
}
// Fewer tokens of a sequence than this in one step run per token (a tile's key transposes
// would outweigh its reuse).
constexpr int32_t kMinTileTokens = 8;
}  // namespace

void CpuAttention::plan_tiles(const ForwardPlan& plan, const AttentionParams& p) {
  const int group = p.n_head / p.n_head_kv;
  const int64_t n_seqs = static_cast<int64_t>(plan.seqs.size());
  tile_tasks_.clear();
  tile_rows_.clear();
  seq_tiled_.assign(n_seqs, 0);
  const int max_tokens = kv_dtype_plain(plan.kv->geometry().dtype) ? cpu::attention_tile_max_tokens(group, p.head_dim) : 0;
  if (max_tokens <= 0) return;
  int64_t n_tiled = 0;
  for (int64_t s = 0; s < n_seqs; ++s)
    if (plan.seq_tokens[s] >= kMinTileTokens) {
      seq_tiled_[s] = 1;
      n_tiled += plan.seq_tokens[s];
    }
  if (n_tiled == 0) return;
  // Rows grouped by sequence, in batch order (= position order within a sequence).
  std::vector<int32_t>& offset = tile_offset_;
  offset.assign(n_seqs + 1, 0);
  for (int64_t s = 0; s < n_seqs; ++s) offset[s + 1] = offset[s] + (seq_tiled_[s] ? plan.seq_tokens[s] : 0);
  tile_rows_.resize(n_tiled);
  tile_fill_.assign(offset.begin(), offset.end() - 1);
  for (int64_t t = 0; t < plan.n_tokens(); ++t)
    if (seq_tiled_[plan.seq_index[t]]) tile_rows_[tile_fill_[plan.seq_index[t]]++] = static_cast<int32_t>(t);
  // Tile size: about 4 tasks per thread, at least kMinTileTokens tokens, at most what fits.
  const int64_t want = 4LL * plan.pool->n_threads();
  const int tile = static_cast<int>(std::clamp<int64_t>((n_tiled * p.n_head_kv + want - 1) / want, kMinTileTokens,
                                                        max_tokens));
  for (int64_t s = 0; s < n_seqs; ++s) {
    if (!seq_tiled_[s]) continue;
    // Last tiles first: they see the most keys, so the pool starts on the longest tasks.
    const int32_t n_tiles = (offset[s + 1] - offset[s] + tile - 1) / tile;
    for (int32_t k = n_tiles - 1; k >= 0; --k)
      for (int kvh = 0; kvh < p.n_head_kv; ++kvh) {
        const int32_t b = offset[s] + k * tile;
        tile_tasks_.push_back({static_cast<int32_t>(s), kvh, b, std::min<int32_t>(tile, offset[s + 1] - b)});
      }
  }
}

void CpuAttention::write(const ForwardPlan& plan, int layer, const float* k, const float* v, int kv_dim, int head_dim) {
  KvCache& kv = *plan.kv;
  const int n_kv_heads = kv_dim / head_dim;
  for (int64_t t = 0; t < plan.n_tokens(); ++t) {
    const SeqKv& seq = *plan.seqs[plan.seq_index[t]];
    const int32_t pos = plan.positions[t];
    for (int hh = 0; hh < n_kv_heads; ++hh) {
      const float* kt = k + t * kv_dim + hh * head_dim;
      const float* vt = v + t * kv_dim + hh * head_dim;
      kv.write(seq, layer, hh, pos, kt, vt);
      if (sparse_) sparse_->on_key(seq.blocks, layer, hh, pos, kt, vt);
    }
  }
}

void CpuAttention::end_step() {
  if (!hot_used_) return;
  hot_used_ = false;
  const HotChunkStats st = hot_->end_step();
  if (sparse_) sparse_->count_fetch(st);
}

bool CpuAttention::tiered(int layer, const AttentionParams& p) const {
  const int group = p.n_head / p.n_head_kv;
  return hot_ && sparse_ && hot_->chunk_tokens() == sparse_->config().chunk_tokens &&
         group <= kPieceAttnMaxGroup && hot_->hot_set(layer, 0) != nullptr;
}

void CpuAttention::fetch_chunks(const ForwardPlan& plan, int layer, const AttentionParams& p) {
  KvCache& kv = *plan.kv;
  ThreadPool& pool = *plan.pool;
  const auto seqs = plan.seqs;
  const SparseConfig& cfg = sparse_->config();
  const int C = cfg.chunk_tokens;
  const int64_t n_sel = static_cast<int64_t>(sel_items_.size());
  if (static_cast<int64_t>(sel_slots_.size()) < n_sel) sel_slots_.resize(n_sel);
  if (static_cast<int64_t>(sel_copies_.size()) < n_sel) sel_copies_.resize(n_sel);
  sel_resident_.assign(n_sel, 0);
  sel_hot_.assign(n_sel, {0, 0});
  for (int64_t i = 0; i < n_sel; ++i) {
    const int64_t t = sel_items_[i] / p.n_head_kv;
    SeqKv& seq = *seqs[plan.seq_index[t]];
    const std::vector<int32_t>& chunks = selected_[i];  // ascending
    sel_slots_[i].assign(chunks.size(), -1);
    sel_copies_[i].clear();
    if (!kv.lease(seq).is_ok()) continue;  // every lease in use: this one reads the pages
    sel_resident_[i] = hot_->acquire_resident(seq);  // sinks + window ring (else read from the pages)
    // Fetched: the chunks between the sinks and the window that are full (not being filled).
    const int32_t n_keys = plan.positions[t] + 1;
    const auto [first, last] = candidate_range(n_keys, cfg);
    const int32_t end = std::min(last, n_keys / C);
    const auto b = std::lower_bound(chunks.begin(), chunks.end(), first) - chunks.begin();
    const auto e = std::lower_bound(chunks.begin(), chunks.end(), end) - chunks.begin();
    if (e > b) sel_hot_[i] = {static_cast<int32_t>(b), static_cast<int32_t>(e)};
  }
  hot_used_ = true;
  pool.parallel_for(p.n_head_kv, 1, [&](int64_t head_begin, int64_t head_end, int) {
    for (int64_t i = 0; i < n_sel; ++i) {
      const int kvh = static_cast<int>(sel_items_[i] % p.n_head_kv);
      const auto [b, e] = sel_hot_[i];
      if (kvh < head_begin || kvh >= head_end) continue;
      const SeqKv& seq = *seqs[plan.seq_index[sel_items_[i] / p.n_head_kv]];
      if (sel_resident_[i]) hot_->sync_resident(seq, layer, kvh, plan.positions[sel_items_[i] / p.n_head_kv] + 1);
      if (b == e) continue;
      // The misses' copies run in the attention task that reads them (see attention()).
      hot_->fetch(seq, layer, kvh, std::span<const int32_t>(selected_[i].data() + b, e - b),
                  std::span<int32_t>(sel_slots_[i].data() + b, e - b), &sel_copies_[i]);
    }
  });
}

void CpuAttention::run(const ForwardPlan& plan, int layer, const float* q_all, float* out_all, const AttentionParams& p) {
  KvCache& kv = *plan.kv;
  ThreadPool& pool = *plan.pool;
  const auto seqs = plan.seqs;
  const int64_t n = plan.n_tokens();
  const int hd = p.head_dim, group = p.n_head / p.n_head_kv;
  const bool swa = p.window > 0;
  const int q_dim = p.n_head * hd;
  const KvGeometry& g = kv.geometry();

  // One task per (token, kv head, key split). Splitting long ranges lets a single decode
  // step use every thread; partials are merged per (token, kv head) afterwards.
  constexpr int32_t kSplitKeys = 512;
  select_chunks(plan, layer, q_all, p);
  const bool tier = !sel_items_.empty() && tiered(layer, p);
  if (tier) fetch_chunks(plan, layer, p);
  plan_tiles(plan, p);
  tasks_.clear();
  spans_.clear();
  pieces_.clear();
  piece_src_.clear();
  // Keys [b, e) of (token t, kv head): a plain-dtype task reads the pages through
  // PagedKvView; a scaled dtype (bf16/int8/int4/fp8) reads them as pieces, one per page.
  const bool plain = kv_dtype_plain(g.dtype);
  auto push_range = [&](int64_t t, int kvh, int32_t b, int32_t e) {
    AttnTask task{static_cast<int32_t>(t), kvh, b, e};
    if (!plain) {
      const SeqKv& seq = *seqs[plan.seq_index[t]];
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
    const int32_t pos = plan.positions[t];
    if (seq_tiled_[plan.seq_index[t]]) {  // in a prefill tile: no per-token tasks, no merge
      for (int kvh = 0; kvh < p.n_head_kv; ++kvh) spans_.push_back({-1, -1});
      continue;
    }
    // Sliding window: key j is visible iff pos - j < window (HF: kv_idx > q_idx - window).
    const int32_t first = swa ? std::max<int32_t>(0, pos - p.window + 1) : 0;
    for (int kvh = 0; kvh < p.n_head_kv; ++kvh) {
      spans_.push_back({static_cast<int32_t>(tasks_.size()), 0});
      const int32_t sel = sel_index_.empty() ? -1 : sel_index_[t * p.n_head_kv + kvh];
      if (sel >= 0 && tier) {  // sparse through the device tier: the same ranges, as pieces
        const int C = sparse_->config().chunk_tokens;
        const std::vector<int32_t>& chunks = selected_[sel];
        const std::vector<int32_t>& slots = sel_slots_[sel];  // [chunks.size()]
        const SeqKv& seq = *seqs[plan.seq_index[t]];
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
  if (!tile_tasks_.empty()) {
    pool.parallel_for(static_cast<int64_t>(tile_tasks_.size()), 1, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) {
        const TileTask& task = tile_tasks_[i];
        const SeqKv& seq = *seqs[task.seq];
        const int32_t* rows = tile_rows_.data() + task.row_begin;
        const cpu::PagedKvView view{kv.layer_base(layer), page_elems, seq.blocks.data(), g.page_tokens, hd,
                                    g.dtype == KvDtype::kF16};
        const int64_t head_offset = static_cast<int64_t>(task.kv_head) * group * hd;
        const cpu::PrefillTile tile{q_all + head_offset, q_dim, out_all + head_offset, q_dim, rows, task.n_tokens,
                                    plan.positions[rows[0]], p.window};
        cpu::attention_prefill_tile(tile, group, view, task.kv_head, p.scale);
      }
    });
  }
  pool.parallel_for(static_cast<int64_t>(tasks_.size()), [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const AttnTask& task = tasks_[i];
      const float* q = q_all + task.token * q_dim + task.kv_head * group * hd;  // [group][hd]
      if (task.tail_sel >= 0) {
        sparse_->tail_partial(sel_inputs_[task.tail_sel], sel_scratch_, task.tail_sel, selected_[task.tail_sel],
                              parts_[i]);
      } else if (task.piece_begin >= 0) {  // same float math as attention_partial over the same keys
        for (int32_t p = task.piece_begin; p < task.piece_end; ++p)  // this step's misses land in their slots
          if (piece_src_[p])
            std::memcpy(const_cast<uint8_t*>(pieces_[p].view.base), piece_src_[p],
                        static_cast<size_t>(hot_->piece_bytes()));
        kv_attend_pieces(q, group, pieces_.data() + task.piece_begin, task.piece_end - task.piece_begin,
                         p.scale, parts_[i].max, parts_[i].sum, parts_[i].acc);
      } else {
        const SeqKv& seq = *seqs[plan.seq_index[task.token]];
        const cpu::PagedKvView view{kv.layer_base(layer), page_elems, seq.blocks.data(), g.page_tokens, hd,
                                    g.dtype == KvDtype::kF16};
        cpu::attention_partial(q, group, view, task.kv_head, task.begin, task.end, p.scale, parts_[i]);
      }
    }
  });
  auto merge = [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const auto [first_task, last_task] = spans_[i];
      if (first_task < 0) continue;  // written by its prefill tile
      const int64_t t = i / p.n_head_kv;
      const int kvh = static_cast<int>(i % p.n_head_kv);
      float* out = out_all + t * q_dim + kvh * group * hd;  // [group][hd]
      cpu::attention_merge(parts_.data() + first_task, last_task - first_task, group, hd, out);
    }
  };
  // A decode step of one sequence has n_kv_heads merges of a few partials: not worth a dispatch.
  if (spans_.size() <= 8)
    merge(0, static_cast<int64_t>(spans_.size()), 0);
  else
    pool.parallel_for(static_cast<int64_t>(spans_.size()), merge);
}

void CpuAttention::select_chunks(const ForwardPlan& plan, int layer, const float* q_all, const AttentionParams& p) {
  sel_items_.clear();
  sel_index_.clear();
  if (!sparse_ || !sparse_->layer_sparse(layer) || p.window > 0) return;
  const KvCache& kv = *plan.kv;
  ThreadPool& pool = *plan.pool;
  const auto seqs = plan.seqs;
  const int64_t n = plan.n_tokens();
  const int group = p.n_head / p.n_head_kv, hd = p.head_dim;
  const int q_dim = p.n_head * hd;
  int64_t n_dense = 0;
  sel_index_.assign(n * p.n_head_kv, -1);
  for (int64_t t = 0; t < n; ++t) {
    // Decode tokens only (one token of its sequence in this batch): prefill stays dense.
    const bool decode = plan.seq_tokens[plan.seq_index[t]] == 1;
    if (!decode || !sparse_->use_sparse(plan.positions[t] + 1)) { n_dense += p.n_head_kv; continue; }
    for (int kvh = 0; kvh < p.n_head_kv; ++kvh) {
      sel_index_[t * p.n_head_kv + kvh] = static_cast<int32_t>(sel_items_.size());
      sel_items_.push_back(static_cast<int32_t>(t * p.n_head_kv + kvh));
    }
  }
  sparse_->count_dense(n_dense);
  if (sel_items_.empty()) return;
  const int64_t n_sel = static_cast<int64_t>(sel_items_.size());
  if (static_cast<int64_t>(selected_.size()) < n_sel) selected_.resize(n_sel);
  sel_inputs_.resize(n_sel);
  for (int64_t i = 0; i < n_sel; ++i) {
    const int64_t t = sel_items_[i] / p.n_head_kv;
    SelectInput& in = sel_inputs_[i];
    in.layer = layer;
    in.kv_head = static_cast<int>(sel_items_[i] % p.n_head_kv);
    in.q = q_all + t * q_dim + in.kv_head * group * hd;  // [group][hd]
    in.n_q = group;
    in.blocks = seqs[plan.seq_index[t]]->blocks;
    in.n_tokens = plan.positions[t] + 1;
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
      sparse_->add_recall(layer, attention_mass_recall(q, group, view, kvh, n_keys, p.scale, selected_[i],
                                                       sparse_->config().chunk_tokens));
      sparse_->add_oracle_recall(layer, oracle_mass_recall(q, group, view, kvh, n_keys, p.scale, sparse_->config()));
    }
  });
}

}  // namespace hs
