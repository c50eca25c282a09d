// igemm_mma.cpp: the mma.sync implicit GEMM per stride phase, or over all phases of a tile in one
// block (templates/igemm_mma.cu): TF32, 3xTF32, BF16, FP16 operands.
#include <algorithm>

#include "base/status.h"
#include "generator/families/igemm_shape.h"
#include "generator/family.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

// igemm_mma candidates (tf32, fp32x3, bf16, f16): block N covers the group's channels (rounded up
// to 8, or tiles of 64/128 beyond 128), 64-256 outputs per block, 2-8 warps; ranked by the shared
// memory bytes each mma needs (the bound at small N), then tile waste.
std::vector<Config> MmaCandidates(const Problem& p, const DeviceLimits& limits) {
  std::vector<std::pair<double, Config>> scored;
  const bool half = IsHalf(p.dtype);
  if (!half && (p.dtype != DType::kF32 || p.precision == Precision::kFp32)) return {};
  // kWOff holds one long long per stride phase in __constant__ memory (64 KiB in all), and
  // IgemmShapeOf walks every phase for each tile tried: at most 4096 phases.
  if (p.stride[0] * p.stride[1] * p.stride[2] > 4096) return {};
  const int split = OperandSplit(p.precision);
  const int kstep = half ? 16 : 8;  // K of one mma
  const int64_t cout_g = p.c_out / p.groups, cin_g = p.c_in / p.groups;
  std::vector<int> bns;
  if (cout_g <= 128)
    bns.push_back(static_cast<int>((cout_g + 7) / 8 * 8));
  else
    bns = {128, 64};
  for (int bn : bns) {
    for (int wn : {1, 2, 4}) {
      if ((bn / 8) % wn != 0 || bn / 8 / wn > 8) continue;
      const int nt8 = bn / 8 / wn;
      for (int bqw : {16, 32, 64}) {
        for (int bqh : {1, 2, 4, 8}) {
          const int bm = bqw * bqh;
          if (bm < 64 || bm > 256) continue;
          for (int wm : {1, 2, 4, 8}) {
            if (bm % (16 * wm) != 0) continue;
            const int mt = bm / 16 / wm;
            const int warps = wm * wn;
            if (mt < 2 || mt > 8 || warps < 2 || warps > 8) continue;
            for (int ck : {kstep, 2 * kstep}) {
              if (ck > kstep && cin_g <= kstep) continue;
              Config c;
              c.family = "igemm_mma";
              c.dtype = p.dtype;
              c.bqd = 1, c.bqh = bqh, c.bqw = bqw, c.wm = wm, c.wn = wn, c.mt = mt, c.nt8 = nt8;
              c.ck = ck, c.split = split;
              const IgemmShape s = IgemmShapeOf(p, c);
              const int words = split == 3 ? 2 : 1;  // 3xTF32 keeps a partial sum and both halves
              const int regs = mt * nt8 * 4 * words + (mt * 4 + nt8 * 2) * words + mt + 40;
              if (s.threads > limits.max_threads_per_block || regs > limits.max_regs_per_thread ||
                  regs * s.threads > limits.max_regs_per_block ||
                  s.smem_bytes > std::min(113 * 1024, limits.max_smem_per_block))
                continue;
              // Shared-memory bytes per m16n8k8: an A fragment is shared by nt8 mmas, a B
              // fragment by mt; with 3xTF32 the same loads feed three mmas.
              const double bytes_per_mma = (512.0 / nt8 + 256.0 / mt) / split;
              const double waste =
                  static_cast<double>(s.tiles[2] * bqw - s.qmax[2]) / (s.tiles[2] * bqw) +
                  static_cast<double>(s.tiles[1] * bqh - s.qmax[1]) / (s.tiles[1] * bqh) +
                  static_cast<double>(s.co_tiles * s.bn - cout_g) / (s.co_tiles * s.bn);
              const double score = bytes_per_mma / 64.0 + waste * 2 + (warps == 4 ? 0 : 0.15) +
                                   (ck == kstep ? 0 : 0.1);
              scored.push_back({score, c});
            }
          }
        }
      }
    }
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Config> out;
  for (size_t i = 0; i < scored.size() && out.size() < 12; ++i) out.push_back(scored[i].second);
  // The best-ranked tiles are the largest, and their shared memory allows only 2-3 blocks per
  // SM: one or two warps per scheduler, too few to hide shared-memory and global latency. Also
  // try the best four that leave room for four blocks per SM.
  std::vector<Config> light;
  for (size_t i = out.size(); i < scored.size() && light.size() < 4; ++i)
    if (IgemmShapeOf(p, scored[i].second).smem_bytes <= 56 * 1024)
      light.push_back(scored[i].second);
  // Strided problems: the six best tiles and the light ones also as all-phases blocks, which
  // read the input halo region once for every phase (L1 hits) and write each output row's
  // phases close in time.
  const bool strided = p.stride[0] * p.stride[1] * p.stride[2] > 1;
  std::vector<Config> pa;
  for (size_t i = 0; strided && i < out.size() && i < 6; ++i) pa.push_back(out[i]);
  for (const Config& c : light) {
    out.push_back(c);
    if (strided) pa.push_back(c);
  }
  for (Config c : pa) {
    c.pa = 1;
    out.push_back(c);
  }
  std::vector<Config> staged;  // the same tiles staged, tried last (see the shared ones below)
  for (Config c : pa) {
    c.pa = 2;
    if (IgemmShapeOf(p, c).smem_bytes <= std::min(113 * 1024, limits.max_smem_per_block))
      staged.push_back(c);
  }
  // Strided problems: all-phases blocks with the whole channel group in one chunk load a single
  // halo (the union of the phases' windows) and reuse it for every phase, instead of re-loading
  // it per phase (the phases' windows overlap, so per-phase halos read the same input from L2
  // about once per phase). Try them as they are (pa 1) and with the output stage (pa 2,
  // "_pa_st": whole output rows instead of fragment stores, which at a stride leave partial
  // sectors): the stage pays where the output writes bound the kernel, and where they do not its
  // shared memory only costs blocks per SM, so tuning decides. Each kind gets the four best tiles
  // that allow two blocks per SM and the four best that allow four (three when staged: the stage
  // adds 16-66 KB).
  const int ck_all = static_cast<int>((cin_g + kstep - 1) / kstep * kstep);
  for (int kind = 1; kind <= 2; ++kind) {
    const int light_smem = kind == 1 ? 56 * 1024 : 74 * 1024;
    int heavy = 0, light_shared = 0;
    for (size_t i = 0; strided && ck_all <= 64 && i < scored.size(); ++i) {
      Config c = scored[i].second;
      c.ck = ck_all, c.pa = kind;
      if (std::find(out.begin(), out.end(), c) != out.end()) continue;
      const int smem = IgemmShapeOf(p, c).smem_bytes;
      if (smem > std::min(113 * 1024, limits.max_smem_per_block)) continue;
      int& count = smem <= light_smem ? light_shared : heavy;
      if (count >= 4) continue;
      ++count;
      out.push_back(c);
    }
  }
  for (const Config& c : staged)
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  // The shared-halo staged tiles that allow three blocks per SM again with twice the warps (each
  // warp half the M or N fragments): the same shared memory for twice the warps per SM. These
  // tiles hold much shared memory for few warps (67 KB for 2 warps leaves 6 warps per SM, 1.5 per
  // scheduler) and are latency-bound; twice the warps hide more of it for more shared-memory
  // loads per mma, a trade that a second doubling no longer wins.
  std::vector<Config> wider;
  for (const Config& c : out) {
    if (c.pa != 2 || c.ck != ck_all || IgemmShapeOf(p, c).smem_bytes > 74 * 1024) continue;
    for (int along_n = 0; along_n < 2; ++along_n) {
      Config w = c;
      if (along_n ? w.nt8 % 2 != 0 : w.mt % 2 != 0) continue;
      (along_n ? w.wn : w.wm) *= 2;
      (along_n ? w.nt8 : w.mt) /= 2;
      const IgemmShape s = IgemmShapeOf(p, w);
      if (w.wm * w.wn > 8 || s.threads > limits.max_threads_per_block ||
          s.smem_bytes > std::min(113 * 1024, limits.max_smem_per_block) ||
          std::find(out.begin(), out.end(), w) != out.end() ||
          std::find(wider.begin(), wider.end(), w) != wider.end())
        continue;
      wider.push_back(w);
    }
  }
  out.insert(out.end(), wider.begin(), wider.end());
  return out;
}

constexpr const char* kPaLabels[] = {"", "_pa", "_pa_st"};

class IgemmMma final : public Family {
 public:
  std::string_view name() const override { return "igemm_mma"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        {"bqd", &Config::bqd, "_q"},  // the block's box of one phase: D x H x W positions
        {"bqh", &Config::bqh, "x"},
        {"bqw", &Config::bqw, "x"},
        {"wm", &Config::wm, "_w"},   // warps along M (outputs)
        {"wn", &Config::wn, "x"},    // warps along N (channels)
        {"mt", &Config::mt, "_m"},   // m16 fragments per warp
        {"nt8", &Config::nt8, "n"},  // n8 fragments per warp
        {"ck", &Config::ck, "_k"},   // input channels per stage
        {"split", &Config::split, nullptr, nullptr, Field::kRequired, 1, 3},
        // 1: every phase of the box in one block; 2: and whole output rows staged for stores
        {"pa", &Config::pa, nullptr, kPaLabels, 0, 0, 2},
    };
    return f;
  }
  std::string Token(const Config& c) const override { return OperandToken(c); }
  Status CheckFields(const Config& c) const override {
    if (c.split == 2) return InvalidArgument(StrCat("bad split in ", c.ToJson()));
    return Status();
  }

  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext&) const override {
    return MmaCandidates(p, limits);
  }
  bool TensorCoreGemm() const override { return true; }
  // Strided problems want more, smaller warps' tiles (they are latency-bound): the best-ranked
  // all-phases tile of four warps, staged and sharing one halo if there is one, else staged,
  // else any all-phases tile (staging alone loses where most phases are empty).
  Config Pick(const Problem& p, const std::vector<Config>& all) const override {
    if (p.stride[0] * p.stride[1] * p.stride[2] == 1) return all.front();
    for (const int rule : {0, 1, 2})
      for (const Config& o : all)
        if (o.family == name() && o.wm * o.wn == 4 && o.pa == (rule == 2 ? 1 : 2) &&
            (rule != 0 || IgemmShapeOf(p, o).share))
          return o;
    for (const Config& o : all)
      if (o.family == name() && o.pa) return o;
    return all.front();
  }

  KernelSet Kernels(const Problem&, const Config& c) const override {
    return {true, IsHalf(c.dtype), false};
  }
  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    const IgemmShape sh = PhaseTilePreamble(p, c, os);
    DefInt(os, "kWM", c.wm);
    DefInt(os, "kWN", c.wn);
    DefInt(os, "kMT", c.mt);
    DefInt(os, "kNT8", c.nt8);
    DefInt(os, "kSPLIT", c.split);
    DefInt(os, "kPlane", sh.plane);
    DefInt(os, "kWCI", sh.wci);
    DefInt(os, "kHWS", sh.hws);
    DefInt(os, "kVEC", sh.vec);
    DefInt(os, "kKP", sh.kp);
    DefInt(os, "kWTile", sh.wtile);
    DefInt(os, "kHaloD", sh.halo_d);
    DefInt(os, "kHaloH", sh.halo_h);
    DefInt(os, "kShare", sh.share);
    for (int i = 0; i < 3; ++i) DefLong(os, DimName("kU", i, "0"), sh.u0[i]);
    PhaseClasses(p, os);
    return Status();
  }
  // Each phase's first word in the re-laid weights.
  void Tables(const Problem& p, const Config& c, std::ostream& os) const override {
    os << "__constant__ long long kWOff[" << p.stride[0] * p.stride[1] * p.stride[2] << "] = {";
    for (int64_t v : IgemmShapeOf(p, c).woff) os << v << "LL, ";
    os << "};\n";
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh", "phases.cuh", "igemm_tile.cuh", "operands.cuh", "igemm_mma.cu"};
  }

  // Without an input re-layout the halo is copied in vectors of up to 16 bytes straight from x.
  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    LaunchPlan plan = TensorCoreLaunches(p, c, named);
    const IgemmShape s = IgemmShapeOf(p, c);
    if (s.x_words == 0) plan.x_alignment = static_cast<size_t>(s.vec) * DTypeBytes(p.dtype);
    return plan;
  }
};

}  // namespace

const Family& IgemmMmaFamily() { return FamilyInstance<IgemmMma>(); }

}  // namespace convt3d::gen
