// gemm_simt.cpp: the per-phase implicit GEMM in strict fp32 FFMA for any stride
// (templates/gemm_simt.cu): register tiles of 8 rows x 4 or 8 channels, persistent, cp.async.
#include <algorithm>
#include <climits>

#include "base/math.h"
#include "base/status.h"
#include "generator/families/phase_gemm.h"
#include "generator/family.h"
#include "generator/phases.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

constexpr int kSmemPerSm = 228 * 1024;  // what the scheduler leaves the blocks of one SM
constexpr int kRankSms = 132;           // the SMs the ranking assumes (H100 SXM, H200)

// Derived sizes of a gemm_simt candidate, shared by ranking, preamble and launches.
struct SimtShape : PhaseGemm {
  int bm = 32, bn = 32, threads = 32, smem_bytes = 0, blocks_per_sm = 1;
  int64_t w_bytes = 0, x_bytes = 0;
  int64_t part_offset = 0, part_bytes = 0;  // the split sums (sk > 1) after the re-laid input
};

// Registers per thread: the tile's sums twice (a stage's apart), a K step's 8 x 4 A values and
// its B values, and ~48 for addresses and the copies' rows.
int Registers(int tn) { return 2 * 8 * tn + 32 + tn + 48; }

// Blocks per SM the registers allow, at most 4: the stage count is sized for this many, so that
// small tiles leave shared memory for more blocks. (Launches ask for at most 2 per SM, the form
// measured on the GPU, except split-K forms; see ShapeOf.)
int BlocksByRegisters(int tn, int threads) {
  return std::max(1, std::min(4, 65536 / (Registers(tn) * threads)));
}

SimtShape ShapeOf(const Problem& p, const Config& c) {
  SimtShape s;
  s.bm = 32 * c.wm;
  s.bn = 8 * c.tn * c.wn;
  static_cast<PhaseGemm&>(s) = PhaseGemmOf(p, s.bm, s.bn, c.ck);
  s.threads = 32 * c.wm * c.wn;
  s.smem_bytes = c.st * (s.bm * (c.ck + 4) + c.ck * s.bn) * 4;
  // Split-K forms exist for layers with too few tiles to fill the GPU: their persistent grid
  // takes as many blocks as fit (a cap of 2 kept MUN-1 at 4 warps per SM whatever the split).
  const int most = c.sk > 1 ? 4 : 2;
  s.blocks_per_sm = std::max(
      1, std::min({most, kSmemPerSm / (s.smem_bytes + 1024), BlocksByRegisters(c.tn, s.threads)}));
  s.w_bytes = p.groups * s.ntiles * s.stages_all * c.ck * s.bn * 4;
  s.x_bytes = p.n * p.groups * p.in[0] * p.in[1] * p.in[2] * s.cp * 4;
  s.part_offset = CeilDiv(RelaidInputOffset(s.w_bytes) + s.x_bytes, 256) * 256;
  s.part_bytes = c.sk > 1 ? s.total_tiles * c.sk * s.bm * s.bn * 4 : 0;
  return s;
}

bool Applies(const Problem& p) {
  if (p.dtype != DType::kF32 || p.precision != Precision::kFp32) return false;
  return PhaseGemmFits(p);
}

// Lower is better: rows, channels and K padding wasted, the idle share of the last wave of
// tiles, and shared-memory reads per product (small tiles reread more; a thread tile of 4
// channels reuses each A value half as often as one of 8).
double Score(const Problem& p, const Config& c, const SimtShape& s) {
  const int64_t slots = int64_t{kRankSms} * s.blocks_per_sm;
  return PhaseGemmWaste(p, s, s.bm, s.bn, s.total_tiles * c.sk, slots) + 2.0 / c.tn +
         0.25 * (64.0 / s.bm + 64.0 / s.bn);
}

