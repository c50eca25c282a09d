// winograd.cpp: shape, candidates and preamble of the fused Winograd family
// (templates/winograd.cu).
#include "generator/families/winograd.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <tuple>
#include <vector>

#include "base/math.h"
#include "base/status.h"
#include "generator/family.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

int Round4(int64_t n) { return static_cast<int>((n + 3) / 4 * 4); }

// Shared-memory wavefronts of one warp-wide load of `run` consecutive words per lane (as
// LoadRun issues it: 16, 8 or 4 bytes per instruction) at word `lane_word(lane)`: a 16-byte load
// is served a quarter-warp at a time, an 8-byte load a half-warp at a time; within each, a bank
// holding k distinct words costs k wavefronts.
template <class F>
int Wavefronts(int run, F lane_word) {
  const int vec = run % 4 == 0 ? 4 : run % 2 == 0 ? 2 : 1;
  const int group = 32 / vec;  // lanes served together
  int total = 0;
  for (int v = 0; v < run; v += vec)
    for (int g0 = 0; g0 < 32; g0 += group) {
      std::vector<std::vector<int>> bank(32);
      for (int l = g0; l < g0 + group; ++l)
        for (int k = 0; k < vec; ++k) {
          const int w = lane_word(l) + v + k;
          auto& b = bank[w % 32];
          if (std::find(b.begin(), b.end(), w) == b.end()) b.push_back(w);
        }
      size_t worst = 1;
      for (const auto& b : bank) worst = std::max(worst, b.size());
      total += static_cast<int>(worst);
    }
  return total;
}

// The per-point stride of U (or V): the smallest of n, n+4, ..., n+28 (16-byte aligned where the
// thread's run is read in 16-byte loads) whose GEMM loads cost the fewest wavefronts for the
// kernel's lane layout (tg fastest, then ng, then the point). An unpadded U (stride n) is also
// copied as one flat run.
int PointStride(int n, int run, int tg_count, int ng_count, bool is_u) {
  const int align = run % 4 == 0 ? 4 : run % 2 == 0 ? 2 : 1;
  int best = n, best_cost = INT32_MAX;
  for (int stride = n; stride <= n + 28; stride += 4) {
    if (stride % align != 0) continue;
    const int cost = Wavefronts(run, [&](int lane) {
      const int tg = lane % tg_count, ng = lane / tg_count % ng_count;
      const int pt = lane / (tg_count * ng_count);
      return pt * stride + (is_u ? ng : tg) * run;
    });
    if (cost < best_cost) best = stride, best_cost = cost;
  }
  return best;
}

// Taps per stride phase along dimension dim (kernel / stride) where the family applies.
int PhaseTaps(const Problem& p, int dim) { return static_cast<int>(p.kernel[dim] / p.stride[dim]); }

// Stride phases in all (the product of the strides): 1 for stride-1 problems.
int64_t StridePhases(const Problem& p) { return p.stride[0] * p.stride[1] * p.stride[2]; }

}  // namespace

WinoTransform WinoTransformOf(int taps) {
  WinoTransform t;
  t.taps = taps;
  t.alpha = taps + 1;
  if (taps == 1) {
    t.bt = {{1, 0}, {0, 1}};
    t.g = {{1}, {1}};
    t.at = {{1, 0}, {0, 1}};
  } else if (taps == 2) {  // points 0, 1, infinity
    t.bt = {{1, -1, 0}, {0, 1, 0}, {0, -1, 1}};
    t.g = {{1, 0}, {1, 1}, {0, 1}};
    t.at = {{1, 1, 0}, {0, 1, 1}};
  } else {  // taps == 3: points 0, 1, -1, infinity
    t.bt = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
    t.g = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    t.at = {{1, 1, 1, 0}, {0, 1, -1, -1}};
  }
  return t;
}

bool WinogradApplies(const Problem& p) {
  // F(2, k) for k > 3 needs points like +-2 and +-1/2, which amplify rounding: simulated in f32
  // against f64, F(2,3) x F(2,5)^2 errs by ~2e-6, past the strict contract's 1e-6, while k <= 3
  // (points 0, +-1, infinity) stays at ~3e-7, a direct sum's level. Strided problems are taken
  // where every phase has the same taps (kernel = stride x taps), so one kernel runs them all.
  if (p.dtype != DType::kF32 || p.precision == Precision::kTf32) return false;
  // On strided layers fp32x3's 3xTF32 tiles run 2-3x faster (GAN-4, H200: 1.42 against 3.10 ms).
  if (StridePhases(p) > 1 && p.precision != Precision::kFp32) return false;
  int taps = 1;
  for (int i = 0; i < 3; ++i) {
    if (p.dilation[i] != 1 || p.kernel[i] % p.stride[i] != 0) return false;
    const int j = PhaseTaps(p, i);
    if (j > 3) return false;
    taps *= j;
  }
  // Below 8 taps per phase the transforms save too little (1 tap: nothing at all).
  return taps >= 8;
}

