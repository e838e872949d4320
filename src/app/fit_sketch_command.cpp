// app/fit_sketch_command.cpp — `hindsight fit-sketch -m MODEL --corpus FILES -o FILE`: fits the
// per-(layer, kv head) key sketch basis by PCA of real keys.
//
// The corpus is tokenized and run through the model in windows (prefill only, dense); a key
// observer on the model hands every KV layer's keys (a hybrid model's full-attention layers),
// before and after RoPE, to SketchFitter.
// One window in ten is held out: the command reports, per layer, the share of the held-out
// post-RoPE key energy (about the mean) that the fitted basis keeps — the quantity that
// decides whether to fit before or after RoPE (the sketch scores post-RoPE keys, because the
// KV cache stores keys after RoPE and attention logits are q·k after RoPE). With
// --compare-rope it fits both and prints both columns. With --query-aware the observer also
// takes the post-RoPE queries (rotated by the same position shift as the keys) and the file
// gets the query-aware bilinear basis (sketch_fitter.h); the command then also reports, per
// layer, the share of the held-out score energy E[(q·(k − mu))²] that the PCA and the
// query-aware basis keep (1 − mean squared score error / that energy; held-out keys and the
// held-out queries' second moment). Cost: one prefill of the corpus plus n_keys · head_dim² / 2
// FMAs per fit (and n_queries · head_dim² / 2 more with --query-aware).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <random>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/commands.h"
#include "app/loaded_model.h"
#include "backend/cpu/ops.h"
#include "sparse/sketch_fitter.h"

