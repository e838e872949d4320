// sparse/oracle_selector.cpp — see oracle_selector.h.
#include "sparse/oracle_selector.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/attention.h"

namespace hs {

Result<std::unique_ptr<OracleSelector>> OracleSelector::create(const KvCache& kv, float attn_scale,
                                                               const SparseConfig& cfg) {
  HS_RETURN_IF_ERROR(cfg.validate(kv.geometry().page_tokens));
  if (!kv_dtype_plain(kv.geometry().dtype))
    return make_error(StatusCode::kInvalidArgument, "sparse 'oracle' reads exact keys: needs --kv-cache-dtype f16 or f32");
  return std::unique_ptr<OracleSelector>(new OracleSelector(kv, attn_scale, cfg));
}

void OracleSelector::log_masses(const SelectInput& in, int32_t chunk_begin, int32_t chunk_end, float* out) const {
  const KvGeometry& g = kv_.geometry();
  const int G = in.n_q, hd = g.head_dim, C = cfg_.chunk_tokens;
  const cpu::PagedKvView view{kv_.layer_base(in.layer), g.page_elems(), in.blocks.data(), g.page_tokens, hd,
                              g.dtype == KvDtype::kF16};
  static thread_local std::vector<float> buf;  // [G][2 + hd] one chunk's partial
  buf.resize(static_cast<size_t>(G) * (2 + hd));
  const cpu::AttnPartial part{buf.data(), buf.data() + G, buf.data() + 2 * G};
  for (int32_t c = chunk_begin; c < chunk_end; ++c) {
    float* l = out + static_cast<int64_t>(c - chunk_begin) * G;
    const int32_t b = c * C, e = std::min(in.n_tokens, (c + 1) * C);
    if (b >= e) {
      std::fill(l, l + G, -INFINITY);
      continue;
    }
    cpu::attention_partial(in.q, G, view, in.kv_head, b, e, scale_, part);
    for (int h = 0; h < G; ++h) l[h] = part.max[h] + std::log(part.sum[h]);
  }
}

void OracleSelector::prepare(const SelectInput& in, float* prep) const { forced_log_mass(in, prep, prep); }

void OracleSelector::chunk_scores(const SelectInput& in, const float*, int32_t chunk_begin, int32_t chunk_end,
                                  float* out) const {
  log_masses(in, chunk_begin, chunk_end, out);
}

void OracleSelector::finish_scores(const SelectInput& in, const float* prep, const float* raw, int32_t n_cand,
                                   float* ranking) const {
  group_mass_ranking(raw, in.n_q, n_cand, prep, ranking);
}

}  // namespace hs
