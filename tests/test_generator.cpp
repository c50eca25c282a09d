// test_generator.cpp: phase decomposition, candidate enumeration, names and sources (no GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <complex>
#include <random>
#include <set>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/families/direct_tile.h"
#include "generator/families/fft.h"
#include "generator/families/igemm_shape.h"
#include "generator/families/winograd.h"
#include "generator/family.h"
#include "generator/lattice.h"
#include "generator/phases.h"
#include "generator/source.h"
#include "src/problem_io.h"
#include "src/reference.h"

namespace convt3d::gen {
namespace {

// The plan of candidate c as the tests read it: the main kernel's launch, the workspace, the
// input re-layout's offset and size, the lattice fill's grid, the fft chunks and the symbols.
struct PlanView {
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  unsigned smem_bytes = 0;
  size_t workspace_bytes = 0, x_offset_bytes = 0, x_bytes = 0;
  unsigned fill_grid[3] = {0, 0, 0};
  int chunks = 0;
  std::set<std::string> symbols;
};
PlanView Geometry(const Problem& p, const Config& c) {
  const LaunchPlan plan = Launches(p, c);
  PlanView v;
  v.workspace_bytes = plan.workspace_bytes;
  v.x_offset_bytes = plan.x_offset_bytes;
  bool main_seen = false;
  for (const LaunchStep& s : plan.steps) {
    v.symbols.insert(s.symbol);
    if (s.symbol == c.Name() && !main_seen) {
      main_seen = true;
      std::copy(s.grid, s.grid + 3, v.grid);
      std::copy(s.block, s.block + 3, v.block);
      v.smem_bytes = s.smem_bytes;
    }
    if (s.symbol == c.Name() + "_fill") std::copy(s.grid, s.grid + 3, v.fill_grid);
    if (s.symbol == c.Name() + "_post") ++v.chunks;
  }
  if (v.symbols.count(c.Name() + "_prepx") && !v.symbols.count(c.Name() + "_post"))
    v.x_bytes = v.workspace_bytes - v.x_offset_bytes;
  return v;
}
std::string PrepSymbol(const Config& c) {
  return FamilyOf(c).Kernels(c.Plain()).prep ? c.Name() + "_prep" : "";
}
std::string PrepXSymbol(const Config& c) {
  return FamilyOf(c).Kernels(c.Plain()).prepx ? c.Name() + "_prepx" : "";
}
std::string FillSymbol(const Config& c) { return c.lattice == 1 ? c.Name() + "_fill" : ""; }
bool LatticeFamily(const Config& c, int kind) {
  return kind == 1 ? FamilyOf(c).SubLatticeQuota(c, nullptr) > 0 : FamilyOf(c).RunsPhaseChannels();
}

// Brute force: the (input index, tap) pairs that land on output o in one dimension.
std::set<std::pair<int64_t, int64_t>> Pairs(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d,
                                            int64_t o) {
  std::set<std::pair<int64_t, int64_t>> r;
  for (int64_t i = 0; i < in; ++i)
    for (int64_t kk = 0; kk < k; ++kk)
      if (i * s + kk * d == o + p) r.insert({i, kk});
  return r;
}

TEST(Phases, MatchBruteForceOnManyConfigurations) {
  std::mt19937 rng(7);
  int checked = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t in = 1 + rng() % 9, k = 1 + rng() % 7, s = 1 + rng() % 5, d = 1 + rng() % 4;
    const int64_t p = rng() % (d * (k - 1) + 2);
    const int64_t op = rng() % std::max(s, d);
    const int64_t out = (in - 1) * s - 2 * p + d * (k - 1) + op + 1;
    if (out <= 0) continue;
    const DimPhases dp = PhasesOf(in, k, s, p, d, out);
    ASSERT_EQ(dp.phases.size(), static_cast<size_t>(s));
    int64_t covered = 0;
    for (const DimPhase& ph : dp.phases) {
      covered += ph.q_count;
      for (int64_t q = ph.q_lo; q < ph.q_lo + ph.q_count; ++q) {
        const int64_t o = ph.r - p + s * q;
        ASSERT_GE(o, 0);
        ASSERT_LT(o, out);
        std::set<std::pair<int64_t, int64_t>> got;
        for (int j = 0; j < ph.taps; ++j) {
          const int64_t i = q + ph.c - j * dp.d_red, kk = ph.kk0 + j * dp.s_red;
          ASSERT_LT(kk, k);
          if (i >= 0 && i < in) got.insert({i, kk});
        }
        ASSERT_EQ(got, Pairs(in, k, s, p, d, o))
            << "in=" << in << " k=" << k << " s=" << s << " p=" << p << " d=" << d << " o=" << o;
      }
    }
    ASSERT_EQ(covered, out) << "every output belongs to exactly one phase";
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

TEST(Phases, DilatedStridedL1_77HasOneActivePhase) {
  // k3 s2 p1 d2: only odd outputs (phase r = 1 + p mod 2 = 0) have taps; they have all three.
  const DimPhases dp = PhasesOf(16, 3, 2, 1, 2, 33);
  ASSERT_EQ(dp.phases.size(), 2u);
  EXPECT_EQ(dp.phases[0].taps, 3);
  EXPECT_EQ(dp.phases[1].taps, 0);
}

Problem L1_72() {
  Problem p;
  p.n = 8;
  p.c_in = 32;
  p.c_out = 32;
  p.in = {12, 24, 48};
  p.kernel = {3, 5, 7};
  p.stride = {2, 2, 2};
  p.padding = {1, 2, 3};
  p.output_padding = {1, 1, 1};
  p.groups = 4;
  return p;
}

TEST(Candidates, NamesUniqueStableAndParametersValid) {
  const Problem p = L1_72();
  const auto a = Candidates(p), b = Candidates(p);
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  std::set<std::string> names;
  int direct = 0, igemm = 0, tile = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const Config& c = a[i];
    EXPECT_EQ(c.Name(), b[i].Name()) << "order must be deterministic";
    EXPECT_TRUE(names.insert(c.Name()).second) << "duplicate " << c.Name();
    const auto g = Geometry(p, c);
    EXPECT_LE(g.block[0] * g.block[1] * g.block[2], 1024u) << c.Name();
    if (c.family == "direct_phase") {
      ++direct;
      EXPECT_EQ((p.c_out / p.groups) % c.cob, 0) << c.Name();
      EXPECT_EQ(c.Name().rfind("direct_phase_f32_", 0), 0u) << c.Name();
    } else if (c.family == "direct_tile") {
      ++tile;
      const TileShape sh = TileShapeOf(p, c);
      EXPECT_TRUE(sh.fits) << c.Name();
      EXPECT_EQ(c.vw % p.stride[2], 0) << c.Name() << ": a thread covers every W phase";
      EXPECT_EQ((p.c_out / p.groups) % c.cob, 0) << c.Name();
      EXPECT_EQ(sh.hws % 4, 0) << c.Name() << ": halo rows are read as float4";
      EXPECT_LE(sh.k_chunk, 256) << c.Name();
      EXPECT_LE(sh.smem_bytes, 113 * 1024) << c.Name();
      EXPECT_EQ(c.Name().rfind("direct_tile_f32_", 0), 0u) << c.Name();
    } else {
      ++igemm;
      const IgemmShape sh = IgemmShapeOf(p, c);
      EXPECT_EQ((p.c_out / p.groups) % (c.tn * c.nt), 0) << c.Name();
      EXPECT_EQ(c.bqw % c.tm, 0) << c.Name();
      EXPECT_EQ(c.tm % 4, 0) << c.Name() << ": register windows are read as float4";
      EXPECT_EQ(sh.lpad % 4, 0);
      EXPECT_GE(sh.lpad, (sh.jmax[2] - 1) * sh.dred[2]);
      EXPECT_LE(sh.smem_bytes, 48 * 1024) << c.Name();
      EXPECT_EQ(c.Name().rfind("igemm_simt_f32_", 0), 0u) << c.Name();
    }
  }
  EXPECT_GT(direct, 0) << "the direct family is the fallback and must always be offered";
  EXPECT_GT(igemm, 0);
  EXPECT_GT(tile, 0);
  EXPECT_EQ(a[0].Name(), HeuristicPick(p).Name());
}

TEST(Candidates, PrunedByDeviceLimits) {
  DeviceLimits small;
  small.max_threads_per_block = 128;
  for (const auto& c : Candidates(L1_72(), small)) {
    const auto g = Geometry(L1_72(), c);
    EXPECT_LE(g.block[0] * g.block[1], 128u) << c.Name();
  }
  // ...while the unrestricted list does use bigger blocks, so the limit really pruned.
  bool bigger = false;
  for (const auto& c : Candidates(L1_72())) {
    const auto g = Geometry(L1_72(), c);
    bigger |= g.block[0] * g.block[1] > 128u;
  }
  EXPECT_TRUE(bigger);
}

TEST(Candidates, JsonRoundTripAndErrors) {
  for (const auto& c : Candidates(L1_72())) {
    auto back = Config::FromJson(c.ToJson());
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->Name(), c.Name());
  }
  EXPECT_EQ(Config::FromJson("{\"family\":\"wgmma\"}").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Config::FromJson("not json").status().code(), Code::kInvalidArgument);
}

TEST(Candidates, Fp64ProblemsGetFp64Kernels) {
  Problem p = L1_72();
  p.dtype = DType::kF64;
  // Only the direct family has an fp64 variant (it is also the GPU reference).
  for (const auto& c : Candidates(p)) EXPECT_EQ(c.Name().rfind("direct_phase_f64_", 0), 0u);
}

TEST(Source, PreambleHasTheProblemConstantsAndTemplateLines) {
  const Problem p = L1_72();
  bool seen[3] = {false, false, false};
  for (const Config& c : Candidates(p)) {
    const int f = c.family == "igemm_simt" ? 1 : c.family == "direct_tile" ? 2 : 0;
    if (seen[f]) continue;
    seen[f] = true;
    auto src = BuildSource(p, c);
    ASSERT_TRUE(src.ok()) << src.status().message();
    const std::string& s = src.value();
    EXPECT_NE(s.find("constexpr int kKW = 7;"), std::string::npos);
    EXPECT_NE(s.find("constexpr int kG = 4;"), std::string::npos);
    EXPECT_NE(s.find("constexpr int kCinG = 8;"), std::string::npos);
    EXPECT_NE(s.find("#define KERNEL_NAME " + c.Name()), std::string::npos);
    const std::string file = f == 1   ? "igemm_simt.cu"
                             : f == 2 ? "direct_tile.cu"
                                      : "direct_phase.cu";
    EXPECT_NE(s.find("#line 1 \"templates/" + file + "\""), std::string::npos) << c.Name();
    EXPECT_NE(s.find("extern \"C\" __global__"), std::string::npos);
    if (f == 1) {
      // k = 3,5,7 at stride 2: taps per phase are {2,1} x {3,2} x {4,3}: 8 classes.
      EXPECT_NE(s.find("#define CONVT3D_FOR_PHASE_CLASSES(X) X(1, 2, 3) X(1, 2, 4)"),
                std::string::npos);
      EXPECT_NE(s.find("X(2, 3, 4)\n"), std::string::npos);
    }
  }
  EXPECT_TRUE(seen[0] && seen[1] && seen[2]);
}

TEST(Source, CodeHashIsStableHex) {
  const std::string h = CodeHash();
  EXPECT_EQ(h.size(), 16u);
  EXPECT_EQ(h, CodeHash());
  EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(Geometry, CoversEveryVirtualBlock) {
  const Problem p = L1_72();
  for (const auto& c : Candidates(p)) {
    const auto g = Geometry(p, c);
    if (c.family == "direct_phase") {
      EXPECT_EQ(g.block[0], static_cast<unsigned>(c.bx));
      EXPECT_EQ(g.block[1], static_cast<unsigned>(c.by));
    } else if (c.family == "direct_tile") {
      const TileShape sh = TileShapeOf(p, c);
      EXPECT_EQ(g.block[0], static_cast<unsigned>(c.bx * c.by * c.bz));
      EXPECT_EQ(g.smem_bytes, static_cast<unsigned>(sh.smem_bytes));
      // Every (W tile, H tile, H phase, D tile, D phase, channel block, group, sample).
      // (all-phases blocks: every (D, H) phase in one block)
      EXPECT_EQ(sh.blocks,
                sh.tiles[0] * sh.tiles[1] * sh.tiles[2] * (c.pa ? 1 : 4) * sh.co_blocks * 4 * 8);
      EXPECT_EQ(sh.tiles[2], (96 + c.bx * c.vw - 1) / (c.bx * c.vw));
    } else {
      const IgemmShape sh = IgemmShapeOf(p, c);
      EXPECT_EQ(g.block[0], static_cast<unsigned>(sh.threads));
      // Every (tile, phase, channel tile, group, sample) is one virtual block.
      EXPECT_EQ(sh.blocks, sh.tiles[0] * sh.tiles[1] * sh.tiles[2] * 8 * sh.co_tiles * 4 * 8);
    }
    EXPECT_GE(g.grid[0], 1u);
  }
}

// ---- igemm_mma (tensor cores) ---------------------------------------------------------------
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
    EXPECT_EQ(PrepXSymbol(c), c.Name() + "_prepx");
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
      EXPECT_EQ(PrepXSymbol(c), "") << "f32 inputs are read in place";
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

TEST(MmaCandidates, LevelOneShapesAllGetThem) {
  auto all = io::LoadProblems(CONVT3D_SOURCE_DIR "/problems/kernelbench_l1.json");
  ASSERT_TRUE(all.ok()) << all.status().message();
  for (auto np : *all) {
    np.problem.precision = Precision::kFp32x3;
    const auto c = HeuristicPick(np.problem);
    // Strided shapes get a four-warp all-phases mma.sync tile (measured closer to the tuned
    // winner), stride-1 shapes an fft tile, and so do stride == dilation shapes (L1-77), as a
    // lattice candidate; the pick is always one of the candidates the tuner would time.
    // L1-72's phase-channel form fits one wgmma channel tile: a subpixel_ wgmma tile.
    const bool lattice = LatticeOf(np.problem).kind != Lattice::kNone,
               subpixel = np.name == "L1-72";
    EXPECT_EQ(c.lattice, lattice ? 1 : subpixel ? 2 : 0) << np.name << " got " << c.Name();
    const bool strided = !lattice && !subpixel &&
                         np.problem.stride[0] * np.problem.stride[1] * np.problem.stride[2] > 1;
    // Stride 1 and the L1-77 sub-problem: the fft family, which won fp32x3 on all four stride-1
    // shapes (session 14 trials); L1-72's phase channels: wgmma.
    EXPECT_EQ(c.family, strided    ? "igemm_mma"
                        : subpixel ? "igemm_wgmma"
                                   : "fft")
        << np.name << " got " << c.Name();
    EXPECT_EQ(c.pa != 0, strided) << np.name << " got " << c.Name();
    if (strided) {
      EXPECT_EQ(c.wm * c.wn, 4) << np.name << " got " << c.Name();
    }
    const auto cands = Candidates(np.problem);
    EXPECT_TRUE(std::any_of(cands.begin(), cands.end(),
                            [&](const Config& o) { return o.Name() == c.Name(); }))
        << np.name << ": " << c.Name() << " is not a candidate";
  }
}

// ---- igemm_wgmma (sm_90a, stride 1) ----------------------------------------------------------
Problem L1_68() {  // kernelbench_l1.json's L1-68: 16 x 32 x 64^3, 64 out, kernel 3x5x5
  Problem p;
  p.n = 16;
  p.c_in = 32;
  p.c_out = 64;
  p.in = {64, 64, 64};
  p.kernel = {3, 5, 5};
  return p;
}

TEST(WgmmaCandidates, OnlyStrideOneTensorModesOnAnSm90Target) {
  Problem p = L1_68();
  const auto strict = Candidates(p);  // (begin and end of one list, not of two temporaries)
  EXPECT_TRUE(std::none_of(strict.begin(), strict.end(), [](const Config& c) {
    return c.family == "igemm_wgmma";
  })) << "strict fp32 has no tensor-core candidates";
  for (auto mode : {0, 1, 2, 3}) {
    Problem q = p;
    if (mode == 0) q.precision = Precision::kTf32;
    if (mode == 1) q.precision = Precision::kFp32x3;
    if (mode == 2) q.dtype = DType::kBF16;
    if (mode == 3) q.dtype = DType::kF16;
    const auto all = Candidates(q);
    ASSERT_FALSE(all.empty());
    // tf32 and fp32x3: the fft candidates come first on this 5x5 H x W kernel.
    EXPECT_EQ(all.front().family, mode <= 1 ? "fft" : "igemm_wgmma") << "mode " << mode;
    for (const Config& c : all) {
      if (c.family != "igemm_wgmma") continue;
      EXPECT_EQ(c.bn, 64);
      EXPECT_EQ(c.split, mode == 1 ? 3 : 1) << c.Name();
      EXPECT_EQ(c.bqd * (c.bqh / 8) * (c.bqw / 8), c.wg * c.mt) << c.Name();
      EXPECT_TRUE(c.sr == 1 || c.sr == 5) << c.Name();
      EXPECT_LE(IgemmShapeOf(q, c).smem_bytes, 113 * 1024) << c.Name();
      EXPECT_EQ(CompileArch(c, "sm_90"), "sm_90a");
      EXPECT_EQ(CompileArch(c, "sm_100"), "sm_100");
    }
    DeviceLimits not_sm90;
    not_sm90.wgmma = false;
    for (const Config& c : Candidates(q, not_sm90)) EXPECT_NE(c.family, "igemm_wgmma") << c.Name();
    // Strided problems: wgmma tiles only as phase-channel (subpixel_) candidates.
    Problem strided = q;
    strided.stride = {1, 2, 1};
    for (const Config& c : Candidates(strided))
      EXPECT_TRUE(c.family != "igemm_wgmma" || c.lattice == 2) << c.Name();
    // A halo far beyond shared memory (kernel 3, dilation 700): no tile of any family is offered
    // (its int shape arithmetic once wrapped to a negative size that passed the filters).
    Problem dilated = q;
    dilated.n = 1, dilated.c_in = dilated.c_out = 8, dilated.in = {1, 1, 1};
    dilated.kernel = {3, 3, 3}, dilated.dilation = {700, 700, 700},
    dilated.padding = {699, 699, 699};
    ASSERT_TRUE(Validate(dilated).ok());
    const auto dil = Candidates(dilated);
    ASSERT_FALSE(dil.empty());
    for (const Config& c : dil) EXPECT_EQ(c.family, "direct_phase") << c.Name();
    EXPECT_EQ(HeuristicPick(dilated).family, "direct_phase");
    Problem wide = q;  // more than one channel tile: not offered until a GPU suite covers it
    wide.c_out = 264;
    wide.n = 1;
    for (const Config& c : Candidates(wide)) EXPECT_NE(c.family, "igemm_wgmma") << c.Name();
  }
}

// Sizes worked out by hand from the template's layout for L1-68 in TF32 with a 4 x 8 x 8 box
// (two warpgroups of two m64 tiles), 8 channels (two 16-byte units) per chunk.
TEST(WgmmaCandidates, ShapeOfL1_68ByHand) {
  Problem p = L1_68();
  p.precision = Precision::kTf32;
  Config c;
  c.family = "igemm_wgmma";
  c.bqd = 4, c.bqh = 8, c.bqw = 8, c.wg = 2, c.mt = 2, c.bn = 64, c.ck = 8;
  IgemmShape s = IgemmShapeOf(p, c);
  EXPECT_EQ(s.halo_d, 4 + 2);  // box + (k - 1) * dilation
  EXPECT_EQ(s.halo_h, 8 + 4);
  EXPECT_EQ(s.hws, 8 + 4);
  EXPECT_EQ(s.plane, 6 * 12 * 12);  // units per channel unit
  EXPECT_EQ(s.kp, 2);               // 8 channels / 4 per unit
  EXPECT_EQ(s.cg, 8);               // 32 channels / 4
  EXPECT_EQ(s.chunks, 4);
  EXPECT_EQ(s.wtile, 5 * 2 * 64);  // kW taps x units x channels
  // 15 steps per chunk: two halo buffers and four weight tiles (asynchronous pipeline).
  EXPECT_EQ(s.smem_bytes, 16 * (2 * 2 * 864 + 4 * 640));
  EXPECT_EQ(s.threads, 256);
  // Output 66 x 68 x 68: 17 x 9 x 9 boxes per image, 16 images.
  EXPECT_EQ(s.blocks, 17 * 9 * 9 * 16);
  EXPECT_EQ(s.weight_words, 4 * 15 * 640 * 4);
  EXPECT_EQ(s.x_words, 16LL * 8 * 64 * 64 * 64 * 4);
  EXPECT_EQ(s.workspace_words, s.weight_words + s.x_words);
  // 3xTF32: two parts of halo and weights, and (waiting for every step) two weight buffers.
  p.precision = Precision::kFp32x3;
  c.split = 3;
  s = IgemmShapeOf(p, c);
  EXPECT_EQ(s.wtile, 2 * 5 * 2 * 64);
  EXPECT_EQ(s.smem_bytes, 16 * (2 * 2 * 2 * 864 + 2 * 1280));
  EXPECT_EQ(s.x_words, 2 * 16LL * 8 * 64 * 64 * 64 * 4);
  // All five tap rows per step: three steps per chunk, a five times larger weight tile.
  p.precision = Precision::kTf32;
  c.split = 1, c.sr = 5;
  s = IgemmShapeOf(p, c);
  EXPECT_EQ(s.wtile, 5 * 5 * 2 * 64);
  EXPECT_EQ(s.weight_words, 4 * 3 * 3200 * 4);
  // bf16: eight channels per unit, so the 32 channels are four units and a 16-channel chunk two.
  p.precision = Precision::kFp32;
  p.dtype = DType::kBF16;
  c.dtype = DType::kBF16, c.sr = 1, c.ck = 16;
  s = IgemmShapeOf(p, c);
  EXPECT_EQ(s.kp, 2);
  EXPECT_EQ(s.cg, 4);
  EXPECT_EQ(s.chunks, 2);
}

TEST(WgmmaCandidates, NamesRoundTripThroughJson) {
  Config c;
  c.family = "igemm_wgmma";
  c.dtype = DType::kBF16;
  c.bqd = 2, c.bqh = 8, c.bqw = 8, c.wg = 1, c.mt = 2, c.bn = 24, c.ck = 16, c.sr = 3;
  EXPECT_EQ(c.Name(), "igemm_wgmma_bf16_q2x8x8_g1_m2_n24_k16_r3");
  EXPECT_EQ(PrepSymbol(c), c.Name() + "_prep");
  EXPECT_EQ(PrepXSymbol(c), c.Name() + "_prepx");
  auto back = Config::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->Name(), c.Name());
  c.bqh = 12;  // not whole m64 tiles
  EXPECT_FALSE(Config::FromJson(c.ToJson()).ok());
}

// The heuristic takes the all-rows tile at <= 48 channels (L1-58: 16, L1-61: 48, L1-70: 24) and
// the one-row tile at 64 (L1-68), as measured on the H100 (candidates.cpp).
TEST(WgmmaCandidates, HeuristicRowsPerStepFollowTheChannelCount) {
  auto all = io::LoadProblems(CONVT3D_SOURCE_DIR "/problems/kernelbench_l1.json");
  ASSERT_TRUE(all.ok()) << all.status().message();
  for (auto np : *all) {
    const Problem& p0 = np.problem;
    if (p0.stride[0] * p0.stride[1] * p0.stride[2] != 1) continue;
    Problem p = p0;
    p.precision = Precision::kTf32;
    const Config c = HeuristicPick(p);
    if (p.kernel[1] * p.kernel[2] >= 25) {  // L1-58, L1-68: the fft family's TF32 GEMMs won
      EXPECT_EQ(c.family, "fft") << np.name;
      continue;
    }
    ASSERT_EQ(c.family, "igemm_wgmma") << np.name;
    EXPECT_EQ(c.sr > 1, p.c_out <= 48) << np.name << " got " << c.Name();
  }
}

// ---- direct_tile ------------------------------------------------------------------------------
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
        const DimPhases dp = PhasesOf(p.in[i], p.kernel[i], p.stride[i], p.padding[i],
                                      p.dilation[i], p.OutSize()[i]);
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

namespace convt3d::gen {
namespace {

// ---- winograd -------------------------------------------------------------------------------
// The transforms, checked against their definition (not against the kernel): for random inputs
// d (alpha of them) and taps g, AT [(G g) . (BT d)] is the two-output correlation.
TEST(Winograd, TransformsComputeTheCorrelation) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int taps = 1; taps <= 3; ++taps) {
    const WinoTransform t = WinoTransformOf(taps);
    ASSERT_EQ(t.alpha, taps + 1);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<double> d(t.alpha), g(taps), m(t.alpha);
      for (double& v : d) v = u(rng);
      for (double& v : g) v = u(rng);
      for (int a = 0; a < t.alpha; ++a) {
        double gd = 0, bd = 0;
        for (int j = 0; j < taps; ++j) gd += t.g[a][j] * g[j];
        for (int i = 0; i < t.alpha; ++i) bd += t.bt[a][i] * d[i];
        m[a] = gd * bd;
      }
      for (int o = 0; o < 2; ++o) {
        double y = 0, want = 0;
        for (int a = 0; a < t.alpha; ++a) y += t.at[o][a] * m[a];
        for (int j = 0; j < taps; ++j) want += d[o + j] * g[j];
        EXPECT_NEAR(y, want, 1e-12) << "taps " << taps << " output " << o;
      }
    }
  }
}

