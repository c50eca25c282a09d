// test_family_igemm_wgmma.cpp: the igemm_wgmma family (generator/families/igemm_wgmma.cpp,
// igemm_shape.cpp).
#include <gtest/gtest.h>

#include <algorithm>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/families/igemm_shape.h"
#include "generator/family.h"
#include "src/problem_io.h"
#include "tests/generator_test_util.h"

namespace convt3d::gen {
namespace {

TEST(WgmmaCandidates, OnlyStrideOneTensorModesOnAnSm90Target) {
  Problem p = L1_68();
  const auto strict = Candidates(p);  // (begin and end of one list, not of two temporaries)
  EXPECT_TRUE(std::none_of(strict.begin(), strict.end(), [](const Config& c) {
    return c.family == "igemm_wgmma";
  })) << "strict fp32 has no tensor-core candidates";
  for (auto mode : {0, 1, 2, 3}) {
    Problem q = p;
    if (mode == 0) q.precision = Precision::kTf32;
    if (mode == 1) q.precision = Precision::kFp32x3;
    if (mode == 2) q.dtype = DType::kBF16;
    if (mode == 3) q.dtype = DType::kF16;
    const auto all = Candidates(q);
    ASSERT_FALSE(all.empty());
    // tf32 and fp32x3: the fft candidates come first on this 5x5 H x W kernel.
    EXPECT_EQ(all.front().family, mode <= 1 ? "fft" : "igemm_wgmma") << "mode " << mode;
    for (const Config& c : all) {
      if (c.family != "igemm_wgmma") continue;
      EXPECT_EQ(c.bn, 64);
      EXPECT_EQ(c.split, mode == 1 ? 3 : 1) << c.Name();
      EXPECT_EQ(c.bqd * (c.bqh / 8) * (c.bqw / 8), c.wg * c.mt) << c.Name();
      EXPECT_TRUE(c.sr == 1 || c.sr == 5) << c.Name();
      EXPECT_LE(IgemmShapeOf(q, c).smem_bytes, 113 * 1024) << c.Name();
      EXPECT_EQ(CompileArch(c, "sm_90"), "sm_90a");
      EXPECT_EQ(CompileArch(c, "sm_100"), "sm_100");
    }
    DeviceLimits not_sm90;
    not_sm90.wgmma = false;
    for (const Config& c : Candidates(q, not_sm90)) EXPECT_NE(c.family, "igemm_wgmma") << c.Name();
    // Strided problems: wgmma tiles only as phase-channel (subpixel_) candidates.
    Problem strided = q;
    strided.stride = {1, 2, 1};
    for (const Config& c : Candidates(strided))
      EXPECT_TRUE(c.family != "igemm_wgmma" || c.lattice == 2) << c.Name();
    // A halo far beyond shared memory (kernel 3, dilation 700): no tile of a family that stages
    // halos is offered (its int shape arithmetic once wrapped to a negative size that passed the
    // filters); gemm_wgmma gathers rows per tap and has no halo.
    Problem dilated = q;
    dilated.n = 1, dilated.c_in = dilated.c_out = 8, dilated.in = {1, 1, 1};
    dilated.kernel = {3, 3, 3}, dilated.dilation = {700, 700, 700},
    dilated.padding = {699, 699, 699};
    ASSERT_TRUE(Validate(dilated).ok());
    const auto dil = Candidates(dilated);
    ASSERT_FALSE(dil.empty());
    for (const Config& c : dil)
      EXPECT_TRUE(c.family == "direct_phase" || c.family == "gemm_wgmma") << c.Name();
    EXPECT_EQ(HeuristicPick(dilated).family, "direct_phase");
    Problem wide = q;  // more than one channel tile: not offered until a GPU suite covers it
    wide.c_out = 264;
    wide.n = 1;
    for (const Config& c : Candidates(wide)) EXPECT_NE(c.family, "igemm_wgmma") << c.Name();
  }
}

// Sizes worked out by hand from the template's layout for L1-68 in TF32 with a 4 x 8 x 8 box
// (two warpgroups of two m64 tiles), 8 channels (two 16-byte units) per chunk.
TEST(WgmmaCandidates, ShapeOfL1_68ByHand) {
  Problem p = L1_68();
  p.precision = Precision::kTf32;
  Config c;
  c.family = "igemm_wgmma";
  c.bqd = 4, c.bqh = 8, c.bqw = 8, c.wg = 2, c.mt = 2, c.bn = 64, c.ck = 8;
  IgemmShape s = IgemmShapeOf(p, c);
  EXPECT_EQ(s.halo_d, 4 + 2);  // box + (k - 1) * dilation
  EXPECT_EQ(s.halo_h, 8 + 4);
  EXPECT_EQ(s.hws, 8 + 4);
  EXPECT_EQ(s.plane, 6 * 12 * 12);  // units per channel unit
  EXPECT_EQ(s.kp, 2);               // 8 channels / 4 per unit
  EXPECT_EQ(s.cg, 8);               // 32 channels / 4
  EXPECT_EQ(s.chunks, 4);
  EXPECT_EQ(s.wtile, 5 * 2 * 64);  // kW taps x units x channels
  // 15 steps per chunk: two halo buffers and four weight tiles (asynchronous pipeline).
  EXPECT_EQ(s.smem_bytes, 16 * (2 * 2 * 864 + 4 * 640));
  EXPECT_EQ(s.threads, 256);
  // Output 66 x 68 x 68: 17 x 9 x 9 boxes per image, 16 images.
  EXPECT_EQ(s.blocks, 17 * 9 * 9 * 16);
  EXPECT_EQ(s.weight_words, 4 * 15 * 640 * 4);
  EXPECT_EQ(s.x_words, 16LL * 8 * 64 * 64 * 64 * 4);
  EXPECT_EQ(s.workspace_words, s.weight_words + s.x_words);
  // 3xTF32: two parts of halo and weights, and (waiting for every step) two weight buffers.
  p.precision = Precision::kFp32x3;
  c.split = 3;
  s = IgemmShapeOf(p, c);
  EXPECT_EQ(s.wtile, 2 * 5 * 2 * 64);
  EXPECT_EQ(s.smem_bytes, 16 * (2 * 2 * 2 * 864 + 2 * 1280));
  EXPECT_EQ(s.x_words, 2 * 16LL * 8 * 64 * 64 * 64 * 4);
  // All five tap rows per step: three steps per chunk, a five times larger weight tile.
  p.precision = Precision::kTf32;
  c.split = 1, c.sr = 5;
  s = IgemmShapeOf(p, c);
  EXPECT_EQ(s.wtile, 5 * 5 * 2 * 64);
  EXPECT_EQ(s.weight_words, 4 * 3 * 3200 * 4);
  // bf16: eight channels per unit, so the 32 channels are four units and a 16-channel chunk two.
  p.precision = Precision::kFp32;
  p.dtype = DType::kBF16;
  c.dtype = DType::kBF16, c.sr = 1, c.ck = 16;
  s = IgemmShapeOf(p, c);
  EXPECT_EQ(s.kp, 2);
  EXPECT_EQ(s.cg, 4);
  EXPECT_EQ(s.chunks, 2);
}

TEST(WgmmaCandidates, NamesRoundTripThroughJson) {
  Config c;
  c.family = "igemm_wgmma";
  c.dtype = DType::kBF16;
  c.bqd = 2, c.bqh = 8, c.bqw = 8, c.wg = 1, c.mt = 2, c.bn = 24, c.ck = 16, c.sr = 3;
  EXPECT_EQ(c.Name(), "igemm_wgmma_bf16_q2x8x8_g1_m2_n24_k16_r3");
  EXPECT_EQ(PrepSymbol(Problem{}, c), c.Name() + "_prep");
  EXPECT_EQ(PrepXSymbol(Problem{}, c), c.Name() + "_prepx");
  auto back = Config::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->Name(), c.Name());
  c.bqh = 12;  // not whole m64 tiles
  EXPECT_FALSE(Config::FromJson(c.ToJson()).ok());
}

// The heuristic takes the all-rows tile at <= 48 channels (L1-58: 16, L1-61: 48, L1-70: 24) and
// the one-row tile at 64 (L1-68), as measured on the H100 (candidates.cpp).
TEST(WgmmaCandidates, HeuristicRowsPerStepFollowTheChannelCount) {
  auto all = io::LoadProblems(CONVT3D_SOURCE_DIR "/problems/kernelbench_l1.json");
  ASSERT_TRUE(all.ok()) << all.status().message();
  for (auto np : *all) {
    const Problem& p0 = np.problem;
    if (p0.stride[0] * p0.stride[1] * p0.stride[2] != 1) continue;
    Problem p = p0;
    p.precision = Precision::kTf32;
    const Config c = HeuristicPick(p);
    if (p.kernel[1] * p.kernel[2] >= 25) {  // L1-58, L1-68: the fft family's TF32 GEMMs won
      EXPECT_EQ(c.family, "fft") << np.name;
      continue;
    }
    ASSERT_EQ(c.family, "igemm_wgmma") << np.name;
    EXPECT_EQ(c.sr > 1, p.c_out <= 48) << np.name << " got " << c.Name();
  }
}

}  // namespace
}  // namespace convt3d::gen
