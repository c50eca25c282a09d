// test_phases.cpp: phase decomposition against brute force (generator/phases.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "convt3d/convt3d.h"
#include "generator/phases.h"
#include "tests/generator_test_util.h"

namespace convt3d::gen {
namespace {

TEST(Phases, MatchBruteForceOnManyConfigurations) {
  std::mt19937 rng(7);
  int checked = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t in = 1 + rng() % 9, k = 1 + rng() % 7, s = 1 + rng() % 5, d = 1 + rng() % 4;
    const int64_t p = rng() % (d * (k - 1) + 2);
    const int64_t op = rng() % std::max(s, d);
    const int64_t out = (in - 1) * s - 2 * p + d * (k - 1) + op + 1;
    if (out <= 0) continue;
    const DimPhases dp = PhasesOf(k, s, p, d, out);
    ASSERT_EQ(dp.phases.size(), static_cast<size_t>(s));
    int64_t covered = 0;
    for (const DimPhase& ph : dp.phases) {
      covered += ph.q_count;
      for (int64_t q = ph.q_lo; q < ph.q_lo + ph.q_count; ++q) {
        const int64_t o = ph.r - p + s * q;
        ASSERT_GE(o, 0);
        ASSERT_LT(o, out);
        std::set<std::pair<int64_t, int64_t>> got;
        for (int j = 0; j < ph.taps; ++j) {
          const int64_t i = q + ph.c - j * dp.d_red, kk = ph.kk0 + j * dp.s_red;
          ASSERT_LT(kk, k);
          if (i >= 0 && i < in) got.insert({i, kk});
        }
        ASSERT_EQ(got, Pairs(in, k, s, p, d, o))
            << "in=" << in << " k=" << k << " s=" << s << " p=" << p << " d=" << d << " o=" << o;
      }
    }
    ASSERT_EQ(covered, out) << "every output belongs to exactly one phase";
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

TEST(Phases, DilatedStridedL1_77HasOneActivePhase) {
  // k3 s2 p1 d2: only odd outputs (phase r = 1 + p mod 2 = 0) have taps; they have all three.
  const DimPhases dp = PhasesOf(3, 2, 1, 2, 33);
  ASSERT_EQ(dp.phases.size(), 2u);
  EXPECT_EQ(dp.phases[0].taps, 3);
  EXPECT_EQ(dp.phases[1].taps, 0);
}

}  // namespace
}  // namespace convt3d::gen
