// test_family_igemm_mma.cpp: the igemm_mma family (generator/families/igemm_mma.cpp,
// igemm_shape.cpp).
#include <gtest/gtest.h>

#include <set>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/families/igemm_shape.h"
#include "generator/family.h"
#include "generator/source.h"
#include "tests/generator_test_util.h"

namespace convt3d::gen {
namespace {

TEST(MmaCandidates, OnlyForTensorCorePrecisionsAndNamedByIt) {
  Problem p = L1_72();
  for (const auto& c : Candidates(p)) EXPECT_NE(c.family, "igemm_mma") << c.Name();
  for (Precision pr : {Precision::kTf32, Precision::kFp32x3}) {
    p.precision = pr;
    const auto all = Candidates(p);
    ASSERT_FALSE(all.empty());
    const Config& first = all.front();
    EXPECT_EQ(first.family, "igemm_mma") << "heuristic should pick tensor cores";
    const std::string prefix = pr == Precision::kTf32 ? "igemm_mma_tf32_" : "igemm_mma_3xtf32_";
    std::set<std::string> names;
    for (const auto& c : all) {
      EXPECT_TRUE(names.insert(c.Name()).second) << "duplicate " << c.Name();
      auto back = Config::FromJson(c.ToJson());
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_EQ(back->Name(), c.Name());
      if (c.family != "igemm_mma") continue;
      EXPECT_EQ(c.Name().rfind(prefix, 0), 0u) << c.Name();
      const IgemmShape sh = IgemmShapeOf(p, c);
      // The template's static_asserts, and the conflict-free strides (8 or 24 mod 32 words).
      EXPECT_EQ(c.bqd * c.bqh * c.bqw, c.wm * c.mt * 16) << c.Name();
      EXPECT_EQ(c.bqw % 16, 0) << c.Name();
      EXPECT_EQ(c.ck % 8, 0) << c.Name();
      EXPECT_TRUE(sh.plane % 32 == 8 || sh.plane % 32 == 24) << c.Name() << " " << sh.plane;
      EXPECT_TRUE(sh.wci % 32 == 8 || sh.wci % 32 == 24) << c.Name() << " " << sh.wci;
      EXPECT_GE(sh.co_tiles * sh.bn, p.c_out / p.groups);
      EXPECT_EQ(Geometry(p, c).smem_bytes, static_cast<unsigned>(sh.smem_bytes));
    }
  }
}

// 16-bit problems get the mma family at any input width, with the input re-laid as channel
// pairs after the re-laid weights in the workspace; the sizes are worked out from the layout.
TEST(MmaCandidates, SixteenBitWorkspaceLayout) {
  Problem p;
  p.n = 2;
  p.c_in = 6;
  p.c_out = 10;
  p.groups = 2;
  p.in = {3, 4, 7};  // odd width: 4-byte halo copies
  p.kernel = {3, 3, 3};
  p.stride = {2, 1, 1};
  p.dtype = DType::kBF16;
  const auto all = Candidates(p);
  int mma = 0;
  for (const auto& c : all) {
    if (c.family != "igemm_mma") continue;
    ++mma;
    EXPECT_EQ(c.Name().rfind("igemm_mma_bf16_", 0), 0u) << c.Name();
    EXPECT_EQ(PrepXSymbol(p, c), c.Name() + "_prepx");
    const IgemmShape sh = IgemmShapeOf(p, c);
    EXPECT_EQ(sh.vec, 1) << "width 7 is not a multiple of 4";
    EXPECT_EQ(sh.kp, c.ck / 2);
    EXPECT_EQ(sh.weight_words % 4, 0);
    // 2 batches x 2 groups x ceil(3 channels / 2) pairs x 3*4*7 positions.
    EXPECT_EQ(sh.x_words, 2 * 2 * 2 * 3 * 4 * 7);
    const auto g = Geometry(p, c);
    EXPECT_EQ(g.x_offset_bytes, static_cast<size_t>(sh.weight_words) * 4);
    EXPECT_EQ(g.workspace_bytes, static_cast<size_t>(sh.weight_words + sh.x_words) * 4);
    // Phase offsets grow; the empty phases (none here along D: k3 s2 d1 has 2 and 1 taps) add 0.
    ASSERT_EQ(sh.woff.size(), 2u);
    EXPECT_LT(sh.woff[0], sh.woff[1]);
    auto src = BuildSource(p, c);
    ASSERT_TRUE(src.ok());
    EXPECT_NE(src->find("#define PREPX_KERNEL_NAME " + c.Name() + "_prepx"), std::string::npos);
  }
  EXPECT_GE(mma, 4);
  p.dtype = DType::kF32;
  p.precision = Precision::kTf32;
  for (const auto& c : Candidates(p))
    if (c.family == "igemm_mma") {
      EXPECT_EQ(PrepXSymbol(p, c), "") << "f32 inputs are read in place";
      EXPECT_EQ(Geometry(p, c).x_bytes, 0u);
    }
}

// The shared halo's extents, worked out by hand from phases.h (i = q + c - j*d' for phase r's
// taps): all-phases tiles whose channel group is one chunk load the union of the phases' windows.
TEST(MmaCandidates, SharedHaloIsTheUnionOfThePhasesWindows) {
  Problem p;
  p.n = 2;
  p.c_in = 4;
  p.c_out = 8;
  p.in = {8, 8, 16};
  p.kernel = {4, 4, 4};  // stride 2, padding 1: WB-64's phases
  p.stride = {2, 2, 2};
  p.padding = {1, 1, 1};
  p.precision = Precision::kTf32;
  Config c;
  c.family = "igemm_mma";
  c.bqd = 1, c.bqh = 2, c.bqw = 16, c.wm = 2, c.wn = 1, c.mt = 1, c.nt8 = 1, c.ck = 8, c.pa = 1;
  // r = 0: kk0 = 0, 2 taps, c = 0, q_lo = 1, so inputs [t*bq + 0, t*bq + bq]; r = 1: kk0 = 1,
  // 2 taps, c = 0, q_lo = 0, so inputs [t*bq - 1, t*bq + bq - 1]. Union: bq + 2 from -1.
  IgemmShape sh = IgemmShapeOf(p, c);
  ASSERT_TRUE(sh.share);
  EXPECT_EQ(sh.halo_d, 1 + 2);
  EXPECT_EQ(sh.halo_h, 2 + 2);
  EXPECT_EQ(sh.u0[0], -1);
  EXPECT_EQ(sh.u0[1], -1);
  // W: the row starts lpad = 4 before the lowest q_lo + c (0) and spans bq + (1 - 0) + lpad,
  // plus up to 3 positions of 16-byte alignment: 16 + 1 + 4 + 3 = 24.
  EXPECT_EQ(sh.u0[2], 0);
  EXPECT_EQ(sh.hws, 24);
  // One halo buffer (8 rows) and two weight tiles; staging adds bn x (bqd*bqh*2*bqw + 1) floats.
  EXPECT_EQ(sh.smem_bytes, 4 * 8 * sh.plane + 2 * 4 * sh.wtile);
  c.pa = 2;
  EXPECT_EQ(IgemmShapeOf(p, c).smem_bytes, sh.smem_bytes + 4 * 8 * (1 * 2 * 2 * 16 + 1));
  // Per-phase halos (one phase per block, or several chunks): each phase's own window, two buffers.
  c.pa = 0;
  sh = IgemmShapeOf(p, c);
  EXPECT_FALSE(sh.share);
  EXPECT_EQ(sh.halo_d, 1 + 1);
  EXPECT_EQ(sh.halo_h, 2 + 1);
  EXPECT_EQ(sh.smem_bytes, 2 * 4 * 8 * sh.plane + 2 * 4 * sh.wtile);
  p.c_in = 16;  // two chunks of 8
  c.pa = 1;
  EXPECT_FALSE(IgemmShapeOf(p, c).share);
}

// igemm_mma's wide tiles: on L1-73 in tf32, every staged shared-halo tile of at most 74 KB is
// offered again with twice the warps (one of wm, wn doubled, mt or nt8 halved), the same block
// tile and shared memory, and no candidate twice.
TEST(Generator, WideStagedMmaTilesKeepTheirTileAndSharedMemory) {
  Problem p = L1_73();
  p.precision = Precision::kTf32;
  const auto all = Candidates(p);
  std::set<std::string> names;
  for (const Config& c : all) EXPECT_TRUE(names.insert(c.Name()).second) << c.Name();
  // The list's own tiles: those without a parent (a tile with half the warps and the same block).
  auto has_parent = [&](const Config& c) {
    for (const Config& o : all)
      if (o.family == c.family && o.pa == 2 && o.bqh == c.bqh && o.bqw == c.bqw && o.ck == c.ck &&
          2 * o.wm * o.wn == c.wm * c.wn && o.wm * o.mt == c.wm * c.mt &&
          o.wn * o.nt8 == c.wn * c.nt8)
        return true;
    return false;
  };
  int wide = 0;
  for (const Config& c : all) {
    if (c.family != "igemm_mma" || c.pa != 2 || has_parent(c)) continue;
    const IgemmShape s = IgemmShapeOf(p, c);
    if (s.smem_bytes > 74 * 1024 || !s.share) continue;
    for (int along_n = 0; along_n < 2; ++along_n) {
      Config w = c;
      if (along_n ? w.nt8 % 2 != 0 : w.mt % 2 != 0) continue;
      (along_n ? w.wn : w.wm) *= 2;
      (along_n ? w.nt8 : w.mt) /= 2;
      if (w.wm * w.wn > 8) continue;
      EXPECT_TRUE(names.count(w.Name())) << w.Name() << " (from " << c.Name() << ")";
      const IgemmShape ws = IgemmShapeOf(p, w);
      EXPECT_EQ(ws.smem_bytes, s.smem_bytes) << w.Name();
      EXPECT_EQ(ws.threads, 2 * s.threads) << w.Name();
      EXPECT_EQ(w.wm * w.mt * 16, c.wm * c.mt * 16) << w.Name();  // the block's M
      EXPECT_EQ(w.wn * w.nt8, c.wn * c.nt8) << w.Name();          // and N
      ++wide;
    }
  }
  EXPECT_GE(wide, 6);
}

// The never-tune pick on strided mma problems is a staged all-phases tile of four warps in every
// tensor-core mode, with a shared halo where one fits (tf32, bf16) and without one otherwise
// (3xTF32 on L1-73, whose shared staged tiles exceed the shared memory: an unstaged pick was
// 1.51x off the tuned winner, session 13).
TEST(Generator, StridedMmaHeuristicPicksAStagedFourWarpTile) {
  for (int m = 0; m < 3; ++m) {
    Problem p = L1_73();
    if (m == 0) p.precision = Precision::kTf32;
    if (m == 1) p.precision = Precision::kFp32x3;
    if (m == 2) p.dtype = DType::kBF16;
    bool shared_staged = false;
    for (const Config& c : Candidates(p))
      if (c.family == "igemm_mma" && c.pa == 2 && c.wm * c.wn == 4)
        shared_staged = shared_staged || IgemmShapeOf(p, c).share;
    const Config pick = HeuristicPick(p);
    ASSERT_EQ(pick.family, "igemm_mma") << p.Signature();
    EXPECT_EQ(pick.pa, 2) << pick.Name();
    EXPECT_EQ(pick.wm * pick.wn, 4) << pick.Name();
    EXPECT_EQ(IgemmShapeOf(p, pick).share, shared_staged) << pick.Name();
    if (m == 1) {
      EXPECT_FALSE(shared_staged);  // the case the rule's fallback is for
    }
  }
}

}  // namespace
}  // namespace convt3d::gen
