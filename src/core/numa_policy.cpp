// core/numa_policy.cpp — ScopedNumaPreference over the set_mempolicy / get_mempolicy system calls
// (numa_policy.h).
#include "core/numa_policy.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace hs {
namespace {

// linux/mempolicy.h's modes (not included: the header is not in every libc's set).
constexpr int kMpolDefault = 0, kMpolPreferred = 1, kMpolBind = 2;
constexpr unsigned long kMaxNodes = sizeof(unsigned long) * 8 * 16;

long set_policy(int mode, const unsigned long* mask, unsigned long max_node) {
  return syscall(SYS_set_mempolicy, mode, mask, max_node);
}
long get_policy(int* mode, unsigned long* mask, unsigned long max_node) {
  return syscall(SYS_get_mempolicy, mode, mask, max_node, nullptr, 0UL);
}

}  // namespace

int numa_nodes() {
  // "0" or "0-3" or "0,2-3": the highest node + 1 (nodes are numbered densely in practice).
  std::ifstream f("/sys/devices/system/node/online");
  std::string s;
  if (!(f >> s) || s.empty()) return 1;
  int highest = 0, cur = 0;
  bool digits = false;
  for (char ch : s) {
    if (ch >= '0' && ch <= '9') {
      cur = cur * 10 + (ch - '0');
      digits = true;
    } else {
      if (digits && cur > highest) highest = cur;
      cur = 0;
      digits = false;
    }
  }
  if (digits && cur > highest) highest = cur;
  return highest + 1;
}

int preferred_numa_node() {
  int mode = 0;
  unsigned long mask[16] = {};
  if (get_policy(&mode, mask, kMaxNodes) != 0) return -1;
  mode &= ~(3 << 14);  // MPOL_F_STATIC_NODES / MPOL_F_RELATIVE_NODES
  if (mode != kMpolPreferred && mode != kMpolBind) return -1;
  for (unsigned long n = 0; n < kMaxNodes; ++n)
    if (mask[n / (sizeof(unsigned long) * 8)] >> (n % (sizeof(unsigned long) * 8)) & 1UL) return static_cast<int>(n);
  return -1;
}

ScopedNumaPreference::ScopedNumaPreference(int node) {
  if (node < 0 || static_cast<unsigned long>(node) >= kMaxNodes || node >= numa_nodes()) return;
  if (get_policy(&old_mode_, old_mask_, kMaxNodes) != 0) return;
  unsigned long mask[16] = {};
  mask[node / (sizeof(unsigned long) * 8)] = 1UL << (node % (sizeof(unsigned long) * 8));
  active_ = set_policy(kMpolPreferred, mask, kMaxNodes) == 0;
}

ScopedNumaPreference::~ScopedNumaPreference() {
  if (!active_) return;
  if (set_policy(old_mode_, old_mode_ == kMpolDefault ? nullptr : old_mask_, old_mode_ == kMpolDefault ? 0 : kMaxNodes) != 0)
    (void)set_policy(kMpolDefault, nullptr, 0);
}

}  // namespace hs
