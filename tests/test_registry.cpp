// test_registry.cpp: the registry: names, JSON, candidate order and uniqueness, pruning, sources,
// launches and the heuristic pick across families (generator/registry.cpp, config.cpp, source.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "base/math.h"
#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/families/direct_tile.h"
#include "generator/families/igemm_shape.h"
#include "generator/family.h"
#include "generator/lattice.h"
#include "generator/source.h"
#include "src/problem_io.h"
#include "tests/generator_test_util.h"

namespace convt3d::gen {
namespace {

TEST(Candidates, NamesUniqueStableAndParametersValid) {
  const Problem p = L1_72();
  const auto a = Candidates(p), b = Candidates(p);
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  std::set<std::string> names;
  int direct = 0, igemm = 0, tile = 0, gemm = 0;
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
    } else if (c.family == "gemm_simt") {  // its own tests: test_family_gemm_simt.cpp
      ++gemm;
      EXPECT_NE(c.Name().find("gemm_simt_f32_"), std::string::npos) << c.Name();
    } else if (c.family == "cell_simt") {  // its own tests: test_family_cell_simt.cpp
      EXPECT_EQ(c.Name().rfind("cell_simt_f32_", 0), 0u) << c.Name();
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
  EXPECT_GT(gemm, 0);
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

TEST(Source, PreambleHasTheProblemConstantsAndTemplateLines) {
  const Problem p = L1_72();
  bool seen[3] = {false, false, false};
  for (const Config& c : Candidates(p)) {
    if (c.family == "gemm_simt") continue;  // test_family_gemm_simt.cpp
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
    } else if (c.family == "gemm_simt") {
      EXPECT_EQ(g.block[0], 32u * c.wm * c.wn) << c.Name();
    } else if (c.family == "cell_simt") {
      // Threads: the cells' x the group's 8 output channels in blocks of cob; blocks: every (W, H,
      // D tile of output cells (output / stride), group, sample).
      const Dim3 out = p.OutSize();
      const int64_t tiles = CeilDiv(CeilDiv(out[0], 2), c.bz * c.dc) *
                            CeilDiv(CeilDiv(out[1], 2), c.by * c.hc) *
                            CeilDiv(CeilDiv(out[2], 2), c.bx * c.vw);
      EXPECT_EQ(g.block[0], static_cast<unsigned>(c.bx * c.by * c.bz * (8 / c.cob))) << c.Name();
      EXPECT_EQ(g.grid[0], static_cast<unsigned>(tiles * 4 * 8)) << c.Name();
    } else {
      const IgemmShape sh = IgemmShapeOf(p, c);
      EXPECT_EQ(g.block[0], static_cast<unsigned>(sh.threads));
      // Every (tile, phase, channel tile, group, sample) is one virtual block.
      EXPECT_EQ(sh.blocks, sh.tiles[0] * sh.tiles[1] * sh.tiles[2] * 8 * sh.co_tiles * 4 * 8);
    }
    EXPECT_GE(g.grid[0], 1u);
  }
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

// A toy family, defined here and added with ScopedFamily only: the evidence that a family is
// its own module (its field table, candidates, preamble, templates and launches) plus one
// registry line, and that names, JSON, sources and launch plans need nothing else. It runs
// direct_phase's template with one output and one channel per thread.
class ToyDirect final : public Family {
 public:
  std::string_view name() const override { return "toy_direct"; }
  // Threads along W and along output rows.
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {{"bx", &Config::bx, "_x"}, {"by", &Config::by, "_y"}};
    return f;
  }
  std::vector<Config> Candidates(const Problem& p, const DeviceLimits&,
                                 const RankContext&) const override {
    if (p.dtype != DType::kF32) return {};
    Config c;
    c.family = name();
    c.bx = 32, c.by = 4;
    return {c};
  }
  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    return FindFamily("direct_phase")->Preamble(p, DirectPhaseOf(c), os);
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh", "phases.cuh", "direct_phase.cu"};
  }
  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    return FindFamily("direct_phase")->Launches(p, DirectPhaseOf(c), named);
  }

 private:
  // The direct_phase tile the toy's kernel is: the same block, one output and channel a thread.
  static Config DirectPhaseOf(const Config& c) {
    Config d;
    d.dtype = c.dtype;
    d.bx = c.bx, d.by = c.by, d.opt = 1, d.cob = 1;
    return d;
  }
};