Problem L1_61() {  // kernelbench_l1.json's L1-61: 8 x 48 x 64^3, 48 out, kernel 3
  Problem p;
  p.n = 8, p.c_in = 48, p.c_out = 48, p.in = {64, 64, 64}, p.kernel = {3, 3, 3};
  return p;
}

TEST(Winograd, WhereTheFamilyApplies) {
  Problem p = L1_61();
  const auto strict = Candidates(p);
  ASSERT_FALSE(strict.empty());
  // fft first (it won L1-61 and L1-70 in strict fp32, session 11), then winograd.
  EXPECT_EQ(strict.front().family, "fft") << strict.front().Name();
  EXPECT_EQ(HeuristicPick(p).family, "fft");
  const auto first_other =
      std::find_if(strict.begin(), strict.end(), [](const Config& c) { return c.family != "fft"; });
  ASSERT_NE(first_other, strict.end());
  EXPECT_EQ(first_other->family, "winograd") << first_other->Name();
  int wino = 0;
  for (const Config& c : strict) {
    if (c.family != "winograd") continue;
    ++wino;
    const WinoShape s = WinoShapeOf(p, c);
    ASSERT_TRUE(s.fits) << c.Name();
    EXPECT_EQ(s.points, 64);
    EXPECT_EQ(s.threads % 32, 0) << c.Name();
    EXPECT_LE(s.threads, 1024) << c.Name();
    EXPECT_EQ(48 % c.bn, 0) << c.Name();
    EXPECT_LE(s.smem_bytes, 227 * 1024) << c.Name();
    EXPECT_EQ(c.Name().rfind("winograd_f32_q", 0), 0u) << c.Name();
    auto back = Config::FromJson(c.ToJson());
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->Name(), c.Name());
    EXPECT_EQ(PrepSymbol(c), c.Name() + "_prep");
    const PlanView g = Geometry(p, c);
    EXPECT_EQ(g.workspace_bytes, size_t{4} * s.co_blocks * s.cpad * 64 * c.bn) << c.Name();
    // Every 2x2x2 tile of the 66^3 output, every channel block and sample.
    EXPECT_EQ(s.tiles[0], 33);
    EXPECT_EQ(s.blocks,
              s.blocks_per_dim[0] * s.blocks_per_dim[1] * s.blocks_per_dim[2] * s.co_blocks * 8);
    EXPECT_GE(s.blocks_per_dim[2] * c.bqw, 33) << c.Name();
  }
  EXPECT_GE(wino, 4);
  p.precision = Precision::kFp32x3;  // offered, after the tensor-core tiles
  const auto x3 = Candidates(p);
  EXPECT_NE(x3.front().family, "winograd");
  EXPECT_TRUE(
      std::any_of(x3.begin(), x3.end(), [](const Config& c) { return c.family == "winograd"; }));
  // Not where its error or its transforms do not fit: tf32 (tensor cores are faster), taps of 5
  // (F(2,5)'s f32 error breaks the strict contract), strides, dilation, 16-bit and f64 storage.
  std::vector<Problem> not_taken(6, L1_61());
  not_taken[0].precision = Precision::kTf32;
  not_taken[1].kernel = {3, 5, 5};
  not_taken[2].stride = {2, 2, 2};
  not_taken[3].dilation = {1, 2, 1};
  not_taken[4].dtype = DType::kBF16;
  not_taken[5].dtype = DType::kF64;
  for (const Problem& q : not_taken) {
    ASSERT_TRUE(Validate(q).ok()) << q.Signature();
    for (const Config& c : Candidates(q))
      EXPECT_NE(c.family, "winograd") << q.Signature() << " " << c.Name();
  }
}

