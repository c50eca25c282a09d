// test_family_narrow_gemm.cpp: the narrow_gemm family (generator/families/narrow_gemm.cpp).
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

bool IsNarrow(const Config& c) { return c.family == "narrow_gemm"; }

// Both layers in every mode: FFMA candidates in strict fp32 and fp32x3, tensor-core ones in tf32,
// fp32x3 (3xTF32), bf16 and f16; placed first (their GEMM rows: 16 and 24).
TEST(NarrowGemmCandidates, FewOutputChannelsInEveryModeFirst) {
  for (const Problem& layer : {Gan5(), Mun4()}) {
    for (int mode : {0, 1, 2, 3, 4}) {
      Problem q = layer;
      test::SetMode(q, mode);
      const auto all = Candidates(q);
      ASSERT_FALSE(all.empty());
      // First, but for the tensor modes on sm_90, where overlap_wgmma (no zero taps) goes first.
      EXPECT_TRUE(IsNarrow(all.front()) || (mode != 0 && all.front().family == "overlap_wgmma"))
          << q.Signature() << ": " << all.front().Name();
      DeviceLimits not_sm90;
      not_sm90.wgmma = false;
      EXPECT_TRUE(IsNarrow(Candidates(q, not_sm90).front())) << q.Signature();
      bool ffma = false, mma = false;
      for (const Config& c : all) {
        if (!IsNarrow(c)) continue;
        (c.mma ? mma : ffma) = true;
        EXPECT_EQ(c.split, c.mma && mode == 2 ? 3 : 1) << c.Name();
        EXPECT_EQ(CompileArch(c, "sm_90"), "sm_90") << c.Name();  // mma.sync: no sm_90a
        auto back = Config::FromJson(c.ToJson());
        ASSERT_TRUE(back.ok()) << back.status().message();
        EXPECT_EQ(back->Name(), c.Name());
      }
      EXPECT_EQ(ffma, mode == 0 || mode == 2) << q.Signature();
      EXPECT_EQ(mma, mode != 0) << q.Signature();
    }
  }
}

// Not taken: more than 64 GEMM rows (8 output channels at stride 2, kernel 4), W rows longer
// than 128, 16-bit rows of an odd length (2-byte units), f64.
TEST(NarrowGemmCandidates, NotTakenOutsideItsGround) {
  std::vector<Problem> others;
  others.push_back(Strided(2, 64, 8, {8, 8, 8}, 4, 2, 1, 1));
  others.push_back(Strided(1, 16, 1, {4, 4, 160}, 4, 2, 1, 1));
  Problem odd = Strided(1, 16, 1, {4, 4, 7}, 4, 2, 1, 1);
  odd.dtype = DType::kBF16;
  others.push_back(odd);
  Problem f64 = Gan5();
  f64.dtype = DType::kF64;
  others.push_back(f64);
  for (const Problem& q : others) {
    const auto all = Candidates(q);
    EXPECT_TRUE(std::none_of(all.begin(), all.end(), IsNarrow)) << q.Signature();
  }
}

// The tile both GAN-5 plans below are worked out for: bf16 mma.sync, 2 x 4 cells, 16 channels
// a stage, four stages.
Config Bf16Tile2x4() {
  Config c;
  c.family = "narrow_gemm";
  c.dtype = DType::kBF16;
  c.bz = 2, c.by = 4, c.ck = 16, c.st = 4, c.mma = 1;
  return c;
}

