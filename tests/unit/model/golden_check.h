// tests/unit/model/golden_check.h — the comparison every golden test makes of our logits with
// transformers' stored top-k log-probabilities (test_golden.cpp, test_hybrid_golden.cpp): the
// KL divergence over the top k plus the lumped tail, and top-1 where the reference margin is
// above the threshold (a failure names the position). Header-only, for tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

namespace hs::golden {

// x := log_softmax(x), in double for the sum.
inline void log_softmax(float* x, int n) {
  float mx = -INFINITY;
  for (int i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  const float lse = mx + static_cast<float>(std::log(sum));
  for (int i = 0; i < n; ++i) x[i] -= lse;
}

inline int argmax(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

// Running KL / top-1 figures over the positions of a golden run.
struct PositionChecks {
  double kl_sum = 0;
  int kl_n = 0, top1_checked = 0, top1_equal = 0;

  // One position: row = our logits (log-softmaxed in place), ids / lp = the reference's top k
  // token ids and log-probs (best first).
  void add(const std::string& name, int position, float* row, int n_vocab, const int32_t* ids, const float* lp, int k,
           float margin) {
    log_softmax(row, n_vocab);
    double p_top = 0, q_top = 0, kl = 0;
    for (int j = 0; j < k; ++j) {
      const double pr = std::exp(static_cast<double>(lp[j]));
      p_top += pr;
      q_top += std::exp(static_cast<double>(row[ids[j]]));
      kl += pr * (lp[j] - row[ids[j]]);
    }
    const double p_tail = std::max(1e-12, 1 - p_top), q_tail = std::max(1e-12, 1 - q_top);
    kl += p_tail * std::log(p_tail / q_tail);
    kl_sum += kl;
    ++kl_n;
    if (lp[0] - lp[1] > margin) {
      ++top1_checked;
      const int ours = argmax(row, n_vocab);
      if (ours == ids[0]) ++top1_equal;
      else ADD_FAILURE() << name << " position " << position << ": top-1 " << ours << " != reference " << ids[0]
                         << " (margin " << lp[0] - lp[1] << ")";
    }
  }
  double mean_kl() const { return kl_n ? kl_sum / kl_n : 0.0; }
};

}  // namespace hs::golden