Problem Strided(int64_t n, int64_t cin, int64_t cout, Dim3 in, int64_t k, int64_t s, int64_t pad,
                int64_t d) {
  Problem p;
  p.n = n, p.c_in = cin, p.c_out = cout, p.in = in;
  p.kernel = {k, k, k}, p.stride = {s, s, s}, p.padding = {pad, pad, pad};
  p.dilation = {d, d, d};
  return p;
}
Problem L1_77() { return Strided(16, 32, 64, {16, 32, 32}, 3, 2, 1, 2); }
Problem L1_73() { return Strided(4, 32, 32, {32, 64, 128}, 3, 2, 1, 1); }

// The lattice sub-problem against brute force: on random stride == dilation problems, every
// (input, tap) pair that reaches output o of the real problem reaches exactly output (o - r) / s
// of the stride-1 sub-problem (o on the lattice), and the outputs off the lattice get none; the
// sub-problem's output is the lattice's whole extent.
TEST(Lattice, SubProblemHasExactlyTheRealProblemsProducts) {
  std::mt19937 rng(17);
  int checked = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    Problem p;
    for (int i = 0; i < 3; ++i) {
      p.in[i] = 1 + rng() % 7, p.kernel[i] = 1 + rng() % 5;
      p.stride[i] = p.dilation[i] = 1 + rng() % 3;
      p.padding[i] = rng() % (p.dilation[i] * (p.kernel[i] - 1) + 2);
      p.output_padding[i] = rng() % p.stride[i];
    }
    if (!Validate(p).ok()) continue;
    const Lattice l = LatticeOf(p);
    const bool strided = p.stride[0] * p.stride[1] * p.stride[2] > 1;
    if (l.kind == Lattice::kNone) {
      // Only output_padding past the last lattice row, an empty lattice (no output gets any
      // product) or no stride at all rule it out.
      bool empty = false;
      for (int i = 0; i < 3; ++i) {
        const int64_t r = ((-p.padding[i]) % p.stride[i] + p.stride[i]) % p.stride[i];
        empty = empty || p.OutSize()[i] <= r;
      }
      EXPECT_TRUE(!strided || empty ||
                  p.output_padding[0] + p.output_padding[1] + p.output_padding[2] > 0)
          << p.Signature();
      continue;
    }
    ASSERT_TRUE(strided);
    ASSERT_TRUE(Validate(l.sub).ok());
    const Dim3 out = p.OutSize(), sub_out = l.sub.OutSize();
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(l.sub.stride[i], 1);
      ASSERT_EQ(l.sub.dilation[i], 1);
      const int64_t s = l.step[i], r = l.offset[i];
      ASSERT_EQ(sub_out[i], out[i] > r ? (out[i] - r + s - 1) / s : 0) << p.Signature();
      for (int64_t o = 0; o < out[i]; ++o) {
        const auto real = Pairs(p.in[i], p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], o);
        if ((o - r) % s != 0 || o < r) {
          ASSERT_TRUE(real.empty()) << p.Signature() << " o=" << o;
          continue;
        }
        ASSERT_EQ(real, Pairs(l.sub.in[i], l.sub.kernel[i], 1, l.sub.padding[i], 1, (o - r) / s))
            << p.Signature() << " o=" << o;
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 500);
  Problem l77 = L1_77();
  const Lattice l = LatticeOf(l77);
  ASSERT_EQ(l.kind, Lattice::kSubLattice);
  EXPECT_EQ(l.sub.OutSize(), (Dim3{16, 32, 32}));
  EXPECT_EQ(l.offset[0], 1);
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