WinoShape WinoShapeOf(const Problem& p, const Config& c) {
  WinoShape s;
  if (c.family != "winograd" || !WinogradApplies(p)) return s;
  const int64_t cout_g = p.c_out / p.groups, cin_g = p.c_in / p.groups;
  const int bq[3] = {c.bqd, c.bqh, c.bqw};
  for (int i = 0; i < 3; ++i) {
    if (bq[i] <= 0 || bq[i] > 16) return s;
    s.alpha[i] = PhaseTaps(p, i) + 1;
    s.region[i] = 2 * bq[i] + s.alpha[i] - 2;
  }
  s.points = s.alpha[0] * s.alpha[1] * s.alpha[2];
  s.tiles_per_block = c.bqd * c.bqh * c.bqw;
  if (c.bn <= 0 || c.tn <= 0 || c.tm <= 0 || c.ck <= 0 || cout_g % c.bn != 0 || c.bn % c.tn != 0 ||
      s.tiles_per_block % c.tm != 0)
    return s;
  const int64_t threads = int64_t{s.points} * (c.bn / c.tn) * (s.tiles_per_block / c.tm);
  // Whole warps: the GEMM's lanes (one point, tn channels, tm tiles each) rounded up to 32, the
  // rest idle in the GEMM but copying and transforming with the others. At most an eighth idle:
  // 27-point blocks then also come as 448 threads (16 groups) with 128 registers, not only as
  // 864 with 72.
  const int64_t padded = (threads + 31) / 32 * 32;
  if (padded > 1024 || (padded - threads) * 8 > padded) return s;
  s.threads = static_cast<int>(padded);
  s.region_ws = s.region[2];
  const int tg = s.tiles_per_block / c.tm, ng = c.bn / c.tn;
  s.vs = PointStride(s.tiles_per_block, c.tm, tg, ng, false);
  s.us = PointStride(c.bn, c.tn, tg, ng, true);
  s.ms = Round4(int64_t{c.bn} * s.tiles_per_block) + 4;
  s.cpad = static_cast<int>(CeilDiv(cin_g, c.ck) * c.ck);
  // Past 128 input channels the point sums go in runs of ~sqrt(K) channels (whole stages), each
  // summed apart (templates/winograd.cu): plain sums reached 8.6e-7 at 256 channels and 1.3e-6
  // at 512 (H200, F(2,2)^3), against strict's 1e-6; at 128, 6.0e-7. The runs' second set of
  // sums costs registers (27-point blocks then keep 4x4 tiles, 13-20% slower on the GAN layers),
  // so they are not spent where plain sums stay within the contract.
  if (cin_g > 128)
    s.sum_stages = std::max(1, static_cast<int>(std::lround(std::sqrt(double(cin_g)) / c.ck)));
  // Raw input, U and V double-buffered (templates/winograd.cu's software pipeline).
  const int64_t stage = 2 * Round4(int64_t{c.ck} * s.region[0] * s.region[1] * s.region_ws) +
                        2 * Round4(int64_t{c.ck} * s.points * s.us) +
                        2 * Round4(int64_t{c.ck} * s.points * s.vs);  // V, double-buffered
  const int64_t epilogue = int64_t{s.points} * s.ms;
  s.smem_bytes = static_cast<int>(std::max(stage, epilogue) * 4);
  const Dim3 out = p.OutSize();
  s.phases = StridePhases(p);
  s.blocks = p.n * p.groups * s.phases;
  for (int i = 0; i < 3; ++i) {
    // Phase 0 has the most outputs: ceil(out / s).
    s.tiles[i] = CeilDiv(CeilDiv(out[i], p.stride[i]), 2);
    s.blocks_per_dim[i] = CeilDiv(s.tiles[i], bq[i]);
    s.blocks *= s.blocks_per_dim[i];
  }
  s.co_blocks = cout_g / c.bn;
  s.blocks *= s.co_blocks;
  s.workspace_words = s.phases * p.groups * s.co_blocks * s.cpad * int64_t{s.points} * c.bn;
  // 32-bit offsets inside the template: each tensor under 2^31 elements.
  if (std::max({p.InputElements(), p.OutputElements(), s.workspace_words}) >= (int64_t{1} << 31))
    return s;
  s.fits = true;
  return s;
}

