// test_family_winograd.cpp: the winograd family (generator/families/winograd.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/families/winograd.h"
#include "generator/family.h"
#include "tests/generator_test_util.h"

namespace convt3d::gen {
namespace {

// The transforms, checked against their definition (not against the kernel): for random inputs
// d (alpha of them) and taps g, AT [(G g) . (BT d)] is the two-output correlation.
TEST(Winograd, TransformsComputeTheCorrelation) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int taps = 1; taps <= 3; ++taps) {
    const WinoTransform t = WinoTransformOf(taps);
    ASSERT_EQ(t.alpha, taps + 1);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<double> d(t.alpha), g(taps), m(t.alpha);
      for (double& v : d) v = u(rng);
      for (double& v : g) v = u(rng);
      for (int a = 0; a < t.alpha; ++a) {
        double gd = 0, bd = 0;
        for (int j = 0; j < taps; ++j) gd += t.g[a][j] * g[j];
        for (int i = 0; i < t.alpha; ++i) bd += t.bt[a][i] * d[i];
        m[a] = gd * bd;
      }
      for (int o = 0; o < 2; ++o) {
        double y = 0, want = 0;
        for (int a = 0; a < t.alpha; ++a) y += t.at[o][a] * m[a];
        for (int j = 0; j < taps; ++j) want += d[o + j] * g[j];
        EXPECT_NEAR(y, want, 1e-12) << "taps " << taps << " output " << o;
      }
    }
  }
}

TEST(Winograd, WhereTheFamilyApplies) {
  Problem p = L1_61();
  const auto strict = Candidates(p);
  ASSERT_FALSE(strict.empty());
  // fft first (it won L1-61 and L1-70 in strict fp32, session 11), then winograd.
  EXPECT_EQ(strict.front().family, "fft") << strict.front().Name();
  EXPECT_EQ(HeuristicPick(p).family, "fft");
  const auto first_other =
      std::find_if(strict.begin(), strict.end(), [](const Config& c) { return c.family != "fft"; });
  ASSERT_NE(first_other, strict.end());
  EXPECT_EQ(first_other->family, "winograd") << first_other->Name();
  int wino = 0;
  for (const Config& c : strict) {
    if (c.family != "winograd") continue;
    ++wino;
    const WinoShape s = WinoShapeOf(p, c);
    ASSERT_TRUE(s.fits) << c.Name();
    EXPECT_EQ(s.points, 64);
    EXPECT_EQ(s.threads % 32, 0) << c.Name();
    EXPECT_LE(s.threads, 1024) << c.Name();
    EXPECT_EQ(48 % c.bn, 0) << c.Name();
    EXPECT_LE(s.smem_bytes, 227 * 1024) << c.Name();
    EXPECT_EQ(c.Name().rfind("winograd_f32_q", 0), 0u) << c.Name();
    auto back = Config::FromJson(c.ToJson());
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->Name(), c.Name());
    EXPECT_EQ(PrepSymbol(p, c), c.Name() + "_prep");
    const PlanView g = Geometry(p, c);
    EXPECT_EQ(g.workspace_bytes, size_t{4} * s.co_blocks * s.cpad * 64 * c.bn) << c.Name();
    // Every 2x2x2 tile of the 66^3 output, every channel block and sample.
    EXPECT_EQ(s.tiles[0], 33);
    EXPECT_EQ(s.blocks,
              s.blocks_per_dim[0] * s.blocks_per_dim[1] * s.blocks_per_dim[2] * s.co_blocks * 8);
    EXPECT_GE(s.blocks_per_dim[2] * c.bqw, 33) << c.Name();
  }
  EXPECT_GE(wino, 4);
  p.precision = Precision::kFp32x3;  // offered, after the tensor-core tiles
  const auto x3 = Candidates(p);
  EXPECT_NE(x3.front().family, "winograd");
  EXPECT_TRUE(
      std::any_of(x3.begin(), x3.end(), [](const Config& c) { return c.family == "winograd"; }));
  // Not where its error or its transforms do not fit: tf32 (tensor cores are faster), taps of 5
  // (F(2,5)'s f32 error breaks the strict contract), strides, dilation, 16-bit and f64 storage.
  std::vector<Problem> not_taken(6, L1_61());
  not_taken[0].precision = Precision::kTf32;
  not_taken[1].kernel = {3, 5, 5};
  not_taken[2].stride = {2, 2, 2};
  not_taken[3].dilation = {1, 2, 1};
  not_taken[4].dtype = DType::kBF16;
  not_taken[5].dtype = DType::kF64;
  for (const Problem& q : not_taken) {
    ASSERT_TRUE(Validate(q).ok()) << q.Signature();
    for (const Config& c : Candidates(q))
      EXPECT_NE(c.family, "winograd") << q.Signature() << " " << c.Name();
  }
}

}  // namespace
}  // namespace convt3d::gen
