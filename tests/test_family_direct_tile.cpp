// test_family_direct_tile.cpp: the direct_tile family (generator/families/direct_tile.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/families/direct_tile.h"
#include "generator/family.h"
#include "generator/phases.h"
#include "tests/generator_test_util.h"

namespace convt3d::gen {
namespace {

// Valid random problems with small extents and channel counts (the direct_tile brute-force
// checks): up to `draws` draws, invalid ones skipped.
std::vector<Problem> SmallRandomProblems(unsigned seed, int draws, int max_stride) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  std::vector<Problem> out;
  for (int t = 0; t < draws; ++t) {
    Problem p;
    p.n = 1, p.c_in = pick(1, 4), p.c_out = pick(1, 8);
    for (int i = 0; i < 3; ++i) {
      p.in[i] = pick(1, 9);
      p.kernel[i] = pick(1, 6);
      p.stride[i] = pick(1, max_stride);
      p.dilation[i] = pick(1, 3);
      p.padding[i] = pick(0, static_cast<int>(p.dilation[i] * (p.kernel[i] - 1)));
      p.output_padding[i] = pick(0, static_cast<int>(std::max(p.stride[i], p.dilation[i])) - 1);
    }
    if (Validate(p).ok()) out.push_back(p);
  }
  return out;
}

Problem WB_64() {
  Problem p;
  p.n = 64, p.c_in = 4, p.c_out = 8;
  p.in = {32, 32, 32};
  p.kernel = {4, 4, 4}, p.stride = {2, 2, 2}, p.padding = {1, 1, 1};
  return p;
}

// Sizes worked out by hand from the template's layout for the write-bound shape with 8 x 8 x 4
// threads of 8 W outputs and 8 channels: 2 taps per phase in every dimension.
TEST(TileCandidates, ShapeOfWB64ByHand) {
  const Problem p = WB_64();
  ASSERT_TRUE(Validate(p).ok());
  Config c;
  c.family = "direct_tile";
  c.bx = 8, c.by = 8, c.bz = 4, c.vw = 8, c.cob = 8, c.ck = 4;
  EXPECT_EQ(c.Name(), "direct_tile_f32_x8y8z4_v8_c8_k4");
  const TileShape s = TileShapeOf(p, c);
  ASSERT_TRUE(s.fits);
  EXPECT_EQ(s.halo_d, 4 + 1);  // rows + (taps - 1) * d'
  EXPECT_EQ(s.halo_h, 8 + 1);
  // Output k of a run and tap kw meet iff k + 1 - kw is even; they read run start + (k+1-kw)/2:
  // from (0+1-3)/2 = -1 to (7+1-0)/2 = 4.
  EXPECT_EQ(s.off_lo, -1);
  EXPECT_EQ(s.off_hi, 4);
  EXPECT_EQ(s.win_n, 6);
  EXPECT_EQ(s.hw, 7 * 4 + 6);  // 8 threads' windows, 4 inputs apart
  EXPECT_EQ(s.hws, 36);
  EXPECT_EQ(s.smem_bytes, 4 * (4 * 5 * 9 * 36 + 4 * 2 * 2 * 4 * 8 + 4 * 5 * 9));  // + row offsets
  EXPECT_EQ(s.k_chunk, 4 * 8);
  EXPECT_EQ(s.tiles[0], 32 / 4);
  EXPECT_EQ(s.tiles[1], 32 / 8);
  EXPECT_EQ(s.tiles[2], 1);
  EXPECT_EQ(s.blocks, 8 * 2 * 4 * 2 * 1 * 1 * 1 * 64);
  auto back = Config::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->Name(), c.Name());
  // The all-phases block: D phase 0 (kd 0, 2) has q_lo 1 and c 0, phase 1 (kd 1, 3) q_lo 0 and
  // c 0; tap j of phase r reads q + (q_lo + c) - j from the tile's q, so the union of the
  // phases' rows runs from -1 (phase 1, j = 1) to rows - 1 + 1 (phase 0, j = 0): rows + 2. The
  // weights are every (kd, kh) row: 4 x 4.
  c.pa = 1;
  EXPECT_EQ(c.Name(), "direct_tile_f32_x8y8z4_v8_c8_k4_pa");
  const TileShape a = TileShapeOf(p, c);
  ASSERT_TRUE(a.fits);
  EXPECT_EQ(a.u0[0], -1);
  EXPECT_EQ(a.u0[1], -1);
  EXPECT_EQ(a.halo_d, 4 + 2);
  EXPECT_EQ(a.halo_h, 8 + 2);
  EXPECT_EQ(a.smem_bytes, 4 * (4 * 6 * 10 * 36 + 4 * 4 * 4 * 4 * 8 + 4 * 6 * 10));
  EXPECT_EQ(a.blocks, 8 * 4 * 1 * 1 * 1 * 64);  // no phase factor
  auto back_pa = Config::FromJson(c.ToJson());
  ASSERT_TRUE(back_pa.ok()) << back_pa.status().message();
  EXPECT_EQ(back_pa->Name(), c.Name());
  c.ck = 2;  // all-phases blocks stage the whole channel group at once
  EXPECT_FALSE(TileShapeOf(p, c).fits);
  c.ck = 4, c.pa = 0;
  c.vw = 5;  // not a multiple of the W stride
  EXPECT_FALSE(TileShapeOf(p, c).fits);
}

