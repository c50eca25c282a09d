// test_family_shuffle_wgmma.cpp: the shuffle_wgmma family (generator/families/shuffle_wgmma.cpp).
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

// nnU-Net's NNU-4 of problems/models.json: 2 x 128 x 32^3 -> 64 channels, kernel 2, stride 2.
Problem Nnu4() { return Strided(2, 128, 64, {32, 32, 32}, 2, 2, 0, 1); }

bool IsShuffle(const Config& c) { return c.family == "shuffle_wgmma"; }

TEST(ShuffleWgmmaCandidates, OnlyPixelShufflesInTensorCoreModesOnSm90) {
  for (int mode : {0, 1, 2, 3, 4}) {  // strict, tf32, fp32x3, bf16, f16
    Problem q = Nnu4();
    test::SetMode(q, mode);
    const auto all = Candidates(q);
    const bool any = std::any_of(all.begin(), all.end(), IsShuffle);
    EXPECT_EQ(any, mode != 0) << "mode " << mode;
    if (any) {
      EXPECT_TRUE(IsShuffle(all.front())) << "mode " << mode << ": first where it applies";
    }
    DeviceLimits not_sm90;
    not_sm90.wgmma = false;
    const auto other = Candidates(q, not_sm90);
    EXPECT_TRUE(std::none_of(other.begin(), other.end(), IsShuffle));
    for (const Config& c : all) {
      if (!IsShuffle(c)) continue;
      EXPECT_EQ(CompileArch(c, "sm_90"), "sm_90a");
      EXPECT_EQ(c.split, mode == 2 ? 3 : 1) << c.Name();
      // Accumulators per thread: 96, or 128 for two m64 tiles of 16-bit operands.
      EXPECT_LE(c.mt * c.bn / 2, mode >= 3 && c.mt == 2 ? 128 : 96) << c.Name();
    }
  }
  // Not a pixel shuffle: kernel 4 at stride 2, padding, output_padding, dilation past one tap,
  // or channel planes that are not whole 16-byte units (3^3 positions of 4 bytes).
  std::vector<Problem> others;
  others.push_back(Strided(2, 32, 32, {8, 8, 8}, 4, 2, 1, 1));
  Problem padded = Nnu4();
  padded.padding = {0, 1, 0};
  others.push_back(padded);
  Problem op = Nnu4();
  op.output_padding = {1, 0, 0};
  others.push_back(op);
  Problem dil = Nnu4();
  dil.dilation = {1, 1, 2};
  others.push_back(dil);
  others.push_back(Strided(2, 32, 32, {3, 3, 3}, 2, 2, 0, 1));
  for (Problem q : others) {
    q.precision = Precision::kTf32;
    const auto all = Candidates(q);
    EXPECT_TRUE(std::none_of(all.begin(), all.end(), IsShuffle)) << q.Signature();
  }
  // Dilation does not matter along a dimension of one tap.
  Problem k1 = Nnu4();
  k1.kernel = {1, 2, 2}, k1.stride = {1, 2, 2}, k1.dilation = {3, 1, 1};
  k1.precision = Precision::kTf32;
  const auto k1c = Candidates(k1);
  EXPECT_TRUE(std::any_of(k1c.begin(), k1c.end(), IsShuffle));
}

// The untuned pick on the pixel-shuffle layers where it is placed first, over the phase-channel
// tiles the heuristic otherwise prefers there (NNU-A: kernel 1 x 2 x 2).
TEST(ShuffleWgmmaCandidates, UntunedPickWhereFirst) {
  Problem nnua = test::MakeProblem(2, 64, 32, {20, 160, 128}, {1, 2, 2}).Stride({1, 2, 2});
  for (int mode : {1, 3}) {
    Problem q = nnua;
    test::SetMode(q, mode);
    EXPECT_EQ(HeuristicPick(q).family, "shuffle_wgmma") << q.Signature();
    Problem n4 = Nnu4();
    test::SetMode(n4, mode);
    EXPECT_EQ(HeuristicPick(n4).family, "shuffle_wgmma") << n4.Signature();
  }
}

