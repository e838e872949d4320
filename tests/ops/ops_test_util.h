// tests/ops/ops_test_util.h — what the backend-op tests share: one fresh seed per run
// (HS_TEST_SEED=<n> replays it; seed_note() goes into every failure message) and N(0, sd)
// inputs with optional 1 % outliers (x20).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace hs::ops_test {

inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("HS_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(s, nullptr, 10));
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

inline std::string seed_note() { return "seed " + std::to_string(test_seed()) + " (rerun with HS_TEST_SEED=<seed>)"; }

inline std::vector<float> normal(std::mt19937_64& rng, size_t n, float sd = 1.0f, bool outliers = false) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = nd(rng);
    if (outliers && u(rng) < 0.01f) x *= 20.0f;
  }
  return v;
}

}  // namespace hs::ops_test