// The pipelined variant on L1-73 (k3 s2 p1, 32 channels: at most 2 x 2 x 2 taps per phase, 256
// products per output), worked out by hand: chunks of 8 channels in two buffers, the weights
// packed per (D, H) phase by a weight-only step into the workspace.
TEST(TileCandidates, PipelinedTwinOfL1_73ByHand) {
  const Problem p = L1_73();
  Config c;
  c.family = "direct_tile";
  c.bx = 16, c.by = 2, c.bz = 4, c.vw = 4, c.cob = 16, c.ck = 8, c.cp = 1;
  EXPECT_EQ(c.Name(), "direct_tile_f32_x16y2z4_v4_c16_k8_cp");
  const TileShape s = TileShapeOf(p, c);
  ASSERT_TRUE(s.fits);
  EXPECT_EQ(s.halo_d, 4 + 1);
  EXPECT_EQ(s.halo_h, 2 + 1);
  EXPECT_EQ(s.hws, 36);  // 15 threads' windows 2 inputs apart + a window of 3: 33, rounded to 4
  // Two buffers of 8 channels' halo (5 x 3 rows of 36) and weights (2 x 2 rows of 3 taps of 16
  // channels), then one row offset per halo row of a chunk.
  EXPECT_EQ(s.smem_bytes, 4 * (2 * (8 * 5 * 3 * 36 + 8 * 2 * 2 * 3 * 16) + 8 * 5 * 3));
  auto back = Config::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->Name(), c.Name());
  const LaunchPlan plan = Launches(p, c);
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_TRUE(plan.steps[0].weight_only);
  EXPECT_EQ(plan.steps[0].symbol, c.Name() + "_prep");
  // [rd][rh][g][cb][ci][a][b][kw][c]: 2 x 2 D, H phases, 32 x 32 channels, 2 x 2 rows of 3 taps.
  EXPECT_EQ(plan.workspace_bytes, 4u * 2 * 2 * 32 * 32 * 2 * 2 * 3);
  EXPECT_EQ(plan.steps[1].symbol, c.Name());
  // Not with all-phases blocks or the tensor-core variant, nor where a chunk is not whole.
  Config pa = c;
  pa.pa = 1;
  EXPECT_FALSE(FamilyOf(pa).CheckFields(pa).ok());
  EXPECT_FALSE(TileShapeOf(p, pa).fits);
  Config odd = c;
  odd.ck = 12;
  EXPECT_FALSE(TileShapeOf(p, odd).fits);
  // Nor (as no tile) where the channel blocks do not divide the group's 32 output channels: the
  // packed weights count whole blocks.
  Config partial = c;
  partial.cob = 12;
  EXPECT_FALSE(TileShapeOf(p, partial).fits);
}

