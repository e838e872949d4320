// tests/unit/core/test_numa_policy.cpp — ScopedNumaPreference (core/numa_policy.h): while alive the
// calling thread prefers the node (get_mempolicy says so), after it the policy it found is back;
// a node the machine lacks, or none, changes nothing.
#include <gtest/gtest.h>

#include <vector>

#include "core/numa_policy.h"

namespace hs {
namespace {

TEST(NumaPolicy, PrefersTheNodeWhileAliveAndRestoresThePolicyAfter) {
  ASSERT_GE(numa_nodes(), 1);
  const int before = preferred_numa_node();
  {
    ScopedNumaPreference p(0);
    if (!p.active()) GTEST_SKIP() << "set_mempolicy refused here (a sandbox without the system call)";
    EXPECT_EQ(preferred_numa_node(), 0);
    std::vector<char> pages(1 << 20, 1);  // faulted in under the preference (node 0 has memory)
    EXPECT_EQ(pages.back(), 1);
  }
  EXPECT_EQ(preferred_numa_node(), before);
}

TEST(NumaPolicy, ANodeTheMachineLacksOrNoneChangesNothing) {
  const int before = preferred_numa_node();
  {
    ScopedNumaPreference none(-1);
    EXPECT_FALSE(none.active());
    ScopedNumaPreference absent(numa_nodes());
    EXPECT_FALSE(absent.active());
    EXPECT_EQ(preferred_numa_node(), before);
  }
  EXPECT_EQ(preferred_numa_node(), before);
}

}  // namespace
}  // namespace hs
