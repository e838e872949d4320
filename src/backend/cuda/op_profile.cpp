// backend/cuda/op_profile.cpp — see op_profile.h.
#include "backend/cuda/op_profile.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace hs::cuda {

OpProfile::OpProfile() {
  const char* e = std::getenv("HS_CUDA_PROFILE");
  on_ = e && std::strcmp(e, "1") == 0;
}

OpProfile::~OpProfile() {
  for (auto* ev : events_) (void)cudaEventDestroy(ev);
}

int OpProfile::event() {
  if (next_ == static_cast<int>(events_.size())) {
    cudaEvent_t ev = nullptr;
    if (cudaEventCreate(&ev) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    events_.push_back(ev);
  }
  return next_++;
}

OpProfile::Scope::Scope(OpProfile* p, std::string name, CUstream_st* s) : p_(p), s_(s) {
  if (!p_->on_) return;
  const int e0 = p_->event(), e1 = p_->event();
  if (e0 < 0 || e1 < 0) return;
  (void)cudaEventRecord(p_->events_[e0], s_);
  index_ = static_cast<int>(p_->pending_.size());
  p_->pending_.push_back({std::move(name), e0, e1});
}

OpProfile::Scope::~Scope() {
  if (index_ >= 0) (void)cudaEventRecord(p_->events_[p_->pending_[index_].ev1], s_);
}

void OpProfile::collect() {
  if (!on_) return;
  for (const Pending& p : pending_) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, events_[p.ev0], events_[p.ev1]) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    Total& t = totals_[p.name];
    t.ms += ms;
    ++t.calls;
  }
  pending_.clear();
  next_ = 0;
}

std::string OpProfile::report() const {
  if (!on_ || totals_.empty()) return {};
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double all = 0;
  for (const auto& r : rows) all += r.second.ms;
  std::string out = fmt::format("cuda op profile (HS_CUDA_PROFILE=1, eager launches): {:.1f} ms in all\n", all);
  out += "| op | ms | calls | us/call | share |\n|---|---|---|---|---|\n";
  for (const auto& [name, t] : rows)
    out += fmt::format("| {} | {:.2f} | {} | {:.1f} | {:.1f} % |\n", name, t.ms, t.calls, 1e3 * t.ms / t.calls,
                       100.0 * t.ms / all);
  return out;
}

}  // namespace hs::cuda
