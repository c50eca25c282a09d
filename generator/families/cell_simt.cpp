// cell_simt.cpp: f32 layers with few output channels per group in exact FFMA
// (templates/cell_simt.cu): a thread computes every stride phase of a run of input-aligned output
// cells for all of its group's output channels, in FFMA from a staged input halo and broadcast
// weights.
//
// The last layers of U-Nets and GAN generators (32 -> 2, 64 -> 1) have too few output channels
// for a GEMM over them: `narrow_gemm` makes them the GEMM's rows and sums the W taps in a
// shared-memory epilogue (~30% of its instructions), `direct_tile` runs one phase at a time.
// Here each input value a thread loads feeds every tap that reads it, each weight kV cells, and
// the W taps meet in registers: per input channel ~90% of the instructions are FFMA.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>

#include "base/math.h"
#include "base/status.h"
#include "generator/families/pixel_shuffle.h"
#include "generator/family.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

constexpr int kRankSms = 132;           // the SMs the ranking assumes (H100 SXM, H200)
constexpr int kSmemPerSm = 228 * 1024;  // what the scheduler leaves the blocks of one SM
constexpr int kMaxOutputChannels = 16;  // per group, in blocks of 1-4 per thread
constexpr int kMaxThreads = 512;
constexpr int kMaxAccumulators = 64;      // per thread: channels x phases x cells
constexpr int kMaxFfmaPerChannel = 1024;  // unrolled code per input channel
constexpr int kMaxRows = 24;              // input rows a thread loads per channel (unrolled)
// Plain running sums, whose rounding error grows with sqrt(products): at most 512 products per
// output in strict fp32 (4.0e-7 on random operands against its 1e-6, as shuffle_simt's
// kPlainSumMaxK); fp32x3 (1e-5) and tf32 (1e-3) allow 8192 (~1.6e-6).
int64_t MaxProducts(Precision precision) { return precision == Precision::kFp32 ? 512 : 8192; }

// Tap t of one dimension: the phase it writes and the input offset it reads (input c + delta
// feeds output stride * c + phase), as templates/cell_simt.cu computes them.
int TapPhase(int64_t t, int64_t s, int64_t p, int64_t dil) {
  return static_cast<int>(((t * dil - p) % s + s) % s);
}
int TapDelta(int64_t t, int64_t s, int64_t p, int64_t dil) {
  return static_cast<int>((TapPhase(t, s, p, dil) + p - t * dil) / s);
}

// Per dimension: the smallest input offset, the input rows a cell reaches, the most taps of one
// phase, and the output cells.
struct CellReach {
  int delta_min = 0, rows = 1, max_taps = 0;
  int64_t cells = 0;
};
CellReach ReachOf(const Problem& p, int i) {
  CellReach r;
  int lo = INT32_MAX, hi = INT32_MIN;
  std::vector<int> taps(static_cast<size_t>(p.stride[i]), 0);
  for (int64_t t = 0; t < p.kernel[i]; ++t) {
    const int d = TapDelta(t, p.stride[i], p.padding[i], p.dilation[i]);
    lo = std::min(lo, d);
    hi = std::max(hi, d);
    ++taps[static_cast<size_t>(TapPhase(t, p.stride[i], p.padding[i], p.dilation[i]))];
  }
  r.delta_min = lo;
  r.rows = hi - lo + 1;
  r.max_taps = *std::max_element(taps.begin(), taps.end());
  r.cells = CeilDiv(p.OutSize()[i], p.stride[i]);
  return r;
}

// Derived sizes of a candidate, shared by ranking, preamble and launches.
struct CellShape {
  CellReach d, h, w;
  int cell_threads = 0, threads = 0, bw = 0, bh = 0, bd = 0, unit = 4, accumulators = 0, ffma = 0;
  int rows = 0;  // input rows a thread loads per channel
  int64_t tiles_d = 0, tiles_h = 0, tiles_w = 0, blocks = 0, smem_bytes = 0;
};

