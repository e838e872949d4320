// tests/unit/engine/test_sampler.cpp — sampling rules on small hand-made logits.
#include <gtest/gtest.h>

#include <map>

#include "engine/sampler.h"

namespace hs {
namespace {

TEST(Sampler, GreedyPicksArgmax) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  std::vector<float> l{0.1f, 3.0f, -1.0f, 2.9f};
  EXPECT_EQ(s.sample(l), 1);
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplingParams p;
  p.top_k = 1;
  p.seed = 7;
  Sampler s(p);
  for (int i = 0; i < 20; ++i) {
    std::vector<float> l{0.1f, 3.0f, -1.0f, 2.9f};
    EXPECT_EQ(s.sample(l), 1);
  }
}

TEST(Sampler, SeedReproduces) {
  SamplingParams p;
  p.seed = 42;
  std::vector<int> a, b;
  for (auto* out : {&a, &b}) {
    Sampler s(p);
    for (int i = 0; i < 50; ++i) {
      std::vector<float> l{1.0f, 1.1f, 0.9f, 1.2f, 0.5f};
      out->push_back(s.sample(l));
    }
  }
  EXPECT_EQ(a, b);
}

TEST(Sampler, TopPKeepsSmallestPrefix) {
  // probs ≈ [0.64, 0.24, 0.09, 0.03]: top_p 0.7 keeps the first two only.
  SamplingParams p;
  p.top_p = 0.7f;
  p.seed = 1;
  Sampler s(p);
  std::map<int, int> seen;
  for (int i = 0; i < 400; ++i) {
    std::vector<float> l{3.0f, 2.0f, 1.0f, 0.0f};
    ++seen[s.sample(l)];
  }
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_EQ(seen.count(2) + seen.count(3), 0u);
}

TEST(Sampler, MinPDropsUnlikely) {
  SamplingParams p;
  p.min_p = 0.5f;  // keep tokens with prob >= 0.5 * max
  p.seed = 3;
  Sampler s(p);
  for (int i = 0; i < 200; ++i) {
    std::vector<float> l{2.0f, 1.9f, 0.0f, -1.0f};
    int t = s.sample(l);
    EXPECT_TRUE(t == 0 || t == 1);
  }
}

TEST(Sampler, PenaltiesChangeTheChoice) {
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 1.0f;
  Sampler s(p);
  s.accept(0);
  std::vector<float> l{2.0f, 1.5f};
  EXPECT_EQ(s.sample(l), 1);  // 2.0 - 1.0 < 1.5

  SamplingParams r;
  r.temperature = 0;
  r.repetition_penalty = 2.0f;
  Sampler s2(r);
  s2.accept(0);
  std::vector<float> l2{2.0f, 1.5f};
  EXPECT_EQ(s2.sample(l2), 1);  // 2.0 / 2 < 1.5
}

TEST(Sampler, ValidateRejectsOutOfRange) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_FALSE(p.validate().is_ok());
  p = {};
  p.top_p = 0;
  EXPECT_FALSE(p.validate().is_ok());
  p = {};
  p.presence_penalty = 3;
  EXPECT_NE(p.validate().message().find("presence_penalty"), std::string::npos);
  EXPECT_TRUE(SamplingParams{}.validate().is_ok());
}

TEST(Sampler, LogitBiasForcesAndBansTokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.logit_bias = {{3, 100.0f}};
  Sampler s(p);
  std::vector<float> logits = {5.0f, 1.0f, 0.5f, -2.0f};
  EXPECT_EQ(s.sample(logits), 3);
  SamplingParams q;
  q.temperature = 0.8f;
  q.seed = 11;
  q.logit_bias = {{0, -100.0f}};
  Sampler t(q);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l = {5.0f, 1.0f, 0.5f, -2.0f};
    EXPECT_NE(t.sample(l), 0);
  }
  SamplingParams bad;
  bad.logit_bias = {{1, 101.0f}};
  EXPECT_FALSE(bad.validate().is_ok());
}

}  // namespace
}  // namespace hs
