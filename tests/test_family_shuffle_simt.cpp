// test_family_shuffle_simt.cpp: the shuffle_simt family (generator/families/shuffle_simt.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/family.h"
#include "generator/source.h"
#include "tests/generator_test_util.h"

namespace convt3d::gen {
namespace {

// nnU-Net's NNU-5 of problems/models.json: 2 x 64 x 64^3 -> 32 channels, kernel 2, stride 2.
Problem Nnu5() { return Strided(2, 64, 32, {64, 64, 64}, 2, 2, 0, 1); }

bool IsShuffleSimt(const Config& c) { return c.family == "shuffle_simt"; }

// A MONAI UNet up-convolution of 4 samples: kernel 3, stride 2, padding 1, output padding 1,
// bias; `in` positions per dimension.
Problem MonaiUp(int64_t cin, int64_t cout, int64_t in) {
  return test::MakeProblem(4, cin, cout, {in, in, in}, {3, 3, 3})
      .Stride({2, 2, 2})
      .Padding({1, 1, 1})
      .OutputPadding({1, 1, 1})
      .Bias(true);
}

TEST(ShuffleSimtCandidates, OnlyStrictPixelShufflesOnSm90) {
  for (int mode : {0, 1, 2, 3, 4}) {  // strict, tf32, fp32x3, bf16, f16
    Problem q = Nnu5();
    test::SetMode(q, mode);
    const auto all = Candidates(q);
    EXPECT_EQ(std::any_of(all.begin(), all.end(), IsShuffleSimt), mode == 0) << "mode " << mode;
  }
  DeviceLimits not_sm90;
  not_sm90.wgmma = false;
  const auto other = Candidates(Nnu5(), not_sm90);
  EXPECT_TRUE(std::none_of(other.begin(), other.end(), IsShuffleSimt));
  // Not taken: overlapping taps with 32 input channels (kernel 4 at stride 3: the column
  // buffer's round trip would outweigh the GEMM) or a column buffer past 256 MB (NNU-5 padded:
  // 537 MB), overlapping taps over planes that are not whole 16-byte units (3 x 3 x 3 positions,
  // kernel 3), latent sample rows that are not (30 channels).
  Problem padded = Nnu5();
  padded.padding = {0, 1, 0};
  for (const Problem& q :
       {Strided(2, 32, 32, {8, 8, 8}, 4, 3, 1, 1), padded,
        Strided(2, 320, 32, {3, 3, 3}, 3, 2, 1, 1), Strided(8, 30, 32, {1, 1, 1}, 4, 1, 0, 1)}) {
    const auto all = Candidates(q);
    EXPECT_TRUE(std::none_of(all.begin(), all.end(), IsShuffleSimt)) << q.Signature();
  }
}

// Sizes worked out by hand for NNU-5: 32 x 8 = 256 columns in two slices of 128 (two warps of
// 64 columns), 64 positions per row tile (two warps of 32), 32 channels per stage.
TEST(ShuffleSimtCandidates, PlanOfNnu5ByHand) {
  Config c;
  c.family = "shuffle_simt";
  c.wm = 2, c.wn = 2, c.ck = 32, c.st = 4, c.mb = 2;
  EXPECT_EQ(c.Name(), "shuffle_simt_f32_w2x2_k32_s4_b2");
  const PlanView v = Geometry(Nnu5(), c);
  // Units: 2 slices x 2 samples x 64^3 / 64 row tiles (the engine caps the grid at 2 per SM).
  EXPECT_EQ(v.grid[0], 2u * 2 * 4096);
  EXPECT_EQ(v.block[0], 160u);  // four consumer warps and the producer
  // B: 64 channels x 128 columns; 4 slots of 32 channels x 64 positions; 2 mbarriers per slot
  // and 2 for B.
  EXPECT_EQ(v.smem_bytes, 64u * 128 * 4 + 4 * 32 * 64 * 4 + 16 * 5);
  EXPECT_EQ(v.workspace_bytes, 0u);  // the weights are read as they are
  EXPECT_EQ(v.symbols.size(), 1u);
  const LaunchPlan plan = Launches(Nnu5(), c);
  EXPECT_EQ(plan.x_alignment, 16u);
  EXPECT_FALSE(plan.steps.front().overlaps_previous);
  EXPECT_EQ(plan.steps.front().blocks_per_sm, 2);
  auto back = Config::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->Name(), c.Name());
  c.wn = 4, c.wm = 4;  // 16 consumer warps
  EXPECT_FALSE(Config::FromJson(c.ToJson()).ok());
  c.wn = 2, c.wm = 2, c.ck = 6;  // stage parts of 24 bytes: not 16-byte copies
  EXPECT_FALSE(Config::FromJson(c.ToJson()).ok());
}

// Pixel shuffles over planes that are not whole 16-byte units (3D U-Net's 512 -> 512 over 9 x 9 x
// 7 = 567 positions; SwinUNETR's 3^3): a _prepx kernel copies the input into planes padded to a
// multiple of 4 positions (zeros) after the column buffer, the GEMM reads that copy as its
// programmatic dependent, and K splits keep planes as long in the column buffer.
TEST(ShuffleSimtCandidates, OddVolumesReadPaddedPlanes) {
  int direct = 0, split = 0;
  // (3D U-Net: K in parts too, 512 channels over few tiles; 64 -> 32 over 2 x 11 x 10 x 7 = 770
  // positions, padded to 772: the direct form.)
  for (const auto& [p, plane] : std::vector<std::pair<Problem, int64_t>>{
           {Strided(1, 512, 512, {9, 9, 7}, 2, 2, 0, 1), 568},
           {Strided(2, 64, 32, {11, 10, 7}, 2, 2, 0, 1), 772}}) {
    for (const Config& c : Candidates(p)) {
      if (!IsShuffleSimt(c)) continue;
      const LaunchPlan plan = Launches(p, c);
      const int64_t columns = c.sk > 1 ? p.n * p.c_out * 8 * plane * 4 * c.sk : 0;
      ASSERT_EQ(plan.steps.size(), c.sk > 1 ? 3u : 2u) << c.Name();
      EXPECT_EQ(plan.steps[0].symbol, c.Name() + "_prepx");
      EXPECT_EQ(plan.steps[0].args, (std::vector<Arg>{Arg::kX, Arg::kXRelaid}));
      EXPECT_FALSE(plan.steps[0].overlaps_previous);
      EXPECT_EQ(plan.steps[1].args[0], Arg::kXRelaid) << c.Name();
      EXPECT_TRUE(plan.steps[1].overlaps_previous) << c.Name();
      EXPECT_EQ(plan.x_offset_bytes, static_cast<size_t>(columns)) << c.Name();  // 256 | columns
      EXPECT_EQ(plan.workspace_bytes, plan.x_offset_bytes + p.n * p.c_in * plane * 4) << c.Name();
      EXPECT_EQ(plan.x_alignment, 1u);  // the copy reads the input float by float
      auto src = BuildSource(p, c);
      ASSERT_TRUE(src.ok()) << src.status().message();
      EXPECT_NE(src->find("kXVol = " + std::to_string(plane) + "LL"), std::string::npos)
          << c.Name();
      EXPECT_NE(src->find("#define PREPX_KERNEL_NAME"), std::string::npos) << c.Name();
      ++(c.sk > 1 ? split : direct);
    }
  }
  EXPECT_GE(direct, 1);
  EXPECT_GE(split, 1);
  // Whole 16-byte planes keep reading the input in place: one kernel, kXVol = kVol.
  for (const Config& c : Candidates(Nnu5())) {
    if (!IsShuffleSimt(c)) continue;
    EXPECT_EQ(Launches(Nnu5(), c).steps.size(), 1u) << c.Name();
    auto src = BuildSource(Nnu5(), c);
    ASSERT_TRUE(src.ok()) << src.status().message();
    EXPECT_NE(src->find("kXVol = 262144LL"), std::string::npos) << c.Name();
    break;
  }
  const auto swu1 = Candidates(Strided(2, 768, 384, {3, 3, 3}, 2, 2, 0, 1));
  EXPECT_TRUE(std::any_of(swu1.begin(), swu1.end(), IsShuffleSimt));
}

// The 3D-GAN's latent first layer (GAN-1: 32 samples of 200 channels -> 512 x 4^3): the rows
// are the samples, one 32-row tile (a warp along them) of 4 x 64 columns per slice, each sample's
// 32 channels of a stage in a row of 36 floats.
TEST(ShuffleSimtCandidates, PlanOfLatentGan1ByHand) {
  const Problem gan1 = Strided(32, 200, 512, {1, 1, 1}, 4, 1, 0, 1);
  Config c;
  c.family = "shuffle_simt";
  c.wm = 1, c.wn = 4, c.ck = 32, c.st = 3, c.mb = 1;
  const PlanView v = Geometry(gan1, c);
  EXPECT_EQ(v.grid[0], 512u * 64 / 256);  // column slices x one row tile
  EXPECT_EQ(v.block[0], 160u);
  EXPECT_EQ(v.smem_bytes, 200u * 256 * 4 + 3 * 32 * 36 * 4 + 16 * 4);
  const auto all = Candidates(gan1);
  EXPECT_TRUE(std::any_of(all.begin(), all.end(),
                          [](const Config& k) { return IsShuffleSimt(k) && k.wm == 1; }));
  auto src = BuildSource(gan1, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
}

// Every candidate fits shared memory; two blocks per SM only with 4 consumer warps and plain
// sums; the sums go stage-wise past 512 input channels per group and K part (SWU-1's 768), and
// deep layers or those of few tiles (NNU-2's 320 channels: 2048 columns in 8 slices or more,
// its input in L2) are also offered K split in parts.
TEST(ShuffleSimtCandidates, CandidatesFitAndSourcesBuild) {
  for (const Problem& p : std::vector<Problem>{
           Nnu5(), Strided(2, 128, 64, {32, 32, 32}, 2, 2, 0, 1),
           Strided(2, 320, 256, {8, 8, 8}, 2, 2, 0, 1), Strided(2, 768, 384, {4, 4, 4}, 2, 2, 0, 1),
           test::MakeProblem(2, 64, 32, {20, 160, 128}, {1, 2, 2}).Stride({1, 2, 2}),
           Strided(2, 48, 48, {4, 6, 7}, 3, 3, 0, 1)}) {
    int n = 0, split = 0;
    for (const Config& c : Candidates(p)) {
      if (!IsShuffleSimt(c)) continue;
      ++n;
      const bool deep = p.c_in / p.groups / c.sk > 512;  // per K part
      if (c.sk > 1) {  // through the column buffer and its overlap-add
        ++split;
        EXPECT_EQ(Geometry(p, c).symbols.count(c.Name() + "_post"), 1u) << c.Name();
      }
      EXPECT_GE(c.st, 2) << c.Name();
      EXPECT_LE(Geometry(p, c).smem_bytes, std::min(227u, 228u / c.mb - 1) * 1024) << c.Name();
      if (c.mb > 1) {
        EXPECT_LE(c.wm * c.wn, 4) << c.Name();
        EXPECT_FALSE(deep) << c.Name();
      }
      auto src = BuildSource(p, c);
      ASSERT_TRUE(src.ok()) << src.status().message();
      EXPECT_NE(src->find(std::string("constexpr bool kStaged = ") + (deep ? "true" : "false")),
                std::string::npos)
          << c.Name();
    }
    EXPECT_GE(n, 1) << p.Signature();
    // K is split where the sums would go stage-wise (SWU-1's 768 channels) or the tiles are few
    // (NNU-2's 320 channels over 8^3 positions).
    if (p.c_in / p.groups > 256) {
      EXPECT_GE(split, 1) << p.Signature();
    }
  }
}

// Tiles copying by tensor maps (ws 1): worked out by hand for NNU-2 (2 x 320 x 8^3 -> 256, k2 s2)
// in 128 x 64 tiles: x as (position, sample, channel) = (512, 2, 320) in boxes of 128 positions
// x 1 sample x 32 channels, w as [320][2048] in two boxes of 160 rows x 64 columns (the largest
// divisor of 320 up to 256); both maps travel after the four tensors.
TEST(ShuffleSimtCandidates, TensorMapTileByHand) {
  const Problem nnu2 = Strided(2, 320, 256, {8, 8, 8}, 2, 2, 0, 1);
  Config c;
  c.family = "shuffle_simt";
  c.wm = 4, c.wn = 1, c.ck = 32, c.st = 2, c.mb = 2, c.ws = 1;
  EXPECT_EQ(c.Name(), "shuffle_simt_f32_w4x1_k32_s2_b2_tma");
  auto back = Config::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->Name(), c.Name());
  const LaunchPlan plan = Launches(nnu2, c);
  ASSERT_EQ(plan.steps.size(), 1u);
  const LaunchStep& main = plan.steps[0];
  EXPECT_EQ(main.args,
            (std::vector<Arg>{Arg::kX, Arg::kW, Arg::kBias, Arg::kY, Arg::kXMap, Arg::kWMap}));
  EXPECT_EQ(plan.x_alignment, 16u);
  const TiledMapShape& x = main.x_map;
  EXPECT_EQ(x.rank, 5);
  EXPECT_EQ(x.swizzle_bytes, 0);
  EXPECT_EQ(std::vector<uint64_t>(x.dims, x.dims + 3), (std::vector<uint64_t>{512, 2, 320}));
  EXPECT_EQ(x.strides_bytes[0], 320u * 512 * 4);
  EXPECT_EQ(x.strides_bytes[1], 512u * 4);
  EXPECT_EQ(std::vector<uint32_t>(x.box, x.box + 5), (std::vector<uint32_t>{128, 1, 32, 1, 1}));
  const TiledMapShape& w = main.w_map;
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(std::vector<uint64_t>(w.dims, w.dims + 2), (std::vector<uint64_t>{2048, 320}));
  EXPECT_EQ(w.strides_bytes[0], 2048u * 4);
  EXPECT_EQ(std::vector<uint32_t>(w.box, w.box + 5), (std::vector<uint32_t>{64, 160, 1, 1, 1}));
  // The same shared memory as the bulk-copy tile: B, two slots, the mbarriers.
  c.ws = 0;
  EXPECT_EQ(Geometry(nnu2, c).smem_bytes, 320u * 64 * 4 + 2 * 32 * 128 * 4 + 16 * 3);
  EXPECT_EQ(Launches(nnu2, c).steps[0].args.size(), 4u);
  auto src = BuildSource(nnu2, *back);
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_NE(src->find("#define SHUFFLE_MAPS 1"), std::string::npos);
  EXPECT_NE(src->find("kBRows = 160"), std::string::npos);
  EXPECT_NE(src->find("kNT = 1;"), std::string::npos);  // 512 positions: whole tiles per sample
}

// The GEMM's step of c's plan (the padded planes' copy may come before it, the overlap-add after).
LaunchStep MainStep(const Problem& p, const Config& c) {
  for (const LaunchStep& step : Launches(p, c).steps)
    if (step.symbol == c.Name()) return step;
  ADD_FAILURE() << c.Name() << ": no main step";
  return {};
}

// B's rows by stage (bst 1, tensor maps only), by hand for NNU-2's 128 x 64 tile: the weight
// map's box is one stage's 32 rows; B keeps its 320 rows (10 whole stages), so shared memory is
// unchanged. Where K is not whole stages (kernel 2 stride 2 over 2 x 100 channels, stages of 32:
// 4 stages, 128 rows) B's region takes the last stage whole. Every map tile of NNU-2 takes it.
TEST(ShuffleSimtCandidates, BRowsByStageByHand) {
  const Problem nnu2 = Strided(2, 320, 256, {8, 8, 8}, 2, 2, 0, 1);
  Config c;
  c.family = "shuffle_simt";
  c.wm = 4, c.wn = 1, c.ck = 32, c.st = 2, c.mb = 2, c.ws = 1, c.bst = 1;
  EXPECT_EQ(c.Name(), "shuffle_simt_f32_w4x1_k32_s2_b2_tma_bst");
  const LaunchStep main = MainStep(nnu2, c);
  EXPECT_EQ(main.w_map.box[1], 32u);
  EXPECT_EQ(main.smem_bytes, 320u * 64 * 4 + 2 * 32 * 128 * 4 + 16 * 3);
  auto src = BuildSource(nnu2, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_NE(src->find("constexpr bool kBStaged = true;"), std::string::npos);
  const Problem odd = Strided(2, 100, 64, {8, 8, 8}, 2, 2, 0, 1);
  EXPECT_EQ(MainStep(odd, c).smem_bytes, 128u * 64 * 4 + 2 * 32 * 128 * 4 + 16 * 3);
  c.bst = 0;
  EXPECT_EQ(MainStep(odd, c).smem_bytes, 100u * 64 * 4 + 2 * 32 * 128 * 4 + 16 * 3);
  c.bst = 1, c.ws = 0;  // bulk copies: no B by stage
  EXPECT_FALSE(BuildSource(nnu2, c).ok());
  int staged = 0;
  for (const Config& k : Candidates(nnu2)) {
    if (!IsShuffleSimt(k)) continue;
    if (k.bst == 2) continue;  // streamed
    EXPECT_EQ(k.bst, k.ws) << k.Name();
    staged += k.bst;
  }
  EXPECT_GE(staged, 6);
}

// B streamed with every stage (bst 2), by hand for MUN-1 (4 x 384 x 6^3 -> 64, k3 s2 p1 op1) in
// 128 x 64 tiles (4 warps) with K in 2 parts, 3 blocks per SM: B's region is 3 stages of 32 rows
// x 64 columns (24 KB), not the part's 192 rows; the weight map's box is a stage's 32 rows;
// 7 row tiles (32 positions of each of 4 samples) x 27 slices x 2 parts = 378 units. MUN-1's
// candidates include two streamed tiles.
TEST(ShuffleSimtCandidates, StreamedBByHand) {
  const Problem mun1 = MonaiUp(384, 64, 6);
  Config c;
  c.family = "shuffle_simt";
  c.wm = 4, c.wn = 1, c.ck = 32, c.st = 3, c.mb = 3, c.sk = 2, c.ws = 1, c.bst = 2;
  EXPECT_EQ(c.Name(), "shuffle_simt_f32_w4x1_k32_s3_b3_sk2_tma_bss");
  const LaunchStep main = MainStep(mun1, c);
  EXPECT_EQ(main.smem_bytes, 3u * 32 * 64 * 4 + 3 * 32 * 128 * 4 + 16 * 4);
  EXPECT_EQ(main.w_map.box[1], 32u);
  EXPECT_EQ(main.grid[0], 7u * 27 * 2);
  auto src = BuildSource(mun1, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_NE(src->find("constexpr bool kBStream = true;"), std::string::npos);
  EXPECT_NE(src->find("constexpr bool kBStaged = false;"), std::string::npos);
  c.ws = 0;  // bulk copies: no streamed B
  EXPECT_FALSE(BuildSource(mun1, c).ok());
  int streamed = 0;
  for (const Config& k : Candidates(mun1)) streamed += IsShuffleSimt(k) && k.bst == 2;
  EXPECT_EQ(streamed, 2);
}

// Row tiles over several samples, worked out by hand for MUN-1 (4 x 384 x 6^3 -> 64, k3 s2 p1
// op1) in 96 x 128 tiles (3 x 2 warps): 24 positions of each of the 4 samples per tile, so 9 row
// tiles cover the 864 positions (one sample per tile: 3 tiles of 96 per 216-position sample,
// 12); 1728 columns in 14 slices of 128: 126 units. The map's box: 24 positions x 4 samples x 32
// channels. Bulk copies (ws 0) keep one sample per tile.
TEST(ShuffleSimtCandidates, RowTilesOverSamplesByHand) {
  const Problem mun1 = MonaiUp(384, 64, 6);
  Config c;
  c.family = "shuffle_simt";
  c.wm = 3, c.wn = 2, c.ck = 32, c.st = 2, c.mb = 1, c.ws = 1;
  const LaunchStep main = MainStep(mun1, c);
  EXPECT_EQ(main.grid[0], 126u);
  EXPECT_EQ(std::vector<uint32_t>(main.x_map.box, main.x_map.box + 5),
            (std::vector<uint32_t>{24, 4, 32, 1, 1}));
  auto src = BuildSource(mun1, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_NE(src->find("kNT = 4;"), std::string::npos);
  EXPECT_NE(src->find("kMTS = 9LL"), std::string::npos);
  c.ws = 0;
  EXPECT_EQ(MainStep(mun1, c).grid[0], 4u * 3 * 14);
  // 128-position tiles (4 warps): 32 of each sample, 7 tiles (2 of 64: 8, no fewer than alone).
  c.wm = 4, c.ws = 1;
  EXPECT_EQ(MainStep(mun1, c).x_map.box[0], 32u);
  EXPECT_EQ(MainStep(mun1, c).grid[0], 7u * 14);
  c.wm = 3;
  // Six samples: 96 positions hold whole quads of 2 or 3 samples (48 or 32 each): 3 pairs of 5
  // tiles (15) or 2 triples of 7 (14) against 6 x 3 = 18 alone.
  Problem six = mun1;
  six.n = 6;
  c.ws = 1;
  auto six_src = BuildSource(six, c);
  ASSERT_TRUE(six_src.ok()) << six_src.status().message();
  EXPECT_NE(six_src->find("kNT = 3;"), std::string::npos);
}

// Every tile copies by tensor maps where they fit, in the folded and split forms too (a folded
// row box starts 4 positions early: 136 = 128 + 8); latent layers and padded planes copy in
// bulk, and a slice whose rows are not whole 16-byte units (3 output channels x 3 taps = 9
// columns) keeps its weights out of the map (rank 0: the consumers load B, the whole slice).
TEST(ShuffleSimtCandidates, TensorMapsWhereTheyFit) {
  auto forms = [](const Problem& p) {
    int plain = 0, tma = 0;
    for (const Config& c : Candidates(p)) {
      if (!IsShuffleSimt(c)) continue;
      ++(c.ws ? tma : plain);
      if (!c.ws) continue;
      const LaunchStep main = MainStep(p, c);
      EXPECT_EQ(main.args.back(), Arg::kWMap) << c.Name();
      EXPECT_LE(main.x_map.box[0], 256u) << c.Name();
      EXPECT_LE(main.w_map.box[1], 256u) << c.Name();
      if (main.w_map.rank > 0 && c.bst) {
        EXPECT_EQ(main.w_map.box[1], static_cast<uint32_t>(c.ck)) << c.Name();
      } else if (main.w_map.rank > 0) {
        EXPECT_EQ(p.c_in / p.groups / c.sk % main.w_map.box[1], 0) << c.Name();
      }
      auto src = BuildSource(p, c);
      EXPECT_TRUE(src.ok()) << c.Name() << ": " << src.status().message();
    }
    return std::pair<int, int>{plain, tma};
  };
  for (const Problem& p :
       {Strided(2, 320, 256, {8, 8, 8}, 2, 2, 0, 1), MonaiUp(384, 64, 6), Nnu5()}) {
    const auto [plain, tma] = forms(p);
    EXPECT_GE(tma, 6) << p.Signature();
    EXPECT_EQ(plain, 0) << p.Signature();
  }
  // Folded (MONAI's kernel 3 at W stride 2 over 12-wide rows): a row box of kBM + 8 positions;
  // slices of 3 or 4 warps along the columns are 288 or 384 W-tap columns wide, past a box's
  // 256, and keep their bulk copies.
  const auto [plain2, tma2] = forms(MonaiUp(128, 32, 12));
  EXPECT_GE(tma2, 1);
  int wide = 0;
  for (const Config& c : Candidates(MonaiUp(128, 32, 12))) wide += IsShuffleSimt(c) && c.wn >= 3;
  EXPECT_EQ(plain2, wide);
  bool folded = false;
  for (const Config& c : Candidates(MonaiUp(128, 32, 12))) {
    if (!IsShuffleSimt(c) || !c.ws) continue;
    auto src = BuildSource(MonaiUp(128, 32, 12), c);
    ASSERT_TRUE(src.ok());
    if (src->find("kFoldW = true") == std::string::npos) continue;
    folded = true;
    EXPECT_EQ(MainStep(MonaiUp(128, 32, 12), c).x_map.box[0], 32u * c.wm + 8) << c.Name();
  }
  EXPECT_TRUE(folded);
  for (const Problem& p : {Strided(32, 200, 512, {1, 1, 1}, 4, 1, 0, 1),
                           Strided(1, 512, 512, {9, 9, 7}, 2, 2, 0, 1)}) {
    const auto [plain, tma] = forms(p);
    EXPECT_GE(plain, 1) << p.Signature();
    EXPECT_EQ(tma, 0) << p.Signature();
  }
  const Problem odd_rows = test::MakeProblem(2, 64, 3, {4, 4, 8}, {3, 1, 1}).Stride({3, 1, 1});
  int rank0 = 0;
  for (const Config& c : Candidates(odd_rows)) {
    if (!IsShuffleSimt(c) || !c.ws) continue;
    rank0 += MainStep(odd_rows, c).w_map.rank == 0;
    EXPECT_EQ(c.bst, 0) << c.Name();  // B's rows by stage only where the map brings them
  }
  EXPECT_GE(rank0, 1);
}

// MONAI UNet's MUN-1 (4 x 384 x 6^3 -> 64 channels, kernel 3, stride 2, padding 1, output
// padding 1): taps overlap, so the GEMM (216 positions x 384 channels x 64 x 27 columns per
// sample) writes the column buffer and the overlap-add kernel sums it into the output. Worked
// out by hand for a split of K in 4 parts of 96 channels.
TEST(ShuffleSimtCandidates, OverlappingTapsGoThroughTheColumnBuffer) {
  const Problem mun1 = MonaiUp(384, 64, 6);
  Config c;
  c.family = "shuffle_simt";
  c.wm = 2, c.wn = 2, c.ck = 32, c.st = 3, c.mb = 2, c.sk = 4;
  EXPECT_EQ(c.Name(), "shuffle_simt_f32_w2x2_k32_s3_b2_sk4");
  const PlanView v = Geometry(mun1, c);
  // Units: 1728 columns in 14 slices of 128, 4 K parts, 4 samples x 4 row tiles of 64.
  EXPECT_EQ(v.grid[0], 14u * 4 * 4 * 4);
  EXPECT_EQ(v.block[0], 160u);
  // B: 96 channels x 128 columns; 3 slots of 32 channels x 64 positions; 2 mbarriers per slot
  // and 2 for B.
  EXPECT_EQ(v.smem_bytes, 96u * 128 * 4 + 3 * 32 * 64 * 4 + 16 * 4);
  // The column buffer: 4 parts x 4 samples x 1728 columns x 216 positions.
  EXPECT_EQ(v.workspace_bytes, 4ull * 4 * 1728 * 216 * 4);
  EXPECT_EQ(v.symbols.size(), 2u);
  EXPECT_TRUE(v.symbols.count(c.Name() + "_post"));
  const LaunchPlan plan = Launches(mun1, c);
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_EQ(plan.steps[1].symbol, c.Name() + "_post");
  // The overlap-add waits for the GEMM in the kernel (griddepcontrol.wait), so it is launched
  // overlapping the GEMM's end; the GEMM, first of the run, is launched plainly.
  EXPECT_FALSE(plan.steps[0].overlaps_previous);
  EXPECT_TRUE(plan.steps[1].overlaps_previous);
  auto src = BuildSource(mun1, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
  for (const char* def : {"constexpr bool kColumns = true;", "kSK = 4;", "kKS = 96;",
                          "constexpr bool kStaged = false;", "#define POST_KERNEL_NAME"})
    EXPECT_NE(src->find(def), std::string::npos) << def;
  // Offered: splits of at most 8 parts, each of at least 48 channels, stage-wise sums past 512
  // channels per part; never the untuned pick.
  int n = 0, split = 0;
  for (const Config& k : Candidates(mun1)) {
    if (!IsShuffleSimt(k)) continue;
    ++n;
    split += k.sk > 1;
    EXPECT_LE(Geometry(mun1, k).smem_bytes, std::min(227u, 228u / k.mb - 1) * 1024) << k.Name();
    auto s = BuildSource(mun1, k);
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_NE(
        s->find(std::string("constexpr bool kStaged = ") + (384 / k.sk > 512 ? "true" : "false")),
        std::string::npos)
        << k.Name();
  }
  EXPECT_GE(n, 1);
  EXPECT_GE(split, 1);  // the buffer is there anyway: K parts cost only its size
  EXPECT_NE(HeuristicPick(mun1).family, "shuffle_simt");
  // Refused: K parts of a latent input (its epilogue writes the output directly) and parts of
  // fewer than 48 channels (the buffer's round trip would outweigh the GEMM: 384 / 16 = 24).
  Config latent = c;
  latent.sk = 2;
  EXPECT_FALSE(BuildSource(Strided(32, 200, 512, {1, 1, 1}, 4, 1, 0, 1), latent).ok());
  Config thin = c;
  thin.sk = 16;
  EXPECT_FALSE(BuildSource(mun1, thin).ok());
  c.sk = 3;  // not a power of two
  EXPECT_FALSE(Config::FromJson(c.ToJson()).ok());
  // The pixel shuffles keep the direct form: no column buffer, one kernel.
  c.sk = 1;
  EXPECT_EQ(Geometry(Nnu5(), c).symbols.size(), 1u);
}

// MONAI UNet's MUN-3 (4 x 64 x 24^3 -> 16 channels, kernel 3, stride 2, padding 1, output
// padding 1): W stride 2 and 4 | W, so the W taps are summed in the register tiles (folded).
// Worked out by hand: a slice is 32 W-tap runs (co, td, th) of 3 columns, 144 runs in 5 slices;
// the buffer keeps per run and input row (d, h) the 48 outputs along W, 2/3 of the 27 taps'
// columns. Folded tiles sum plainly, so past 512 channels K goes in parts. Not folded: W stride
// 3, a W extent not a multiple of 4 (MUN-1's 6), padding 0 (an output W cell past the input's).
TEST(ShuffleSimtCandidates, FoldedWTapsCutTheColumnBuffer) {
  const Problem mun3 = MonaiUp(64, 16, 24);
  Config c;
  c.family = "shuffle_simt";
  c.wm = 4, c.wn = 1, c.ck = 32, c.st = 5, c.mb = 2;
  const PlanView v = Geometry(mun3, c);
  // Units: 5 slices x 4 samples x 13824 / 128 row tiles.
  EXPECT_EQ(v.grid[0], 5u * 4 * 108);
  // B: 64 channels x 96 columns; 5 slots of 32 channels x (128 + 8) positions; mbarriers.
  EXPECT_EQ(v.smem_bytes, 64u * 96 * 4 + 5 * 32 * 136 * 4 + 16 * 6);
  EXPECT_EQ(v.workspace_bytes, 4ull * 16 * 3 * 3 * 24 * 24 * 48 * 4);
  auto src = BuildSource(mun3, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_NE(src->find("constexpr bool kFoldW = true;"), std::string::npos);

  // GAN-style kernel 4, padding 1: taps read the W neighbours on both sides; folded, 2 of 4.
  const Problem k4 = Strided(2, 32, 8, {4, 4, 8}, 4, 2, 1, 1);
  EXPECT_EQ(Geometry(k4, c).workspace_bytes, 2ull * 8 * 4 * 4 * 4 * 4 * 16 * 4);
  auto k4src = BuildSource(k4, c);
  ASSERT_TRUE(k4src.ok()) << k4src.status().message();
  EXPECT_NE(k4src->find("constexpr bool kFoldW = true;"), std::string::npos);

  // Folded tiles sum plainly: 600 channels only in parts of at most 512.
  const Problem deep = MonaiUp(600, 16, 8);
  EXPECT_FALSE(BuildSource(deep, c).ok());
  Config halves = c;
  halves.sk = 2;
  auto deep_src = BuildSource(deep, halves);
  ASSERT_TRUE(deep_src.ok()) << deep_src.status().message();
  EXPECT_NE(deep_src->find("constexpr bool kFoldW = true;"), std::string::npos);
  int deep_kept = 0;
  for (const Config& k : Candidates(deep)) {
    if (!IsShuffleSimt(k)) continue;
    ++deep_kept;
    EXPECT_GE(k.sk, 2) << k.Name();
  }
  EXPECT_GE(deep_kept, 1);

  Problem stride3 = mun3, w6 = mun3, pad0 = mun3;
  stride3.stride = {2, 2, 3};
  w6.in = {24, 24, 6};
  pad0.padding = {1, 1, 0};
  pad0.output_padding = {1, 1, 0};
  for (const Problem& q : {stride3, w6, pad0}) {
    auto qs = BuildSource(q, c);
    ASSERT_TRUE(qs.ok()) << q.Signature() << ": " << qs.status().message();
    EXPECT_NE(qs->find("constexpr bool kFoldW = false;"), std::string::npos) << q.Signature();
    EXPECT_EQ(Geometry(q, c).workspace_bytes, 4ull * 16 * 27 * q.in[0] * q.in[1] * q.in[2] * 4)
        << q.Signature();
  }
}

// The untuned pick on the strict pixel shuffles with plain sums (NNU-5, NNU-A: kernel 1 x 2 x 2,
// NNU-2's 320 input channels, GAN-1's latent input), not on deeper ones (SWU-1: 768 input
// channels).
TEST(ShuffleSimtCandidates, UntunedPickWherePlainSums) {
  const Problem nnua = test::MakeProblem(2, 64, 32, {20, 160, 128}, {1, 2, 2}).Stride({1, 2, 2});
  EXPECT_EQ(HeuristicPick(Nnu5()).family, "shuffle_simt");
  EXPECT_EQ(HeuristicPick(nnua).family, "shuffle_simt");
  EXPECT_EQ(HeuristicPick(Strided(2, 320, 256, {8, 8, 8}, 2, 2, 0, 1)).family, "shuffle_simt");
  EXPECT_NE(HeuristicPick(Strided(2, 768, 384, {4, 4, 4}, 2, 2, 0, 1)).family, "shuffle_simt");
  // GAN-1, latent: 32 samples of 200 channels.
  EXPECT_EQ(HeuristicPick(Strided(32, 200, 512, {1, 1, 1}, 4, 1, 0, 1)).family, "shuffle_simt");
}

}  // namespace
}  // namespace convt3d::gen