// Lattice candidates: offered first on lattice problems only, named and JSON-round-tripped as
// such, with the sub-problem's launch plus a fill over every output row.
TEST(Lattice, CandidatesAndGeometry) {
  Problem p = L1_77();
  for (Precision m : {Precision::kFp32, Precision::kTf32}) {
    p.precision = m;
    const auto all = Candidates(p);
    ASSERT_FALSE(all.empty());
    EXPECT_TRUE(all.front().lattice);
    int n = 0;
    for (const Config& c : all) {
      if (!c.lattice) continue;
      ++n;
      EXPECT_TRUE(LatticeFamily(c, 1)) << c.Name();
      EXPECT_EQ(c.Name().rfind("lattice_", 0), 0u) << c.Name();
      auto back = Config::FromJson(c.ToJson());
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_EQ(back->Name(), c.Name());
      const PlanView g = Geometry(p, c);
      EXPECT_GE(g.fill_grid[0], 1u);
      auto src = BuildSource(p, c);
      ASSERT_TRUE(src.ok()) << src.status().message();
      EXPECT_NE(src->find("#define FILL_KERNEL_NAME " + FillSymbol(c)), std::string::npos);
    }
    EXPECT_GE(n, 2);
    EXPECT_TRUE(HeuristicPick(p).lattice);
  }
  // L1-73 (stride 2, dilation 1): no sub-lattice; in the tensor-core modes subpixel_ tiles, which
  // round-trip through JSON as such and need no fill.
  for (Precision m : {Precision::kFp32, Precision::kTf32, Precision::kFp32x3}) {
    p = L1_73();
    p.precision = m;
    int subpixel = 0;
    for (const Config& c : Candidates(p)) {
      EXPECT_NE(c.lattice, 1) << c.Name();
      if (c.lattice != 2) continue;
      ++subpixel;
      EXPECT_EQ(c.Name().rfind("subpixel_igemm_wgmma_", 0), 0u) << c.Name();
      auto back = Config::FromJson(c.ToJson());
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_EQ(back->Name(), c.Name());
      EXPECT_EQ(Geometry(p, c).fill_grid[0], 0u) << c.Name();
      EXPECT_TRUE(FillSymbol(c).empty());
    }
    EXPECT_EQ(subpixel > 0, m != Precision::kFp32);
  }
  // A lattice kernel indexes the real output, which may need 64-bit offsets where the
  // sub-problem's own tensors would not (L1-77 at N = 256: 2.3e9 outputs, 2.9e8 on the lattice).
  p = L1_77();
  p.n = 256;
  p.precision = Precision::kTf32;
  ASSERT_GE(p.OutputElements(), int64_t{1} << 31);
  ASSERT_LT(LatticeOf(p).sub.OutputElements(), int64_t{1} << 31);
  const Config pick = HeuristicPick(p);
  ASSERT_EQ(pick.lattice, 1);
  auto big = BuildSource(p, pick);
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_NE(big->find("typedef long long idx_t;"), std::string::npos);
  EXPECT_FALSE(
      Config::FromJson(
          R"({"dtype":"f32","family":"igemm_mma","bqd":1,"bqh":4,"bqw":16,"wm":2,"wn":2,"mt":1,"nt8":2,"ck":8,"split":1,"lattice":1})")
          .ok());
}

