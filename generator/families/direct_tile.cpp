// direct_tile.cpp: direct FFMA (or mma.sync) from a staged input halo and weights
// (templates/direct_tile.cu), f32/bf16/f16 tensors, every precision mode.
#include "generator/families/direct_tile.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "base/status.h"
#include "generator/family.h"
#include "generator/phases.h"
#include "generator/preamble.h"

namespace convt3d::gen {

// Words of a pipelined tile's packed weights: [D phase][H phase][group][channel block][channel]
// [D row][H row][kw][channel] (templates/direct_tile.cu, PREP_KERNEL_NAME).
int64_t PackedWeightWords(const Problem& p, const TileShape& s) {
  return p.stride[0] * p.stride[1] * (p.c_in / p.groups) * p.c_out * std::max(s.jmax[0], 1) *
         std::max(s.jmax[1], 1) * p.kernel[2];
}

TileShape TileShapeOf(const Problem& p, const Config& c) {
  TileShape s;
  const Dim3 out = p.OutSize();
  DimPhases dp[3];
  for (int i = 0; i < 3; ++i) {
    dp[i] = PhasesOf(p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], out[i]);
    s.jmax[i] = dp[i].max_taps;
    s.dred[i] = dp[i].d_red;
  }
  const int64_t sw = p.stride[2];
  // Whole channel blocks: a block computes kCOB channels and the pipelined variant's packed
  // weights (PackedWeightWords) count the group's channels, not blocks of them.
  if (c.cob < 1 || (p.c_out / p.groups) % c.cob != 0) return s;
  if (c.vw % sw != 0) return s;
  if (c.pa && c.ck < p.c_in / p.groups) return s;  // all-phases blocks stage one chunk
  if (c.cp) {
    // The pipelined variant (templates/direct_tile.cu, kCP): f32 per-phase FFMA blocks of whole
    // chunks; where an output sums more than 256 products, runs of chunks are summed apart, which
    // doubles the sums: at most 32 accumulators then.
    const int64_t cin_g = p.c_in / p.groups;
    int64_t taps = 1;
    for (int i = 0; i < 3; ++i) taps *= std::max(s.jmax[i], 1);
    if (p.dtype != DType::kF32 || c.pa || c.mma || cin_g % c.ck != 0 ||
        (cin_g * taps > 256 && c.vw * c.cob > 32))
      return s;
    // The packed weights keep every phase's rows, empty ones too: at most 4x the weights (a
    // stride far past the kernel multiplies them) and 2^31 words.
    const int64_t packed = PackedWeightWords(p, s);
    if (packed > 4 * p.WeightElements() || packed >= INT32_MAX) return s;
  }
  if (c.mma) {
    // The tensor-core variant (templates/direct_tile.cu, MmaPhase): f32, all-phases blocks, the
    // same taps in every phase, a K column per input channel of a fixed tap (channels % 4),
    // n8 channel tiles, m16 tiles of one W phase, and the W phases stored side by side.
    bool ok = p.dtype == DType::kF32 && c.pa && (p.c_in / p.groups) % 4 == 0 && c.cob % 8 == 0 &&
              (c.bx * c.vw / sw) % 16 == 0 && (sw == 1 || sw == 2 || sw == 4);
    for (int i = 0; i < 3; ++i) ok = ok && p.dilation[i] == 1 && p.kernel[i] % p.stride[i] == 0;
    if (!ok) return s;
  }
  // Extents in int64 first: kernel, dilation and padding may each be up to 2^24 (Validate).
  int64_t hd = c.bz + int64_t{std::max(s.jmax[0], 1) - 1} * s.dred[0];
  int64_t hh = c.by + int64_t{std::max(s.jmax[1], 1) - 1} * s.dred[1];
  if (c.pa) {
    // One halo for every phase: phase r's tap j reads input q + (q_lo + c) - j*d' for the
    // tile's q; the union over the phases with taps, from the lowest row any of them reads.
    for (int i = 0; i < 2; ++i) {
      int64_t lo = INT64_MAX, hi = INT64_MIN;
      for (const auto& ph : dp[i].phases) {
        if (ph.taps == 0) continue;
        lo = std::min(lo, ph.q_lo + ph.c - (ph.taps - 1) * dp[i].d_red);
        hi = std::max(hi, ph.q_lo + ph.c);
      }
      s.u0[i] = lo;
      (i == 0 ? hd : hh) = (i == 0 ? c.bz : c.by) + hi - lo;
    }
  }
  // Over the (k, kw) with e = k + p - kw*d divisible by sw. The kw of one k repeat every
  // sw/gcd(sw, d) taps and e falls as kw grows, so the first and last of them bound e: O(vw*sw),
  // whatever the kernel's width.
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  const int64_t period = sw / std::gcd(sw, p.dilation[2]);
  for (int64_t k = 0; k < c.vw; ++k)
    for (int64_t kw = 0; kw < std::min(period, p.kernel[2]); ++kw) {
      if ((k + p.padding[2] - kw * p.dilation[2]) % sw != 0) continue;
      const int64_t last = kw + (p.kernel[2] - 1 - kw) / period * period;
      for (const int64_t t : {kw, last}) {
        const int64_t e = k + p.padding[2] - t * p.dilation[2];
        lo = std::min(lo, e / sw), hi = std::max(hi, e / sw);
      }
    }
  if (lo == INT64_MAX) return s;  // cannot happen: vw >= stride reaches every W phase
  const int64_t win = hi - lo + 1;
  const int64_t hw = int64_t{c.bx - 1} * (c.vw / sw) + win;
  if (hd > 4096 || hh > 4096 || win > 64 || hw > 4096 || std::abs(lo) > (int64_t{1} << 24))
    return s;
  s.halo_d = static_cast<int>(hd), s.halo_h = static_cast<int>(hh);
  s.off_lo = static_cast<int>(lo), s.off_hi = static_cast<int>(hi), s.win_n = static_cast<int>(win);
  s.hw = static_cast<int>(hw), s.hws = (s.hw + 3) / 4 * 4;
  // Weight rows: the phase's taps, or every (kd, kh) for all-phases blocks.
  const int64_t wrows =
      c.pa ? p.kernel[0] * p.kernel[1] : int64_t{std::max(s.jmax[0], 1)} * std::max(s.jmax[1], 1);
  // Halo, weights, and one int per halo row (its offset in the input, see Stage()).
  // Per channel; the tensor-core variant pads both strides to 8 words mod 32 (bank spread).
  auto pad8 = [&](int64_t w) { return c.mma ? w + (40 - w % 32) % 32 : w; };
  int64_t words =
      int64_t{c.ck} * (pad8(hd * hh * s.hws) + pad8(wrows * p.kernel[2] * c.cob) + hd * hh);
  // The pipelined variant: two buffers of halo and weights (each a 16-byte multiple), one table.
  if (c.cp)
    words = 2 * (c.ck * hd * hh * s.hws + (c.ck * wrows * p.kernel[2] * c.cob + 3) / 4 * 4) +
            c.ck * hd * hh;
  if (words * 4 > INT32_MAX / 2) return s;
  // The row offsets are ints: a stage's channels must span less than 2^31 elements.
  if (int64_t{c.ck} * p.in[0] * p.in[1] * p.in[2] >= INT32_MAX) return s;
  s.fits = true;
  s.smem_bytes = static_cast<int>(words * 4);
  s.threads = c.bx * c.by * c.bz;
  s.k_chunk = int64_t{c.ck} * s.jmax[0] * s.jmax[1] * s.jmax[2];
  s.needed[0] = dp[0].max_q_count, s.needed[1] = dp[1].max_q_count, s.needed[2] = out[2];
  s.tiles[0] = (dp[0].max_q_count + c.bz - 1) / c.bz;
  s.tiles[1] = (dp[1].max_q_count + c.by - 1) / c.by;
  s.tiles[2] = (out[2] + int64_t{c.bx} * c.vw - 1) / (int64_t{c.bx} * c.vw);
  s.co_blocks = p.c_out / p.groups / c.cob;
  s.blocks = s.tiles[0] * s.tiles[1] * s.tiles[2] * (c.pa ? 1 : p.stride[0] * p.stride[1]) *
             s.co_blocks * p.groups * p.n;
  return s;
}

