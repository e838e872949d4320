// core/numa_policy.h — host memory placed on a NUMA node (docs/tensor-parallel.md: each GPU rank's
// pinned host tier on the node nearest its GPU, so its PCIe reads do not cross the socket link).
// ScopedNumaPreference sets the calling thread's memory policy to prefer `node` (the Linux
// set_mempolicy system call, MPOL_PREFERRED; no libnuma) for its lifetime and then restores the
// policy it found. Pages faulted in meanwhile (a pinning allocation such as cudaHostAlloc touches
// every page of its buffer) come from that node while it has free memory, else from any node.
// node < 0, a machine of one node, or a kernel without the call: nothing changes.
// Cost: two system calls per scope.
#pragma once

namespace hs {

// Memory nodes of this machine (/sys/devices/system/node/online), 1 where that cannot be read.
int numa_nodes();

// The node the calling thread's memory policy prefers or binds to, -1 for the default policy.
int preferred_numa_node();

class ScopedNumaPreference {
 public:
  explicit ScopedNumaPreference(int node);
  ~ScopedNumaPreference();
  ScopedNumaPreference(const ScopedNumaPreference&) = delete;
  ScopedNumaPreference& operator=(const ScopedNumaPreference&) = delete;
  // Whether the preference was set (and will be restored).
  bool active() const { return active_; }

 private:
  bool active_ = false;
  int old_mode_ = 0;
  unsigned long old_mask_[16] = {};  // up to 1024 nodes
};

}  // namespace hs
