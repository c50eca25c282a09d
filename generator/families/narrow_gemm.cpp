// narrow_gemm.cpp: layers with few output channels per group (templates/narrow_gemm.cu): a GEMM
// whose rows are (output channel, D phase, H phase, W tap) and whose columns are input positions
// read in place from NCDHW rows.
//
// Where C_out/groups x the D and H phases x the W taps is at most 64 (the last layers of U-Nets
// and GAN generators: 64 -> 1, 32 -> 2), the per-phase GEMMs of the other families have N of a
// few columns and re-lay the input, which is then most of the traffic. Here a block owns a box
// of output cells (q_d, q_h) over whole W rows; per input channel, K is the J_d x J_h input rows
// the cells' taps reach (J = rows per cell), the columns are the box's input positions (q_d,
// q_h, i_w), and the W taps are rows of the product, summed into whole output rows by the
// epilogue (output w takes tap kw from input (w + p - kw*d) / s). The input is staged as plain
// rows (cp.async), each input value feeds every row of the GEMM, and every output is written once.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "base/math.h"
#include "base/status.h"
#include "generator/family.h"
#include "generator/phases.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

constexpr int kSmemTwoBlocks = 113 * 1024;  // two blocks per SM
constexpr int kSmemPerSm = 228 * 1024;
constexpr int kRankSms = 132;
constexpr int kMaxRows = 64;            // GEMM rows (tensor cores: four m16 tiles)
constexpr int kMaxRowsFfma = 32;        // FFMA: 4 columns x 32 rows of accumulators per thread
constexpr int kMaxW = 128;              // whole input rows per block
constexpr int kMaxProductsFfma = 2048;  // strict fp32 sums a column in one accumulator

int RoundUp(int64_t a, int64_t b) { return static_cast<int>(CeilDiv(a, b) * b); }

// The GEMM's rows: output channels of a group x the D and H phases x the W taps.
int64_t GemmRows(const Problem& p) {
  return p.c_out / p.groups * p.stride[0] * p.stride[1] * p.kernel[2];
}

// Per D or H dimension: the input rows one output cell q reaches (q + off .. q + off + J - 1),
// which offsets each phase uses (bit r * J + u), and the cells that have outputs.
struct CellDim {
  int j = 1, off = 0;
  uint64_t taps_mask = 0;
  int64_t q_lo = 0, q_count = 0;
};

CellDim CellDimOf(const Problem& p, int i) {
  const DimPhases dp =
      PhasesOf(p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], p.OutSize()[i]);
  CellDim cd;
  int64_t lo = INT64_MAX, hi = INT64_MIN, q_lo = INT64_MAX, q_hi = INT64_MIN;
  for (const DimPhase& ph : dp.phases) {
    for (int j = 0; j < ph.taps; ++j) {
      lo = std::min(lo, ph.c - int64_t{j} * dp.d_red);
      hi = std::max(hi, ph.c - int64_t{j} * dp.d_red);
    }
    if (ph.q_count > 0) {
      q_lo = std::min(q_lo, ph.q_lo);
      q_hi = std::max(q_hi, ph.q_lo + ph.q_count);
    }
  }
  cd.off = static_cast<int>(lo);
  cd.j = static_cast<int>(hi - lo + 1);
  cd.q_lo = q_lo;
  cd.q_count = q_hi - q_lo;
  for (const DimPhase& ph : dp.phases)
    for (int j = 0; j < ph.taps; ++j) {
      const int u = static_cast<int>(ph.c - int64_t{j} * dp.d_red - lo);
      if (ph.r * cd.j + u < 64) cd.taps_mask |= uint64_t{1} << (ph.r * cd.j + u);
    }
  return cd;
}

// Whether a tensor map can describe the input: W rows of whole 16-byte units (the map's strides)
// and int32 box coordinates.
bool MapFitsInput(const Problem& p) {
  return p.in[2] * DTypeBytes(p.dtype) % 16 == 0 && p.n * p.groups < (int64_t{1} << 31);
}

// Derived sizes of a candidate, shared by ranking, preamble and launches.
struct NarrowShape {
  CellDim d, h;
  int eb = 4, kstep = 1, unit = 16;
  int m = 0, mp = 0, mt = 0;                   // GEMM rows, padded (to 16 or 4), m16 tiles
  int wn = 0, ws = 0, rd = 0, rh = 0, cs = 0;  // columns per row, row and channel strides
  int kc = 0, chunks = 0;  // K per chunk: channels x J_d x J_h (a multiple of the mma k-step)
  int nb = 0, wt = 0, dg = 1, threads = 0, zs = 0;
  int w_chunk_bytes = 0, slab_bytes = 0, stage_bytes = 0, smem_bytes = 0;
  int bar_offset = 0;  // tensor-map form: the stages' mbarriers, after everything else
  int64_t tiles_d = 0, tiles_h = 0, blocks = 0, workspace_bytes = 0;
  bool fits = false;
};