// The reach of each dimension depends on the problem only: the candidate search works it out
// once.
struct Reach3 {
  CellReach d, h, w;
};
Reach3 ReachesOf(const Problem& p) { return {ReachOf(p, 0), ReachOf(p, 1), ReachOf(p, 2)}; }

CellShape ShapeOf(const Problem& p, const Config& c, const Reach3& r) {
  CellShape s;
  s.d = r.d, s.h = r.h, s.w = r.w;
  const int64_t cout_g = p.c_out / p.groups;
  s.cell_threads = c.bx * c.by * c.bz;
  s.threads = s.cell_threads * static_cast<int>(cout_g / c.cob);
  s.bw = c.bx * c.vw;
  s.unit = p.in[2] % 4 == 0 && c.vw % 4 == 0 ? 16 : 4;
  s.accumulators =
      static_cast<int>(c.cob * p.stride[0] * p.stride[1] * p.stride[2] * c.vw * c.hc * c.dc);
  s.ffma = static_cast<int>(c.cob * p.kernel[0] * p.kernel[1] * p.kernel[2] * c.vw * c.hc * c.dc);
  s.bh = c.by * c.hc;
  s.bd = c.bz * c.dc;
  s.rows = (s.d.rows + c.dc - 1) * (s.h.rows + c.hc - 1);
  s.tiles_d = CeilDiv(s.d.cells, s.bd);
  s.tiles_h = CeilDiv(s.h.cells, s.bh);
  s.tiles_w = CeilDiv(s.w.cells, s.bw);
  s.blocks = p.n * p.groups * s.tiles_d * s.tiles_h * s.tiles_w;
  // The staged halo rows (as the template lays them: kLeft, kRS) and the padded weight rows.
  const int left = s.w.delta_min < 0 ? static_cast<int>(CeilDiv(-s.w.delta_min, 4) * 4) : 0;
  const int reach_hi = std::max(s.w.rows - 1 + s.w.delta_min, 0);
  const int64_t row_stride = CeilDiv(left + s.bw + reach_hi, 4) * 4;
  const int64_t x_chan = int64_t{s.bd + s.d.rows - 1} * (s.bh + s.h.rows - 1) * row_stride;
  const int64_t w_chan = cout_g * p.kernel[0] * p.kernel[1] * CeilDiv(p.kernel[2], 4) * 4;
  s.smem_bytes = int64_t{c.st} * c.ck * (x_chan + w_chan) * 4;
  return s;
}
CellShape ShapeOf(const Problem& p, const Config& c) { return ShapeOf(p, c, ReachesOf(p)); }

// f32 layers in strict fp32, fp32x3 or tf32 (exact FFMA: within 3xTF32's 1e-5 and TF32's 1e-3;
// where few output channels leave a tensor-core tile's N mostly empty, it is also the faster) of
// at most kMaxOutputChannels per group whose sums stay plain (at most MaxProducts per output) and
// whose phases fit a thread's accumulators.
bool Applies(const Problem& p) {
  if (p.dtype != DType::kF32) return false;
  if (p.precision != Precision::kFp32 && p.precision != Precision::kFp32x3 &&
      p.precision != Precision::kTf32)
    return false;
  const int64_t cout_g = p.c_out / p.groups;
  if (cout_g > kMaxOutputChannels) return false;
  if (p.in[0] * p.in[1] * p.in[2] >= (int64_t{1} << 31)) return false;  // int plane offsets
  if (p.stride[0] * p.stride[1] * p.stride[2] > kMaxAccumulators) return false;
  if (p.kernel[0] * p.kernel[1] * p.kernel[2] > kMaxFfmaPerChannel) return false;
  const Reach3 r = ReachesOf(p);
  if (r.d.rows * r.h.rows > 16 || r.w.rows > 8) return false;
  return p.c_in / p.groups * r.d.max_taps * r.h.max_taps * r.w.max_taps <= MaxProducts(p.precision);
}

