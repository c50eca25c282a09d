// test_family_cell_simt.cpp: the cell_simt family (generator/families/cell_simt.cpp).
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

bool IsCell(const Config& c) { return c.family == "cell_simt"; }

// Both layers in strict fp32, fp32x3 and tf32 (exact FFMA within their tolerances), not in the
// 16-bit modes; each candidate's name survives its JSON and its source builds.
TEST(CellSimtCandidates, FewOutputChannelsInEveryF32Mode) {
  for (const Problem& layer : {Gan5(), Mun4()}) {
    for (int mode : {0, 1, 2, 3, 4}) {
      Problem q = layer;
      test::SetMode(q, mode);
      const auto all = Candidates(q);
      const auto n = std::count_if(all.begin(), all.end(), IsCell);
      if (mode > 2) {
        EXPECT_EQ(n, 0) << q.Signature();
        continue;
      }
      EXPECT_GE(n, 3) << q.Signature();
      for (const Config& c : all) {
        if (!IsCell(c)) continue;
        auto back = Config::FromJson(c.ToJson());
        ASSERT_TRUE(back.ok()) << back.status().message();
        EXPECT_EQ(back->Name(), c.Name());
        EXPECT_TRUE(BuildSource(q, c).ok()) << c.Name();
      }
    }
  }
}

// Not taken: more than 512 products per output in strict fp32 (GAN-5 with 128 input channels),
// more than 16 output channels per group, f64. tf32 and fp32x3 take the 1024 products of GAN-5
// with 128 input channels (plain sums up to 8192).
TEST(CellSimtCandidates, NotTakenOutsideItsGround) {
  std::vector<Problem> others;
  others.push_back(Strided(2, 128, 1, {8, 8, 8}, 4, 2, 1, 1));
  others.push_back(Strided(2, 16, 32, {8, 8, 8}, 3, 2, 1, 1));
  Problem f64 = Mun4();
  f64.dtype = DType::kF64;
  others.push_back(f64);
  for (const Problem& q : others) {
    const auto all = Candidates(q);
    EXPECT_TRUE(std::none_of(all.begin(), all.end(), IsCell)) << q.Signature();
  }
  for (int mode : {1, 2}) {
    Problem deep = others.front();
    test::SetMode(deep, mode);
    const auto all = Candidates(deep);
    EXPECT_TRUE(std::any_of(all.begin(), all.end(), IsCell)) << deep.Signature();
  }
}