namespace hs::app {
namespace {

struct FitOptions {
  ModelOptions model;
  std::vector<std::string> corpus;
  std::string out;
  int rank = 0;
  int64_t max_tokens = 200000;
  int window = 2048;
  bool pre_rope = false;
  bool compare_rope = false;
  bool no_center = false;
  bool query_aware = false;
  int max_position = 0;  // 0: the model's trained context
};

// Held-out keys of each (layer, kv head), post-RoPE: [n][head_dim] appended; with
// --query-aware also the held-out queries' second moment Σ q qᵀ of the kv head's group.
struct HeldOut {
  std::vector<std::vector<float>> keys;      // [n_layer * n_kv_heads][n * head_dim]
  std::vector<std::vector<double>> qmoment;  // [n_layer * n_kv_heads][head_dim * head_dim] (lower triangle)
  std::vector<int64_t> qn;                   // [n_layer * n_kv_heads] query rows
};

// Mean over heads of  Σ‖Bᵀ(k − mu)‖² / Σ‖k − mu‖²  on held-out keys (mu: the basis mean).
double kept_energy(const SketchBasis& b, const HeldOut& h, int layer) {
  double kept = 0, total = 0;
  const int hd = b.head_dim, r = b.rank;
  std::vector<double> c(hd);
  for (int head = 0; head < b.n_kv_heads; ++head) {
    const auto& ks = h.keys[static_cast<size_t>(layer) * b.n_kv_heads + head];
    const float* B = b.B(layer, head);
    const float* mu = b.mu(layer, head);
    for (size_t off = 0; off + hd <= ks.size(); off += hd) {
      for (int d = 0; d < hd; ++d) { c[d] = ks[off + d] - mu[d]; total += c[d] * c[d]; }
      for (int j = 0; j < r; ++j) {
        double s = 0;
        for (int d = 0; d < hd; ++d) s += c[d] * B[d * r + j];
        kept += s * s;
      }
    }
  }
  return total > 0 ? kept / total : std::nan("");
}

// Mean over heads of 1 − E[(qᵀ(I − ABᵀ)(k − mu))²] / E[(qᵀ(k − mu))²] on held-out keys, with
// E over q taken through the held-out queries' second moment Q: per key, with c = k − mu and
// u = c − A Bᵀc, the ratio Σ uᵀQu / Σ cᵀQc.
double kept_score(const SketchBasis& b, const HeldOut& h, int layer) {
  const int hd = b.head_dim, r = b.rank;
  double kept_sum = 0;
  int heads = 0;
  std::vector<double> c(hd), u(hd), s(r), Q(static_cast<size_t>(hd) * hd);
  for (int head = 0; head < b.n_kv_heads; ++head) {
    const size_t i = static_cast<size_t>(layer) * b.n_kv_heads + head;
    const auto& ks = h.keys[i];
    if (h.qn.empty() || h.qn[i] == 0 || ks.empty()) continue;
    for (int x = 0; x < hd; ++x)
      for (int y = 0; y <= x; ++y)
        Q[static_cast<size_t>(x) * hd + y] = Q[static_cast<size_t>(y) * hd + x] =
            h.qmoment[i][static_cast<size_t>(x) * hd + y] / static_cast<double>(h.qn[i]);
    auto quad = [&](const std::vector<double>& v) {
      double acc = 0;
      for (int x = 0; x < hd; ++x) {
        const double* qx = Q.data() + static_cast<size_t>(x) * hd;
        double row = 0;
#pragma omp simd reduction(+ : row)
        for (int y = 0; y < hd; ++y) row += qx[y] * v[y];
        acc += v[x] * row;
      }
      return acc;
    };
    const float* B = b.B(layer, head);
    const float* A = b.A(layer, head);
    const float* mu = b.mu(layer, head);
    double err = 0, total = 0;
    for (size_t off = 0; off + hd <= ks.size(); off += hd) {
      for (int d = 0; d < hd; ++d) c[d] = ks[off + d] - mu[d];
      std::fill(s.begin(), s.end(), 0.0);
      for (int d = 0; d < hd; ++d)
        for (int j = 0; j < r; ++j) s[j] += c[d] * B[d * r + j];
      for (int d = 0; d < hd; ++d) {
        double a = 0;
        for (int j = 0; j < r; ++j) a += A[d * r + j] * s[j];
        u[d] = c[d] - a;
      }
      err += quad(u);
      total += quad(c);
    }
    if (total > 0) { kept_sum += 1.0 - err / total; ++heads; }
  }
  return heads ? kept_sum / heads : std::nan("");
}

int run_fit(FitOptions& o) {
  o.model.sparse = "off";  // fitting runs dense
  o.model.ctx_size = std::max(o.model.ctx_size, o.window + 16);
  auto m = load_model(o.model);
  if (!m.is_ok()) { fmt::print(stderr, "error: {}\n", m.status().message()); return 1; }
  LanguageModel& model = m->model();
  const ModelConfig& c = model.config();
  // Keys of the KV layers (a hybrid model's full-attention layers); the dense ones are fitted too.
  const int n_kv_layers = m->kv->geometry().n_layer;
  const std::vector<bool> sparse_layer = model.sparse_kv_layers();
  std::string text;
  for (const auto& f : o.corpus) {
    std::ifstream in(f, std::ios::binary);
    if (!in) { fmt::print(stderr, "error: cannot read corpus file {}\n", f); return 1; }
    std::stringstream ss;
    ss << in.rdbuf();
    text += ss.str();
    text += "\n\n";
  }
  std::vector<int32_t> toks = m->tokenizer->encode(text, true, false);
  if (static_cast<int64_t>(toks.size()) > o.max_tokens) toks.resize(o.max_tokens);
  if (toks.size() < 64) { fmt::print(stderr, "error: corpus too small ({} tokens)\n", toks.size()); return 1; }

  if (o.query_aware && o.pre_rope) {
    fmt::print(stderr, "error: --query-aware fits post-RoPE keys and queries (drop --pre-rope)\n");
    return 1;
  }
  const int kvd = c.kv_dim(), hd = c.head_dim, qd = c.q_dim(), group = c.n_head / c.n_head_kv;
  SketchFitter post(n_kv_layers, c.n_head_kv, hd), pre(n_kv_layers, c.n_head_kv, hd);
  const size_t n_pairs = static_cast<size_t>(n_kv_layers) * c.n_head_kv;
  HeldOut held{std::vector<std::vector<float>>(n_pairs), {}, {}};
  if (o.query_aware) {
    held.qmoment.assign(n_pairs, std::vector<double>(static_cast<size_t>(hd) * hd, 0.0));
    held.qn.assign(n_pairs, 0);
  }
  bool holding = false;
  // Position spread: windows are prefilled at positions 0..window-1, but the sketch must
  // serve keys at any position up to the context length, and post-RoPE keys of the slow
  // rotary frequencies only turn at large positions. RoPE composes (R(p + d) = R(d) R(p)),
  // so each window's post-RoPE keys are rotated by a random shift d, as if the window sat at
  // positions d..d+window-1 (attention is relative, so the keys themselves are unchanged).
  const int max_pos = o.max_position > 0 ? o.max_position : c.n_ctx_train;
  std::mt19937_64 shift_rng(42);
  // Partial RoPE (qwen35: the first rope_dims of each head turn) shifts only those dims.
  const int rot_dims = c.rope_dims > 0 ? c.rope_dims : hd, half = rot_dims / 2;
  std::vector<float> rot_global(rot_dims), rot_local(rot_dims), shifted, shifted_q;  // [cos | sin], [n][kv_dim], [n][q_dim]
  auto draw_shift = [&] {
    const int span = std::max(0, max_pos - o.window);
    const int32_t d = span > 0 ? static_cast<int32_t>(shift_rng() % static_cast<uint64_t>(span)) : 0;
    cpu::rope_table(d, c.rope_theta, rot_dims, rot_global.data(), rot_global.data() + half);
    cpu::rope_table(d, c.rope_theta_local, rot_dims, rot_local.data(), rot_local.data() + half);
  };
  // Rotates each head of one token's row [n_heads][hd] by the drawn shift.
  auto shift_row = [&](float* row, int n_heads, const std::vector<float>& rot) {
    for (int h = 0; h < n_heads; ++h)
      cpu::rope_apply(row + h * hd, 1, rot_dims, rot.data(), rot.data() + half, c.rope_style == RopeStyle::kNeox);
  };
  const bool want_pre = o.pre_rope || o.compare_rope, want_post = !o.pre_rope || o.compare_rope;
  model.set_key_observer([&](int layer, const float* k_pre, const float* k_post_raw, const float* q_post_raw,
                             const float*, int64_t n) {
    const bool swa = !sparse_layer[layer];  // a sliding-window layer (gemma3): its local theta
    const std::vector<float>& rot = swa && c.rope_theta_local != c.rope_theta ? rot_local : rot_global;
    shifted.assign(k_post_raw, k_post_raw + n * kvd);
    for (int64_t t = 0; t < n; ++t) shift_row(shifted.data() + t * kvd, c.n_head_kv, rot);
    const float* k_post = shifted.data();
    const float* q_post = nullptr;
    if (o.query_aware) {  // the queries at the same shifted positions (q·k is unchanged: R(d)ᵀR(d) = I)
      shifted_q.assign(q_post_raw, q_post_raw + n * qd);
      for (int64_t t = 0; t < n; ++t) shift_row(shifted_q.data() + t * qd, c.n_head, rot);
      q_post = shifted_q.data();
    }
    for (int h = 0; h < c.n_head_kv; ++h) {
      if (holding) {
        const size_t i = static_cast<size_t>(layer) * c.n_head_kv + h;
        auto& dst = held.keys[i];
        for (int64_t t = 0; t < n; ++t) dst.insert(dst.end(), k_post + t * kvd + h * hd, k_post + t * kvd + h * hd + hd);
        if (q_post) {
          double* qm = held.qmoment[i].data();
          for (int64_t t = 0; t < n; ++t)
            for (int g = 0; g < group; ++g) {
              const float* qr = q_post + t * qd + (h * group + g) * hd;
              for (int x = 0; x < hd; ++x)
                for (int y = 0; y <= x; ++y) qm[static_cast<size_t>(x) * hd + y] += static_cast<double>(qr[x]) * qr[y];
            }
          held.qn[i] += n * group;
        }
        continue;
      }
      if (want_post) post.add_keys(layer, h, k_post + h * hd, n, kvd);
      if (want_post && q_post)
        for (int g = 0; g < group; ++g) post.add_queries(layer, h, q_post + (h * group + g) * hd, n, qd);
      if (want_pre) pre.add_keys(layer, h, k_pre + h * hd, n, kvd);
    }
  });
  std::vector<float> logits;
  int n_windows = 0;
  for (size_t start = 0; start < toks.size(); start += o.window, ++n_windows) {
    holding = n_windows % 10 == 9;
    draw_shift();
    SeqKv seq;
    SeqKv* seqs[] = {&seq};
    const size_t end = std::min(toks.size(), start + o.window);
    for (size_t s = start; s < end; s += 512) {
      Batch b;
      for (size_t p = s; p < std::min(end, s + 512); ++p) b.add(toks[p], static_cast<int32_t>(p - start), 0, false);
      Status st = model.forward_copy(b, seqs, *m->kv, *m->pool, logits);
      if (!st.is_ok()) { fmt::print(stderr, "error: {}\n", st.message()); return 1; }
    }
    m->kv->release(seq);
    spdlog::info("fit-sketch: window {} ({} / {} tokens)", n_windows + 1, end, toks.size());
  }
  model.set_key_observer({});
  SketchFitter::Options fo;
  fo.rank = o.rank;
  fo.centered = !o.no_center;
  std::unique_ptr<SketchBasis> b_post, b_pre, b_query;
  if (want_post) {
    fo.post_rope = true;
    auto r = post.fit(fo, m->pool.get());
    if (!r.is_ok()) { fmt::print(stderr, "error: {}\n", r.status().message()); return 1; }
    b_post = std::make_unique<SketchBasis>(std::move(*r));
  }
  if (o.query_aware) {
    SketchFitter::Options qo = fo;
    qo.post_rope = true;
    qo.query_aware = true;
    auto r = post.fit(qo, m->pool.get());
    if (!r.is_ok()) { fmt::print(stderr, "error: {}\n", r.status().message()); return 1; }
    b_query = std::make_unique<SketchBasis>(std::move(*r));
  }
  if (want_pre) {
    fo.post_rope = false;
    auto r = pre.fit(fo, m->pool.get());
    if (!r.is_ok()) { fmt::print(stderr, "error: {}\n", r.status().message()); return 1; }
    b_pre = std::make_unique<SketchBasis>(std::move(*r));
  }
  SketchBasis& chosen = o.pre_rope ? *b_pre : b_query ? *b_query : *b_post;
  std::filesystem::path mp(o.model.model);
  chosen.model_name = mp.filename().string();
  fmt::print("\nkeys: {} tokens, {} windows ({} held out); rank {}\n\n", toks.size(), n_windows, n_windows / 10,
             chosen.rank);
  fmt::print("| layer | kept energy, post-RoPE fit |{}{}\n|---|---|{}{}\n",
             b_pre ? " kept energy, pre-RoPE fit |" : "",
             b_query ? " kept score, PCA fit | kept score, query-aware fit |" : "", b_pre ? "---|" : "",
             b_query ? "---|---|" : "");
  for (int l = 0; l < n_kv_layers; ++l)
    fmt::print("| {}{} | {} |{}{}\n", l, !sparse_layer[l] ? " (local)" : "",
               b_post ? fmt::format("{:.4f}", kept_energy(*b_post, held, l)) : "-",
               b_pre ? fmt::format(" {:.4f} |", kept_energy(*b_pre, held, l)) : "",
               b_query ? fmt::format(" {:.4f} | {:.4f} |", kept_score(*b_post, held, l), kept_score(*b_query, held, l))
                       : "");
  fmt::print("\n(kept energy: share of held-out post-RoPE key variance inside the basis; the sketch scores "
             "post-RoPE keys)\n");
  if (b_query)
    fmt::print("(kept score: 1 - mean squared error of the sketched score q·(k - mu) / its mean square, "
               "held-out keys and queries)\n");
  Status st = chosen.save(o.out);
  if (!st.is_ok()) { fmt::print(stderr, "error: {}\n", st.message()); return 1; }
  fmt::print("wrote {}\n", o.out);
  return 0;
}

}  // namespace

void register_fit_sketch(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<FitOptions>();
  CLI::App* cmd = app.add_subcommand("fit-sketch", "Fit the key sketch basis (PCA of real keys) for sparse attention");
  add_model_options(cmd, o->model);
  cmd->add_option("--corpus", o->corpus, "Text files whose keys are fitted")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", o->out, "Output file (.sketch.safetensors)")->required();
  cmd->add_option("--rank", o->rank, "Sketch rank (0: head_dim / 4)")->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "Use at most this many corpus tokens")->capture_default_str();
  cmd->add_option("--window", o->window, "Tokens per prefill window (positions 0..window-1)")->capture_default_str();
  cmd->add_flag("--pre-rope", o->pre_rope, "Fit keys before RoPE (default: after)");
  cmd->add_flag("--compare-rope", o->compare_rope, "Fit both and report both held-out energies");
  cmd->add_flag("--no-center", o->no_center, "Plain second-moment PCA (no key mean)");
  cmd->add_flag("--query-aware", o->query_aware,
                "Fit the query-aware bilinear sketch (min. mean squared q·k error under the query second moment)");
  cmd->add_option("--max-position", o->max_position,
                  "Spread the keys over positions up to this (RoPE shift per window; 0: the model's context)")
      ->capture_default_str();
  cmd->callback([o, &run] { run = [o] { return run_fit(*o); }; });
}

}  // namespace hs::app