// The phase-channel form against the CPU reference, on random strided problems (stride and
// dilation independent, groups, bias, cropping padding, output_padding): the sub-problem's
// scatter-form output, with each sub weight taken from the real tap RealTap names (zero where
// none) and each sub output placed at (s*q + r) of channel co*S + phase, equals the real
// problem's gather-form output everywhere. The generated WeightIndex/OutputIndex follow the same
// definitions; the GPU suite (RandomSubpixel) checks them.
TEST(Lattice, PhaseChannelFormMatchesTheReference) {
  std::mt19937 rng(29);
  int checked = 0;
  for (int trial = 0; trial < 400 && checked < 120; ++trial) {
    Problem p;
    p.groups = 1 + rng() % 2;
    p.c_in = p.groups * (1 + rng() % 3), p.c_out = p.groups * (1 + rng() % 3);
    p.n = 1 + rng() % 2;
    p.bias = rng() % 2;
    for (int i = 0; i < 3; ++i) {
      p.in[i] = 1 + rng() % 5, p.kernel[i] = 1 + rng() % 4;
      p.stride[i] = 1 + rng() % 3, p.dilation[i] = 1 + rng() % 3;
      p.padding[i] = rng() % (p.dilation[i] * (p.kernel[i] - 1) + 2);
      p.output_padding[i] = rng() % std::max(p.stride[i], p.dilation[i]);
    }
    if (!Validate(p).ok()) continue;
    const Lattice l = PhaseChannelsOf(p);
    if (l.kind == Lattice::kNone) {
      EXPECT_TRUE(p.stride[0] * p.stride[1] * p.stride[2] == 1 ||
                  LatticeOf(p).kind == Lattice::kSubLattice)
          << p.Signature();
      continue;
    }
    const Problem& q = l.sub;
    ASSERT_EQ(q.c_out, p.c_out * l.phases);
    std::vector<double> x(p.InputElements()), w(p.WeightElements()), b(p.c_out);
    ref::FillRandom(x, 1 + trial), ref::FillRandom(w, 1000 + trial), ref::FillRandom(b, 7);
    const int64_t cout_g = p.c_out / p.groups;
    std::vector<double> ws(q.WeightElements(), 0.0);
    for (int64_t ci = 0; ci < p.c_in; ++ci)
      for (int64_t cog = 0; cog < cout_g; ++cog)
        for (int64_t ph = 0; ph < l.phases; ++ph) {
          const int64_t r[3] = {ph / (p.stride[1] * p.stride[2]), ph / p.stride[2] % p.stride[1],
                                ph % p.stride[2]};
          for (int64_t a = 0; a < q.kernel[0]; ++a)
            for (int64_t bb = 0; bb < q.kernel[1]; ++bb)
              for (int64_t c = 0; c < q.kernel[2]; ++c) {
                const int64_t td = l.RealTap(p, 0, r[0], a), th = l.RealTap(p, 1, r[1], bb),
                              tw = l.RealTap(p, 2, r[2], c);
                if (td < 0 || th < 0 || tw < 0) continue;
                ws[(((ci * cout_g + cog) * l.phases + ph) * q.kernel[0] + a) * q.kernel[1] *
                       q.kernel[2] +
                   bb * q.kernel[2] + c] =
                    w[((ci * cout_g + cog) * p.kernel[0] + td) * p.kernel[1] * p.kernel[2] +
                      th * p.kernel[2] + tw];
              }
        }
    std::vector<double> bs(q.c_out);
    for (int64_t co = 0; co < q.c_out; ++co) bs[co] = b[co / l.phases];
    const auto want = ref::ForwardGather(p, x.data(), w.data(), p.bias ? b.data() : nullptr);
    const auto got = ref::ForwardScatter(q, x.data(), ws.data(), p.bias ? bs.data() : nullptr);
    const Dim3 out = p.OutSize(), qo = q.OutSize();
    std::vector<double> placed(want.size(), NAN);
    for (int64_t n = 0; n < p.n; ++n)
      for (int64_t co = 0; co < q.c_out; ++co)
        for (int64_t a = 0; a < qo[0]; ++a)
          for (int64_t bb = 0; bb < qo[1]; ++bb)
            for (int64_t c = 0; c < qo[2]; ++c) {
              const int64_t ph = co % l.phases;
              const int64_t yd = p.stride[0] * a + ph / (p.stride[1] * p.stride[2]);
              const int64_t yh = p.stride[1] * bb + ph / p.stride[2] % p.stride[1];
              const int64_t yw = p.stride[2] * c + ph % p.stride[2];
              if (yd >= out[0] || yh >= out[1] || yw >= out[2]) continue;
              placed[(((n * p.c_out + co / l.phases) * out[0] + yd) * out[1] + yh) * out[2] + yw] =
                  got[(((n * q.c_out + co) * qo[0] + a) * qo[1] + bb) * qo[2] + c];
            }
    for (size_t e = 0; e < want.size(); ++e)
      ASSERT_NEAR(placed[e], want[e], 1e-9) << p.Signature() << " element " << e;
    ++checked;
  }
  EXPECT_GE(checked, 100);
}

