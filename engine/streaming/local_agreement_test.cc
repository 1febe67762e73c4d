#include "engine/streaming/local_agreement.h"

#include <random>

#include "gtest/gtest.h"

namespace waav::streaming {
namespace {

// Tokens >= 100 start a word, < 100 continue one.
LocalAgreement Make() {
  return LocalAgreement([](int t) { return t >= 100; });
}

TEST(LocalAgreementTest, FirstHypothesisCommitsNothing) {
  LocalAgreement la = Make();
  EXPECT_EQ(la.Update({100, 101, 102}), 0u);
  EXPECT_TRUE(la.committed().empty());
}

TEST(LocalAgreementTest, CommitsWholeWordsTwoHypothesesShare) {
  LocalAgreement la = Make();
  la.Update({100, 101, 102});
  EXPECT_EQ(la.Update({100, 101, 103, 104}), 2u);
  EXPECT_EQ(la.committed(), (std::vector<int>{100, 101}));
  EXPECT_EQ(la.last_tail(), (std::vector<int>{103, 104}));
}

TEST(LocalAgreementTest, DoesNotCommitAWordThatContinuesDifferently) {
  LocalAgreement la = Make();
  la.Update({100, 101, 5});                 // "a b·x"
  EXPECT_EQ(la.Update({100, 101, 6}), 1u);  // "a b·y": "b" is not a settled word
  EXPECT_EQ(la.committed(), std::vector<int>{100});
}

TEST(LocalAgreementTest, HypothesisEndingEarlyKeepsItsLastWordOpen) {
  LocalAgreement la = Make();
  la.Update({100, 101, 102, 103});
  EXPECT_EQ(la.Update({100, 101, 102}), 2u);  // "c" may still grow into "c·x"
  EXPECT_EQ(la.committed(), (std::vector<int>{100, 101}));
}

TEST(LocalAgreementTest, IdenticalHypothesesCommitEverything) {
  LocalAgreement la = Make();
  la.Update({100, 7, 101});
  EXPECT_EQ(la.Update({100, 7, 101}), 3u);
  EXPECT_EQ(la.Update({}), 0u);
}

TEST(LocalAgreementTest, AHypothesisThatMayNotCommitIsStillAgreedWith) {
  LocalAgreement la = Make();
  EXPECT_EQ(la.Update({100, 101, 102}, /*may_commit=*/false), 0u);
  EXPECT_EQ(la.Update({100, 101, 103}, /*may_commit=*/false), 0u);
  EXPECT_TRUE(la.committed().empty());
  EXPECT_EQ(la.last_tail(), (std::vector<int>{100, 101, 103}));
  EXPECT_EQ(la.Update({100, 101, 103, 104}), 2u) << "agrees with the latest, uncommitted one";
  EXPECT_EQ(la.committed(), (std::vector<int>{100, 101}));
}

TEST(LocalAgreementTest, CommittedPrefixOnlyGrowsOnRandomHypotheses) {
  std::random_device rd;
  const unsigned seed = rd();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  LocalAgreement la = Make();
  std::vector<int> truth(60);
  for (int& t : truth)
    t = (rng() % 3 == 0) ? static_cast<int>(rng() % 50) : 100 + static_cast<int>(rng() % 50);
  std::vector<int> before;
  for (int round = 0; round < 200; ++round) {
    // A noisy continuation of what is committed: a prefix of the truth, sometimes corrupted.
    std::vector<int> tail;
    const size_t start = la.committed().size();
    const size_t len = rng() % 12;
    for (size_t i = start; i < std::min(truth.size(), start + len); ++i) {
      tail.push_back(rng() % 10 == 0 ? 100 + static_cast<int>(rng() % 50) : truth[i]);
    }
    la.Update(tail);
    const std::vector<int>& now = la.committed();
    ASSERT_GE(now.size(), before.size());
    ASSERT_TRUE(std::equal(before.begin(), before.end(), now.begin()));
    before = now;
  }
}

}  // namespace
}  // namespace waav::streaming