TEST(Registry, AddingAFamilyTouchesOnlyItsModule) {
  const Problem p = L1_72();
  const std::string name = "toy_direct_f32_x32_y4";
  auto toys = [](const std::vector<Config>& all) {
    return std::count_if(all.begin(), all.end(),
                         [](const Config& c) { return c.family == "toy_direct"; });
  };
  const std::vector<Config> before = Candidates(p);
  ASSERT_EQ(toys(before), 0);
  EXPECT_EQ(FindFamily("toy_direct"), nullptr);
  const ToyDirect toy;
  std::string json;
  {
    ScopedFamily guard(&toy);
    ASSERT_EQ(FindFamily("toy_direct"), &toy);
    const std::vector<Config> all = Candidates(p);
    ASSERT_EQ(all.size(), before.size() + 1);
    ASSERT_EQ(toys(all), 1);
    // Placed after the registry's own families' plain candidates (phase-channel forms follow).
    const auto toy_at = std::find_if(all.begin(), all.end(),
                                     [](const Config& o) { return o.family == "toy_direct"; });
    for (auto it = toy_at + 1; it != all.end(); ++it) EXPECT_EQ(it->lattice, 2) << it->Name();
    const Config c = *toy_at;
    EXPECT_EQ(c.family, "toy_direct");
    EXPECT_EQ(c.Name(), name);
    json = c.ToJson();
    EXPECT_EQ(json, R"({"bx":32,"by":4,"dtype":"f32","family":"toy_direct"})");
    auto back = Config::FromJson(json);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->family, "toy_direct");
    EXPECT_EQ(back->Name(), name);
    auto src = BuildSource(p, c);
    ASSERT_TRUE(src.ok()) << src.status().message();
    EXPECT_NE(src->find("#define KERNEL_NAME toy_direct_"), std::string::npos);
    EXPECT_NE(src->find("#define KERNEL_NAME " + name + "\n"), std::string::npos);
    EXPECT_NE(src->find("constexpr int kBX = 32;"), std::string::npos);
    EXPECT_NE(src->find("#line 1 \"templates/direct_phase.cu\""), std::string::npos);
    const LaunchPlan plan = Launches(p, c);
    ASSERT_EQ(plan.steps.size(), 1u);
    EXPECT_EQ(plan.steps[0].symbol, name);
    EXPECT_EQ(plan.steps[0].block[0], 32u);
    EXPECT_EQ(plan.steps[0].block[1], 4u);
    EXPECT_GE(plan.steps[0].grid[0], 1u);
    Problem f64 = p;  // its Candidates: f32 only
    f64.dtype = DType::kF64;
    EXPECT_EQ(toys(Candidates(f64)), 0);
  }
  EXPECT_EQ(FindFamily("toy_direct"), nullptr);
  const std::vector<Config> after = Candidates(p);
  EXPECT_EQ(toys(after), 0);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].Name(), before[i].Name());
  EXPECT_EQ(Config::FromJson(json).status().code(), Code::kInvalidArgument);
}

// The phase-channel form offers each family's six best sub-problem tiles and, for gemm_wgmma where
// those hold no ping-pong tile, the best one too (its stores overlap the other warpgroup's
// products): exactly one such tile beside the six, or none added where one is among them.
TEST(Registry, PhaseChannelFormsIncludeOnePingPongTile) {
  auto all = io::LoadProblems(CONVT3D_SOURCE_DIR "/problems/kernelbench_l1.json");
  ASSERT_TRUE(all.ok()) << all.status().message();
  int seen = 0;
  for (auto np : *all) {
    for (Precision mode : {Precision::kTf32, Precision::kFp32x3}) {
      np.problem.precision = mode;
      std::vector<Config> sub;
      for (const Config& c : Candidates(np.problem))
        if (c.lattice == 2 && c.family == "gemm_wgmma") sub.push_back(c);
      if (sub.empty()) continue;
      ++seen;
      const auto pp = std::count_if(sub.begin(), sub.end(), [](const Config& c) { return c.pp; });
      const bool in_six = std::any_of(sub.begin(), sub.begin() + std::min<size_t>(6, sub.size()),
                                      [](const Config& c) { return c.pp; });
      EXPECT_GE(pp, 1) << np.name;
      EXPECT_EQ(sub.size(), in_six ? std::min<size_t>(6, sub.size()) : 7u) << np.name;
      if (!in_six) {
        EXPECT_TRUE(sub.back().pp) << np.name << ": " << sub.back().Name();
      }
    }
  }
  EXPECT_GT(seen, 0);
}

}  // namespace
}  // namespace convt3d::gen
