// direct_phase.cpp: the direct gather with stride-phase decomposition (templates/direct_phase.cu),
// every dtype and every problem: the fallback that always applies.
#include <algorithm>

#include "generator/family.h"
#include "generator/phases.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

// The thread-block shapes tried: wide rows for long W, taller blocks for short W.
constexpr int kBlockShapes[][2] = {{64, 2}, {128, 1}, {32, 4}, {32, 8}};
constexpr int kOutputsPerThread[] = {1, 2, 4};
constexpr int kChannelsPerThread[] = {1, 2, 4, 8, 16};

// A rough register estimate: accumulators plus the per-tap weight registers plus addressing.
int EstimatedRegs(const Config& c) {
  const int words = c.dtype == DType::kF64 ? 2 : 1;  // accumulators are f32 unless f64
  return (c.cob * c.opt + c.cob) * words + 40;
}

int64_t QCountW(const Problem& p) {
  const Dim3 out = p.OutSize();
  return PhasesOf(p.kernel[2], p.stride[2], p.padding[2], p.dilation[2], out[2]).max_q_count;
}

bool Fits(const Config& c, const DeviceLimits& l) {
  const int threads = c.bx * c.by;
  const int regs = EstimatedRegs(c);
  return threads <= l.max_threads_per_block && regs <= l.max_regs_per_thread &&
         regs * threads <= l.max_regs_per_block;
}

// Blocks of the grid: W tiles of one W phase, per W phase, H tiles, output planes, channel
// blocks, samples.
int64_t TotalBlocks(const Problem& p, const Config& c) {
  const int64_t wtiles = (QCountW(p) + c.bx * c.opt - 1) / (c.bx * c.opt);
  const int64_t htiles = (p.OutSize()[1] + c.by - 1) / c.by;
  return wtiles * p.stride[2] * htiles * p.OutSize()[0] * (p.c_out / c.cob) * p.n;
}

class DirectPhase final : public Family {
 public:
  std::string_view name() const override { return "direct_phase"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        {"bx", &Config::bx, "_x"},    // threads along W
        {"by", &Config::by, "y"},     // threads along output rows
        {"opt", &Config::opt, "_o"},  // outputs per thread along W (same W phase, bx apart)
        {"cob", &Config::cob, "_c"},  // output channels per thread
    };
    return f;
  }

  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext&) const override {
    const int64_t cout_g = p.c_out / p.groups;
    const int64_t qw = QCountW(p);
    const int64_t rows = p.OutSize()[1];
    std::vector<std::pair<double, Config>> scored;
    for (const auto& shape : kBlockShapes) {
      for (int opt : kOutputsPerThread) {
        for (int cob : kChannelsPerThread) {
          Config c;
          c.dtype = p.dtype;
          c.bx = shape[0];
          c.by = shape[1];
          c.opt = opt;
          c.cob = cob;
          if (cout_g % cob != 0 || !Fits(c, limits)) continue;
          // A W tile far longer than a phase's row only adds idle threads.
          if (opt > 1 && static_cast<int64_t>(c.bx) * (opt / 2) >= qw) continue;
          if (c.by > 1 && c.by / 2 >= rows) continue;
          if (c.cob * c.opt > (p.dtype == DType::kF64 ? 16 : 32)) continue;
          // Rank: reuse of each input load across output channels matters most, then outputs
          // per thread, then fuller W tiles. Only ordering, never correctness, depends on it.
          const double waste =
              static_cast<double>((c.bx * c.opt - qw % (c.bx * c.opt)) % (c.bx * c.opt)) /
              static_cast<double>(qw + c.bx * c.opt);
          const double score = -std::min(c.cob, 8) * 1.0 - std::min(c.opt, 2) * 0.5 + waste * 4 +
                               (c.cob == 16 ? 0.25 : 0) + (c.opt == 4 ? 0.25 : 0);
          scored.push_back({score, c});
        }
      }
    }
    std::stable_sort(scored.begin(), scored.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Config> out;
    for (const auto& s : scored) out.push_back(s.second);
    return out;
  }
  // The fallback: every configuration where nothing else applies; where the implicit GEMMs
  // apply it rarely wins, and then with one of its first-ranked configurations.
  Placement Place(const Problem&, const RankContext& ctx) const override {
    Placement at;
    if (ctx.total > 0) at.cap = ctx.tensor_tiles ? 2 : 6;
    return at;
  }

  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    const int64_t wtiles = (QCountW(p) + c.bx * c.opt - 1) / (c.bx * c.opt);
    DefLong(os, "kWTiles", wtiles);
    DefLong(os, "kHTiles", (p.OutSize()[1] + c.by - 1) / c.by);
    DefLong(os, "kCoBlocks", p.c_out / p.groups / c.cob);
    DefLong(os, "kTotalBlocks", TotalBlocks(p, c));
    DefInt(os, "kBX", c.bx);
    DefInt(os, "kBY", c.by);
    DefInt(os, "kOPT", c.opt);
    DefInt(os, "kCOB", c.cob);
    return Status();
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh", "phases.cuh", "direct_phase.cu"};
  }

  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    LaunchStep main =
        Step(named.Name(), TotalBlocks(p, c), c.bx, 0, {Arg::kX, Arg::kW, Arg::kBias, Arg::kY});
    main.block[1] = c.by;
    return OneKernel(main);
  }
};

}  // namespace

const Family& DirectPhaseFamily() { return FamilyInstance<DirectPhase>(); }

}  // namespace convt3d::gen