// Blocks of one SM: by shared memory, registers (the accumulators, a row of values and ~48
// more) and threads.
int BlocksPerSm(const Config& c, const CellShape& s) {
  const int regs = std::min(255, (s.accumulators + c.vw + s.w.rows + 48 + 7) / 8 * 8);
  const int by_smem = static_cast<int>(kSmemPerSm / (s.smem_bytes + 1024));
  const int warp_threads = static_cast<int>(CeilDiv(s.threads, 32) * 32);  // registers go by warp
  const int by_regs = 65536 / (warp_threads * regs);
  return std::max(0, std::min({by_smem, by_regs, 2048 / warp_threads, 32}));
}

// Lower is better: issue per FFMA, each shared-memory load counted 6 times (its slot in the
// memory pipe and its wavefronts: MUN-4 ran 0.054 ms at 4 cells per thread, 0.083-0.09 at 2 and
// 0.13 at 1, where FFMAs per load halve each time), the stage copies, rows of fewer than 8
// threads along W (a quarter warp's 16-byte loads then span staged rows: bank conflicts; MUN-4's
// 4-thread rows ran 0.067-0.071 against 0.054 for 12), cells past the output, the idle share of
// the last wave, fewer than 12 warps per SM, and the halo's L2 traffic where it outruns the
// FFMAs.
double Score(const Problem& p, const Config& c, const CellShape& s) {
  const int64_t cout_g = p.c_out / p.groups;
  const bool vec_cells = c.vw % 4 == 0 && s.w.delta_min <= 0 && s.w.delta_min + s.w.rows - 1 >= 0;
  const double row_loads = vec_cells ? c.vw / 4 + s.w.rows - 1 : c.vw + s.w.rows - 1;
  const double loads = s.rows * row_loads + static_cast<double>(c.cob * p.kernel[0] * p.kernel[1]) *
                                                static_cast<double>(CeilDiv(p.kernel[2], 4));
  const double row_items = s.unit == 16 ? s.bw / 4.0 + s.w.rows - 1 : s.bw + s.w.rows - 1.0;
  const double halo_rows = static_cast<double>(s.bd + s.d.rows - 1) * (s.bh + s.h.rows - 1);
  const double copies =
      4.0 * (halo_rows * row_items + cout_g * p.kernel[0] * p.kernel[1] * p.kernel[2]) / s.threads;
  const double issue = (s.ffma + 6.0 * loads + copies) / s.ffma * (c.bx < 8 ? 1.25 : 1.0);
  const double cells = static_cast<double>(s.tiles_d * s.bd * s.tiles_h * s.bh * s.tiles_w * s.bw) /
                       static_cast<double>(s.d.cells * s.h.cells * s.w.cells);
  const int bps = BlocksPerSm(c, s);
  const double slots = static_cast<double>(kRankSms) * bps;
  const double fill = static_cast<double>(s.blocks) / (std::ceil(s.blocks / slots) * slots);
  const double warps = bps * s.threads / 32.0;
  const double latency = warps < 12 ? 1.0 + (12 - warps) / 12.0 : 1.0;
  // Halo bytes per FFMA against ~0.4 (an SM's L2 share over its FFMA rate).
  const double bytes_per_ffma =
      4.0 * halo_rows * (s.bw + s.w.rows - 1) /
      (static_cast<double>(s.bd) * s.bh * s.bw * c.cob * p.kernel[0] * p.kernel[1] * p.kernel[2]);
  return issue * cells / fill * latency * std::max(1.0, bytes_per_ffma / 0.4);
}

// Whether a tile is one of the regular search's: 2^k threads along H and D, and whole warps per
// channel block where there are several (their weight reads are then one broadcast a warp).
bool RegularTile(const Config& c, const CellShape& s) {
  const auto pow2 = [](int v) { return (v & (v - 1)) == 0; };
  return pow2(c.by) && pow2(c.bz) && s.threads % 32 == 0 &&
         (s.threads == s.cell_threads || s.cell_threads % 32 == 0);
}

