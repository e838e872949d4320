// sparse/oracle_selector.cpp — see oracle_selector.h.
#include "sparse/oracle_selector.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "sparse/exact_chunk_mass.h"

namespace hs {

Result<std::unique_ptr<OracleSelector>> OracleSelector::create(const SparseKernels& k, const KvCache& kv,
                                                               float attn_scale, const SparseConfig& cfg) {
  HS_RETURN_IF_ERROR(cfg.validate(kv.geometry().page_tokens));
  if (!kv_dtype_plain(kv.geometry().dtype))
    return make_error(StatusCode::kInvalidArgument, "sparse 'oracle' reads exact keys: needs --kv-cache-dtype f16 or f32");
  return std::unique_ptr<OracleSelector>(new OracleSelector(k, kv, attn_scale, cfg));
}

void OracleSelector::prepare(const SelectInput& in, float* prep) const { forced_log_mass(in, prep, prep); }

void OracleSelector::chunk_scores(const SelectInput& in, const float*, int32_t chunk_begin, int32_t chunk_end,
                                  float* out) const {
  exact_chunk_log_masses(k_, kv_, scale_, cfg_.chunk_tokens, in, chunk_begin, chunk_end, out);
}

void OracleSelector::finish_scores(const SelectInput& in, const float* prep, const float* raw, int32_t n_cand,
                                   float* ranking) const {
  group_mass_ranking(raw, in.n_q, n_cand, prep, ranking);
}

}  // namespace hs
