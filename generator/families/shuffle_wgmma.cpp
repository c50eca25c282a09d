// shuffle_wgmma.cpp: the pixel-shuffle GEMM of kernel == stride layers on Hopper wgmma
// (templates/shuffle_wgmma.cu, sm_90a): TF32, BF16, FP16; the input read in place, once.
#include <algorithm>
#include <sstream>

#include "base/math.h"
#include "base/status.h"
#include "generator/families/pixel_shuffle.h"
#include "generator/families/wgmma_call.h"
#include "generator/family.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

constexpr int kSmemCap = 227 * 1024;
constexpr int kRankSms = 132;

// Derived sizes of a shuffle_wgmma candidate, shared by ranking, preamble and launches.
struct ShuffleShape {
  int eb = 4, row_b = 128, kp = 0, chunks = 0, taps = 1, bm = 64, bs = 8, lda = 72;
  bool latent = false;  // input volume 1: the rows are samples, A is copied K-major
  int64_t ncols = 0, slices = 1, m_tiles_per_sample = 1, units = 0;
  int a_slot_bytes = 0, b_bytes = 0, smem_bytes = 0, threads = 256;
  int64_t w_bytes = 0;
};

ShuffleShape ShapeOf(const Problem& p, const Config& c) {
  ShuffleShape s;
  s.eb = IsHalf(c.dtype) ? 2 : 4;
  s.row_b = c.ck * s.eb;
  const int64_t cin_g = p.c_in / p.groups, cout_g = p.c_out / p.groups;
  s.kp = static_cast<int>(CeilDiv(cin_g, c.ck) * c.ck);
  s.chunks = s.kp / c.ck;
  s.taps = static_cast<int>(p.kernel[0] * p.kernel[1] * p.kernel[2]);
  s.ncols = cout_g * s.taps;
  s.bs = c.wg * c.bn;
  s.slices = CeilDiv(s.ncols, s.bs);
  s.bm = 64 * c.mt;
  const int64_t vol = p.in[0] * p.in[1] * p.in[2];
  s.latent = vol == 1;
  // Elements per row of an A slot: per channel (positions along it), or per sample when latent
  // (channels along it); the extra 8 (4) elements keep the fragment loads conflict-free.
  s.lda = s.latent ? s.kp + (s.eb == 4 ? 4 : 8) : s.bm + 8;
  // Row tiles: per sample, or over the samples when latent (one "sample" of n positions).
  s.m_tiles_per_sample = s.latent ? CeilDiv(p.n, s.bm) : CeilDiv(vol, s.bm);
  s.units = p.groups * s.slices * (s.latent ? 1 : p.n) * s.m_tiles_per_sample;
  const int64_t a_elems = int64_t{s.latent ? s.bm : s.kp} * s.lda;
  s.a_slot_bytes = static_cast<int>(CeilDiv(a_elems * s.eb, 1024) * 1024);
  s.b_bytes = s.chunks * s.bs * s.row_b * (c.split == 3 ? 2 : 1);  // 3xTF32: big, small
  s.threads = 128 * (c.wg + 1);
  // B, the A slots, 2 mbarriers per slot + 2 for B, and 1024 for the alignment.
  s.smem_bytes = static_cast<int>(CeilDiv(s.b_bytes, 1024) * 1024) + c.st * s.a_slot_bytes +
                 16 * (c.st + 1) + 1024;
  s.w_bytes = p.groups * s.slices * int64_t{s.b_bytes};
  return s;
}

// A pixel shuffle (pixel_shuffle.h) whose copies move whole 16-byte units: of each input
// channel plane, or (input volume 1) of each sample's channels.
bool Applies(const Problem& p, const DeviceLimits& limits) {
  if (!PlaneWgmmaMode(p, limits)) return false;
  if (!IsPixelShuffle(p)) return false;
  const int64_t vol = p.in[0] * p.in[1] * p.in[2];
  const int64_t unit = vol == 1 ? p.c_in / p.groups : vol;
  return unit * DTypeBytes(p.dtype) % 16 == 0;
}

// Lower is better: column and row padding, the input reread once per extra column slice, the
// idle share of the last wave, and fewer A slots in flight.
double Score(const Problem& p, const Config& c, const ShuffleShape& s) {
  const int64_t rows = s.latent ? p.n : p.in[0] * p.in[1] * p.in[2];
  return ShuffleTilingWaste(p, s.ncols, s.slices, s.bs, rows, s.bm, s.units, kRankSms) + 0.2 / c.st;
}

