// test_family_gemm_wgmma.cpp: the gemm_wgmma family (generator/families/gemm_wgmma.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <tuple>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/families/phase_gemm.h"
#include "generator/family.h"
#include "generator/phases.h"
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
      // 3xTF32 in fp32x3 (at most 64 sums beside the promoted ones); 3xFP16 only by opt-in
      EXPECT_EQ(c.split, mode == 2 ? 3 : 1) << c.Name();
      EXPECT_LE(c.mt * c.bn / 2, mode == 2 ? 64 : 128) << c.Name();
    }
    if (mode == 2) {
      // Opted in (DeviceLimits::fp16_split): both splits, the 3xFP16 tiles first.
      DeviceLimits fp16;
      fp16.fp16_split = true;
      int splits[5] = {};
      for (const Config& c : Candidates(q, fp16))
        if (IsGemm(c)) {
          EXPECT_TRUE(c.split == 3 || c.split == 4) << c.Name();
          EXPECT_LE(c.mt * c.bn / 2, 64) << c.Name();
          ++splits[c.split];
        }
      EXPECT_GT(splits[3], 0);
      EXPECT_GT(splits[4], 0);
      const auto with = Candidates(q, fp16);
      const auto first = std::find_if(with.begin(), with.end(), IsGemm);
      EXPECT_EQ(first->split, 4) << first->Name();
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
  EXPECT_TRUE(v.symbols.count(PrepSymbol(p, c)) && v.symbols.count(PrepXSymbol(p, c)));
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

// 3xFP16 (split 4) on GAN-3: 64 input channels (128 bytes of fp16) per stage, both parts of each
// operand as 3xTF32 holds them at half the bytes, each operand's 256 scale partials (1 KB) after
// it, and two more kernels: the input's maxima in front of its re-layout, the weights' in front
// of their packing (weight-only, like it).
TEST(GemmWgmmaCandidates, HalfSplitPlanOfGan3ByHand) {
  Problem p = Gan3();
  p.precision = Precision::kFp32x3;
  Config c;
  c.family = "gemm_wgmma";
  c.wg = 2, c.mt = 1, c.bn = 128, c.ck = 64, c.st = 3, c.ws = 2, c.split = 4;
  EXPECT_EQ(c.Name(), "gemm_wgmma_3xf16_g2_m1_n128_k64_s3_tma");
  const PlanView v = Geometry(p, c);
  // Weights: 8 phases x 8 taps x 4 channel chunks of 128 x 128 bytes, two parts, then 1 KB.
  const size_t w_bytes = 2 * 8 * 8 * 4 * 128 * 128 + 1024;
  EXPECT_EQ(v.x_offset_bytes, w_bytes);
  // The input: 32 x 512 positions of 256 fp16 channels, two parts, then 1 KB.
  EXPECT_EQ(v.workspace_bytes, w_bytes + 2 * 32ull * 512 * 256 * 2 + 1024);
  const LaunchPlan plan = Launches(p, c);
  std::vector<std::string> steps;
  for (const LaunchStep& s : plan.steps)
    steps.push_back(s.symbol.substr(c.Name().size()) + (s.weight_only ? " (w)" : "") +
                    (s.overlaps_previous ? " (pdl)" : ""));
  // Every kernel after the first waits for its predecessor in the kernel: a programmatic
  // dependent launch.
  EXPECT_EQ(steps, (std::vector<std::string>{"_amax", "_prepx (pdl)", "_wamax (w) (pdl)",
                                             "_prep (w) (pdl)", " (pdl)"}));
  auto src = BuildSource(p, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
  // A call of the wait, not its definition (templates/elem.cuh, in every source).
  EXPECT_NE(src->find("WaitForPreviousKernel();"), std::string::npos);
  EXPECT_NE(src->find("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16"), std::string::npos);
  auto back = Config::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->Name(), c.Name());
  // Opted in, the untuned pick on dense strided layers in fp32x3 (and on the small layer that
  // the GPU weight-version test plans without tuning); else 3xTF32's.
  DeviceLimits fp16;
  fp16.fp16_split = true;
  EXPECT_EQ(HeuristicPick(p, fp16).split, 4) << HeuristicPick(p, fp16).Name();
  EXPECT_EQ(HeuristicPick(p).split, 3) << HeuristicPick(p).Name();
  Problem small = Strided(2, 128, 64, {4, 4, 4}, 4, 2, 1, 1);
  small.precision = Precision::kFp32x3;
  EXPECT_EQ(HeuristicPick(small, fp16).family, "gemm_wgmma");
  EXPECT_EQ(HeuristicPick(small, fp16).split, 4) << HeuristicPick(small, fp16).Name();
  // Not for 16-bit tensors, nor with stage rows that are not whole fp16 K steps (16 channels).
  Config bf = c;
  bf.dtype = DType::kBF16;
  EXPECT_FALSE(Config::FromJson(bf.ToJson()).ok());
  Config narrow = c;
  narrow.ck = 8;
  EXPECT_FALSE(Config::FromJson(narrow.ToJson()).ok());
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

// First (the untuned pick) on strided layers with at least 1024 products per output and 64
// output channels per group, in a tensor-map form, where it measured fastest (GAN-2/3/4, VID-1,
// MUN-1 on an H100); after the first four elsewhere, so the picks of the stride-1 and
// write-bound problems stay as they were.
TEST(GemmWgmmaCandidates, FirstOnDenseStridedProblems) {
  Problem gan = Gan3();
  gan.precision = Precision::kTf32;
  EXPECT_EQ(HeuristicPick(gan).family, "gemm_wgmma");
  EXPECT_EQ(HeuristicPick(gan).ws, 2);
  Problem gan4 = Strided(32, 128, 64, {16, 16, 16}, 4, 2, 1, 1);  // 1024 products, 64 channels
  test::SetMode(gan4, 3);                                         // bf16
  EXPECT_EQ(HeuristicPick(gan4).family, "gemm_wgmma");
  EXPECT_EQ(HeuristicPick(gan4).ws, 2);
  Problem k2 = Strided(2, 64, 32, {16, 16, 16}, 2, 2, 0, 1);  // 64 products per output
  k2.precision = Precision::kTf32;
  EXPECT_NE(Candidates(k2).front().family, "gemm_wgmma");
  Problem s1 = L1_61();
  s1.precision = Precision::kTf32;
  EXPECT_NE(HeuristicPick(s1).family, "gemm_wgmma");
}

// The tensor-map form of GAN-3 worked out by hand: tiles of 256 rows are boxes of 8 x 8 x 4 q
// positions of one sample (two per sample and phase, so 8 x 64 tiles as in the flat form), and
// the main kernel takes the map of the re-laid input [32 samples][8][8][8][256 channels], read
// in boxes of 32 channels (one 128-byte swizzled row) x the tile's box.
TEST(GemmWgmmaCandidates, TensorMapFormOfGan3ByHand) {
  Problem p = Gan3();
  p.precision = Precision::kTf32;
  Config c;
  c.family = "gemm_wgmma";
  c.wg = 2, c.mt = 2, c.bn = 128, c.ck = 32, c.st = 4, c.ws = 2;
  EXPECT_EQ(c.Name(), "gemm_wgmma_tf32_g2_m2_n128_k32_s4_tma");
  EXPECT_EQ(Geometry(p, c).grid[0], 8u * 64u);
  const LaunchStep main = Launches(p, c).steps.back();
  ASSERT_EQ(main.symbol, c.Name());
  ASSERT_FALSE(main.args.empty());
  EXPECT_EQ(main.args.back(), Arg::kXRelaidMap);
  const TiledMapShape& m = main.x_map;
  EXPECT_EQ(m.rank, 5);
  EXPECT_EQ(m.elem_bytes, 4);
  EXPECT_EQ(std::vector<uint64_t>(m.dims, m.dims + 5), (std::vector<uint64_t>{256, 8, 8, 8, 32}));
  EXPECT_EQ(std::vector<uint64_t>(m.strides_bytes, m.strides_bytes + 4),
            (std::vector<uint64_t>{1024, 8 * 1024, 64 * 1024, 512 * 1024}));
  EXPECT_EQ(std::vector<uint32_t>(m.box, m.box + 5), (std::vector<uint32_t>{32, 8, 8, 4, 1}));
  EXPECT_EQ(m.swizzle_bytes, 128);
  auto src = BuildSource(p, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
  EXPECT_NE(src->find("#define GEMM_X_MAP 1"), std::string::npos);
  EXPECT_NE(src->find("constexpr long long kBoxD = 4LL;"), std::string::npos);
  // Ping-pong: a tile is one warpgroup's 128 rows, a box of 8 x 8 x 2: twice the tiles.
  Config pp = c;
  pp.pp = 1;
  EXPECT_EQ(pp.Name(), "gemm_wgmma_tf32_g2_m2_n128_k32_s4_tma_pp");
  EXPECT_EQ(Geometry(p, pp).grid[0], 8u * 128u);
  EXPECT_EQ(Launches(p, pp).steps.back().x_map.box[3], 2u);
  // 3xTF32: the small parts' copy of the input follows the big parts' as 32 more samples.
  Problem x3 = p;
  x3.precision = Precision::kFp32x3;
  Config c3 = c;
  c3.split = 3, c3.st = 3;
  EXPECT_EQ(Launches(x3, c3).steps.back().x_map.dims[4], 64u);
  // bf16: 64 channels of 2 bytes per row.
  Problem h = p;
  test::SetMode(h, 3);
  Config ch = c;
  ch.dtype = h.dtype, ch.ck = 64;
  const TiledMapShape mh = Launches(h, ch).steps.back().x_map;
  EXPECT_EQ(mh.elem_bytes, 2);
  EXPECT_EQ(mh.box[0], 64u);
  EXPECT_EQ(mh.strides_bytes[0], 512u);
  // The cp.async forms take no map.
  Config ws = c;
  ws.ws = 1;
  EXPECT_NE(Launches(p, ws).steps.back().args.back(), Arg::kXRelaidMap);
}

// Ping-pong needs the tensor-map producer and two consumer warpgroups; such configs are refused
// by name (a cache row or JSON naming one), and every offered one has them.
TEST(GemmWgmmaCandidates, PingPongOnlyWithTensorMapsAndTwoWarpgroups) {
  Config c;
  c.family = "gemm_wgmma";
  c.dtype = DType::kF32;
  c.wg = 2, c.mt = 1, c.bn = 64, c.ck = 32, c.st = 4, c.ws = 2, c.pp = 1;
  EXPECT_TRUE(Config::FromJson(c.ToJson()).ok());
  for (auto [ws, wg] : {std::pair{1, 2}, std::pair{0, 2}, std::pair{2, 1}}) {
    Config bad = c;
    bad.ws = ws, bad.wg = wg;
    EXPECT_FALSE(Config::FromJson(bad.ToJson()).ok()) << bad.Name();
  }
  Problem p = Gan3();
  p.precision = Precision::kTf32;
  int pp = 0, tma = 0;
  for (const Config& k : Candidates(p)) {
    if (!IsGemm(k)) continue;
    tma += k.ws == 2 && !k.pp;
    if (k.pp) {
      ++pp;
      EXPECT_EQ(k.ws, 2) << k.Name();
      EXPECT_EQ(k.wg, 2) << k.Name();
    }
  }
  EXPECT_GT(pp, 0);
  EXPECT_GT(tma, 0);
}

// The channels-on-M forms (cm): tensor-map copies and channel tiles of 64k only; more than two
// position blocks per warpgroup only with cm. GAN-4 (64 output channels) gets them in every
// tensor mode, with a wgmma N of 128 or 256 positions.
TEST(GemmWgmmaCandidates, ChannelsOnMOnlyWithTensorMapsAnd64ChannelTiles) {
  Config c;
  c.family = "gemm_wgmma";
  c.dtype = DType::kBF16;
  c.wg = 2, c.mt = 4, c.bn = 64, c.ck = 64, c.st = 5, c.ws = 2, c.pp = 1, c.cm = 1;
  EXPECT_EQ(c.Name(), "gemm_wgmma_bf16_g2_m4_n64_k64_s5_tma_pp_cm");
  EXPECT_TRUE(Config::FromJson(c.ToJson()).ok());
  for (auto [ws, bn, cm] : {std::tuple{1, 64, 1}, std::tuple{2, 96, 1}, std::tuple{2, 64, 0}}) {
    Config bad = c;
    bad.ws = ws, bad.bn = bn, bad.cm = cm, bad.pp = ws == 2 ? 1 : 0;
    EXPECT_FALSE(Config::FromJson(bad.ToJson()).ok()) << bad.Name();
  }
  Problem gan4 = Strided(32, 128, 64, {16, 16, 16}, 4, 2, 1, 1);
  for (int mode : {1, 2, 3}) {  // tf32, fp32x3, bf16
    Problem q = gan4;
    test::SetMode(q, mode);
    int cm = 0;
    for (const Config& k : Candidates(q)) {
      if (!IsGemm(k) || !k.cm) continue;
      ++cm;
      EXPECT_EQ(k.ws, 2) << k.Name();
      EXPECT_EQ(k.bn, 64) << k.Name();
      EXPECT_TRUE(k.mt == 2 || k.mt == 4) << k.Name();
      // The preamble's wgmma is m64n(64 mt): the positions are its N.
      auto src = BuildSource(q, k);
      ASSERT_TRUE(src.ok()) << src.status().message();
      EXPECT_NE(src->find("m64n" + std::to_string(64 * k.mt) + "k"), std::string::npos) << k.Name();
    }
    EXPECT_GT(cm, 0) << "mode " << mode;
  }
}

// The halo form (hl: 2-4 halo slots) worked out by hand on GAN-3 in bf16: a tile is 8 x 8 q
// positions x one D plane per m64 tile, the halo box grows by one position per dimension (two
// taps of d' = 1 per phase), and the map reads the position-major re-laid input [32 samples][8]
// [8][8][256 channels] in boxes of 64 channels x the halo (9 x 9 x 3), swizzled by its 128-byte
// rows.
TEST(GemmWgmmaCandidates, HaloFormOfGan3ByHand) {
  Problem p = Gan3();
  test::SetMode(p, 3);  // bf16
  Config c;
  c.family = "gemm_wgmma";
  c.dtype = DType::kBF16;
  c.wg = 2, c.mt = 1, c.bn = 128, c.ck = 64, c.st = 5, c.ws = 2, c.hl = 3;
  EXPECT_EQ(c.Name(), "gemm_wgmma_bf16_g2_m1_n128_k64_s5_tma_hl3");
  EXPECT_TRUE(Config::FromJson(c.ToJson()).ok());
  // 8 phases x 4 boxes of 8 x 8 x 2 per sample x 32 samples.
  EXPECT_EQ(Geometry(p, c).grid[0], 8u * 4u * 32u);
  const TiledMapShape m = Launches(p, c).steps.back().x_map;
  EXPECT_EQ(m.rank, 5);
  EXPECT_EQ(m.elem_bytes, 2);
  EXPECT_EQ(std::vector<uint64_t>(m.dims, m.dims + 5), (std::vector<uint64_t>{256, 8, 8, 8, 32}));
  EXPECT_EQ(std::vector<uint64_t>(m.strides_bytes, m.strides_bytes + 4),
            (std::vector<uint64_t>{512, 8 * 512, 64 * 512, 512 * 512}));
  EXPECT_EQ(std::vector<uint32_t>(m.box, m.box + 5), (std::vector<uint32_t>{64, 9, 9, 3, 1}));
  EXPECT_EQ(m.swizzle_bytes, 128);
  auto src = BuildSource(p, c);
  ASSERT_TRUE(src.ok()) << src.status().message();
  for (const char* line : {"constexpr long long kHaloW = 9LL;", "constexpr long long kHaloD = 3LL;",
                           "constexpr long long kBoxD = 2LL;", "constexpr int kHaloSlots = 3;"})
    EXPECT_NE(src->find(line), std::string::npos) << line;
  // Not with 3xTF32, rows of other than 128 bytes, one slot or without a tensor map.
  for (int bad_case = 1; bad_case < 5; ++bad_case) {
    Config bad = c;
    if (bad_case == 1) bad.dtype = DType::kF32, bad.ck = 32, bad.split = 3;
    if (bad_case == 2) bad.ck = 32;
    if (bad_case == 3) bad.hl = 1;
    if (bad_case == 4) bad.ws = 1;
    EXPECT_FALSE(Config::FromJson(bad.ToJson()).ok()) << bad.Name();
  }
  // Offered in tf32 and 16-bit, never in fp32x3; two of each halo form (plain, ping-pong,
  // channels on M and both) and one of each two-plane form (channels on M, plain and ping-pong),
  // the ping-pong ones also in phase-inner order.
  for (int mode : {1, 2, 3, 4}) {
    Problem q = Gan3();
    test::SetMode(q, mode);
    int forms[2][3] = {{0, 0, 0}, {0, 0, 0}};
    for (const Config& k : Candidates(q)) {
      if (!IsGemm(k) || !k.hl || k.lattice || k.po) continue;
      ++forms[k.pp][k.cm];
      EXPECT_TRUE(k.hl >= 2 && k.hl <= 4 && k.ws == 2) << k.Name();
      EXPECT_EQ(k.ck * (IsHalf(k.dtype) ? 2 : 4), 128) << k.Name();
    }
    for (int pp : {0, 1})
      for (int cm : {0, 1, 2})
        EXPECT_EQ(forms[pp][cm], mode == 2 ? 0
                                 : cm == 2 ? 1
                                           : 2)
            << "mode " << mode << " pp " << pp << " cm " << cm;
  }
  // No halo candidate whose box cannot be copied: kernel 10 along H at dilation 30 reaches
  // 8 + 9 x 30 = 278 positions (past a tensor map's 256 a dimension, and 285 KB a slot).
  Problem wide = test::MakeProblem(2, 64, 64, {4, 300, 8}, {1, 10, 1}).Dilation({1, 30, 1});
  test::SetMode(wide, 3);
  bool gemm = false;
  for (const Config& k : Candidates(wide)) {
    gemm = gemm || (IsGemm(k) && !k.lattice);
    EXPECT_FALSE(IsGemm(k) && k.hl) << k.Name();
  }
  EXPECT_TRUE(gemm);
  // Channels on M (GAN-4: q grids of 16^3, 64 channels): a warpgroup's N of 128 positions is
  // one plane of 8 x 16, so a ping-pong tile's box is 8 x 16 x 1 and its halo 9 x 17 x 2.
  Problem gan4 = Strided(32, 128, 64, {16, 16, 16}, 4, 2, 1, 1);
  test::SetMode(gan4, 3);
  Config cm = c;
  cm.bn = 64, cm.mt = 2, cm.cm = 1, cm.pp = 1, cm.hl = 4;
  EXPECT_EQ(cm.Name(), "gemm_wgmma_bf16_g2_m2_n64_k64_s5_tma_pp_cm_hl4");
  EXPECT_EQ(Geometry(gan4, cm).grid[0], 8u * (2 * 1 * 16) * 32u);  // phases x boxes x samples
  const TiledMapShape cm_map = Launches(gan4, cm).steps.back().x_map;
  EXPECT_EQ(std::vector<uint32_t>(cm_map.box, cm_map.box + 5),
            (std::vector<uint32_t>{64, 9, 17, 2, 1}));
  // Two planes a warpgroup (cm 2): a warpgroup's 256 positions (mt 4) are 8 x 16 x 2, the box
  // and its halo 9 x 17 x 3; as many boxes along W and H, half as many along D; the preamble
  // defines the n256 wgmma and the n128 one each plane takes. Not without halo tiles or with an
  // odd mt.
  Config cm2 = cm;
  cm2.mt = 4, cm2.cm = 2, cm2.hl = 2;
  EXPECT_EQ(cm2.Name(), "gemm_wgmma_bf16_g2_m4_n64_k64_s5_tma_pp_cm2_hl2");
  EXPECT_TRUE(Config::FromJson(cm2.ToJson()).ok());
  EXPECT_EQ(Geometry(gan4, cm2).grid[0], 8u * (2 * 1 * 8) * 32u);
  const TiledMapShape cm2_map = Launches(gan4, cm2).steps.back().x_map;
  EXPECT_EQ(std::vector<uint32_t>(cm2_map.box, cm2_map.box + 5),
            (std::vector<uint32_t>{64, 9, 17, 3, 1}));
  auto cm2_src = BuildSource(gan4, cm2);
  ASSERT_TRUE(cm2_src.ok()) << cm2_src.status().message();
  for (const char* line : {"constexpr int kCM = 2;", "constexpr long long kBoxH = 16LL;",
                           "constexpr long long kBoxD = 2LL;", "m64n256k16", "m64n128k16"})
    EXPECT_NE(cm2_src->find(line), std::string::npos) << line;
  for (int bad_case = 0; bad_case < 2; ++bad_case) {
    Config bad = cm2;
    if (bad_case == 0) bad.hl = 0;
    if (bad_case == 1) bad.mt = 3;
    EXPECT_FALSE(Config::FromJson(bad.ToJson()).ok()) << bad.Name();
  }
}

// Every ping-pong candidate comes twice where several phases have taps: in phase order and in
// phase-inner order (po, "_pi"); a stride-1 layer (one phase) only in phase order, and so do the
// phase-channel (subpixel_) candidates, tiles of a stride-1 sub-problem.
TEST(GemmWgmmaCandidates, PhaseInnerTwinsOfPingPongForms) {
  Problem p = Gan3();
  test::SetMode(p, 3);
  std::vector<std::string> names;
  for (const Config& k : Candidates(p))
    if (IsGemm(k) && k.lattice == 0) names.push_back(k.Name());
  int pp = 0;
  for (const std::string& n : names) {
    if (n.find("_pp") == std::string::npos || n.find("_pi") != std::string::npos) continue;
    ++pp;
    EXPECT_NE(std::find(names.begin(), names.end(), n + "_pi"), names.end()) << n;
  }
  EXPECT_GT(pp, 0);
  Problem s1 = Strided(4, 64, 64, {8, 8, 8}, 3, 1, 1, 1);
  test::SetMode(s1, 3);
  for (const Config& k : Candidates(s1)) {
    if (IsGemm(k)) {
      EXPECT_EQ(k.po, 0) << k.Name();
    }
  }
}

// Box tiles take the shape with the fewest tiles: GAN-2 (q grids of 4^3, 32 samples) in 128-row
// tiles is 4 x 4 x 4 x 2 samples; with groups a box holds one sample.
TEST(PhaseGemm, BoxTilesOfFewestTiles) {
  Problem gan2 = Strided(32, 512, 256, {4, 4, 4}, 4, 2, 1, 1);
  PhaseGemm s = PhaseGemmOf(gan2, 128, 128, 64);
  UseBoxTiles(gan2, 128, s);
  EXPECT_EQ(std::vector<int64_t>(s.box, s.box + 4), (std::vector<int64_t>{4, 4, 4, 2}));
  EXPECT_EQ(s.mtiles, 16);
  EXPECT_EQ(s.total_tiles, 8 * 16 * 2);  // phases x row tiles x channel tiles (256 / 128)
  Problem grouped = gan2;
  grouped.groups = 2;
  PhaseGemm g = PhaseGemmOf(grouped, 128, 128, 64);
  UseBoxTiles(grouped, 128, g);
  EXPECT_EQ(g.box[3], 1);
  EXPECT_EQ(g.mtiles, 32);
}

// Halo box tiles: 8 x 8 q positions x `planes` of one sample; the halo adds (taps - 1) x d' per
// dimension. Here D: kernel 5, dilation 2 at stride 2 (gcd 2: phase 0 has all 5 taps, d' = 1,
// phase 1 none; output 19, so phase 0 has q 0..9); H: kernel 3 at stride 1 (3 taps, d' = 1, q
// 0..11); W: kernel 2 at stride 2 (one tap a phase, q 0..11). Partial boxes count whole.
TEST(PhaseGemm, HaloBoxTiles) {
  Problem p = Strided(2, 16, 16, {6, 10, 12}, 3, 1, 1, 1);
  p.kernel = {5, 3, 2};
  p.stride = {2, 1, 2};
  p.dilation = {2, 1, 1};
  p.padding = {0, 0, 0};
  PhaseGemm s = PhaseGemmOf(p, 128, 16, 64);
  UseHaloBoxTiles(p, 8, 2, s);
  EXPECT_EQ(std::vector<int64_t>(s.box, s.box + 4), (std::vector<int64_t>{8, 8, 2, 1}));
  EXPECT_EQ(std::vector<int64_t>(s.halo, s.halo + 3), (std::vector<int64_t>{8, 10, 6}));
  EXPECT_EQ(std::vector<int64_t>(s.qmax, s.qmax + 3), (std::vector<int64_t>{10, 12, 12}));
  // Per sample ceil(12 / 8) x ceil(12 / 8) x ceil(10 / 2) boxes; two samples.
  EXPECT_EQ(s.mtiles, 2 * 2 * 5 * 2);
  EXPECT_EQ(s.total_tiles, static_cast<int64_t>(s.work.size()) * s.mtiles);
}

// kTapSlot / kTapIndex invert the stage order the kernels use (StageTapOf in
// templates/phase_gemm.cuh: a phase's tap j is jw fastest, then jh, then jd, and its kernel tap
// is kk0 + j' * s' per dimension): every kernel tap is one (phase slot, index) pair and back.
TEST(PhaseGemm, TapTablesInvertTheStageOrder) {
  struct Case {
    int k, s, p, d;
  };
  for (const Case& cs : {Case{4, 2, 1, 1}, Case{3, 2, 1, 1}, Case{5, 3, 2, 2}, Case{3, 1, 2, 2},
                         Case{2, 4, 0, 1}, Case{7, 3, 3, 1}}) {
    Problem p = test::MakeProblem(2, 8, 8, {5, 6, 7}, {cs.k, cs.k, cs.k});
    p.kernel[0] = cs.k > 1 ? cs.k - 1 : cs.k;  // mixed kernels per dimension
    for (int i = 0; i < 3; ++i) p.stride[i] = cs.s, p.padding[i] = cs.p, p.dilation[i] = cs.d;
    ASSERT_TRUE(Validate(p).ok()) << cs.k << " " << cs.s;
    const PhaseGemm g = PhaseGemmOf(p, 64, 64, 32);
    const int64_t kd = p.kernel[0], kh = p.kernel[1], kw = p.kernel[2];
    ASSERT_EQ(g.tap_slot.size(), static_cast<size_t>(kd * kh * kw));
    DimPhases ph[3];
    for (int i = 0; i < 3; ++i)
      ph[i] = PhasesOf(p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], p.OutSize()[i]);
    size_t pairs = 0;
    for (size_t slot = 0; slot < g.work.size(); ++slot) {
      const PhaseWork& w = g.work[slot];
      const DimPhase &a = ph[0].phases[w.rd], &b = ph[1].phases[w.rh], &c = ph[2].phases[w.rw];
      for (int j = 0; j < w.taps; ++j, ++pairs) {
        const int jw = j % c.taps, jh = j / c.taps % b.taps, jd = j / (c.taps * b.taps);
        const int64_t tap = ((a.kk0 + jd * ph[0].s_red) * kh + b.kk0 + jh * ph[1].s_red) * kw +
                            c.kk0 + jw * ph[2].s_red;
        ASSERT_GE(tap, 0);
        ASSERT_LT(tap, kd * kh * kw);
        EXPECT_EQ(g.tap_slot[tap], static_cast<int>(slot)) << "tap " << tap;
        EXPECT_EQ(g.tap_index[tap], j) << "tap " << tap;
      }
    }
    EXPECT_EQ(pairs, g.tap_slot.size()) << "every kernel tap once";
  }
}

}  // namespace
}  // namespace convt3d::gen
