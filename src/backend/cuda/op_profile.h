// backend/cuda/op_profile.h — per-op device time of the CUDA backend (HS_CUDA_PROFILE=1).
//
// With profiling on, every op brackets its launches with two events on the backend's stream
// (graphs are off then: a profiled step runs eagerly, so the figures are of eager launches,
// an upper bound on a replayed graph's); end_step syncs and adds each op's elapsed time to its
// name's total. report() lists the names by total time: ms, calls, share. Off (the default) it
// costs one branch per op. Host C++ only; events come from a pool that grows, never per step.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

struct CUstream_st;
struct CUevent_st;

namespace hs::cuda {

class OpProfile {
 public:
  OpProfile();  // on when the environment has HS_CUDA_PROFILE=1
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;
  bool on() const { return on_; }

  // Brackets one op: begin records the start event, end the stop event.
  class Scope {
   public:
    Scope(OpProfile* p, std::string name, CUstream_st* s);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
   private:
    OpProfile* p_;
    CUstream_st* s_;
    int index_ = -1;
  };

  // After the stream has synchronised: adds the pending ops' times to the totals.
  void collect();
  // The totals, one line per op name; "" when off or empty.
  std::string report() const;

 private:
  struct Pending {
    std::string name;
    int ev0, ev1;
  };
  int event();  // an unused pool index (creates events as needed); -1 on failure
  bool on_ = false;
  std::vector<CUevent_st*> events_;
  int next_ = 0;
  std::vector<Pending> pending_;
  struct Total {
    double ms = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Total> totals_;
};

}  // namespace hs::cuda