// gemm_simt candidates (strict fp32): warp tiles of 32 rows x 32 or 64 channels, 1-4 warps along
// M and 1-2 along N (64-256 threads), stages of 16 or 32 input channels (16 only where it pads
// the group's channels less), 2-4 stages as shared memory allows; the best by Score in both tile
// orders.
std::vector<Config> SimtCandidates(const Problem& p, const DeviceLimits& limits, int max_bn) {
  if (!Applies(p)) return {};
  const int64_t cin_g = p.c_in / p.groups, cout_g = p.c_out / p.groups;
  std::vector<std::pair<double, Config>> scored;
  for (int ck : {32, 16}) {
    if (ck == 16 && CeilDiv(cin_g, 16) * 16 >= CeilDiv(cin_g, 32) * 32) continue;
    for (int tn : {8, 4})
      for (int wm : {4, 2, 1})
        for (int wn : {2, 1}) {
          Config c;
          c.family = "gemm_simt";
          c.wm = wm, c.wn = wn, c.tn = tn, c.ck = ck;
          const int bn = 8 * tn * wn, threads = 32 * wm * wn;
          // No channel tile twice as wide as the group's channels; at least two warps.
          if (bn >= 2 * std::max<int64_t>(cout_g, 32) || bn > max_bn || threads < 64) continue;
          // The most stages (2-4) that fit the shared memory of the blocks the registers allow
          // (at most 4 per SM).
          const int blocks = BlocksByRegisters(tn, threads);
          const int cap = std::min(limits.max_smem_per_block, kSmemPerSm / blocks - 1024);
          for (c.st = 4; c.st > 2 && ShapeOf(p, c).smem_bytes > cap;) --c.st;
          const SimtShape s = ShapeOf(p, c);
          if (s.smem_bytes > limits.max_smem_per_block || s.threads > limits.max_threads_per_block)
            continue;
          if (s.cp > 4 * cin_g) continue;  // the re-laid input: at most 4x the input
          scored.push_back({Score(p, c, s), c});
        }
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  // The five best with the phases of a row tile consecutive (they share input rows and write
  // neighbouring outputs), and the three best with each phase's tiles in turn, most taps first
  // (a shorter tail where the phases' tap counts differ); with one stride phase (a stride-1 or
  // phase-channel problem) the order means nothing: the six best.
  std::vector<Config> out;
  const bool one_phase = PhaseGemmOf(p, 32, 32, 32).work.size() == 1;
  for (int po : {1, 0})
    for (size_t i = 0; i < scored.size() && i < (one_phase ? (po ? 0u : 6u) : po ? 5u : 3u); ++i) {
      Config c = scored[i].second;
      c.po = po;
      out.push_back(c);
    }
  // Where the best tiles leave most SMs idle (fewer than two waves), the three best again with
  // each tile's stages split into parts (about four waves of work items, each at least 2 stages)
  // and as many blocks per SM as fit.
  for (size_t i = 0; i < scored.size() && i < 3; ++i) {
    Config c = scored[i].second;
    const SimtShape s = ShapeOf(p, c);
    if (s.total_tiles >= 2 * int64_t{kRankSms} * s.blocks_per_sm) continue;
    Config split = c;
    split.sk = 2;
    const int64_t slots = int64_t{kRankSms} * ShapeOf(p, split).blocks_per_sm;
    int64_t min_stages = INT64_MAX;
    for (const PhaseWork& pw : s.work)
      if (pw.taps > 0) min_stages = std::min(min_stages, pw.taps * s.cp / c.ck);
    const int64_t sk = std::min<int64_t>(
        {8, CeilDiv(4 * slots, s.total_tiles), std::max<int64_t>(1, min_stages / 2)});
    if (sk < 2) continue;
    c.sk = static_cast<int>(sk);
    c.po = one_phase ? 0 : 1;
    out.push_back(c);
  }
  return out;
}

constexpr const char* kPhaseOrderLabels[] = {"", "_pi"};

class GemmSimt final : public Family {
 public:
  std::string_view name() const override { return "gemm_simt"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        {"wm", &Config::wm, "_w", nullptr, Field::kRequired, 1, 4},   // warps along M (32 rows)
        {"wn", &Config::wn, "x", nullptr, Field::kRequired, 1, 2},    // warps along N
        {"tn", &Config::tn, "_n", nullptr, Field::kRequired, 4, 8},   // channels per thread
        {"ck", &Config::ck, "_k", nullptr, Field::kRequired, 4, 64},  // input channels per stage
        {"st", &Config::st, "_s", nullptr, Field::kRequired, 2, 8},   // pipeline stages
        // 1: the phases of a row tile are consecutive tiles
        {"po", &Config::po, nullptr, kPhaseOrderLabels, 0, 0, 1, true},
        {"sk", &Config::sk, "_sk", nullptr, 1, 1, 64, true},  // K splits per tile
    };
    return f;
  }
  Status CheckFields(const Config& c) const override {
    if ((c.tn != 4 && c.tn != 8) || c.ck % 4 != 0 || (32 * c.wm * c.wn) % (c.ck / 4) != 0 ||
        (32 * c.wm) % (32 * c.wm * c.wn / (c.ck / 4)) != 0)
      return InvalidArgument(StrCat("gemm_simt: tn must be 4 or 8 and ck a multiple of 4 that ",
                                    "splits the block's rows evenly (", c.ToJson(), ")"));
    return Status();
  }
  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext& ctx) const override {
    return SimtCandidates(p, limits, ctx.max_block_n);
  }
  // First on strided problems with at least 64 output channels per group, so that it is the
  // untuned pick there (it won every such model layer in strict fp32, 1.05-1.95x cuDNN on the
  // GAN and video layers); after the first four on other strided problems (it also won MUN-2
  // with 32); last on stride-1 problems, where fft, winograd and direct_tile are built for the
  // shape.
  Placement Place(const Problem& p, const RankContext&) const override {
    if (p.stride[0] * p.stride[1] * p.stride[2] == 1) return {Placement::kBack};
    return {p.c_out / p.groups >= 64 ? Placement::kFront : Placement::kAfterFirstFour};
  }
  // Its epilogue maps columns through OutputRow/OutputCol, so it runs the phase-channel form
  // (kernel == stride layers: one GEMM with N = phases x C_out, the input read once).
  bool RunsPhaseChannels() const override { return true; }
  KernelSet Kernels(const Problem&, const Config& c) const override {
    return {true, true, c.sk > 1};
  }
  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    const SimtShape s = ShapeOf(p, c);
    DefInt(os, "kWM", c.wm);
    DefInt(os, "kWN", c.wn);
    DefInt(os, "kTN", c.tn);
    DefInt(os, "kST", c.st);
    DefInt(os, "kSplit", 0);
    DefInt(os, "kMinBlocks", s.blocks_per_sm);
    DefInt(os, "kSK", c.sk);
    DefLong(os, "kPartOffset", s.part_offset);
    PhaseGemmConstants(s, s.bm, s.bn, c.ck, c.po == 1, os);
    return Status();
  }
  void Tables(const Problem& p, const Config& c, std::ostream& os) const override {
    const SimtShape s = ShapeOf(p, c);
    PhaseWorkTable(s, os);
    TapSlotTables(s, os);
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh", "phases.cuh", "operands.cuh", "phase_gemm.cuh", "gemm_simt.cu"};
  }

  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    const SimtShape s = ShapeOf(p, c);
    // The weight packing: a block per (group, channel tile, input channel).
    const int64_t prep_blocks = p.groups * s.ntiles * s.cp;
    LaunchPlan plan =
        PhaseGemmLaunches(named.Name(), s.w_bytes, s.x_bytes, 4, s.total_tiles * c.sk, s.threads,
                          s.smem_bytes, s.blocks_per_sm, prep_blocks * 256);
    if (c.sk > 1) {  // the split sums, then their sum into y
      plan.workspace_bytes = static_cast<size_t>(s.part_offset + s.part_bytes);
      plan.steps.push_back(GridStride(named.Name() + "_post", s.total_tiles * s.bm * s.bn, 8192,
                                      {Arg::kWorkspace, Arg::kBias, Arg::kY}));
    }
    return plan;
  }
};

}  // namespace

const Family& GemmSimtFamily() { return FamilyInstance<GemmSimt>(); }

}  // namespace convt3d::gen