// Offered for f32 storage, in chunks of at least 4 channels (of at most 256 products per output,
// and at most 32 accumulators where the whole sum is longer); twins of 8-channel chunks rank
// before the plain tiles.
TEST(TileCandidates, WherePipelinedTwinsApply) {
  auto twins = [](const Problem& p) {
    std::vector<Config> out;
    for (const Config& c : Candidates(p))
      if (c.family == "direct_tile" && c.cp) out.push_back(c);
    return out;
  };
  const auto all = Candidates(L1_73());
  const auto l73 = twins(L1_73());
  ASSERT_FALSE(l73.empty());
  EXPECT_EQ(all.front().Name(), l73.front().Name()) << "8-channel chunks rank first";
  EXPECT_EQ(HeuristicPick(L1_73()).Name(), l73.front().Name());
  for (const Config& c : l73) {
    EXPECT_EQ(c.ck, 8) << c.Name();
    EXPECT_EQ(c.pa, 0) << c.Name();
  }
  Problem bf16 = L1_73();
  bf16.dtype = DType::kBF16;
  EXPECT_TRUE(twins(bf16).empty()) << "16-bit storage is converted while staged";
  // 64 channels x 8 taps: two runs of 256 products, so 32 accumulators at most per thread.
  Problem deep = L1_73();
  deep.c_in = 64;
  const auto deep_twins = twins(deep);
  ASSERT_FALSE(deep_twins.empty());
  for (const Config& c : deep_twins) {
    EXPECT_LE(c.vw * c.cob, 32) << c.Name();
    EXPECT_LE(TileShapeOf(deep, c).k_chunk, 256) << c.Name();
  }
  Config wide = deep_twins.front();
  wide.cob = 16, wide.vw = 4;
  EXPECT_FALSE(TileShapeOf(deep, wide).fits) << "64 accumulators and their runs' sums";
  EXPECT_TRUE(twins(WB_64()).empty()) << "4 channels: no chunk of 4 leaves two";
  // A stride far past the kernel: the packed weights keep every phase's rows, empty ones too,
  // so they would be 64 x 64 times the weights (805 MB); no twins past 4 times.
  Problem sparse;
  sparse.n = 1, sparse.c_in = 128, sparse.c_out = 128;
  sparse.in = {4, 4, 16};
  sparse.kernel = {1, 1, 3}, sparse.stride = {64, 64, 1};
  ASSERT_TRUE(Validate(sparse).ok());
  EXPECT_TRUE(twins(sparse).empty());
  sparse.stride = {2, 1, 1};  // 2 x the weights
  EXPECT_FALSE(twins(sparse).empty());
  // L1-72: 8 channels per group, two chunks of 4, ranked after the plain tiles.
  const auto l72 = twins(L1_72());
  ASSERT_FALSE(l72.empty());
  for (const Config& c : l72) EXPECT_EQ(c.ck, 4) << c.Name();
  EXPECT_NE(Candidates(L1_72()).front().cp, 1);
}