NarrowShape ShapeOf(const Problem& p, const Config& c) {
  NarrowShape s;
  s.d = CellDimOf(p, 0);
  s.h = CellDimOf(p, 1);
  s.eb = static_cast<int>(DTypeBytes(p.dtype));
  const bool mma = c.mma != 0;
  s.kstep = mma ? (s.eb == 2 ? 16 : 8) : 1;
  const int64_t cin_g = p.c_in / p.groups, cout_g = p.c_out / p.groups;
  s.m = static_cast<int>(GemmRows(p));
  s.mp = RoundUp(s.m, mma ? 16 : 4);
  s.mt = s.mp / 16;
  s.wn = RoundUp(p.in[2], mma ? 8 : 4);
  s.rd = c.bz + s.d.j - 1;
  s.rh = c.by + s.h.j - 1;
  s.kc = c.ck * s.d.j * s.h.j;
  s.chunks = static_cast<int>(CeilDiv(cin_g, c.ck));
  s.unit = p.in[2] * s.eb % 16 == 0 ? 16 : 4;
  s.nb = c.bz * c.by * s.wn;
  // mma: a warp per 8-column W tile and D group, at least four warps where the cells allow.
  // More warps along D where a warp's cells would not fit its registers (boxes of more cells:
  // less halo per cell, the weights read once for more of them).
  s.wt = s.wn / 8;
  s.dg = 1;
  const int acc_limit = c.split == 3 ? 48 : 64;
  auto acc_per_warp = [&] { return c.bz / s.dg * c.by * s.mt * 4; };  // a warp's cells
  auto more_warps = [&] {
    return s.wt * s.dg < 4 || (acc_per_warp() > acc_limit && s.wt * s.dg < 16);
  };
  while (mma && more_warps() && c.bz % (s.dg * 2) == 0) s.dg *= 2;
  s.threads = mma ? 32 * s.wt * s.dg : s.nb / 4;
  // Row stride: whole 16-byte units. Channel stride: the tensor-core forms read one row of 8
  // (16-bit: ldmatrix) or 4 (TF32) consecutive channels at once, which land on distinct banks
  // when the stride is an odd number of 16-byte units (16-bit) or 8 or 24 words mod 32 (TF32).
  s.ws = RoundUp(s.wn, 16 / s.eb);
  s.cs = s.rd * s.rh * s.ws;
  auto conflict_free = [&](int cs) {
    return !mma || (s.eb == 2 ? cs / 8 % 2 == 1 : cs % 32 == 8 || cs % 32 == 24);
  };
  bool strides_ok = !c.ws || MapFitsInput(p);
  if (c.ws) {
    // The tensor-map form lands a chunk as one dense box [channel][row d][row h][kWS]: the
    // channel stride is the box's, so the row is widened instead (its tail past W reads as
    // zeros from outside the tensor, fetching nothing), where some width up to 64 more does.
    while (!conflict_free(s.cs) && s.ws < s.wn + 64) s.cs = s.rd * s.rh * (s.ws += 16 / s.eb);
    strides_ok = strides_ok && conflict_free(s.cs);
  } else {
    while (!conflict_free(s.cs)) s.cs += 16 / s.eb;
  }
  // Packed weights per chunk: mma fragments ([channel group][offset][part][m16 tile][lane][4
  // words], 3xTF32: big and small parts), or FFMA rows [k][mp] of f32.
  const int parts = mma && c.split == 3 ? 2 : 1;
  s.w_chunk_bytes = mma ? s.kc / s.kstep * s.mt * 512 * parts : s.kc * s.mp * 4;
  // Tensor-map boxes land at 128-byte aligned addresses.
  s.slab_bytes = RoundUp(c.ck * s.cs * s.eb, c.ws ? 128 : 16);
  s.stage_bytes = RoundUp(s.slab_bytes + s.w_chunk_bytes, c.ws ? 128 : 1);
  s.zs = s.nb + 4;
  // The product for the epilogue, then a 16-byte record per output row.
  const int z_bytes =
      s.mp * s.zs * 4 + static_cast<int>(cout_g * p.stride[0] * p.stride[1]) * c.bz * c.by * 16;
  // Persistent blocks keep the product in a region of its own; others reuse the stages.
  s.smem_bytes = c.pa ? c.st * s.stage_bytes + z_bytes : std::max(c.st * s.stage_bytes, z_bytes);
  s.bar_offset = RoundUp(s.smem_bytes, 8);
  if (c.ws) s.smem_bytes = s.bar_offset + 8 * c.st;
  s.tiles_d = CeilDiv(s.d.q_count, c.bz);
  s.tiles_h = CeilDiv(s.h.q_count, c.by);
  s.blocks = p.n * p.groups * s.tiles_d * s.tiles_h;
  s.workspace_bytes = p.groups * int64_t{s.chunks} * s.w_chunk_bytes;
  s.fits = strides_ok && s.m <= (mma ? kMaxRows : kMaxRowsFfma) && s.threads >= 32 &&
           s.threads <= 512 && (mma || s.threads % 32 == 0) && (!mma || c.ck % s.kstep == 0) &&
           s.smem_bytes <= kSmemTwoBlocks &&
           // A block of one tile reuses its stages for the product: one tile per block.
           (c.pa || s.blocks <= INT32_MAX) &&
           // mma registers: the A fragments of every offset and the accumulators of a warp's cells.
           (!mma ||
            (s.d.j * s.h.j * s.mt * (c.split == 3 ? 2 : 1) <= 16 && acc_per_warp() <= acc_limit));
  return s;
}