namespace {

// direct_tile candidates (f32, bf16, f16 storage; FFMA, so every precision contract): kV of
// lcm(W stride, 4) or twice that (16-byte stores), the group's channels or a block of them per
// thread (at most 64 accumulators), 64-256 threads, input channels staged in chunks of at most
// 256 products per output (a long single FFMA chain loses accuracy); ranked by accumulators per
// thread, then the box's overhang past the output, then halo words loaded per output. The `keep`
// best per-phase tiles, then (strided in D or H) the `keep_pa` best all-phases ones; with
// `twins`, the pipelined twins of the per-phase ones (below).
std::vector<Config> TileCandidates(const Problem& p, const DeviceLimits& limits, size_t keep,
                                   size_t keep_pa, bool pow2_too, bool twins) {
  if (p.dtype == DType::kF64) return {};
  const int64_t sw = p.stride[2], cout_g = p.c_out / p.groups, cin_g = p.c_in / p.groups;
  const int64_t wout = p.OutSize()[2];
  const bool phases_dh = p.stride[0] * p.stride[1] > 1;
  std::vector<int> vws;
  const int64_t l = std::lcm<int64_t>(sw, 4);
  if (l <= 16) {
    vws.push_back(static_cast<int>(l));
    if (2 * l <= 16) vws.push_back(static_cast<int>(2 * l));
  } else if (sw <= 16) {
    vws.push_back(static_cast<int>(sw));
  }
  // Stages tried: the whole channel group, then powers of two below it.
  std::vector<int> stages = {static_cast<int>(cin_g)};
  for (int ck = 64; ck >= 1; ck /= 2)
    if (ck < cin_g) stages.push_back(ck);
  // A chunk's FFMA chain stays short (accuracy) and its stage leaves room for two blocks per SM.
  auto usable = [&](const TileShape& s) {
    return s.fits && s.k_chunk <= 256 &&
           s.smem_bytes <= std::min(113 * 1024, limits.max_smem_per_block);
  };
  struct Scored {
    double score, overhang;
    Config c;
  };
  std::vector<Scored> scored[2];  // per-phase blocks, all-phases blocks
  std::vector<Scored> mma;        // the tensor-core variant of all-phases blocks
  const int split = OperandSplit(p.precision);
  const bool tensor = p.dtype == DType::kF32 && p.precision != Precision::kFp32;
  // Outputs computed per output needed, less one: the box's overhang past the tensor.
  auto overhang = [&](const Config& c, const TileShape& s) {
    const int64_t covered[3] = {s.tiles[0] * c.bz, s.tiles[1] * c.by, s.tiles[2] * c.bx * c.vw};
    double r = 1;
    for (int i = 0; i < 3; ++i) r *= static_cast<double>(covered[i]) / s.needed[i];
    return r - 1;
  };
  // Halo words staged per output: an all-phases block stages one halo for all its phases.
  auto halo_per_output = [&](const Config& c, const TileShape& s) {
    return static_cast<double>(s.halo_d) * s.halo_h * s.hw /
           (c.bx * c.by * c.bz * c.vw * (c.pa ? p.stride[0] * p.stride[1] : 1));
  };
  auto add = [&](const Config& c, const TileShape& s) {
    const int threads = c.bx * c.by * c.bz;
    const bool chunks = c.ck < cin_g;
    // Several chunks keep a partial sum beside the running one, doubling the sums: at 64
    // accumulators a thread needs close to 200 registers, one block of 8 warps per SM, too few
    // to hide the stage's loads.
    if (chunks && c.vw * c.cob > 32) return;
    // All-phases tiles of more than 32 accumulators only where a chunk sums at most 64 products
    // per output: over a long sum (many channels x every tap staged) their registers run out
    // (spills in bf16, the slowest tiles in fp32); over a short one the halo shared by every
    // phase pays for them.
    if (c.pa && c.vw * c.cob > 32 && s.k_chunk > 64) return;
    const int regs = c.vw * c.cob * (chunks ? 2 : 1) + s.win_n + c.cob + 40;
    if (regs > limits.max_regs_per_thread || regs * threads > limits.max_regs_per_block) return;
    const double waste = overhang(c, s);
    // Block size: 128 threads first, other sizes up to 256 next, 64 last; fitted to H100 trials
    // of the strided benchmark problems (see bench/JOURNAL.md). Small blocks stage more halo per
    // output and give each barrier fewer warps to overlap.
    const double score = -std::min(c.vw * c.cob, 64) / 16.0 + waste * 3 +
                         halo_per_output(c, s) * 0.2 +
                         (threads == 128 ? 0
                          : threads > 64 ? 0.1
                                         : 0.3) +
                         (c.bx < 4 ? 0.3 : 0);
    scored[c.pa].push_back({score, waste * 3, c});
  };
  // Box sides need not be powers of two: a tile that fits the output exactly does no work on
  // padding (power-of-two boxes on extents just past a power of two, such as 66, compute a
  // quarter or more padding outputs over three dimensions).
  for (int vw : vws)
    for (int cob : {16, 8, 4, 2, 1}) {
      if (cout_g % cob != 0 || vw * cob > 64 || (vw * cob < 8 && cob < cout_g)) continue;
      for (int bx = 2; bx <= 32; ++bx)
        for (int by = 1; by <= 16; ++by)
          for (int bz = 1; bz <= 8; ++bz) {
            const int threads = bx * by * bz;
            if (threads % 32 != 0 || threads < 64 ||
                threads > std::min(256, limits.max_threads_per_block))
              continue;
            // A W tile with a whole column of threads past the row's end only adds idle ones.
            if (int64_t{bx - 1} * vw >= wout) continue;
            Config c;
            c.family = "direct_tile";
            c.dtype = p.dtype;
            c.bx = bx, c.by = by, c.bz = bz, c.vw = vw, c.cob = cob;
            for (int ck : stages) {
              c.ck = ck;
              const TileShape s = TileShapeOf(p, c);
              if (!usable(s)) continue;
              add(c, s);
              break;
            }
            // With strides in D or H, the same tile as an all-phases block (one chunk).
            c.ck = static_cast<int>(cin_g), c.pa = 1;
            const TileShape s = TileShapeOf(p, c);
            if (phases_dh && usable(s)) add(c, s);
            // Its tensor-core variant: no FFMA and few registers, so only the fill per output,
            // the overhang and the block size rank it.
            c.mma = 1, c.split = split;
            const TileShape ms = TileShapeOf(p, c);
            if (tensor && phases_dh && usable(ms))
              mma.push_back(
                  {halo_per_output(c, ms) * 0.2 + overhang(c, ms) * 3 + (threads == 128 ? 0 : 0.1),
                   0, c});
          }
    }
  auto by_score = [](const Scored& a, const Scored& b) { return a.score < b.score; };
  auto pow2 = [](int v) { return (v & (v - 1)) == 0; };
  std::vector<Scored> kept;
  for (int pa = 0; pa < 2; ++pa) {
    std::vector<Scored>& all = scored[pa];
    std::stable_sort(all.begin(), all.end(), by_score);
    const size_t n = std::min(pa ? keep_pa : keep, all.size());
    kept.insert(kept.end(), all.begin(), all.begin() + n);
    if (!pow2_too) continue;
    // The overhang term does not predict time well: a larger power-of-two box can beat the
    // boxes that fit the output while a third of its outputs are padding, as it stages less
    // halo per output and the fitted boxes' odd widths (e.g. 6) read with 2-way bank
    // conflicts. So the best power-of-two boxes of the first candidate's thread tile, ranked
    // without it, are timed too.
    std::vector<Scored> rest;
    for (size_t i = n; i < all.size(); ++i) {
      const Config& c = all[i].c;
      if (pow2(c.bx) && pow2(c.by) && pow2(c.bz) && c.vw == all[0].c.vw && c.cob == all[0].c.cob)
        rest.push_back(all[i]);
    }
    std::stable_sort(rest.begin(), rest.end(), [](const Scored& a, const Scored& b) {
      return a.score - a.overhang < b.score - b.overhang;
    });
    kept.insert(kept.end(), rest.begin(), rest.begin() + std::min(n, rest.size()));
  }
  std::stable_sort(kept.begin(), kept.end(), by_score);
  std::stable_sort(mma.begin(), mma.end(), by_score);
  // The pipelined twins of the kept per-phase tiles (f32, at most eight): chunks of a quarter of
  // the group's channels (half where a quarter is not whole or under 4 channels; none under 4;
  // more where a quarter sums over 256 products per output), so that most chunks' copies overlap
  // the FFMAs and two buffers take no more shared memory than the one-chunk stage.
  // Twins of 8 or more channels per chunk rank before the plain tiles (on H200 they beat their
  // one-stage tiles by 20-30% on L1-73, NNU-4/5 and SWU-5); narrower chunks, which pay a barrier
  // pair per few channels, rank last (L1-72's chunks of 2 lost to its plain tiles).
  std::vector<Config> wide_twins, narrow_twins;
  for (const auto& k : kept) {  // (TileShapeOf refuses _cp for 16-bit storage: not usable())
    if (!twins || wide_twins.size() + narrow_twins.size() == 8) break;
    if (k.c.pa) continue;
    Config c = k.c;
    c.cp = 1;
    // Deep groups: as many chunks as keep a chunk's sums within 256 products (usable()).
    for (int parts : {4, 2, 8, 16, 32, 64}) {
      if (cin_g % parts != 0 || cin_g / parts < 4) continue;
      c.ck = static_cast<int>(cin_g / parts);
      if (!usable(TileShapeOf(p, c))) continue;
      (c.ck >= 8 ? wide_twins : narrow_twins).push_back(c);
      break;
    }
  }
  std::vector<Config> out;
  for (size_t i = 0; i < mma.size() && i < 3; ++i) out.push_back(mma[i].c);
  out.insert(out.end(), wide_twins.begin(), wide_twins.end());
  for (const auto& k : kept) out.push_back(k.c);
  out.insert(out.end(), narrow_twins.begin(), narrow_twins.end());
  return out;
}

bool HasMma(const Config& c) { return c.mma != 0; }
constexpr const char* kPaLabels[] = {"", "_pa"};
constexpr const char* kSplitLabels[] = {"", "_tf32", "", "_3xtf32"};
constexpr const char* kCpLabels[] = {"", "_cp"};

class DirectTile final : public Family {
 public:
  std::string_view name() const override { return "direct_tile"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        {"bx", &Config::bx, "_x"},    // threads along W
        {"by", &Config::by, "y"},     // threads along H
        {"bz", &Config::bz, "z"},     // threads along D
        {"vw", &Config::vw, "_v"},    // consecutive W outputs per thread
        {"cob", &Config::cob, "_c"},  // output channels per thread
        {"ck", &Config::ck, "_k"},    // input channels per stage
        // 1: every (D, H) phase from one shared halo
        {"pa", &Config::pa, nullptr, kPaLabels, 0, 0, 1},
        // 1: mma.sync from the staged tiles instead of FFMA (all-phases blocks, f32)
        {"mma", &Config::mma, nullptr, nullptr, 0, 0, 1, true},
        {"split", &Config::split, nullptr, kSplitLabels, 1, 1, 3, false, HasMma, HasMma},
        // 1: weights packed per weight version, chunks double-buffered by cp.async (per-phase, f32)
        {"cp", &Config::cp, nullptr, kCpLabels, 0, 0, 1, true},
    };
    return f;
  }
  Status CheckFields(const Config& c) const override {
    if (c.split == 2 || (c.mma && !c.pa))
      return InvalidArgument(StrCat("bad mma/split in ", c.ToJson()));
    if (c.cp && (c.pa || c.mma)) return InvalidArgument(StrCat("bad cp in ", c.ToJson()));
    return Status();
  }

  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext& ctx) const override {
    const bool tensor = ctx.tensor_tiles;
    // No pipelined twins on dense shapes (past 1024 products per output): the transform and GEMM
    // families' ground, where the twins lost to the winner by 1.3-3.7x on every layer measured
    // (MUN-1, GAN-2/3, VID-1; the plain tiles by 2.5-5.7x on the dense stride-1 level-1 shapes).
    return TileCandidates(p, limits, tensor ? 2 : ctx.dense ? 3 : 4, 3, !tensor, !ctx.dense);
  }
  // The strict fp32 workhorse and the write-bound shapes' kernel: first where an output has few
  // products; with tensor cores allowed, dense shapes are the tensor-core tiles' ground.
  Placement Place(const Problem&, const RankContext& ctx) const override {
    Placement at;
    at.where = ctx.products <= 64 ? Placement::kFront : Placement::kBack;
    if (ctx.dense && ctx.tensor_tiles) at.cap = 0;
    return at;
  }
  int SubLatticeQuota(const Config& c, std::string*) const override {
    return c.pa || c.mma || c.cp ? 0 : 6;
  }
  KernelSet Kernels(const Problem&, const Config& c) const override {
    KernelSet k;
    k.prep = c.cp != 0;
    return k;
  }

  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    const TileShape sh = TileShapeOf(p, c);
    if (!sh.fits) return NotApplicable(p, c);
    DefInt(os, "kDilW", static_cast<int>(p.dilation[2]));
    DefInt(os, "kBX", c.bx);
    DefInt(os, "kBY", c.by);
    DefInt(os, "kBZ", c.bz);
    DefInt(os, "kV", c.vw);
    DefInt(os, "kCOB", c.cob);
    DefInt(os, "kCK", c.ck);
    for (int i = 0; i < 3; ++i) DefLong(os, DimName("k", i, "Tiles"), sh.tiles[i]);
    DefLong(os, "kCoBlocks", sh.co_blocks);
    DefLong(os, "kTotalBlocks", sh.blocks);
    DefInt(os, "kHaloD", sh.halo_d);
    DefInt(os, "kHaloH", sh.halo_h);
    DefInt(os, "kHW", sh.hw);
    DefInt(os, "kHWS", sh.hws);
    DefInt(os, "kOffLo", sh.off_lo);
    DefInt(os, "kWinN", sh.win_n);
    DefInt(os, "kALLPH", c.pa != 0);
    for (int i = 0; i < 2; ++i) DefLong(os, DimName("kU", i, "0"), sh.u0[i]);
    os << "#define CONVT3D_MMA " << (c.mma ? c.split : 0) << "\n";
    os << "#define CONVT3D_CP " << (c.cp ? 1 : 0) << "\n";
    // Chunks per FFMA chain of the pipelined variant (k_chunk <= 256: see usable()).
    if (c.cp) DefLong(os, "kChainChunks", std::max<int64_t>(1, 256 / sh.k_chunk));
    return Status();
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh", "phases.cuh", "operands.cuh", "direct_tile.cu"};
  }

  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    const TileShape s = TileShapeOf(p, c);
    if (!c.cp)
      return OneKernel(Step(named.Name(), s.blocks, s.threads, s.smem_bytes,
                            {Arg::kX, Arg::kW, Arg::kBias, Arg::kY}));
    const int64_t words = PackedWeightWords(p, s);
    LaunchPlan plan;
    plan.workspace_bytes = static_cast<size_t>(words) * 4;
    plan.steps = {WeightPrep(named.Name() + "_prep", words, 4096),
                  Step(named.Name(), s.blocks, s.threads, s.smem_bytes,
                       {Arg::kX, Arg::kWorkspace, Arg::kBias, Arg::kY})};
    return plan;
  }
};

}  // namespace

const Family& DirectTileFamily() { return FamilyInstance<DirectTile>(); }

}  // namespace convt3d::gen