std::vector<Config> WinogradCandidates(const Problem& p, const DeviceLimits& limits) {
  if (!WinogradApplies(p)) return {};
  const int64_t cout_g = p.c_out / p.groups;
  constexpr int kBoxes[][3] = {{2, 2, 2}, {1, 2, 4}, {1, 2, 2}, {1, 1, 4}, {2, 2, 4},
                               {1, 4, 4}, {1, 2, 8}, {1, 1, 8}, {1, 2, 6}, {1, 3, 4},
                               {2, 2, 3}, {2, 3, 4}, {2, 4, 4}, {1, 4, 8}};
  struct Scored {
    double score;
    int threads;
    Config c;
  };
  std::vector<Scored> scored;
  for (const auto& box : kBoxes)
    for (int bn = static_cast<int>(std::min<int64_t>(cout_g, 64)); bn >= 4; --bn) {
      if (cout_g % bn != 0) continue;
      for (int tn : {2, 3, 4, 6, 8, 12})
        for (int tm : {1, 2, 3, 4, 6, 8})
          for (int ck : {4, 8}) {
            Config c;
            c.family = "winograd";
            c.dtype = p.dtype;
            c.bqd = box[0], c.bqh = box[1], c.bqw = box[2];
            c.bn = bn, c.tn = tn, c.tm = tm, c.ck = ck;
            const WinoShape s = WinoShapeOf(p, c);
            // With run sums (two sets) at most 64 per thread: 8x12 tiles would get 255 registers.
            if (!s.fits || s.threads < 128 || tn * tm > (s.sum_stages > 0 ? 64 : 96) || tn * tm < 8)
              continue;
            // The template caps registers at accumulators + two stages' operands + 32, or what
            // the block allows; below one stage's operands + 24 it spilled (t8x8 at 96).
            // (per scheduler: a quarter of the warps, rounded up, share a quarter of the file).
            const int quarter_warps = (s.threads / 32 + 3) / 4;
            const int sums = (s.sum_stages > 0 ? 2 : 1) * tn * tm;  // accumulators
            const int cap = std::min(sums + 2 * (tn + tm) + 32,
                                     limits.max_regs_per_block / 4 / (32 * quarter_warps) / 8 * 8);
            if (sums + tn + tm + 24 > cap || s.threads > limits.max_threads_per_block ||
                s.smem_bytes > limits.max_smem_per_block)
              continue;
            // Ranking: time ~ 30/bt + 123/bn, fitted to H100 trials of the level-1 problems (see
            // bench/JOURNAL.md), bt the block's tiles (the transformed weights are re-read from
            // L2 once per block: 4 bytes per bt FMAs) and bn its channels (each input transform
            // serves bn of them, and at small bn the transforms cost more than the GEMM); a
            // penalty for blocks under 384 threads, slower in the same trials; and shared-memory
            // loads per FMA, (tn + tm) / (tn tm), since every point's GEMM is small and few lanes
            // share its operands. Only order depends on it; tuning measures.
            const int bt = s.tiles_per_block;
            const double score =
                30.0 / bt + 123.0 / bn + (s.threads < 384 ? 0.8 : 0) + 4.0 * (tn + tm) / (tn * tm);
            scored.push_back({score, s.threads, c});
          }
    }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const Scored& a, const Scored& b) { return a.score < b.score; });
  // The fit rests on two shapes only: keep the two best of every (channels, tiles) block
  // shape, so that tuning sees every trade between weight traffic (tiles) and transform reuse
  // (channels) on other shapes too; on strided problems of every (channels, tiles, threads),
  // since their 27-point blocks come in two sizes (448 and 864 threads) whose registers differ.
  std::vector<Config> out;
  std::vector<std::tuple<int, int, int>> kinds;
  const bool strided = StridePhases(p) > 1;
  for (const auto& [score, threads, c] : scored) {
    const std::tuple<int, int, int> kind{c.bn, c.bqd * c.bqh * c.bqw, strided ? threads : 0};
    if (std::count(kinds.begin(), kinds.end(), kind) >= 2) continue;
    kinds.push_back(kind);
    out.push_back(c);
    if (out.size() == 16) break;
  }
  return out;
}