// Whether the family takes p at all (before tiles): few output rows, whole W rows of a bounded
// width in 4-byte units, at most 16 input rows per output cell and channel.
bool Applies(const Problem& p, bool mma) {
  if (p.dtype == DType::kF64) return false;
  if (mma) {
    if (p.dtype == DType::kF32 && p.precision == Precision::kFp32) return false;
  } else if (p.dtype != DType::kF32 ||
             (p.precision != Precision::kFp32 && p.precision != Precision::kFp32x3)) {
    return false;
  }
  if (GemmRows(p) > (mma ? kMaxRows : kMaxRowsFfma) || p.in[2] > kMaxW) return false;
  if (p.in[2] * DTypeBytes(p.dtype) % 4 != 0) return false;
  const CellDim d = CellDimOf(p, 0), h = CellDimOf(p, 1);
  if (d.j * h.j > 16 || p.stride[0] * d.j > 64 || p.stride[1] * h.j > 64) return false;
  if (!mma && p.c_in / p.groups * d.j * h.j * p.kernel[2] > kMaxProductsFfma) return false;
  return true;
}

// Whether the input can be read through a tensor map on an sm_90 device (TMA).
bool TakesTensorMap(const Problem& p, const DeviceLimits& limits) {
  return limits.wgmma && MapFitsInput(p);
}

// The tensor-map form's map over the input: [n * groups][channel of the group][D][H][W],
// innermost last; a box is one chunk's channels x the rows the cells reach x kWS columns.
TiledMapShape InputMap(const Problem& p, const Config& c, const NarrowShape& s) {
  TiledMapShape m;
  m.rank = 5;
  m.elem_bytes = s.eb;
  const uint64_t dims[5] = {static_cast<uint64_t>(p.in[2]), static_cast<uint64_t>(p.in[1]),
                            static_cast<uint64_t>(p.in[0]),
                            static_cast<uint64_t>(p.c_in / p.groups),
                            static_cast<uint64_t>(p.n * p.groups)};
  std::copy(dims, dims + 5, m.dims);
  uint64_t stride = static_cast<uint64_t>(s.eb);
  for (int i = 0; i < 4; ++i) m.strides_bytes[i] = stride *= dims[i];
  const uint32_t box[5] = {static_cast<uint32_t>(s.ws), static_cast<uint32_t>(s.rh),
                           static_cast<uint32_t>(s.rd), static_cast<uint32_t>(c.ck), 1};
  std::copy(box, box + 5, m.box);
  m.swizzle_bytes = 0;
  return m;
}

// Lower is better: input rows reread from L2 per output cell (the halo of the cell box), cells
// past the volume, and the idle share of the last wave.
double Score(const Config& c, const NarrowShape& s) {
  const double halo = static_cast<double>(s.rd * s.rh) / (c.bz * c.by);
  const double cells = static_cast<double>(s.tiles_d * c.bz * s.tiles_h * c.by) /
                       static_cast<double>(s.d.q_count * s.h.q_count);
  const double per_sm = 2.0 * kRankSms;
  const double fill = s.blocks / (std::ceil(s.blocks / per_sm) * per_sm);
  return halo * cells + (1.0 - fill) * 0.5 + 0.1 / c.st;
}