// MUN-4's plan by hand with 12 x 2 x 4 threads of 4 cells: per dimension every tap reads input
// c or c + 1 (2 rows, offset 0) of 48 output cells (96 outputs); a block's 48 x 2 x 4 cells are
// whole W rows, so 4 samples x 12 x 24 tiles. A stage: 4 channels x (5 x 3 rows of 52 floats:
// the 48 cells, one more, padded to 16 bytes) and 4 channels x 2 x 3 x 3 weight rows of 3 taps
// padded to 4; three stages.
TEST(CellSimtCandidates, PlanOfMun4ByHand) {
  const Problem p = Mun4();
  Config c;
  c.family = "cell_simt";
  c.bx = 12, c.by = 2, c.bz = 4, c.cob = 2, c.vw = 4, c.ck = 4, c.st = 3;
  EXPECT_EQ(c.Name(), "cell_simt_f32_x12y2z4_c2_v4_k4_s3");
  const PlanView v = Geometry(p, c);
  EXPECT_EQ(v.grid[0], 4u * 12 * 24);
  EXPECT_EQ(v.block[0], 96u);
  EXPECT_EQ(v.smem_bytes, 3u * 4 * (5 * 3 * 52 + 2 * 3 * 3 * 4) * 4);
  EXPECT_EQ(v.workspace_bytes, 0u);
  EXPECT_EQ(Launches(p, c).x_alignment, 16u);  // whole 16-byte units of the W rows
  auto src = BuildSource(p, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_NE(src->find("kUnit = 16;"), std::string::npos);
  EXPECT_NE(src->find("kTilesD = 12LL;"), std::string::npos);
  // One cell per thread: element-wise copies, whatever the row.
  Config one = c;
  one.vw = 1;
  EXPECT_EQ(Launches(p, one).x_alignment, 4u);
  ASSERT_TRUE(BuildSource(p, one).ok());
  EXPECT_NE(BuildSource(p, one)->find("kUnit = 4;"), std::string::npos);
}

// GAN-5's reach: tap 3 reads input c - 1 and tap 0 input c + 1 (3 rows, offset -1), so a staged
// row keeps 4 floats left of the cells (the first cell on a 16-byte boundary) and one right:
// 8 x 8 x 4 threads of 4 cells take 32 x 8 x 4 cells, rows of 40 floats, 6 x 10 of them.
TEST(CellSimtCandidates, PlanOfGan5ByHand) {
  const Problem p = Gan5();
  Config c;
  c.family = "cell_simt";
  c.bx = 8, c.by = 8, c.bz = 4, c.cob = 1, c.vw = 4, c.ck = 4, c.st = 2;
  const PlanView v = Geometry(p, c);
  EXPECT_EQ(v.grid[0], 32u * 8 * 4);
  EXPECT_EQ(v.block[0], 256u);
  EXPECT_EQ(v.smem_bytes, 2u * 4 * (6 * 10 * 40 + 4 * 4 * 4) * 4);
  // Two cells per thread along H: 16 H cells per block, 17 staged rows (one row shared by the
  // two cells of a thread, where each reads 3).
  Config h2 = c;
  h2.hc = 2;
  EXPECT_EQ(h2.Name(), "cell_simt_f32_x8y8z4_c1_v4h2_k4_s2");
  EXPECT_EQ(Geometry(p, h2).grid[0], 32u * 8 * 2);
  EXPECT_EQ(Geometry(p, h2).smem_bytes, 2u * 4 * (6 * 18 * 40 + 4 * 4 * 4) * 4);
}

// MONAI UNet's third up layer (MUN-3, 64 -> 16 channels): 16 output channels in 8 blocks of 2,
// each block of threads a whole number of warps over the same cells, so a block has 8 x 64
// threads, one staged halo, and every channel's weights (16 x 3 x 3 rows of 4).
TEST(CellSimtCandidates, ChannelBlocksOfMun3ByHand) {
  const Problem p = test::ProblemBuilder(Strided(4, 64, 16, {24, 24, 24}, 3, 2, 1, 1))
                        .OutputPadding({1, 1, 1})
                        .Bias();
  const auto all = Candidates(p);
  EXPECT_TRUE(std::any_of(all.begin(), all.end(), IsCell));
  Config c;
  c.family = "cell_simt";
  c.bx = 2, c.by = 8, c.bz = 4, c.cob = 2, c.vw = 4, c.ck = 8, c.st = 3;
  const PlanView v = Geometry(p, c);
  EXPECT_EQ(v.block[0], 8u * 64);
  EXPECT_EQ(v.grid[0], 4u * 6 * 3 * 3);  // samples x D, H tiles of 4, 8 cells x W tiles of 8
  // A stage: 8 channels x (5 x 9 rows of 12 floats: 8 cells and one more) and their weights.
  EXPECT_EQ(v.smem_bytes, 3u * 8 * (5 * 9 * 12 + 16 * 3 * 3 * 4) * 4);
  c.cob = 3;  // not a divisor of the group's 16 channels
  EXPECT_FALSE(BuildSource(p, c).ok());
  // A hand-named configuration that could not launch: 64 channels in each of 8 stages want far
  // more shared memory than an SM has.
  c.cob = 2, c.ck = 64, c.st = 8;
  EXPECT_GT(Geometry(p, c).smem_bytes, 227u * 1024);
  EXPECT_FALSE(BuildSource(p, c).ok());
}

// MUN-3's power-of-two tiles make 216 or 432 blocks, 1.64 waves of the 132 or 264 slots they
// allow; its list also holds other shapes: 3 or 6 threads along H or D, and channel blocks that
// end inside a warp. By hand, 6 x 1 x 3 threads of 4 cells and 2 channels: 18 cell threads in 8
// channel blocks (144 threads, four and a half warps) over 24 x 1 x 3 cells, so 4 samples x 8 D
// tiles x 24 H tiles = 768 blocks (1.94 waves of 396 slots at 3 blocks per SM: 0.97 of two). A
// stage: 8 channels x (4 x 2 rows of 28 floats: the 24 cells, one more, padded) and their
// weights.
TEST(CellSimtCandidates, WaveFittingShapesOfMun3) {
  const Problem p = test::ProblemBuilder(Strided(4, 64, 16, {24, 24, 24}, 3, 2, 1, 1))
                        .OutputPadding({1, 1, 1})
                        .Bias();
  const auto all = Candidates(p);
  EXPECT_TRUE(std::any_of(all.begin(), all.end(), [](const Config& c) {
    return IsCell(c) && (c.by % 3 == 0 || c.bz % 3 == 0);
  }));
  EXPECT_TRUE(std::any_of(all.begin(), all.end(), [](const Config& c) {
    return IsCell(c) && 16 / c.cob > 1 && c.bx * c.by * c.bz % 32 != 0;
  }));
  Config c;
  c.family = "cell_simt";
  c.bx = 6, c.by = 1, c.bz = 3, c.cob = 2, c.vw = 4, c.ck = 8, c.st = 3;
  const PlanView v = Geometry(p, c);
  EXPECT_EQ(v.block[0], 144u);
  EXPECT_EQ(v.grid[0], 4u * 8 * 24);
  EXPECT_EQ(v.smem_bytes, 3u * 8 * (4 * 2 * 28 + 16 * 3 * 3 * 4) * 4);
  EXPECT_TRUE(BuildSource(p, c).ok());
}

// A stride-1 final layer (16 -> 1, kernel 3, padding 1, 24^3): a cell is one output, every tap
// reads input c - 1, c or c + 1 (3 rows, offset -1). Four H cells and two D cells per thread
// (they only go along unstrided dimensions) make 8 x 8 x 4 threads of 4 x 4 x 2 cells take 32 x
// 32 x 8 cells: per channel 10 x 34 staged rows of 40 floats (4 left of the cells, the 32 cells,
// one right, padded) and 3 x 3 weight rows of 4; a thread loads 4 x 6 rows for 27 x 32 FFMAs.
TEST(CellSimtCandidates, UnstridedCellsOfAFinalLayerByHand) {
  const Problem p = test::ProblemBuilder(Strided(2, 16, 1, {24, 24, 24}, 3, 1, 1, 1)).Bias();
  const auto all = Candidates(p);
  EXPECT_TRUE(std::any_of(all.begin(), all.end(), [](const Config& c) {
    return c.family == "cell_simt" && (c.hc > 2 || c.dc > 1);
  }));
  Config c;
  c.family = "cell_simt";
  c.bx = 8, c.by = 8, c.bz = 4, c.cob = 1, c.vw = 4, c.hc = 4, c.dc = 2, c.ck = 1, c.st = 2;
  EXPECT_EQ(c.Name(), "cell_simt_f32_x8y8z4_c1_v4h4d2_k1_s2");
  const PlanView v = Geometry(p, c);
  EXPECT_EQ(v.block[0], 256u);
  EXPECT_EQ(v.grid[0], 2u * 3 * 1 * 1);  // samples x D tiles of 8 (H and W: one tile of 32)
  EXPECT_EQ(v.smem_bytes, 2u * 1 * (10 * 34 * 40 + 3 * 3 * 4) * 4);
  auto src = BuildSource(p, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_NE(src->find("kDC = 2;"), std::string::npos);
  // Along a strided dimension a thread keeps one D cell and at most two H cells: those configs
  // are not offered there (MUN-4's candidates).
  for (const Config& m : Candidates(Mun4()))
    if (m.family == "cell_simt") EXPECT_TRUE(m.hc <= 2 && m.dc == 1) << m.Name();
}

}  // namespace
}  // namespace convt3d::gen
