// test_family_gemm_simt.cpp: the gemm_simt family (generator/families/gemm_simt.cpp).
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

// The 3D-GAN layer GAN-3 of problems/models.json: 32 x 256 x 8^3, 128 out, kernel 4, stride 2,
// padding 1: eight phases of 2 x 2 x 2 taps, each q grid 8^3.
Problem Gan3() { return Strided(32, 256, 128, {8, 8, 8}, 4, 2, 1, 1); }

bool IsSimt(const Config& c) { return c.family == "gemm_simt"; }

TEST(GemmSimtCandidates, OnlyStrictFp32) {
  for (int mode : {0, 1, 2, 3, 4}) {  // strict, tf32, fp32x3, bf16, f16
    Problem q = Gan3();
    test::SetMode(q, mode);
    const auto all = Candidates(q);
    EXPECT_EQ(std::any_of(all.begin(), all.end(), IsSimt), mode == 0) << "mode " << mode;
    // FFMA needs no Hopper instruction: offered and compiled for the device's own target.
    DeviceLimits not_sm90;
    not_sm90.wgmma = false;
    const auto other = Candidates(q, not_sm90);
    EXPECT_EQ(std::any_of(other.begin(), other.end(), IsSimt), mode == 0) << "mode " << mode;
    for (const Config& c : all) {
      if (IsSimt(c)) {
        EXPECT_EQ(CompileArch(c, "sm_90"), "sm_90") << c.Name();
      }
    }
  }
  // More than 10 taps per dimension (kernel 11 at stride 1): not offered.
  const Problem wide = test::MakeProblem(1, 8, 8, {4, 4, 12}, {1, 1, 11});
  const auto w = Candidates(wide);
  EXPECT_TRUE(std::none_of(w.begin(), w.end(), IsSimt));
}

// Sizes worked out by hand for GAN-3 with 4 x 2 warps of 32 rows x 64 channels (a 128 x 128
// tile, 256 threads), 32 input channels per stage, three stages.
TEST(GemmSimtCandidates, PlanOfGan3ByHand) {
  const Problem p = Gan3();
  Config c;
  c.family = "gemm_simt";
  c.wm = 4, c.wn = 2, c.tn = 8, c.ck = 32, c.st = 3;
  EXPECT_EQ(c.Name(), "gemm_simt_f32_w4x2_n8_k32_s3");
  const PlanView v = Geometry(p, c);
  // 8 phases x (32 samples x 8^3 rows / 128 rows per tile) x 1 channel tile.
  EXPECT_EQ(v.grid[0], 8u * 128u);
  EXPECT_EQ(v.block[0], 256u);
  // Three stages of 128 A rows of 32 + 4 floats and 32 B rows of 128 floats.
  EXPECT_EQ(v.smem_bytes, 3u * (128 * 36 + 32 * 128) * 4);
  // Weights: 8 phases x 8 taps x 8 channel chunks of 32 x 128 floats; the input re-laid
  // position-major (256 channels of 4 bytes per position) after them.
  const size_t w_bytes = 8 * 8 * 8 * 32 * 128 * 4;
  EXPECT_EQ(v.x_offset_bytes, w_bytes);
  EXPECT_EQ(v.workspace_bytes, w_bytes + 32ull * 512 * 256 * 4);
  EXPECT_EQ(v.symbols.size(), 3u);  // input re-layout, weight packing, GEMM
  EXPECT_TRUE(v.symbols.count(PrepSymbol(p, c)) && v.symbols.count(PrepXSymbol(p, c)));
  auto back = Config::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->Name(), c.Name());
  // A stage that does not split the block's rows into whole copy passes is refused.
  Config odd = c;
  odd.ck = 12;
  EXPECT_FALSE(FamilyOf(odd).CheckFields(odd).ok());
}

// Every candidate fits the device: at most 256 threads, shared memory within the block limit,
// stages 2-4, and input channels padded at most to the next stage.
TEST(GemmSimtCandidates, CandidatesFitTheDevice) {
  for (const Problem& p : {Gan3(), Strided(4, 384, 64, {6, 6, 6}, 3, 2, 1, 1),
                           Strided(2, 320, 256, {8, 8, 8}, 2, 2, 0, 0)}) {
    int taken = 0;
    for (const Config& c : Candidates(p)) {
      if (!IsSimt(c)) continue;
      ++taken;
      const PlanView v = Geometry(p, c);
      EXPECT_LE(v.block[0], 256u) << c.Name();
      EXPECT_LE(v.smem_bytes, 227u * 1024) << c.Name();
      EXPECT_GE(c.st, 2) << c.Name();
      EXPECT_LE(c.st, 4) << c.Name();
      EXPECT_TRUE(FamilyOf(c).CheckFields(c).ok()) << c.Name();
    }
    EXPECT_GE(taken, 4);
  }
}

// MUN-1 (4 x 384 x 6^3, 64 out, kernel 3, stride 2): 8 phases of 27 row tiles at most, too few
// to fill the GPU, so split-K forms are offered: their plan adds the sum of the splits, and the
// workspace holds every split's tile after the re-laid input. GAN-3's 1024 tiles get none.
TEST(GemmSimtCandidates, SplitKWhereTilesAreFew) {
  const Problem mun1 = Strided(4, 384, 64, {6, 6, 6}, 3, 2, 1, 1);
  int split = 0;
  for (const Config& c : Candidates(mun1)) {
    if (!IsSimt(c) || c.sk == 1) continue;
    ++split;
    EXPECT_NE(c.Name().find("_sk" + std::to_string(c.sk)), std::string::npos) << c.Name();
    const PlanView v = Geometry(mun1, c);
    EXPECT_EQ(v.symbols.size(), 4u) << c.Name();  // re-layout, packing, GEMM, sum of the splits
    EXPECT_TRUE(v.symbols.count(c.Name() + "_post")) << c.Name();
    const size_t tile_bytes = 32u * c.wm * 8 * c.tn * c.wn * 4;
    EXPECT_GE(v.workspace_bytes, v.x_offset_bytes + 4ull * 384 * 216 + c.sk * tile_bytes)
        << c.Name();
    auto back = Config::FromJson(c.ToJson());
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->sk, c.sk);
  }
  EXPECT_GE(split, 1);
  for (const Config& c : Candidates(Gan3())) {
    if (IsSimt(c)) {
      EXPECT_EQ(c.sk, 1) << c.Name();
    }
  }
}

}  // namespace
}  // namespace convt3d::gen