std::vector<Config> NarrowCandidates(const Problem& p, const DeviceLimits& limits) {
  std::vector<Config> out;
  for (int mma : {1, 0}) {
    if (!Applies(p, mma)) continue;
    std::vector<std::pair<double, Config>> scored;
    const int split = mma && !IsHalf(p.dtype) ? OperandSplit(p.precision) : 1;
    for (int bz : {1, 2, 4})
      for (int by : {1, 2, 4, 8})
        for (int ck : {4, 8, 16, 32}) {
          Config c;
          c.family = "narrow_gemm";
          c.dtype = p.dtype;
          c.bz = bz, c.by = by, c.ck = ck, c.mma = mma, c.split = split;
          c.st = 4;
          while (c.st > 2 && ShapeOf(p, c).smem_bytes > kSmemTwoBlocks) --c.st;
          const NarrowShape s = ShapeOf(p, c);
          if (!s.fits || s.threads > limits.max_threads_per_block) continue;
          if (s.smem_bytes > limits.max_smem_per_block) continue;
          // A chunk wider than the group's channels only pads K.
          if (ck > 4 && (ck / 2) >= p.c_in / p.groups) continue;
          if (bz > 1 && (bz / 2) >= s.d.q_count) continue;
          if (by > 1 && (by / 2) >= s.h.q_count) continue;
          scored.push_back({Score(c, s), c});
        }
    std::stable_sort(scored.begin(), scored.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    // A variant of c if it fits: stages cut to two blocks per SM.
    auto push_variant = [&](Config c) {
      while (c.st > 2 && ShapeOf(p, c).smem_bytes > kSmemTwoBlocks) --c.st;
      const NarrowShape s = ShapeOf(p, c);
      if (s.fits && s.smem_bytes <= limits.max_smem_per_block) out.push_back(c);
    };
    // Where the tensor map applies, its twins first (one thread copies a stage: no per-thread
    // address work): of the six best, each also with three stages (more blocks per SM), and of
    // the best as persistent blocks; then the three best by cp.async. Elsewhere the six best.
    // Then the best again as persistent blocks.
    const bool map = TakesTensorMap(p, limits);
    if (map) {
      for (size_t i = 0; i < scored.size() && i < 6; ++i) {
        Config c = scored[i].second;
        c.ws = 1, c.st = 4;
        push_variant(c);
        // Three stages where four fit (else the twin above has three or fewer already).
        if (ShapeOf(p, c).smem_bytes <= kSmemTwoBlocks) {
          c.st = 3;
          push_variant(c);
        }
      }
      if (!scored.empty()) {
        Config c = scored.front().second;
        c.ws = 1, c.pa = 1, c.st = 4;
        push_variant(c);
      }
    }
    for (size_t i = 0; i < scored.size() && i < (map ? 3u : 6u); ++i)
      out.push_back(scored[i].second);
    if (!scored.empty()) {
      Config c = scored.front().second;
      c.pa = 1;
      push_variant(c);
    }
  }
  return out;
}

constexpr const char* kMmaLabels[] = {"", "_mma"};
constexpr const char* kPersistLabels[] = {"", "_p"};
constexpr const char* kTensorMapLabels[] = {"", "_tma"};

class NarrowGemm final : public Family {
 public:
  std::string_view name() const override { return "narrow_gemm"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        {"bz", &Config::bz, "_z", nullptr, Field::kRequired, 1, 16},    // cells along D
        {"by", &Config::by, "y", nullptr, Field::kRequired, 1, 16},     // cells along H
        {"ck", &Config::ck, "_k", nullptr, Field::kRequired, 1, 64},    // channels per stage
        {"st", &Config::st, "_s", nullptr, Field::kRequired, 2, 8},     // stages in flight
        {"mma", &Config::mma, nullptr, kMmaLabels, 0, 0, 1},            // 1: mma.sync, 0: FFMA
        {"pa", &Config::pa, nullptr, kPersistLabels, 0, 0, 1},          // 1: persistent blocks
        {"ws", &Config::ws, nullptr, kTensorMapLabels, 0, 0, 1, true},  // 1: stages by tensor map
        {"split", &Config::split, nullptr, nullptr, 1, 1, 3},
    };
    return f;
  }
  std::string Token(const Config& c) const override {
    return c.mma ? OperandToken(c) : DTypeName(c.dtype);
  }
  Status CheckFields(const Config& c) const override {
    if (c.split == 2 || (c.split == 3 && !c.mma))
      return InvalidArgument(StrCat("bad mma/split in ", c.ToJson()));
    return Status();
  }
  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext&) const override {
    return NarrowCandidates(p, limits);
  }
  // First where the output rows of a cell are few (the GEMM's rows fit one or two m16 tiles):
  // there the other families' GEMMs run N of a few columns on a re-laid input.
  Placement Place(const Problem& p, const RankContext&) const override {
    return {GemmRows(p) <= 32 ? Placement::kFront : Placement::kAfterFirstFour};
  }
  bool TensorCoreGemm() const override { return false; }
  // Where it is placed first, its tile beats the phase-channel GEMMs: they run N of a few
  // columns on a re-laid input, this reads the input in place.
  bool PickOverPhaseChannels(const Problem& p, const Config& first) const override {
    return first.family == name() && Place(p, {}).where == Placement::kFront;
  }

  KernelSet Kernels(const Problem&, const Config&) const override { return {true, false, false}; }
  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    const NarrowShape s = ShapeOf(p, c);
    if (!Applies(p, c.mma != 0) || !s.fits) return NotApplicable(p, c);
    DefInt(os, "kTD", c.bz);
    DefInt(os, "kTH", c.by);
    DefInt(os, "kCK", c.ck);
    DefInt(os, "kST", c.st);
    DefInt(os, "kMMA", c.mma);
    DefInt(os, "kSplit", c.split);
    DefInt(os, "kJD", s.d.j);
    DefInt(os, "kJH", s.h.j);
    DefInt(os, "kOffD", s.d.off);
    DefInt(os, "kOffH", s.h.off);
    DefLong(os, "kQloD", s.d.q_lo);
    DefLong(os, "kQloH", s.h.q_lo);
    DefLong(os, "kTilesD", s.tiles_d);
    DefLong(os, "kTilesH", s.tiles_h);
    DefLong(os, "kTotalTiles", s.blocks);
    DefInt(os, "kPersist", c.pa);
    os << "constexpr unsigned long long kTapMaskD = " << s.d.taps_mask << "ULL;\n";
    os << "constexpr unsigned long long kTapMaskH = " << s.h.taps_mask << "ULL;\n";
    DefInt(os, "kM", s.m);
    DefInt(os, "kMP", s.mp);
    DefInt(os, "kWN", s.wn);
    DefInt(os, "kWS", s.ws);
    DefInt(os, "kCS", s.cs);
    DefInt(os, "kKC", s.kc);
    DefInt(os, "kDilW", p.dilation[2]);
    DefInt(os, "kChunks", s.chunks);
    DefInt(os, "kUnit", s.unit);
    DefInt(os, "kThreads", s.threads);
    DefInt(os, "kZS", s.zs);
    DefInt(os, "kWChunkBytes", s.w_chunk_bytes);
    DefInt(os, "kStageBytes", s.stage_bytes);
    DefInt(os, "kSlabBytes", s.slab_bytes);
    os << "#define NARROW_X_MAP " << c.ws << "\n";
    DefInt(os, "kBarOffset", s.bar_offset);
    return Status();
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh", "phases.cuh", "operands.cuh", "wgmma.cuh", "narrow_gemm.cu"};
  }

  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    const NarrowShape s = ShapeOf(p, c);
    const std::string name = named.Name();
    LaunchPlan plan;
    plan.workspace_bytes = static_cast<size_t>(s.workspace_bytes);
    plan.x_alignment = static_cast<unsigned>(c.ws ? 16 : s.unit);  // a tensor map's base: 16
    plan.steps.push_back(WeightPrep(name + "_prep", s.workspace_bytes / 4, 2048));
    std::vector<Arg> args = {Arg::kX, Arg::kWorkspace, Arg::kBias, Arg::kY};
    if (c.ws) args.push_back(Arg::kXMap);
    LaunchStep main = Step(name, s.blocks, s.threads, s.smem_bytes, args);
    if (c.ws) main.x_map = InputMap(p, c, s);
    // Persistent: as many blocks as fit an SM by shared memory and (estimated) registers.
    const int regs = c.mma ? 168 : s.mp * 4 + 72;
    if (c.pa)
      main.blocks_per_sm = std::clamp(
          std::min(kSmemPerSm / (s.smem_bytes + 1024), 65536 / (s.threads * regs)), 1, 8);
    plan.steps.push_back(main);
    return plan;
  }
};

}  // namespace

const Family& NarrowGemmFamily() { return FamilyInstance<NarrowGemm>(); }

}  // namespace convt3d::gen