// Brute force over random problems, D and H of all-phases blocks: for every phase with taps, row
// of a tile and tap, the halo row the template reads (tz + q_lo + c - u0 - j*d') lies inside
// the halo and holds the input the tap needs (q + c - j*d', q the phase's row).
TEST(TileCandidates, SharedHaloCoversEveryPhaseOnRandomProblems) {
  int checked = 0;
  for (const Problem& p : SmallRandomProblems(11, 300, 4)) {
    for (const Config& c : Candidates(p)) {
      if (c.family != "direct_tile" || !c.pa) continue;
      const TileShape s = TileShapeOf(p, c);
      ASSERT_TRUE(s.fits) << c.Name();
      for (int i = 0; i < 2; ++i) {
        const DimPhases dp =
            PhasesOf(p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], p.OutSize()[i]);
        const int rows = i == 0 ? c.bz : c.by, halo = i == 0 ? s.halo_d : s.halo_h;
        for (const auto& ph : dp.phases)
          for (int64_t tile = 0; tile < s.tiles[i]; ++tile)
            for (int r = 0; r < rows; ++r) {
              const int64_t q = ph.q_lo + tile * rows + r;  // may lie past q_count: still read
              for (int j = 0; j < ph.taps; ++j) {
                const int64_t row = r + ph.q_lo + ph.c - s.u0[i] - int64_t{j} * dp.d_red;
                EXPECT_GE(row, 0) << c.Name();
                EXPECT_LT(row, halo) << c.Name();
                EXPECT_EQ(tile * rows + s.u0[i] + row, q + ph.c - int64_t{j} * dp.d_red);
                ++checked;
              }
            }
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

// Brute force over random problems: every (output, tap) pair of a thread's run that lands on an
// input inside the tensor reads a halo column inside [0, hw), at the offset the template uses.
TEST(TileCandidates, HaloWindowCoversEveryTapOnRandomProblems) {
  int checked = 0;
  for (const Problem& p : SmallRandomProblems(7, 300, 5)) {
    for (const Config& c : Candidates(p)) {
      if (c.family != "direct_tile") continue;
      const TileShape s = TileShapeOf(p, c);
      ASSERT_TRUE(s.fits) << c.Name();
      const int64_t sw = p.stride[2], wout = p.OutSize()[2];
      for (int64_t wt = 0; wt < s.tiles[2]; ++wt)
        for (int tx = 0; tx < c.bx; ++tx)
          for (int k = 0; k < c.vw; ++k) {
            const int64_t ow = wt * c.bx * c.vw + tx * c.vw + k;
            if (ow >= wout) continue;
            for (int64_t kw = 0; kw < p.kernel[2]; ++kw) {
              const int64_t e = ow + p.padding[2] - kw * p.dilation[2];
              if (e % sw != 0) continue;  // this tap does not land on ow
              const int64_t iw = e / sw;  // exact; may be outside the input (zero in the halo)
              const int64_t col = iw - (wt * c.bx * (c.vw / sw) + s.off_lo);
              EXPECT_EQ(col,
                        tx * (c.vw / sw) + (k + p.padding[2] - kw * p.dilation[2]) / sw - s.off_lo)
                  << c.Name();
              EXPECT_GE(col, tx * (c.vw / sw)) << c.Name();
              EXPECT_LT(col, tx * (c.vw / sw) + s.win_n) << c.Name();
              EXPECT_LT(col, s.hw) << c.Name();
              ++checked;
            }
          }
    }
  }
  EXPECT_GT(checked, 10000);
}

// Boxes of any side (whole warps, 64-256 threads): on L1-68 (output 66 x 68 x 68) one that fits
// the output within 10% is offered, beside the power-of-two boxes (which computed 24-41%
// padding outputs on the dense level-1 shapes but still won on L1-68).
TEST(TileCandidates, BoxesThatFitTheOutput) {
  const Problem p = L1_68();
  const Dim3 out = p.OutSize();
  double best_overhang = 1e9;
  int pow2_boxes = 0;
  for (const Config& c : Candidates(p)) {
    if (c.family != "direct_tile") continue;
    const int threads = c.bx * c.by * c.bz;
    EXPECT_EQ(threads % 32, 0) << c.Name();
    EXPECT_GE(threads, 64) << c.Name();
    EXPECT_LE(threads, 256) << c.Name();
    // Stride 1: one phase, q == output position; the grid covers ceil(out / box) boxes.
    auto covered = [](int64_t n, int64_t b) { return (n + b - 1) / b * b; };
    const double overhang = static_cast<double>(covered(out[0], c.bz)) * covered(out[1], c.by) *
                                covered(out[2], c.bx * c.vw) /
                                (static_cast<double>(out[0]) * out[1] * out[2]) -
                            1;
    best_overhang = std::min(best_overhang, overhang);
    auto pow2 = [](int v) { return (v & (v - 1)) == 0; };
    pow2_boxes += pow2(c.bx) && pow2(c.by) && pow2(c.bz);
    const TileShape s = TileShapeOf(p, c);
    EXPECT_EQ(s.tiles[0] * s.tiles[1] * s.tiles[2] * s.co_blocks * p.n, s.blocks) << c.Name();
  }
  EXPECT_LT(best_overhang, 0.10);
  EXPECT_GE(pow2_boxes, 1);
}

// Offered for f32 and 16-bit storage in every precision (FFMA meets every contract): first in
// strict fp32 (dense shapes included) and in every mode up to 64 products per output (WB-64:
// 32); never for fp64, nor for dense shapes where tensor cores are allowed.
TEST(TileCandidates, WhereTheFamilyApplies) {
  const Problem wb = WB_64();
  const auto strict = Candidates(wb);
  ASSERT_FALSE(strict.empty());
  EXPECT_EQ(strict.front().family, "direct_tile") << "32 products per output";
  EXPECT_EQ(HeuristicPick(wb).family, "direct_tile");
  for (int mode = 0; mode < 3; ++mode) {
    Problem q = wb;
    if (mode == 0) q.precision = Precision::kTf32;
    if (mode == 1) q.dtype = DType::kBF16;
    if (mode == 2) q.dtype = DType::kF16;
    const auto all = Candidates(q);
    int tiles = 0;
    for (const Config& c : all) tiles += c.family == "direct_tile";
    EXPECT_GE(tiles, 1) << "mode " << mode;
    // Two per-phase and three all-phases tiles, and in tf32 three of their tensor-core variant.
    EXPECT_LE(tiles, mode == 0 ? 8 : 5) << "mode " << mode;
    EXPECT_EQ(all.front().family, "direct_tile") << "mode " << mode;
    EXPECT_EQ(all.front().pa, 1) << "mode " << mode << ": one halo for the four (D, H) phases";
  }
  // Tensor-core variant: first in tf32 and fp32x3 (f32 storage), never in strict fp32 or 16-bit.
  for (Precision pr : {Precision::kTf32, Precision::kFp32x3}) {
    Problem q = wb;
    q.precision = pr;
    const Config first = Candidates(q).front();
    EXPECT_EQ(first.mma, 1) << first.Name();
    EXPECT_EQ(first.split, pr == Precision::kFp32x3 ? 3 : 1) << first.Name();
    EXPECT_EQ(HeuristicPick(q).Name(), first.Name());
    auto back = Config::FromJson(first.ToJson());
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->Name(), first.Name());
  }
  for (const Config& c : strict) EXPECT_EQ(c.mma, 0) << c.Name();
  Problem wb16 = wb;
  wb16.dtype = DType::kBF16;
  for (const Config& c : Candidates(wb16)) EXPECT_EQ(c.mma, 0) << c.Name();
  // L1-72 (kernel 3x5x7, stride 2: phases with different tap counts) gets none.
  Problem l72 = L1_72();
  l72.precision = Precision::kTf32;
  for (const Config& c : Candidates(l72)) EXPECT_EQ(c.mma, 0) << c.Name();
  Problem f64 = wb;
  f64.dtype = DType::kF64;
  for (const Config& c : Candidates(f64)) EXPECT_NE(c.family, "direct_tile") << c.Name();
  // L1-68 (2400 products per output): in strict fp32 the tiles come right after the fft
  // candidates, ahead of every other family; none in tf32.
  const auto l68 = Candidates(L1_68());
  const auto first_other =
      std::find_if(l68.begin(), l68.end(), [](const Config& c) { return c.family != "fft"; });
  ASSERT_NE(first_other, l68.end());
  EXPECT_EQ(first_other->family, "direct_tile");
  Problem dense_tf32 = L1_68();
  dense_tf32.precision = Precision::kTf32;
  for (const Config& c : Candidates(dense_tf32)) EXPECT_NE(c.family, "direct_tile") << c.Name();
  // L1-72 (192 products per output): first in strict fp32, after the tensor-core tiles in tf32.
  EXPECT_EQ(Candidates(L1_72()).front().family, "direct_tile");
  Problem tf32 = L1_72();
  tf32.precision = Precision::kTf32;
  EXPECT_EQ(Candidates(tf32).front().family, "igemm_mma");
}

}  // namespace
}  // namespace convt3d::gen