// Sizes worked out by hand for GAN-5 in bf16 with 2 x 4 cells and 16 channels per stage: per
// dimension cells q 0..32 (33), each reading input rows q - 1 and q (J = 2, offset -1); GEMM rows
// 1 x 2 x 2 x 4 = 16 (one m16 tile); four 8-column W tiles, one warp each.
TEST(NarrowGemmCandidates, PlanOfGan5ByHand) {
  Problem p = Gan5();
  p.dtype = DType::kBF16;
  Config c = Bf16Tile2x4();
  EXPECT_EQ(c.Name(), "narrow_gemm_bf16_z2y4_k16_s4_mma");
  const PlanView v = Geometry(p, c);
  EXPECT_EQ(v.grid[0], 32u * 17 * 9);  // tiles: samples x ceil(33 / 2) x ceil(33 / 4)
  EXPECT_EQ(Launches(p, c).steps.back().blocks_per_sm, 0);
  // Persistent blocks: the product and row records in a region of their own; two blocks per SM.
  Config pc = c;
  pc.pa = 1;
  EXPECT_EQ(pc.Name(), "narrow_gemm_bf16_z2y4_k16_s4_mma_p");
  EXPECT_EQ(Geometry(p, pc).smem_bytes, 4u * (16 * 488 * 2 + 4 * 512) + 16 * 260 * 4 + 32 * 16);
  EXPECT_EQ(Launches(p, pc).steps.back().blocks_per_sm, 2);
  EXPECT_EQ(v.block[0], 128u);
  // A stage: 16 channels x (3 x 5 rows of 32) halves, the channel stride padded from 480 to 488
  // elements (an odd number of 16-byte units), then the chunk's weights: 16 channels x 4 offsets
  // / 16 = 4 k-steps of one 512-byte fragment. Four stages; the product (16 rows of 2 x 4 x 32
  // columns + 4, f32) and a 16-byte record per output row (2 x 2 phases x 2 x 4 cells) reuse them.
  EXPECT_EQ(v.smem_bytes, 4u * (16 * 488 * 2 + 4 * 512));
  EXPECT_EQ(v.workspace_bytes, 4u * 4 * 512);  // 64 channels in 4 chunks
  EXPECT_EQ(v.symbols.size(), 2u);             // weight packing, GEMM
  EXPECT_TRUE(v.symbols.count(PrepSymbol(p, c)));
  EXPECT_EQ(Launches(p, c).x_alignment, 16u);  // 64-byte rows: 16-byte copies
  // The tap masks: both phases of a dimension take a tap from both rows.
  auto src = BuildSource(p, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_NE(src->find("kTapMaskD = 15ULL"), std::string::npos);
  EXPECT_NE(src->find("kOffD = -1;"), std::string::npos);
  // The FFMA form of strict fp32: a thread per 4 columns (2 x 4 cells x 32 = 256 columns).
  Problem s = Gan5();
  Config f = c;
  f.dtype = DType::kF32, f.mma = 0, f.ck = 4;
  EXPECT_EQ(f.Name(), "narrow_gemm_f32_z2y4_k4_s4");
  EXPECT_EQ(Geometry(s, f).block[0], 64u);
  f.split = 3;  // 3xTF32 is a tensor-core form only
  EXPECT_FALSE(Config::FromJson(f.ToJson()).ok());
}

// The tensor-map form, by hand for GAN-5 in bf16 with 2 x 4 cells and 16 channels per stage. A
// stage is one dense box of 16 channels x 3 x 5 rows x kWS columns: 32 columns would give a
// channel stride of 480 elements (60 16-byte units, even: ldmatrix's 8 channel rows on 4 banks),
// so the row widens to 40 (600 elements, 75 units); its 8 columns past W read as zeros.
TEST(NarrowGemmCandidates, TensorMapPlanOfGan5ByHand) {
  Problem p = Gan5();
  p.dtype = DType::kBF16;
  Config c = Bf16Tile2x4();
  c.ws = 1;
  EXPECT_EQ(c.Name(), "narrow_gemm_bf16_z2y4_k16_s4_mma_tma");
  auto back = Config::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->ws, 1);
  // Stage: 16 x 600 halves (19200 bytes, a multiple of 128) and 4 x 512 bytes of weights; four
  // stages, then an 8-byte mbarrier each.
  const PlanView v = Geometry(p, c);
  EXPECT_EQ(v.smem_bytes, 4u * (19200 + 2048) + 4 * 8);
  EXPECT_EQ(v.block[0], 128u);
  const LaunchPlan plan = Launches(p, c);
  EXPECT_EQ(plan.x_alignment, 16u);
  const LaunchStep& main = plan.steps.back();
  ASSERT_EQ(main.args.size(), 5u);
  EXPECT_EQ(main.args.back(), Arg::kXMap);
  // The input as [32 samples][64 channels][32][32][32], innermost first; the box as above.
  const TiledMapShape& m = main.x_map;
  EXPECT_EQ(m.rank, 5);
  EXPECT_EQ(m.elem_bytes, 2);
  EXPECT_EQ(m.swizzle_bytes, 0);
  const uint64_t dims[5] = {32, 32, 32, 64, 32};
  const uint64_t strides[4] = {64, 64 * 32, 64 * 32 * 32, 64 * 32 * 32 * 64};
  const uint32_t box[5] = {40, 5, 3, 16, 1};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(m.dims[i], dims[i]) << i;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(m.strides_bytes[i], strides[i]) << i;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(m.box[i], box[i]) << i;
  auto src = BuildSource(p, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_NE(src->find("kCS = 600;"), std::string::npos);
  EXPECT_NE(src->find("#define NARROW_X_MAP 1"), std::string::npos);
  // TF32: 3 x 5 rows of 32 floats (480) would sit every channel on the same banks; 40 gives
  // 600, 24 mod 32.
  Problem t = Gan5();
  test::SetMode(t, 1);
  Config ct = c;
  ct.dtype = DType::kF32, ct.ck = 8;
  auto tsrc = BuildSource(t, ct);
  ASSERT_TRUE(tsrc.ok()) << tsrc.status().message();
  EXPECT_NE(tsrc->find("kCS = 600;"), std::string::npos);
  // Groups: the map's channel axis is the group's (4 of 12 channels), its outer axis samples x
  // groups (2 x 3), so a box stops at its group's last channel. Strict fp32 (FFMA), W = 8 floats
  // (32-byte rows, unwidened), D = H = 5; 2 x 2 cells reach 3 x 3 rows.
  Problem grouped = Strided(2, 12, 3, {5, 5, 8}, 4, 2, 1, 1);
  grouped.groups = 3;
  Config cg;
  cg.family = "narrow_gemm";
  cg.bz = 2, cg.by = 2, cg.ck = 4, cg.st = 3, cg.ws = 1;
  const LaunchPlan grouped_plan = Launches(grouped, cg);
  const TiledMapShape& mg = grouped_plan.steps.back().x_map;
  const uint64_t gdims[5] = {8, 5, 5, 4, 6};
  const uint64_t gstrides[4] = {32, 32 * 5, 32 * 5 * 5, 32 * 5 * 5 * 4};
  const uint32_t gbox[5] = {8, 3, 3, 4, 1};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(mg.dims[i], gdims[i]) << i;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(mg.strides_bytes[i], gstrides[i]) << i;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(mg.box[i], gbox[i]) << i;
  // A tensor-map config on rows the map cannot stride (40 bytes) is not a kernel.
  Problem w10 = grouped;
  w10.in[2] = 10;
  EXPECT_FALSE(BuildSource(w10, cg).ok());
}

// Boxes whose cells would not fit one warp's accumulators take more warps along D: GAN-5 in tf32
// (one m16 tile of GEMM rows, four 8-column W tiles) with 4 x 8 cells is 128 accumulators a warp
// with one warp along D, 64 with two: 4 x 2 warps.
TEST(NarrowGemmCandidates, MoreWarpsAlongDForLargeBoxes) {
  Problem p = Gan5();
  test::SetMode(p, 1);
  Config c;
  c.family = "narrow_gemm";
  c.bz = 4, c.by = 8, c.ck = 8, c.st = 3, c.mma = 1;
  EXPECT_EQ(Geometry(p, c).block[0], 256u);
  c.bz = 2, c.by = 2;  // 4 cells: one warp along D holds them
  EXPECT_EQ(Geometry(p, c).block[0], 128u);
}

// Tensor-map twins go first where the map applies, and nowhere else: W rows of whole 16-byte
// units on an sm_90 device.
TEST(NarrowGemmCandidates, TensorMapTwinsWhereTheMapApplies) {
  auto first_narrow = [](const std::vector<Config>& all) {
    const auto it = std::find_if(all.begin(), all.end(), IsNarrow);
    return it == all.end() ? Config{} : *it;  // Config{}: not narrow_gemm, ws 0
  };
  auto any_map = [](const std::vector<Config>& all) {
    return std::any_of(all.begin(), all.end(),
                       [](const Config& c) { return IsNarrow(c) && c.ws == 1; });
  };
  Problem p = Gan5();
  p.dtype = DType::kBF16;
  EXPECT_EQ(first_narrow(Candidates(p)).ws, 1);
  DeviceLimits not_sm90;
  not_sm90.wgmma = false;
  EXPECT_FALSE(any_map(Candidates(p, not_sm90)));
  Problem odd = Strided(1, 16, 1, {4, 4, 12}, 4, 2, 1, 1);  // 48-byte rows: fine in fp32
  test::SetMode(odd, 1);
  EXPECT_TRUE(any_map(Candidates(odd)));
  odd.in[2] = 10;  // 40-byte rows: cp.async only
  EXPECT_FALSE(any_map(Candidates(odd)));
}

}  // namespace
}  // namespace convt3d::gen