Status WinogradPreamble(const Problem& p, const Config& c, std::ostream& os) {
  const WinoShape s = WinoShapeOf(p, c);
  if (!s.fits) return NotApplicable(p, c);
  DefInt(os, "kPhases", s.phases);
  for (int i = 0; i < 3; ++i) {
    DefInt(os, DimName("kJ", i), PhaseTaps(p, i));
    DefInt(os, DimName("kA", i), s.alpha[i]);
    DefInt(os, DimName("kR", i), s.region[i]);
    DefInt(os, DimName("kTiles", i), s.tiles[i]);
    DefInt(os, DimName("kBlocks", i), s.blocks_per_dim[i]);
  }
  const int box[3] = {c.bqd, c.bqh, c.bqw};
  for (int i = 0; i < 3; ++i) DefInt(os, DimName("kBQ", i), box[i]);
  DefInt(os, "kBN", c.bn);
  DefInt(os, "kTN", c.tn);
  DefInt(os, "kTM", c.tm);
  DefInt(os, "kCK", c.ck);
  DefInt(os, "kSumStages", s.sum_stages);
  DefInt(os, "kRWS", s.region_ws);
  DefInt(os, "kVS", s.vs);
  DefInt(os, "kUS", s.us);
  DefInt(os, "kMS", s.ms);
  DefInt(os, "kCPad", s.cpad);
  DefInt(os, "kThreads", s.threads);
  DefInt(os, "kCoBlocks", s.co_blocks);
  DefLong(os, "kTotalBlocks", s.blocks);
  // The transforms as straight-line code: BT d (input), AT m (output), with +-1 coefficients as
  // additions; G only in f64 for the weight transform.
  auto term = [](double coef, const std::string& x, bool first) {
    char buf[64];
    if (coef == 1) return (first ? "" : " + ") + x;
    if (coef == -1) return (first ? "-" : " - ") + x;
    snprintf(buf, sizeof buf, "%s%.9gf * ", first ? "" : " + ", coef);
    return buf + x;
  };
  auto matvec = [&](const std::string& fn, const std::vector<std::vector<double>>& m, int in,
                    int out) {
    os << "__device__ __forceinline__ void " << fn << "(const float (&d)[" << in << "], float (&v)["
       << out << "]) {\n";
    for (int r = 0; r < out; ++r) {
      std::string e;
      for (int k = 0; k < in; ++k)
        if (m[r][k] != 0) e += term(m[r][k], "d[" + std::to_string(k) + "]", e.empty());
      os << "  v[" << r << "] = " << (e.empty() ? "0.f" : e) << ";\n";
    }
    os << "}\n";
  };
  for (int i = 0; i < 3; ++i) {
    const WinoTransform t = WinoTransformOf(PhaseTaps(p, i));
    matvec(DimName("WinIn", i), t.bt, t.alpha, t.alpha);
    matvec(DimName("WinOut", i), t.at, t.alpha, 2);
    os << "__constant__ double " << DimName("kWinG", i) << "[" << t.alpha * t.taps << "] = {";
    for (const auto& row : t.g)
      for (double v : row) os << v << ", ";
    os << "};\n";
  }
  return Status();
}

namespace {

class Winograd final : public Family {
 public:
  std::string_view name() const override { return "winograd"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        {"bqd", &Config::bqd, "_q"},  // 2x2x2 output tiles per block along D, H, W
        {"bqh", &Config::bqh, "x"},  {"bqw", &Config::bqw, "x"},
        {"bn", &Config::bn, "_n"},  // output channels per block
        {"tm", &Config::tm, "_t"},  // tiles per thread at each transform point
        {"tn", &Config::tn, "x"},   // channels per thread at each transform point
        {"ck", &Config::ck, "_k"},  // input channels per stage
    };
    return f;
  }

  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext&) const override {
    return WinogradCandidates(p, limits);
  }
  // A third of the direct sum's FFMAs on 3x3x3 kernels: first in strict fp32; after the first
  // tensor-core tiles where those apply (its error meets every contract). Strided problems:
  // last, twelve at most, until measurements rank them.
  Placement Place(const Problem& p, const RankContext& ctx) const override {
    if (StridePhases(p) > 1) return {Placement::kBack, 12};
    return {ctx.tensor_tiles ? Placement::kAfterFirstFour : Placement::kFront};
  }
  int SubLatticeQuota(const Config&, std::string*) const override { return 6; }

  KernelSet Kernels(const Problem&, const Config&) const override { return {true, false, false}; }
  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    return WinogradPreamble(p, c, os);
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh", "operands.cuh", "winograd.cu"};
  }

  // The weights are transformed (in f64) into the workspace first.
  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    const WinoShape s = WinoShapeOf(p, c);
    LaunchPlan plan;
    plan.workspace_bytes = static_cast<size_t>(s.workspace_words) * 4;
    plan.steps = {
        WeightPrep(named.Name() + "_prep", s.workspace_words, 4096),
        Step(named.Name(), s.blocks, s.threads, s.smem_bytes,
             {Arg::kX, Arg::kWorkspace, Arg::kBias, Arg::kY}),
    };
    return plan;
  }
};

}  // namespace

const Family& WinogradFamily() { return FamilyInstance<Winograd>(); }

}  // namespace convt3d::gen