// Sizes worked out by hand for NNU-4 in TF32: 64 x 8 = 512 columns, two warpgroups of 128 (two
// slices of 256), one m64 tile, 128 input channels in four 128-byte rows, two A slots.
TEST(ShuffleWgmmaCandidates, PlanOfNnu4ByHand) {
  Problem p = Nnu4();
  p.precision = Precision::kTf32;
  Config c;
  c.family = "shuffle_wgmma";
  c.wg = 2, c.mt = 1, c.bn = 128, c.ck = 32, c.st = 2;
  EXPECT_EQ(c.Name(), "shuffle_wgmma_tf32_g2_m1_n128_k32_s2");
  const PlanView v = Geometry(p, c);
  // Units: 2 slices x 2 samples x 32^3 / 64 row tiles (the engine caps the grid at the SMs).
  EXPECT_EQ(v.grid[0], 2u * 2 * 512);
  EXPECT_EQ(v.block[0], 384u);  // two consumer warpgroups and the producer's
  // B: 4 chunks x 256 rows x 128 bytes; 2 A slots of 128 channels x (64 + 8) positions x 4
  // bytes (36864, a multiple of 1024); 2 x 2 + 2 mbarriers of 8 bytes (16 per slot + 16); 1024.
  EXPECT_EQ(v.smem_bytes, 4u * 256 * 128 + 2 * 36864 + 16 * 3 + 1024);
  EXPECT_EQ(v.workspace_bytes, 2u * 4 * 256 * 128);  // the two slices' B images
  EXPECT_EQ(v.symbols.size(), 2u);                   // weight packing, GEMM
  EXPECT_TRUE(v.symbols.count(PrepSymbol(p, c)));
  EXPECT_EQ(Launches(p, c).x_alignment, 16u);
  auto back = Config::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->Name(), c.Name());
  // 3xTF32: the big parts' image, then the small parts', per slice.
  Problem x3 = Nnu4();
  x3.precision = Precision::kFp32x3;
  Config c3 = c;
  c3.split = 3;
  EXPECT_EQ(c3.Name(), "shuffle_wgmma_3xtf32_g2_m1_n128_k32_s2");
  EXPECT_EQ(Geometry(x3, c3).workspace_bytes, 2u * 2 * 4 * 256 * 128);
  c.ck = 24;  // 96-byte rows: no swizzle atom
  EXPECT_FALSE(Config::FromJson(c.ToJson()).ok());
}

// Every candidate fits shared memory with at least two A slots, and the source carries the
// register-A wgmma of its N.
TEST(ShuffleWgmmaCandidates, CandidatesFitAndSourcesBuild) {
  for (int mode : {1, 2, 3, 4}) {
    for (Problem p : {Nnu4(), Strided(2, 64, 32, {64, 64, 64}, 2, 2, 0, 1),
                      Strided(2, 48, 48, {48, 48, 48}, 2, 2, 0, 1),
                      Strided(2, 96, 40, {6, 6, 8}, 2, 2, 0, 1)}) {
      test::SetMode(p, mode);
      int n = 0;
      for (const Config& c : Candidates(p)) {
        if (!IsShuffle(c)) continue;
        ++n;
        EXPECT_GE(c.st, 2) << c.Name();
        EXPECT_LE(Geometry(p, c).smem_bytes, 227u * 1024) << c.Name();
        auto src = BuildSource(p, c);
        ASSERT_TRUE(src.ok()) << src.status().message();
        EXPECT_NE(src->find("void WgmmaRS(float (&d)[" + std::to_string(c.bn / 2) + "]"),
                  std::string::npos)
            << c.Name();
      }
      EXPECT_GE(n, 1) << p.Signature();
    }
  }
}

}  // namespace
}  // namespace convt3d::gen