// ---- fft ----------------------------------------------------------------------------------
Problem L1_58() {  // kernelbench_l1.json's L1-58: 16 x 32 x 16x32x64, 16 out, kernel 3x5x7
  Problem p;
  p.n = 16, p.c_in = 32, p.c_out = 16;
  p.in = {16, 32, 64};
  p.kernel = {3, 5, 7};
  return p;
}

TEST(Fft, WhereTheFamilyApplies) {
  for (const Problem& base : {L1_58(), L1_68()}) {
    // Every f32 mode: the fft candidates come first (they won all three on both, session 11),
    // FFMA GEMMs in strict fp32, TF32 ones in tf32, both kinds in fp32x3 (3xTF32 first).
    for (Precision m : {Precision::kFp32, Precision::kTf32, Precision::kFp32x3}) {
      Problem p = base;
      p.precision = m;
      const auto all = Candidates(p);
      ASSERT_FALSE(all.empty());
      EXPECT_EQ(all.front().family, "fft") << p.Signature();
      EXPECT_EQ(all.front().mma, m != Precision::kFp32 ? 1 : 0) << p.Signature();
      EXPECT_EQ(HeuristicPick(p).Name(), all.front().Name());
      int ffma = 0, tf32 = 0, x3 = 0;
      for (const Config& c : all)
        if (c.family == "fft") ++(!c.mma ? ffma : c.split == 3 ? x3 : tf32);
      EXPECT_EQ(ffma > 0, m != Precision::kTf32) << p.Signature();
      EXPECT_EQ(tf32 > 0, m == Precision::kTf32) << p.Signature();
      EXPECT_EQ(x3 > 0, m == Precision::kFp32x3) << p.Signature();
    }
    Problem h = base;  // 16-bit tensors: not an fft family type
    h.dtype = DType::kBF16;
    for (const Config& c : Candidates(h)) EXPECT_NE(c.family, "fft") << c.Name();
  }
  // Strided problems, and kernels under 9 H x W taps, get none.
  for (const Config& c : Candidates(L1_72())) EXPECT_NE(c.family, "fft") << c.Name();
  Problem small = L1_68();
  small.kernel = {3, 1, 5};
  for (const Config& c : Candidates(small)) EXPECT_NE(c.family, "fft") << c.Name();
  // 3x3 H x W kernels: first in strict fp32, after the tensor-core tiles in tf32.
  EXPECT_EQ(Candidates(L1_61()).front().family, "fft");
  Problem l61 = L1_61();
  l61.precision = Precision::kTf32;
  const auto t61 = Candidates(l61);
  EXPECT_EQ(t61.front().family, "igemm_wgmma");
  EXPECT_TRUE(
      std::any_of(t61.begin(), t61.end(), [](const Config& c) { return c.family == "fft"; }));
}

