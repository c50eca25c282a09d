// registry.cpp: the list of kernel families, and the candidates, pick and launches of a problem.
#include <algorithm>
#include <map>
#include <utility>

#include "base/status.h"
#include "generator/candidates.h"
#include "generator/family.h"
#include "generator/lattice.h"
#include "generator/phases.h"

namespace convt3d::gen {

// Each family's module (generator/families/<name>.cpp) defines its accessor.
const Family& IgemmWgmmaFamily();
const Family& IgemmMmaFamily();
const Family& DirectTileFamily();
const Family& IgemmSimtFamily();
const Family& WinogradFamily();
const Family& FftFamily();
const Family& DirectPhaseFamily();
const Family& GemmWgmmaFamily();
const Family& ShuffleWgmmaFamily();
const Family& ShuffleSimtFamily();
const Family& GemmSimtFamily();
const Family& NarrowGemmFamily();
const Family& CellSimtFamily();
const Family& OverlapWgmmaFamily();

// The ranking order: each family places its candidates after seeing what those above produced.
static std::vector<const Family*>& MutableFamilies() {
  static std::vector<const Family*> families = {
      &IgemmWgmmaFamily(),   &IgemmMmaFamily(),     &DirectTileFamily(),  &IgemmSimtFamily(),
      &WinogradFamily(),     &FftFamily(),          &DirectPhaseFamily(), &GemmWgmmaFamily(),
      &ShuffleWgmmaFamily(), &GemmSimtFamily(),     &NarrowGemmFamily(),  &ShuffleSimtFamily(),
      &CellSimtFamily(),     &OverlapWgmmaFamily(),
  };
  return families;
}

const std::vector<const Family*>& Families() { return MutableFamilies(); }

ScopedFamily::ScopedFamily(const Family* family) : family_(family) {
  MutableFamilies().push_back(family);
}

ScopedFamily::~ScopedFamily() {
  auto& all = MutableFamilies();
  all.erase(std::remove(all.begin(), all.end(), family_), all.end());
}

const Family* FindFamily(std::string_view name) {
  for (const Family* f : Families())
    if (f->name() == name) return f;
  return nullptr;
}

const Family& FamilyOf(const Config& c) {
  const Family* f = FindFamily(c.family);
  if (f == nullptr) std::abort();  // a Config is only made by a family module or FromJson
  return *f;
}

size_t RankContext::CountOf(std::string_view family) const {
  for (const auto& [name, n] : counts)
    if (name == family) return n;
  return 0;
}

std::string OperandToken(const Config& c) {
  if (c.dtype != DType::kF32) return DTypeName(c.dtype);
  return c.split == 4 ? "3xf16" : c.split == 3 ? "3xtf32" : "tf32";
}

int OperandSplit(Precision precision) { return precision == Precision::kFp32x3 ? 3 : 1; }

Status NotApplicable(const Problem& p, const Config& c) {
  return InvalidArgument(StrCat(c.Name(), " does not apply to ", p.Signature()));
}

LaunchStep Step(std::string symbol, int64_t blocks, unsigned threads, unsigned smem_bytes,
                std::vector<Arg> args) {
  LaunchStep step;
  step.symbol = std::move(symbol);
  step.grid[0] = static_cast<unsigned>(std::min<int64_t>(blocks, 0x7fffffff));
  step.block[0] = threads;
  step.smem_bytes = smem_bytes;
  step.args = std::move(args);
  return step;
}

LaunchStep GridStride(std::string symbol, int64_t items, int64_t max_blocks,
                      std::vector<Arg> args) {
  return Step(std::move(symbol), std::clamp<int64_t>((items + 255) / 256, 1, max_blocks), 256, 0,
              std::move(args));
}

LaunchStep WeightPrep(std::string symbol, int64_t items, int64_t max_blocks) {
  LaunchStep step = GridStride(std::move(symbol), items, max_blocks, {Arg::kW, Arg::kWorkspace});
  step.weight_only = true;
  return step;
}

LaunchPlan OneKernel(LaunchStep main) {
  LaunchPlan plan;
  plan.steps.push_back(std::move(main));
  return plan;
}

bool HasWgmma(const std::string& arch) { return arch == "sm_90"; }

std::string CompileArch(const Config& c, const std::string& arch) {
  return FamilyOf(c).ArchSpecific() && HasWgmma(arch) ? arch + "a" : arch;
}

std::vector<Config> RankedCandidates(const std::vector<const Family*>& families, const Problem& p,
                                     const DeviceLimits& limits, int max_block_n) {
  RankContext ctx;
  ctx.max_block_n = max_block_n;
  ctx.products = p.c_in / p.groups;
  for (int i = 0; i < 3; ++i)
    ctx.products *=
        PhasesOf(p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], p.OutSize()[i]).max_taps;
  ctx.dense = ctx.products > 1024;
  std::vector<Config> out;
  for (const Family* f : families) {
    std::vector<Config> mine = f->Candidates(p, limits, ctx);
    const Placement at = f->Place(p, ctx);
    if (mine.size() > at.cap) mine.resize(at.cap);
    const size_t pos = at.where == Placement::kFront            ? 0
                       : at.where == Placement::kAfterFirstFour ? std::min<size_t>(out.size(), 4)
                                                                : out.size();
    out.insert(out.begin() + pos, mine.begin(), mine.end());
    ctx.counts.emplace_back(f->name(), mine.size());
    ctx.total = out.size();
    if (f->TensorCoreGemm() && !mine.empty()) ctx.tensor_tiles = true;
  }
  return out;
}

