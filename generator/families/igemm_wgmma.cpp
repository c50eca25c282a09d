// igemm_wgmma.cpp: the Hopper warpgroup-MMA implicit GEMM for stride-1 problems
// (templates/igemm_wgmma.cu, sm_90a): TF32, 3xTF32, BF16, FP16 operands from shared memory.
#include <algorithm>
#include <sstream>

#include "base/status.h"
#include "generator/families/igemm_shape.h"
#include "generator/families/wgmma_call.h"
#include "generator/family.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

// igemm_wgmma candidates (stride 1; tf32, fp32x3, bf16, f16 on an sm_90 target; at most 256
// channels per group): block N is the group's channels rounded up to 8, 1-2 warpgroups of 1-2 m64
// tiles (8 W x 8 H outputs each) stacked along W, H or D, one or two wgmma K steps per chunk;
// ranked by tile waste, then by halo positions loaded per output.
std::vector<Config> WgmmaCandidates(const Problem& p, const DeviceLimits& limits, int bn_cap) {
  const bool half = IsHalf(p.dtype);
  if (!limits.wgmma || p.stride[0] * p.stride[1] * p.stride[2] != 1) return {};
  if (!half && (p.dtype != DType::kF32 || p.precision == Precision::kFp32)) return {};
  const int split = half ? 1 : OperandSplit(p.precision);
  const int kstep = half ? 16 : 8;
  const int64_t cout_g = p.c_out / p.groups, cin_g = p.c_in / p.groups;
  // At most 256 channels per group. Several channel tiles (bn_cap below the group's channels)
  // run only for phase-channel sub-problems, which RandomSubpixel covers; plain problems get one
  // tile (RandomWgmma draws at most 150 channels per group).
  if (cout_g > 256) return {};
  const int bn = static_cast<int>(std::min<int64_t>((cout_g + 7) / 8 * 8, bn_cap));
  const Dim3 out = p.OutSize();
  std::vector<std::pair<double, Config>> scored[2];  // one tap row per step, all kH rows
  for (int whole_rows = 0; whole_rows < (p.kernel[1] > 1 ? 2 : 1); ++whole_rows)
    for (int wg : {2, 1}) {
      for (int mt : {1, 2}) {
        const int tiles = wg * mt;
        for (int bqd : {1, 2, 4}) {
          for (int th : {1, 2, 4}) {
            if (tiles % (bqd * th) != 0) continue;
            const int tw = tiles / (bqd * th);
            for (int ck : {kstep, 2 * kstep}) {
              if (ck > kstep && cin_g <= kstep) continue;
              Config c;
              c.family = "igemm_wgmma";
              c.dtype = p.dtype;
              c.bqd = bqd, c.bqh = 8 * th, c.bqw = 8 * tw, c.wg = wg, c.mt = mt, c.bn = bn;
              c.ck = ck, c.split = split;
              c.sr = whole_rows ? static_cast<int>(p.kernel[1]) : 1;
              const IgemmShape s = IgemmShapeOf(p, c);
              // 3xTF32 keeps a per-step partial sum beside the running one.
              const int regs = mt * bn / 2 * (split == 3 ? 2 : 1) + 48;
              if (s.threads > limits.max_threads_per_block || regs > limits.max_regs_per_thread ||
                  regs * s.threads > limits.max_regs_per_block ||
                  s.smem_bytes > std::min(113 * 1024, limits.max_smem_per_block))
                continue;
              double waste = 0;
              for (int i = 0; i < 3; ++i) {
                const int64_t covered = s.tiles[i] * (i == 0 ? c.bqd : i == 1 ? c.bqh : c.bqw);
                waste += static_cast<double>(covered - out[i]) / covered;
              }
              waste += static_cast<double>(s.co_tiles * bn - cout_g) / (s.co_tiles * bn);
              const double halo_per_output = static_cast<double>(s.plane) / (c.bqd * c.bqh * c.bqw);
              const double score = waste * 2 + halo_per_output * 0.1 + (wg == 2 ? 0 : 0.1) +
                                   (ck == kstep ? 0 : 0.05);
              scored[whole_rows].push_back({score, c});
            }
          }
        }
      }
    }
  // The eight best with one tap row per step, then the four best with all kH rows per step (a
  // kH times larger weight tile, kH times fewer barriers: small N gives a step little work).
  std::vector<Config> out_configs;
  for (int whole_rows = 0; whole_rows < 2; ++whole_rows) {
    auto& list = scored[whole_rows];
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < list.size() && i < (whole_rows ? 4u : 8u); ++i)
      out_configs.push_back(list[i].second);
  }
  return out_configs;
}