TEST(Fft, ShapeCoversTheOutputAndRoundTrips) {
  std::mt19937 rng(77);
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Problem p;
    p.groups = 1 + rng() % 3;
    p.c_in = p.groups * (1 + rng() % 9), p.c_out = p.groups * (1 + rng() % 20);
    p.n = 1 + rng() % 40;
    for (int i = 0; i < 3; ++i) {
      p.kernel[i] = 1 + rng() % 8, p.dilation[i] = 1 + rng() % 2;
      p.padding[i] = rng() % (p.dilation[i] * (p.kernel[i] - 1) + 1);
      p.in[i] = 1 + rng() % 150;
    }
    if (!Validate(p).ok()) continue;
    const Dim3 out = p.OutSize();
    for (Config c : Candidates(p)) {
      if (c.family != "fft") continue;
      const FftShape s = FftShapeOf(p, c);
      ASSERT_TRUE(s.fits) << c.Name();
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(s.l[i], s.t[i] - s.e[i] + 1);
        EXPECT_GE(s.tiles[i] * s.l[i], out[i + 1]);        // every output in some tile ...
        EXPECT_LT((s.tiles[i] - 1) * s.l[i], out[i + 1]);  // ... and no tile wholly past it
      }
      ASSERT_EQ(s.chunks % s.dchunks, 0);  // chunks: sample groups x ranges of output planes
      EXPECT_EQ(s.chunks / s.dchunks, (p.n + s.nc - 1) / s.nc);
      EXPECT_GE(s.dchunks * s.dc, out[0]);
      EXPECT_LT((s.dchunks - 1) * s.dc, out[0]);
      EXPECT_EQ(s.g_elems % 64, 0);  // Y starts 16-byte aligned
      EXPECT_EQ(s.x_elems % 64, 0);
      const PlanView g = Geometry(p, c);
      EXPECT_EQ(g.chunks, s.chunks);
      EXPECT_EQ(g.workspace_bytes, static_cast<size_t>(s.g_elems + s.x_elems + s.y_elems) * 8);
      if (!c.mma) {
        // FFMA: Gauss's form on 4 x 4 thread tiles only, its weight spectra three floats per
        // complex weight; stages of 16 K but for the 64-sum tiles; shared memory static up to
        // 48 KB (gemm_smem 0), dynamic beyond.
        const int sums = c.gauss ? 3 : 2;
        EXPECT_TRUE(!c.gauss || (c.tm == 4 && c.tn == 4)) << c.Name();
        EXPECT_GE(2 * s.g_elems, sums * s.prep_elems) << c.Name();
        EXPECT_EQ(s.bk, c.tm * c.tn * sums < 64 ? 16 : 8) << c.Name();
        EXPECT_TRUE(s.gemm_smem == 0 || s.gemm_smem > 48 * 1024) << c.Name();
        Config mixed = c;
        mixed.gauss = 1, mixed.mma = 1, mixed.split = 1, mixed.wm = 4, mixed.wn = 2;
        EXPECT_FALSE(Config::FromJson(mixed.ToJson()).ok()) << "Gauss's form is FFMA-only";
      }
      c.fc = 2, c.fd = 1;
      auto back = Config::FromJson(c.ToJson());
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_EQ(back.value().Name(), c.Name());
      EXPECT_EQ(back.value().fc, 2);
      EXPECT_EQ(back.value().fd, 1);
      const FftShape planes = FftShapeOf(p, c);  // one output plane of one sample per chunk
      if (out[0] > 1) {
        EXPECT_EQ(planes.chunks, p.n * out[0]) << c.Name();
        EXPECT_EQ(planes.xd, 1 + (p.kernel[0] - 1) * p.dilation[0]) << c.Name();
      }
      EXPECT_TRUE(BuildSource(p, c).ok()) << c.Name();
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
  // Large planes: the transform blocks shrink until they fit (32-point tiles of a 128 x 128
  // plane with a 7x7 kernel needed 179 KB at ~48 tiles per block).
  Problem big;
  big.c_in = 4, big.c_out = 4, big.in = {2, 122, 122}, big.kernel = {1, 7, 7};
  const auto cands = FftCandidates(big, DeviceLimits{});
  ASSERT_FALSE(cands.empty());
  bool t32 = false;
  for (const Config& c : cands) {
    const FftShape s = FftShapeOf(big, c);
    EXPECT_LE(std::max(s.fwd_smem, s.inv_smem), 100 * 1024) << c.Name();
    t32 = t32 || c.ft_w == 32;
  }
  EXPECT_TRUE(t32);
  // Hand-written tiles the kernels cannot run do not fit: a block of 16 rows stages no A, and a
  // block N that is not a multiple of the thread N leaves channels uncomputed.
  Config bad = cands.front();
  bad.mma = 0, bad.bm = 16, bad.tm = 1, bad.bn = 64, bad.tn = 4;
  EXPECT_FALSE(FftShapeOf(big, bad).fits);
  bad.bm = 128, bad.tm = 8, bad.bn = 33, bad.tn = 2;
  EXPECT_FALSE(FftShapeOf(big, bad).fits);
  // One sample's spectra over the 1 GiB chunk bound: chunks of a range of output planes.
  Problem deep = big;
  deep.c_in = deep.c_out = 64, deep.in = {64, 192, 192}, deep.kernel = {3, 5, 5};
  const auto dcands = FftCandidates(deep, DeviceLimits{});
  ASSERT_FALSE(dcands.empty());
  for (const Config& c : dcands) {
    const FftShape s = FftShapeOf(deep, c);
    EXPECT_LT(s.dc, deep.OutSize()[0]) << c.Name();
    EXPECT_LE(8 * (s.x_elems + s.y_elems), (int64_t{1} << 30) + 1024) << c.Name();
    EXPECT_EQ(s.chunks, deep.n * s.dchunks) << c.Name();
  }
  // A wide layer's weight spectra alone pass the workspace bound: no candidate.
  Problem wide = big;
  wide.c_in = wide.c_out = 1024, wide.in = {2, 20, 20}, wide.kernel = {3, 5, 5};
  EXPECT_TRUE(FftCandidates(wide, DeviceLimits{}).empty());
}