std::vector<Config> ShuffleCandidates(const Problem& p, const DeviceLimits& limits) {
  if (!Applies(p, limits)) return {};
  const bool half = IsHalf(p.dtype);
  const int split = half ? 1 : OperandSplit(p.precision);
  const int64_t cin_g = p.c_in / p.groups;
  const int cap = std::min(limits.max_smem_per_block, kSmemCap);
  std::vector<std::pair<double, Config>> scored;
  for (int ck : PlaneWgmmaKRows(p, cin_g)) {
    for (int wg : {2, 1})
      for (int mt : {1, 2})
        for (int bn = 8; bn <= 256; bn += 8) {
          // At most 96 accumulators per thread (128 for two m64 tiles of 16-bit operands): the
          // epilogue's column offsets and the two fragment sets take the rest, and wider tiles
          // spilled; 3xTF32 (big and small fragments) one m64 tile (two spilled).
          if (mt * bn / 2 > (half && mt == 2 ? 128 : 96) || (split == 3 && mt > 1)) continue;
          Config c;
          c.family = "shuffle_wgmma";
          c.dtype = p.dtype;
          c.wg = wg, c.mt = mt, c.bn = bn, c.ck = ck, c.split = split;
          for (c.st = 6; c.st > 2 && ShapeOf(p, c).smem_bytes > cap;) --c.st;
          const ShuffleShape s = ShapeOf(p, c);
          if (s.smem_bytes > cap || s.threads > limits.max_threads_per_block) continue;
          // The narrowest tile of each slice count only: a wider one pads more columns.
          if (bn > 8 && CeilDiv(s.ncols, int64_t{wg} * (bn - 8)) == s.slices) continue;
          // Each slice past the first rereads the input (from L2 mostly): at most the layer's own
          // traffic again.
          if (!SliceRereadsWithinTraffic(p, s.slices)) continue;
          scored.push_back({Score(p, c, s), c});
        }
  }
  return LowestScored(std::move(scored), 6);
}

class ShuffleWgmma final : public Family {
 public:
  std::string_view name() const override { return "shuffle_wgmma"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        {"wg", &Config::wg, "_g", nullptr, Field::kRequired, 1, 2},    // consumer warpgroups
        {"mt", &Config::mt, "_m", nullptr, Field::kRequired, 1, 2},    // m64 tiles per warpgroup
        {"bn", &Config::bn, "_n", nullptr, Field::kRequired, 8, 256},  // columns per warpgroup
        {"ck", &Config::ck, "_k"},                                     // K per swizzle row
        {"st", &Config::st, "_s", nullptr, Field::kRequired, 2, 8},    // A tiles in flight
        {"split", &Config::split, nullptr, nullptr, Field::kRequired, 1, 3},
    };
    return f;
  }
  std::string Token(const Config& c) const override { return OperandToken(c); }
  Status CheckFields(const Config& c) const override { return CheckWgmmaTile(c, name()); }
  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext&) const override {
    return ShuffleCandidates(p, limits);
  }
  // First where its best tile keeps the input's rereads to four column slices (the layer is a
  // memory-bound pixel shuffle: the input read in place, every output written once from
  // registers); after the first four where B's share of shared memory forces more slices
  // (channel-rich layers of a few microseconds, where other families were tuned).
  Placement Place(const Problem& p, const RankContext&) const override {
    const std::vector<Config> mine = ShuffleCandidates(p, {});
    const bool few = !mine.empty() && ShapeOf(p, mine.front()).slices <= 4;
    return {few ? Placement::kFront : Placement::kAfterFirstFour};
  }
  bool TensorCoreGemm() const override { return true; }
  // Where it is placed first, its tile beats the phase-channel GEMMs: they re-lay the input (a
  // read and a write of it on top of the layer's own traffic), this reads it once, in place.
  bool PickOverPhaseChannels(const Problem& p, const Config& first) const override {
    return first.family == name() && Place(p, {}).where == Placement::kFront;
  }

  KernelSet Kernels(const Problem&, const Config&) const override { return {true, false, false}; }
  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    if (!Applies(p, {})) return NotApplicable(p, c);
    const ShuffleShape s = ShapeOf(p, c);
    DefInt(os, "kWG", c.wg);
    DefInt(os, "kMT", c.mt);
    DefInt(os, "kBN", c.bn);
    DefInt(os, "kBS", s.bs);
    DefInt(os, "kKC", c.ck);
    DefInt(os, "kST", c.st);
    DefInt(os, "kKP", s.kp);
    DefInt(os, "kSlices", s.slices);
    DefLong(os, "kMTS", s.m_tiles_per_sample);
    DefInt(os, "kASlot", s.a_slot_bytes);
    DefInt(os, "kSplit", c.split);
    DefInt(os, "kLDA", s.lda);
    os << WgmmaRegisterAFunction(c.dtype, c.bn);
    return Status();
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh",    "phases.cuh",      "operands.cuh",    "wgmma.cuh",
            "shuffle.cuh", "plane_wgmma.cuh", "shuffle_wgmma.cu"};
  }
  bool ArchSpecific() const override { return true; }

  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    const ShuffleShape s = ShapeOf(p, c);
    const std::string name = named.Name();
    return PlaneWgmmaPlan(name, s.w_bytes, s.units, s.threads, s.smem_bytes, 1);
  }
};

}  // namespace

const Family& ShuffleWgmmaFamily() { return FamilyInstance<ShuffleWgmma>(); }

}  // namespace convt3d::gen
