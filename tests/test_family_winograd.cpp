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
  // 48 input channels: one plain sum per point.
  for (const Config& c : strict) {
    if (c.family == "winograd") {
      EXPECT_EQ(WinoShapeOf(p, c).sum_stages, 0) << c.Name();
    }
  }
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

// Strided problems whose phases all have the same taps (kernel = stride x taps): one kernel runs
// every phase, so the shape counts phases x (2x2x2 tiles of phase 0's extent) blocks and a
// weight transform per phase; F(2, taps) per dimension sets the points.
TEST(Winograd, StridedProblemsRunEveryPhase) {
  // The 3D-GAN's 128 -> 64 layer: k4 s2 p1, 16^3 -> 32^3 (8 phases of 2x2x2 taps, 16^3 each).
  const Problem gan =
      test::MakeProblem(32, 128, 64, {16, 16, 16}, {4, 4, 4}).Stride({2, 2, 2}).Padding({1, 1, 1});
  ASSERT_TRUE(WinogradApplies(gan));
  int wino = 0;
  for (const Config& c : Candidates(gan)) {
    if (c.family != "winograd") continue;
    ++wino;
    const WinoShape s = WinoShapeOf(gan, c);
    ASSERT_TRUE(s.fits) << c.Name();
    EXPECT_EQ(s.points, 27) << c.Name();
    EXPECT_EQ(s.phases, 8);
    EXPECT_EQ(s.tiles[0], 8);  // 16 outputs per phase along D: 8 tiles of 2
    EXPECT_EQ(s.blocks, 8 * 32 * s.co_blocks * s.blocks_per_dim[0] * s.blocks_per_dim[1] *
                            s.blocks_per_dim[2])
        << c.Name();
    EXPECT_EQ(s.workspace_words, int64_t{8} * s.co_blocks * s.cpad * 27 * c.bn) << c.Name();
    EXPECT_EQ(Geometry(gan, c).workspace_bytes, size_t{4} * s.workspace_words) << c.Name();
    // 128 input channels: plain sums (within the strict contract there).
    EXPECT_EQ(s.sum_stages, 0) << c.Name();
  }
  EXPECT_GE(wino, 4);
  EXPECT_LE(wino, 12);
  // 256: runs of whole stages near sqrt(256) = 16 channels.
  Problem deep = gan;
  deep.c_in = 256;
  for (const Config& c : Candidates(deep)) {
    if (c.family != "winograd") continue;
    const int run = WinoShapeOf(deep, c).sum_stages * c.ck;
    EXPECT_GE(run, 8) << c.Name();
    EXPECT_LE(run, 32) << c.Name();
  }
  // Odd output extents: output_padding gives phase 0 one output more than phase 1 (17 vs 16).
  const Problem odd = test::MakeProblem(1, 16, 16, {8, 8, 8}, {4, 2, 6})
                          .Stride({2, 1, 2})
                          .Padding({1, 0, 2})
                          .OutputPadding({1, 0, 1});
  ASSERT_TRUE(Validate(odd).ok());
  ASSERT_TRUE(WinogradApplies(odd));  // phases of 2 x 2 x 3 taps
  for (const Config& c : Candidates(odd)) {
    if (c.family != "winograd") continue;
    const WinoShape s = WinoShapeOf(odd, c);
    ASSERT_TRUE(s.fits) << c.Name();
    EXPECT_EQ(s.points, 3 * 3 * 4);
    EXPECT_EQ(s.phases, 4);
    EXPECT_EQ(s.tiles[0], 5);  // D: 17 outputs, phase 0's 9 in 5 tiles of 2 (phase 1 has 8)
    EXPECT_EQ(s.tiles[2], 5);  // W: the same
  }
  // Not where a phase has other taps than its neighbours (k3 s2), one tap per phase (k2 s2:
  // nothing to save), over 3 taps per phase (k8 s2), dilation, or in fp32x3.
  std::vector<Problem> not_taken(5, gan);
  not_taken[0].kernel = {3, 3, 3};
  not_taken[1].kernel = {2, 2, 2};
  not_taken[1].padding = {0, 0, 0};
  not_taken[2].kernel = {8, 4, 4};
  not_taken[3].dilation = {1, 1, 2};
  not_taken[3].padding = {1, 1, 3};
  not_taken[4].precision = Precision::kFp32x3;  // 3xTF32 tiles are 2-3x faster there
  for (const Problem& q : not_taken) {
    ASSERT_TRUE(Validate(q).ok()) << q.Signature();
    EXPECT_FALSE(WinogradApplies(q)) << q.Signature();
    for (const Config& c : Candidates(q))
      EXPECT_NE(c.family, "winograd") << q.Signature() << " " << c.Name();
  }
}

}  // namespace
}  // namespace convt3d::gen