// The family's arithmetic, emulated in f64 with plain DFTs on the candidate's own tiling
// (tile starts, kept points, D taps, cropping padding, groups): equal to the gather reference.
TEST(Fft, TilingMatchesTheReference) {
  using cd = std::complex<double>;
  std::mt19937 rng(5);
  int checked = 0;
  for (int trial = 0; checked < 12 && trial < 200; ++trial) {
    Problem p;
    p.groups = 1 + rng() % 2;
    p.c_in = p.groups * (1 + rng() % 3), p.c_out = p.groups * (1 + rng() % 3);
    p.n = 1 + rng() % 2;
    p.bias = rng() % 2;
    for (int i = 0; i < 3; ++i) {
      p.kernel[i] = i == 0 ? 1 + rng() % 3 : 3 + rng() % 5;
      p.dilation[i] = 1 + rng() % 2;
      p.padding[i] = rng() % (p.dilation[i] * (p.kernel[i] - 1) + 2);
      p.in[i] = i == 0 ? 1 + rng() % 3 : 2 + rng() % 20;
    }
    if (!Validate(p).ok()) continue;
    const auto cands = FftCandidates(p, DeviceLimits{});
    if (cands.empty()) continue;
    const FftShape s = FftShapeOf(p, cands.back());  // the largest transforms of the list
    std::vector<double> x(p.InputElements()), w(p.WeightElements()), b(p.c_out);
    ref::FillRandom(x, 10 + trial), ref::FillRandom(w, 20 + trial), ref::FillRandom(b, 30);
    const auto want = ref::ForwardGather(p, x.data(), w.data(), p.bias ? b.data() : nullptr);
    const Dim3 out = p.OutSize();
    const int64_t cig = p.c_in / p.groups, cog = p.c_out / p.groups;
    const int th = s.t[0], tw = s.t[1];
    auto dft2 = [&](const std::vector<cd>& a, int sign) {  // th x tw, row-major
      std::vector<cd> r(a.size());
      for (int u = 0; u < th; ++u)
        for (int v = 0; v < tw; ++v) {
          cd acc = 0;
          for (int i = 0; i < th; ++i)
            for (int j = 0; j < tw; ++j)
              acc += a[i * tw + j] *
                     std::polar(1.0, sign * 2 * M_PI * (double(u * i) / th + double(v * j) / tw));
          r[u * tw + v] = acc;
        }
      return r;
    };
    std::vector<double> got(want.size(), NAN);
    for (int64_t n = 0; n < p.n; ++n)
      for (int64_t co = 0; co < p.c_out; ++co)
        for (int64_t od = 0; od < out[0]; ++od)
          for (int64_t tr = 0; tr < s.tiles[0]; ++tr)
            for (int64_t tc = 0; tc < s.tiles[1]; ++tc) {
              const int64_t g = co / cog;
              std::vector<cd> acc(th * tw, 0.0);
              for (int64_t kd = 0; kd < p.kernel[0]; ++kd) {
                const int64_t id = od + p.padding[0] - kd * p.dilation[0];
                if (id < 0 || id >= p.in[0]) continue;
                for (int64_t cl = 0; cl < cig; ++cl) {
                  const int64_t ci = g * cig + cl;
                  std::vector<cd> win(th * tw, 0.0), ker(th * tw, 0.0);
                  for (int i = 0; i < th; ++i)
                    for (int j = 0; j < tw; ++j) {
                      const int64_t ih = tr * s.l[0] + p.padding[1] - (s.e[0] - 1) + i;
                      const int64_t iw = tc * s.l[1] + p.padding[2] - (s.e[1] - 1) + j;
                      if (ih >= 0 && ih < p.in[1] && iw >= 0 && iw < p.in[2])
                        win[i * tw + j] =
                            x[(((n * p.c_in + ci) * p.in[0] + id) * p.in[1] + ih) * p.in[2] + iw];
                    }
                  for (int64_t kh = 0; kh < p.kernel[1]; ++kh)
                    for (int64_t kw = 0; kw < p.kernel[2]; ++kw)
                      ker[kh * p.dilation[1] * tw + kw * p.dilation[2]] =
                          w[(((ci * cog + co % cog) * p.kernel[0] + kd) * p.kernel[1] + kh) *
                                p.kernel[2] +
                            kw];
                  const auto X = dft2(win, -1), G = dft2(ker, -1);
                  for (int f = 0; f < th * tw; ++f) acc[f] += X[f] * G[f];
                }
              }
              const auto c = dft2(acc, +1);
              for (int i = s.e[0] - 1; i < th; ++i)
                for (int j = s.e[1] - 1; j < tw; ++j) {
                  const int64_t oh = tr * s.l[0] + i - (s.e[0] - 1);
                  const int64_t ow = tc * s.l[1] + j - (s.e[1] - 1);
                  if (oh >= out[1] || ow >= out[2]) continue;
                  got[(((n * p.c_out + co) * out[0] + od) * out[1] + oh) * out[2] + ow] =
                      c[i * tw + j].real() / (th * tw) + (p.bias ? b[co] : 0.0);
                }
            }
    const ref::ErrorStats e = ref::Compare(got.data(), want);
    EXPECT_LT(e.rel_l2, 1e-12) << p.Signature() << " " << cands.back().Name();
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}

}  // namespace
}  // namespace convt3d::gen
