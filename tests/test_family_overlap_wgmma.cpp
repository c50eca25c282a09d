// test_family_overlap_wgmma.cpp: the overlap_wgmma family (generator/families/overlap_wgmma.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/family.h"
#include "generator/source.h"
#include "tests/generator_test_util.h"

namespace convt3d::gen {
namespace {

// The 3D-GAN's GAN-5 of problems/models.json: 32 x 64 x 32^3 -> 1 channel, kernel 4, stride 2,
// padding 1.
Problem Gan5() { return Strided(32, 64, 1, {32, 32, 32}, 4, 2, 1, 1); }

bool IsOverlap(const Config& c) { return c.family == "overlap_wgmma"; }

TEST(OverlapWgmmaCandidates, OnlyFewColumnsWithOverlappingTapsInTensorModesOnSm90) {
  for (int mode : {0, 1, 2, 3, 4}) {  // strict, tf32, fp32x3, bf16, f16
    Problem q = Gan5();
    test::SetMode(q, mode);
    const auto all = Candidates(q);
    const bool any = std::any_of(all.begin(), all.end(), IsOverlap);
    EXPECT_EQ(any, mode != 0) << "mode " << mode;
    if (any) {
      EXPECT_TRUE(IsOverlap(all.front())) << "mode " << mode << ": first where it applies";
      EXPECT_EQ(HeuristicPick(q).family, "overlap_wgmma") << q.Signature();
    }
    DeviceLimits not_sm90;
    not_sm90.wgmma = false;
    const auto other = Candidates(q, not_sm90);
    EXPECT_TRUE(std::none_of(other.begin(), other.end(), IsOverlap));
    for (const Config& c : all) {
      if (!IsOverlap(c)) continue;
      EXPECT_EQ(CompileArch(c, "sm_90"), "sm_90a");
      EXPECT_EQ(c.split, mode == 2 ? 3 : 1) << c.Name();
      EXPECT_EQ(c.bqh % 2, 0) << c.Name() << ": blocks start at an H phase 0";
    }
  }
  // Not taken: more than 128 columns (3 channels x 64 taps), kernel == stride (a pixel
  // shuffle: no overlap), input rows that are not whole 16-byte units (W 30 in bf16).
  // And an output plane past 2^30 positions (ints in the template) from an input plane of 2^28.
  std::vector<Problem> others = {
      Strided(2, 64, 3, {8, 8, 8}, 4, 2, 1, 1), Strided(2, 64, 1, {8, 8, 8}, 2, 2, 0, 1),
      Strided(2, 64, 1, {8, 8, 30}, 4, 2, 1, 1),
      test::MakeProblem(1, 16, 1, {1, int64_t{1} << 25, 8}, {1, 3, 3}).Stride({1, 2, 2})};
  for (Problem q : others) {
    test::SetMode(q, 3);
    const auto all = Candidates(q);
    EXPECT_TRUE(std::none_of(all.begin(), all.end(), IsOverlap)) << q.Signature();
  }
  // With 8 input channels a K step is half padding: offered, not first.
  Problem k8 = Strided(2, 8, 1, {8, 16, 16}, 3, 1, 1, 1);
  test::SetMode(k8, 3);
  const auto k8c = Candidates(k8);
  EXPECT_TRUE(std::any_of(k8c.begin(), k8c.end(), IsOverlap));
  EXPECT_FALSE(IsOverlap(k8c.front()));
}

// Sizes worked out by hand for GAN-5 in bf16 with blocks of 16 output rows and all 64 planes:
// output rows [16t, 16t + 16) take input rows [8t - 1, 8t + 9): 10 rows of 32 = 320 positions,
// 5 m64 tiles; 64 columns (1 channel x 64 taps).
TEST(OverlapWgmmaCandidates, PlanOfGan5ByHand) {
  Problem p = Gan5();
  test::SetMode(p, 3);
  Config c;
  c.family = "overlap_wgmma";
  c.dtype = p.dtype;
  c.wg = 2, c.bqh = 16, c.bqd = 64, c.ck = 64, c.st = 3;
  EXPECT_EQ(c.Name(), "overlap_wgmma_bf16_g2_h16_d64_k64_s3");
  const PlanView v = Geometry(p, c);
  EXPECT_EQ(v.grid[0], 32u * 4);  // samples x 4 blocks of rows x 1 of planes
  EXPECT_EQ(v.block[0], 384u);    // two consumer warpgroups and the producer's
  // B: 64 rows of 128 bytes (8192, a multiple of 1024); 3 slots of 64 channels x (320 + 8)
  // positions x 2 bytes (41984, a multiple of 128); the products: 64 columns of 10 slab rows x
  // (32 + 2 zero positions) = 340 floats, padded to 356 (356 % 32 == 4); 3 x 2 + 1 mbarriers;
  // 1024 for the alignment.
  EXPECT_EQ(v.smem_bytes, 8192u + 3 * 41984 + 64 * 356 * 4 + 16 * 3 + 8 + 1024);
  EXPECT_EQ(v.workspace_bytes, 8192u);  // one group's B image
  EXPECT_EQ(v.symbols.size(), 2u);      // weight packing, main kernel
  EXPECT_TRUE(v.symbols.count(PrepSymbol(p, c)));
  const LaunchPlan plan = Launches(p, c);
  EXPECT_EQ(plan.x_alignment, 16u);
  // The packing, then the main kernel as its programmatic dependent (waiting in the kernel).
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_TRUE(plan.steps[0].weight_only);
  EXPECT_FALSE(plan.steps[0].overlaps_previous);
  EXPECT_TRUE(plan.steps[1].overlaps_previous);
  auto src = BuildSource(p, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_NE(src->find("WaitForPreviousKernel();"), std::string::npos);
  auto back = Config::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->Name(), c.Name());
  c.mb = 2;
  EXPECT_EQ(c.Name(), "overlap_wgmma_bf16_g2_b2_h16_d64_k64_s3");
  EXPECT_FALSE(Config::FromJson(c.ToJson()).ok()) << "two blocks of 384 threads";
}

// Every candidate fits shared memory and builds, on the model layers and odd shapes (stride 1,
// 3 and 4, dilation, groups, output_padding).
TEST(OverlapWgmmaCandidates, CandidatesFitAndSourcesBuild) {
  Problem mun4 = Strided(4, 32, 2, {48, 48, 48}, 3, 2, 1, 1);
  mun4.output_padding = {1, 1, 1};
  Problem odd = Strided(3, 24, 6, {5, 7, 16}, 3, 3, 1, 2);  // 3 groups of 8 -> 2 channels
  odd.groups = 3;
  odd.dilation = {2, 1, 1};
  Problem s4 =
      test::MakeProblem(2, 16, 1, {4, 9, 8}, {2, 7, 4}).Stride({1, 4, 4}).Padding({0, 3, 1});
  s4.output_padding = {0, 3, 1};
  for (int mode : {1, 2, 3, 4}) {
    for (Problem p : {Gan5(), mun4, odd, s4, Strided(2, 16, 1, {16, 24, 24}, 3, 1, 1, 1)}) {
      test::SetMode(p, mode);
      if (p.dtype != DType::kF32 && p.in[2] % 8 != 0) continue;
      int n = 0;
      for (const Config& c : Candidates(p)) {
        if (!IsOverlap(c)) continue;
        ++n;
        EXPECT_LE(Geometry(p, c).smem_bytes, (c.mb == 2 ? 113u : 227u) * 1024) << c.Name();
        auto src = BuildSource(p, c);
        ASSERT_TRUE(src.ok()) << src.status().message();
      }
      EXPECT_GE(n, 1) << p.Signature();
    }
  }
}

}  // namespace
}  // namespace convt3d::gen