// The six best-scored regular tiles, then six other tile shapes that can fill the SMs' slots
// better: 3 or 6 threads along H or D, channel blocks of part warps (a warp then reads one weight
// row per channel block it holds) or blocks of part warps. Power-of-two tiles split a 24^3 or 48^3
// cell grid into 216 or 1152 blocks (MUN-3, MUN-4): 1.64 and 1.75 waves of the slots they allow,
// where a third along one dimension can make 0.97 of whole waves. The score ranks these shapes
// poorly (on an H200, MUN-3's fastest, 0.108 ms against the regular 0.120, was the sixth
// best-scored shape; L1-72's the sixth too), so six shapes go to the tuner.
std::vector<Config> CellCandidates(const Problem& p, const DeviceLimits& limits) {
  if (!Applies(p)) return {};
  std::vector<std::pair<double, Config>> regular, wave_fit;
  const int64_t cout_g = p.c_out / p.groups;
  const int64_t phases = p.stride[0] * p.stride[1] * p.stride[2];
  const Reach3 reach = ReachesOf(p);
  // Four H cells or two D cells only along an unstrided dimension: there a cell has one phase, so
  // a thread needs more cells for as many FFMAs per load.
  const std::vector<int> h_cells =
      p.stride[1] == 1 ? std::vector<int>{1, 2, 4} : std::vector<int>{1, 2};
  const std::vector<int> d_cells = p.stride[0] == 1 ? std::vector<int>{1, 2} : std::vector<int>{1};
  for (int cob : {4, 2, 1})
    for (int vw : {8, 4, 2, 1})
      for (int hc : h_cells)
        for (int dc : d_cells)
          for (int bx : {32, 16, 12, 8, 6, 4, 2})
            for (int by : {8, 6, 4, 3, 2, 1})
              for (int bz : {6, 4, 3, 2, 1})
                for (int ck : {16, 8, 4, 2, 1}) {
                  if (cout_g % cob != 0 || phases * cob * vw * hc * dc > kMaxAccumulators) continue;
                  Config c;
                  c.family = "cell_simt";
                  c.bx = bx, c.by = by, c.bz = bz, c.cob = cob, c.vw = vw, c.hc = hc, c.dc = dc;
                  c.ck = ck;
                  c.st = 3;
                  const CellShape probe = ShapeOf(p, c, reach);
                  if (probe.threads < 64 || probe.threads > kMaxThreads || probe.cell_threads > 256)
                    continue;
                  if (probe.ffma > kMaxFfmaPerChannel || probe.rows > kMaxRows) continue;
                  // Blocks no wider, taller or deeper than twice what the output needs.
                  if (bx > 2 && probe.bw / 2 >= probe.w.cells) continue;
                  if (probe.bh > 1 && probe.bh / 2 >= probe.h.cells) continue;
                  if (probe.bd > 1 && probe.bd / 2 >= probe.d.cells) continue;
                  if (ck > 4 && ck / 2 >= p.c_in / p.groups) continue;
                  const int cap = std::min(limits.max_smem_per_block, kSmemPerSm / 2 - 1024);
                  // Stages of 1-2 channels only for the deep tiles (their halo is large) whose
                  // two stages of 4 would not fit.
                  if (ck < 4) {
                    Config four = c;
                    four.ck = 4, four.st = 2;
                    if (hc * dc < 4 || ShapeOf(p, four, reach).smem_bytes <= cap) continue;
                  }
                  while (c.st > 2 && ShapeOf(p, c, reach).smem_bytes > cap) --c.st;
                  const CellShape s = ShapeOf(p, c, reach);
                  if (s.smem_bytes > cap || s.threads > limits.max_threads_per_block) continue;
                  if (BlocksPerSm(c, s) < 1 || s.blocks > INT32_MAX) continue;
                  (RegularTile(c, s) ? regular : wave_fit).push_back({Score(p, c, s), c});
                }
  std::vector<Config> out = LowestScored(std::move(regular), 6);
  // Of the others, one stage depth per tile shape (their scores differ by the stages only).
  std::stable_sort(wave_fit.begin(), wave_fit.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<double, Config>> shapes;
  std::set<std::string> seen;  // names with the stage fields cleared
  for (const auto& e : wave_fit) {
    Config shape = e.second;
    shape.ck = shape.st = 0;
    if (seen.insert(shape.Name()).second) shapes.push_back(e);
  }
  for (const Config& c : LowestScored(std::move(shapes), 6)) out.push_back(c);
  return out;
}

class CellSimt final : public Family {
 public:
  std::string_view name() const override { return "cell_simt"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        {"bx", &Config::bx, "_x", nullptr, Field::kRequired, 1, 64},   // threads along W
        {"by", &Config::by, "y", nullptr, Field::kRequired, 1, 16},    // threads along H
        {"bz", &Config::bz, "z", nullptr, Field::kRequired, 1, 16},    // threads along D
        {"cob", &Config::cob, "_c", nullptr, Field::kRequired, 1, 4},  // output channels per thread
        {"vw", &Config::vw, "_v", nullptr, Field::kRequired, 1, 16},   // cells per thread along W
        {"hc", &Config::hc, "h", nullptr, 1, 1, 4, true},              // and along H
        {"dc", &Config::dc, "d", nullptr, 1, 1, 2, true},              // and along D
        {"ck", &Config::ck, "_k", nullptr, Field::kRequired, 1, 64},   // input channels per stage
        {"st", &Config::st, "_s", nullptr, Field::kRequired, 2, 8},    // stages in flight
    };
    return f;
  }
  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext&) const override {
    return CellCandidates(p, limits);
  }
  // After the others: tuning decides where it wins.
  Placement Place(const Problem&, const RankContext&) const override { return {Placement::kBack}; }
  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    const CellShape s = ShapeOf(p, c);
    // What the template asserts, and what could not launch (a hand-named or cached config).
    // Several D cells on a strided D, or more rows than the search offers, are correct, only
    // slower to compile: allowed.
    if (!Applies(p) || p.c_out / p.groups % c.cob != 0 || s.threads > 1024 ||
        s.accumulators > kMaxAccumulators || s.smem_bytes > 227 * 1024 || s.blocks > INT32_MAX)
      return NotApplicable(p, c);
    DefInt(os, "kTX", c.bx);
    DefInt(os, "kTY", c.by);
    DefInt(os, "kTZ", c.bz);
    DefInt(os, "kCOB", c.cob);
    DefInt(os, "kV", c.vw);
    DefInt(os, "kHC", c.hc);
    DefInt(os, "kDC", c.dc);
    DefInt(os, "kCK", c.ck);
    DefInt(os, "kST", c.st);
    DefInt(os, "kUnit", s.unit);
    DefInt(os, "kDilD", p.dilation[0]);
    DefInt(os, "kDilH", p.dilation[1]);
    DefInt(os, "kDilW", p.dilation[2]);
    DefLong(os, "kTilesD", s.tiles_d);
    DefLong(os, "kTilesH", s.tiles_h);
    DefLong(os, "kTilesW", s.tiles_w);
    return Status();
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh", "operands.cuh", "cell_simt.cu"};
  }
  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    const CellShape s = ShapeOf(p, c);
    LaunchPlan plan = OneKernel(Step(named.Name(), s.blocks, static_cast<unsigned>(s.threads),
                                     static_cast<unsigned>(s.smem_bytes),
                                     {Arg::kX, Arg::kW, Arg::kBias, Arg::kY}));
    plan.x_alignment = static_cast<size_t>(s.unit);
    return plan;
  }
};

}  // namespace

const Family& CellSimtFamily() { return FamilyInstance<CellSimt>(); }

}  // namespace convt3d::gen