bool SeveralRows(const Config& c) { return c.sr > 1; }

class IgemmWgmma final : public Family {
 public:
  std::string_view name() const override { return "igemm_wgmma"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        {"bqd", &Config::bqd, "_q"},  // the block's output box: D x H x W (H, W multiples of 8)
        {"bqh", &Config::bqh, "x"},
        {"bqw", &Config::bqw, "x"},
        {"wg", &Config::wg, "_g"},  // warpgroups
        {"mt", &Config::mt, "_m"},  // m64 tiles (8 W x 8 H outputs) per warpgroup
        {"bn", &Config::bn, "_n"},  // output channels (wgmma N)
        {"ck", &Config::ck, "_k"},  // input channels per stage
        {"split", &Config::split, nullptr, nullptr, Field::kRequired, 1, 3},
        // tap rows (kH taps) per pipeline step: 1, or all kH
        {"sr", &Config::sr, "_r", nullptr, 1, 1, INT_MAX, false, SeveralRows},
    };
    return f;
  }
  std::string Token(const Config& c) const override { return OperandToken(c); }
  Status CheckFields(const Config& c) const override {
    if (c.split == 2) return InvalidArgument(StrCat("bad split in ", c.ToJson()));
    if (c.bqh % 8 != 0 || c.bqw % 8 != 0 || c.bn % 8 != 0 || c.bn > 256 ||
        c.bqd * (c.bqh / 8) * (c.bqw / 8) != c.wg * c.mt)
      return InvalidArgument(StrCat("inconsistent igemm_wgmma tile in ", c.ToJson()));
    return Status();
  }

  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext& ctx) const override {
    return WgmmaCandidates(p, limits, ctx.max_block_n);
  }
  bool TensorCoreGemm() const override { return true; }
  // With at most 48 output channels a step of one tap row is little work for its barrier: the
  // best-ranked tile taking all kH rows per step.
  Config Pick(const Problem&, const std::vector<Config>& all) const override {
    if (all.front().bn <= 48)
      for (const Config& o : all)
        if (o.family == name() && o.sr > 1) return o;
    return all.front();
  }
  // Six of its tiles, and apart the first two with all kH tap rows per step (ranked after the
  // others, they would not be reached, and they win where the sub-problem has few channels).
  int SubLatticeQuota(const Config& c, std::string* bucket) const override {
    if (bucket && c.sr > 1) *bucket = "igemm_wgmma_rows";
    return c.sr > 1 ? 2 : 6;
  }
  bool RunsPhaseChannels() const override { return true; }
  // One channel tile covers every phase channel: the input is read once.
  bool PrefersPhaseChannels(const Problem& sub, const Config& plain) const override {
    return IgemmShapeOf(sub, plain).co_tiles == 1;
  }

  KernelSet Kernels(const Problem&, const Config&) const override { return {true, true, false}; }
  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    const IgemmShape sh = IgemmShapeOf(p, c);
    IgemmPreambleHead(c, sh, os);
    DefInt(os, "kWG", c.wg);
    DefInt(os, "kMT", c.mt);
    DefInt(os, "kBN", c.bn);
    DefInt(os, "kSR", c.sr);
    DefInt(os, "kSPLIT", c.split);
    DefInt(os, "kCG", sh.cg);
    os << WgmmaFunction(c.dtype, c.bn);
    PhaseClasses(p, os);
    return Status();
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh", "phases.cuh", "operands.cuh", "wgmma.cuh", "igemm_wgmma.cu"};
  }
  bool ArchSpecific() const override { return true; }

  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    return TensorCoreLaunches(p, c, named);
  }
};

}  // namespace

const Family& IgemmWgmmaFamily() { return FamilyInstance<IgemmWgmma>(); }

}  // namespace convt3d::gen