// Stride == dilation problems (generator/lattice.h) also get the best-ranked stride-1 kernels of
// their sub-lattice, first (no empty phases to walk); other strided problems, last, the
// phase-channel form's tiles of the families that run it.
std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits) {
  std::vector<Config> out = RankedCandidates(Families(), p, limits);
  if (const Lattice l = LatticeOf(p); l.kind == Lattice::kSubLattice) {
    std::vector<Config> lat;
    std::map<std::string, int> taken;  // per family's quota bucket
    for (Config c : RankedCandidates(Families(), l.sub, limits)) {
      std::string bucket(c.family);
      const int quota = FamilyOf(c).SubLatticeQuota(c, &bucket);
      if (quota == 0 || taken[bucket]++ >= quota) continue;
      c.lattice = 1;
      lat.push_back(c);
    }
    out.insert(out.begin(), lat.begin(), lat.end());
  } else if (const Lattice pc = PhaseChannelsOf(p); pc.kind == Lattice::kPhaseChannels) {
    // Channel tiles of at most 128: the phase channels multiply C_out, and wider tiles spill.
    for (const Family* f : Families()) {
      if (!f->RunsPhaseChannels()) continue;
      std::vector<Config> sub = RankedCandidates({f}, pc.sub, limits, 128);
      const size_t take = std::min<size_t>(sub.size(), 6);
      // And the best ping-pong tile where the first six hold none: one warpgroup's stores then
      // run under the other's products, which is what write-bound phase-channel problems need
      // (many outputs per product: L1-73's sub-problem has 256 channels of K = 256).
      const auto pp = [](const Config& c) { return c.pp != 0; };
      size_t extra = sub.size();
      if (std::none_of(sub.begin(), sub.begin() + take, pp))
        extra = std::find_if(sub.begin() + take, sub.end(), pp) - sub.begin();
      for (size_t i = 0; i < sub.size(); ++i) {
        if (i >= take && i != extra) continue;
        sub[i].lattice = 2;
        out.push_back(sub[i]);
      }
    }
  }
  return out;
}

Config HeuristicPick(const Problem& p, const DeviceLimits& limits) {
  // Candidates() is never empty: direct_phase applies to every problem.
  auto all = Candidates(p, limits);
  if (all.empty()) {
    Config c;
    c.dtype = p.dtype;
    return c;
  }
  // Lattice problems: the sub-problem's own pick, where it is one of the lattice candidates (on
  // GPUs without wgmma the sub-problem's pick may be a family that cannot run it: then the
  // plain problem's rules below, on the plain candidates).
  if (all.front().lattice == 1) {
    Config c = HeuristicPick(LatticeOf(p).sub, limits);
    c.lattice = 1;
    for (const Config& o : all)
      if (o == c) return o;
    if (FamilyOf(c).SubLatticeQuota(c, nullptr) > 0) return all.front();
  }
  // The phase-channel form wins where its first tile covers every output channel in one tile
  // and the group has at least 8 input channels (enough K per product to amortise the zeros),
  // unless the first plain candidate's family claims the problem.
  const auto first_plain =
      std::find_if(all.begin(), all.end(), [](const Config& o) { return o.lattice == 0; });
  if (first_plain != all.end() && FamilyOf(*first_plain).PickOverPhaseChannels(p, *first_plain))
    return *first_plain;
  if (p.c_in / p.groups >= 8)
    for (const Config& o : all)
      if (o.lattice == 2) {
        if (FamilyOf(o).PrefersPhaseChannels(PhaseChannelsOf(p).sub, o.Plain())) return o;
        break;
      }
  all.erase(std::remove_if(all.begin(), all.end(), [](const Config& o) { return o.lattice != 0; }),
            all.end());
  return FamilyOf(all.front()).Pick(p, all);
}

LaunchPlan Launches(const Problem& p, const Config& c) {
  if (!c.lattice) return FamilyOf(c).Launches(p, c, c);
  const Lattice l = LatticeFor(p, c.lattice);
  LaunchPlan plan = FamilyOf(c).Launches(l.sub, c.Plain(), c);
  if (l.kind != Lattice::kSubLattice) return plan;  // phase channels write every output
  // The outputs off the lattice get bias (or zero) first: 16-byte stores, grid-stride, 8 blocks
  // of 256 threads per SM cover them.
  const int64_t vectors = p.OutputElements() * DTypeBytes(p.dtype) / 16;
  plan.steps.insert(plan.steps.begin(),
                    GridStride(c.Name() + "_fill", vectors, 1056, {Arg::kBias, Arg::kY}));
  return plan;
}

}  // namespace convt3d::gen
