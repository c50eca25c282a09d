// igemm_simt.cpp: the strict-fp32 FFMA implicit GEMM per stride phase with a shared-memory halo
// (templates/igemm_simt.cu).
#include <algorithm>

#include "generator/families/igemm_shape.h"
#include "generator/family.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

// igemm_simt candidates: block N covers the group's channels (up to 64), 4 or 8 consecutive W
// outputs per thread, 128-512 threads, and a stage depth that fits 48 KB of shared memory.
std::vector<Config> IgemmCandidates(const Problem& p, const DeviceLimits& limits) {
  std::vector<std::pair<double, Config>> scored;
  if (p.dtype != DType::kF32) return {};
  const int64_t cout_g = p.c_out / p.groups;
  for (int tn : {8, 4, 2, 1}) {
    for (int nt : {8, 6, 4, 3, 2, 1}) {
      const int bn = tn * nt;
      if (cout_g % bn != 0 || bn > 64) continue;
      for (int tm : {4, 8}) {
        for (int bqw : {16, 32, 64}) {
          for (int bqh : {1, 2, 4, 8}) {
            for (int ck : {1, 2, 4, 8}) {
              Config c;
              c.family = "igemm_simt";
              c.tn = tn, c.nt = nt, c.tm = tm, c.bqw = bqw, c.bqh = bqh, c.bqd = 1, c.ck = ck;
              // At most 32 outputs per thread: 8x8 needs 128 accumulator registers with the
              // two-level sum, leaving too few for the operand window and too few warps per SM;
              // it was never close to the best in H100 trials (see bench/JOURNAL.md).
              if (bqw % tm != 0 || bqw / tm < 2 || tm * tn > 32) continue;
              const IgemmShape s = IgemmShapeOf(p, c);
              const int regs = 2 * tm * tn + s.lpad + tm + tn + 48;
              if (s.threads < 64 || s.threads > std::min(512, limits.max_threads_per_block) ||
                  s.smem_bytes > std::min(48 * 1024, limits.max_smem_per_block) ||
                  regs > limits.max_regs_per_thread || regs * s.threads > limits.max_regs_per_block)
                continue;
              // Rank by the tile's shape: many outputs per thread (reuse), the whole channel
              // group per block (input halo read once), little W tile waste, enough threads.
              const double waste =
                  static_cast<double>(s.tiles[2] * bqw - s.qmax[2]) / (s.tiles[2] * bqw);
              const double reuse = std::min(tm * tn, 32) / 32.0;
              const double full_n = static_cast<double>(bn) / std::min<int64_t>(cout_g, 64);
              const double threads = s.threads >= 128 && s.threads <= 256 ? 1.0 : 0.7;
              const double stage = s.smem_bytes >= 8 * 1024 ? 1.0 : 0.8;
              const double score = reuse * 3 + full_n * 2 + threads + stage - waste * 2;
              scored.push_back({-score, c});
            }
          }
        }
      }
    }
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Config> out;
  for (size_t i = 0; i < scored.size() && out.size() < 16; ++i) out.push_back(scored[i].second);
  return out;
}

class IgemmSimt final : public Family {
 public:
  std::string_view name() const override { return "igemm_simt"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        {"bqd", &Config::bqd, "_q"},  // the block's box of one phase: D x H x W positions
        {"bqh", &Config::bqh, "x"},  {"bqw", &Config::bqw, "x"},
        {"tm", &Config::tm, "_t"},  // consecutive W outputs per thread
        {"tn", &Config::tn, "x"},   // output channels per thread
        {"nt", &Config::nt, "_n"},  // channel groups per block (block N = tn * nt)
        {"ck", &Config::ck, "_k"},  // input channels per shared-memory stage
    };
    return f;
  }

  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext&) const override {
    return IgemmCandidates(p, limits);
  }
  // Where tensor cores are allowed, a couple stay as the fallback for shapes the tensor-core
  // tiles waste; on dense strict shapes direct_tile beats it, so a few stay behind those.
  Placement Place(const Problem&, const RankContext& ctx) const override {
    Placement at;
    if (ctx.tensor_tiles)
      at.cap = 2;
    else if (ctx.dense && ctx.CountOf("direct_tile") > 0)
      at.cap = 4;
    return at;
  }

  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    PhaseTilePreamble(p, c, os);
    DefInt(os, "kTM", c.tm);
    DefInt(os, "kTN", c.tn);
    DefInt(os, "kNT", c.nt);
    PhaseClasses(p, os);
    return Status();
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh", "phases.cuh", "igemm_tile.cuh", "operands.cuh", "igemm_simt.cu"};
  }

  // Its shared memory is static, so the launch asks for none.
  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    const IgemmShape s = IgemmShapeOf(p, c);
    return OneKernel(
        Step(named.Name(), s.blocks, s.threads, 0, {Arg::kX, Arg::kW, Arg::kBias, Arg::kY}));
  }
};

}  // namespace

const Family& IgemmSimtFamily() { return FamilyInstance<IgemmSimt>(); }

}  // namespace convt3d::gen
