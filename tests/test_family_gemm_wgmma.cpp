// test_family_gemm_wgmma.cpp: the gemm_wgmma family (generator/families/gemm_wgmma.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
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

bool IsGemm(const Config& c) { return c.family == "gemm_wgmma"; }

TEST(GemmWgmmaCandidates, OnlyTensorCoreModesOnAnSm90Target) {
  Problem p = Gan3();
  for (int mode : {0, 1, 2, 3, 4}) {  // strict, tf32, fp32x3, bf16, f16
    Problem q = p;
    test::SetMode(q, mode);
    const auto all = Candidates(q);
    const bool any = std::any_of(all.begin(), all.end(), IsGemm);
    EXPECT_EQ(any, mode != 0) << "mode " << mode;
    DeviceLimits not_sm90;
    not_sm90.wgmma = false;
    const auto other = Candidates(q, not_sm90);
    EXPECT_TRUE(std::none_of(other.begin(), other.end(), IsGemm)) << "mode " << mode;
    for (const Config& c : all) {
      if (!IsGemm(c)) continue;
      EXPECT_EQ(CompileArch(c, "sm_90"), "sm_90a");
      EXPECT_EQ(c.split, mode == 2 ? 3 : 1) << c.Name();  // 3xTF32 in fp32x3
      EXPECT_LE(c.mt * c.bn / 2, 128) << c.Name();        // accumulators per thread
    }
  }
  // More than 10 taps per dimension (kernel 11 at stride 1): not offered.
  Problem wide = test::MakeProblem(1, 8, 8, {4, 4, 12}, {1, 1, 11});
  wide.precision = Precision::kTf32;
  const auto w = Candidates(wide);
  EXPECT_TRUE(std::none_of(w.begin(), w.end(), IsGemm));
}

// Sizes worked out by hand for GAN-3 in TF32 with two warpgroups of two m64 tiles (256 rows),
// 128 channels, 32 input channels (one 128-byte row) per stage, four stages.
TEST(GemmWgmmaCandidates, PlanOfGan3ByHand) {
  Problem p = Gan3();
  p.precision = Precision::kTf32;
  Config c;
  c.family = "gemm_wgmma";
  c.wg = 2, c.mt = 2, c.bn = 128, c.ck = 32, c.st = 4;
  EXPECT_EQ(c.Name(), "gemm_wgmma_tf32_g2_m2_n128_k32_s4");
  const PlanView v = Geometry(p, c);
  // 8 phases x (32 samples x 8^3 rows / 256 rows per tile) x 1 channel tile.
  EXPECT_EQ(v.grid[0], 8u * 64u);
  EXPECT_EQ(v.block[0], 256u);
  // Four stages of (256 + 128) rows x 128 bytes, per warpgroup the epilogue's 32 x 68 words,
  // 64 rows (12 bytes) and 32 columns (16 bytes), and 1024 bytes of alignment slack.
  EXPECT_EQ(v.smem_bytes, 4u * 384 * 128 + 2 * (32 * 68 * 4 + 64 * 12 + 32 * 16) + 1024);
  // Weights: 8 phases x 8 taps x 8 channel chunks of 128 x 128 bytes; the input re-laid
  // position-major (256 channels of 4 bytes per position) after them.
  const size_t w_bytes = 8 * 8 * 8 * 128 * 128;
  EXPECT_EQ(v.x_offset_bytes, w_bytes);
  EXPECT_EQ(v.workspace_bytes, w_bytes + 32ull * 512 * 256 * 4);
  EXPECT_EQ(v.symbols.size(), 3u);  // input re-layout, weight packing, GEMM
  EXPECT_TRUE(v.symbols.count(PrepSymbol(c)) && v.symbols.count(PrepXSymbol(c)));
  auto back = Config::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->Name(), c.Name());
  // 3xTF32: stages, packed weights and the re-laid input hold both parts.
  Problem x3 = p;
  x3.precision = Precision::kFp32x3;
  Config c3 = c;
  c3.split = 3, c3.st = 3;
  EXPECT_EQ(c3.Name(), "gemm_wgmma_3xtf32_g2_m2_n128_k32_s3");
  const PlanView v3 = Geometry(x3, c3);
  EXPECT_EQ(v3.smem_bytes, 3u * 2 * 384 * 128 + 2 * (32 * 68 * 4 + 64 * 12 + 32 * 16) + 1024);
  EXPECT_EQ(v3.x_offset_bytes, 2 * w_bytes);
  EXPECT_EQ(v3.workspace_bytes, 2 * w_bytes + 2 * 32ull * 512 * 256 * 4);
  c.bn = 12;  // not a multiple of 8
  EXPECT_FALSE(Config::FromJson(c.ToJson()).ok());
}

// Tiles visit the phases with the most taps first: kernel 3, stride 2 has phases of 2 and 1 taps
// per dimension (8, 4, 2 and 1 per phase); the source's kWork table lists them in that order.
TEST(GemmWgmmaCandidates, PhasesWithMostTapsFirst) {
  Problem p = Strided(2, 16, 16, {5, 6, 7}, 3, 2, 1, 1);
  p.precision = Precision::kTf32;
  const auto all = Candidates(p);
  const auto it = std::find_if(all.begin(), all.end(),
                               [](const Config& c) { return IsGemm(c) && c.lattice == 0; });
  ASSERT_NE(it, all.end());
  auto src = BuildSource(p, *it);
  ASSERT_TRUE(src.ok()) << src.status().message();
  const std::string& s = *src;
  const size_t at = s.find("kWork[8] = {");
  ASSERT_NE(at, std::string::npos);
  std::vector<int> taps;
  const std::regex entry(R"(\{(\d+), (\d+), (\d+), (\d+), (\d+)LL\})");
  const std::string table = s.substr(at, s.find("};", at) - at);
  for (std::sregex_iterator m(table.begin(), table.end(), entry), end; m != end; ++m)
    taps.push_back(std::stoi((*m)[4]));
  EXPECT_EQ(taps, (std::vector<int>{8, 4, 4, 4, 2, 2, 2, 1}));
}

// First (the untuned pick) on strided layers with more than 1024 products per output, where it
// measured fastest (GAN-3, VID-1 on an H200); after the first four elsewhere, so the picks of
// the stride-1 and write-bound problems stay as they were.
TEST(GemmWgmmaCandidates, FirstOnDenseStridedProblems) {
  Problem gan = Gan3();
  gan.precision = Precision::kTf32;
  EXPECT_EQ(HeuristicPick(gan).family, "gemm_wgmma");
  Problem k2 = Strided(2, 64, 32, {16, 16, 16}, 2, 2, 0, 1);  // 64 products per output
  k2.precision = Precision::kTf32;
  EXPECT_NE(Candidates(k2).front().family, "gemm_wgmma");
  Problem s1 = L1_61();
  s1.precision = Precision::kTf32;
  EXPECT_NE(HeuristicPick(s1).family, "gemm_wgmma");
}

}  // namespace
}  // namespace convt3d::gen
