// shuffle_simt.cpp: the scatter GEMM (input positions x channels x (output channels x taps)) in
// strict fp32 FFMA (templates/shuffle_simt.cu, sm_90: TMA or bulk copies), the input read in place,
// once per column slice: written straight to the output where taps do not overlap (pixel shuffles),
// else (or where K is split) to a column buffer that an overlap-add kernel sums into the output.
#include <algorithm>

#include "base/math.h"
#include "base/status.h"
#include "generator/families/pixel_shuffle.h"
#include "generator/family.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

constexpr int kSmemPerSm = 228 * 1024;  // what the scheduler leaves the blocks of one SM
constexpr int kRankSms = 132;           // the SMs the ranking assumes (H100 SXM, H200)
// Deeper sums are added per stage (kStaged): a plain running sum of K products in fp32 grows
// its rounding error with sqrt(K): on uniform random operands 2.9e-7 at K = 256 and 4.0e-7 at
// K = 512 (relative L2, unfused adds), against strict fp32's 1e-6. Folded tiles (FoldsW) chain
// the W taps of an output phase too, up to 3 x 512 products: 7e-7; they have no stage-wise
// form (deeper K goes in parts through the column buffer).
constexpr int64_t kPlainSumMaxK = 512;

// The column buffer (taps x output channels x input positions, per K split) is written and read
// once more than the output: at most this much device memory.
constexpr int64_t kMaxColumnBytes = int64_t{256} << 20;

// Whether each stage's products are summed apart (kStaged): past kPlainSumMaxK input channels
// per group (per K split).
bool StagedSums(const Problem& p, int sk = 1) { return p.c_in / p.groups / sk > kPlainSumMaxK; }

// Whether the W taps are summed in the register tiles before the column buffer ("folded"): where
// taps overlap, the W stride is 2 and whole position quads lie in a W row (4 | W), each output
// w = 2 * c + r (phase r) is a W cell c of the input's, and every W tap of phase r reads input
// c + delta with |delta| <= 1. A thread then holds a quad's two phases of every W tap: the buffer
// keeps (output channel, D tap, H tap) x (input d, h) x output w, 2 / kW of the taps' columns.
bool FoldsW(const Problem& p) {
  if (IsPixelShuffle(p) || p.stride[2] != 2 || p.in[2] % 4 != 0) return false;
  if (p.OutSize()[2] > 2 * p.in[2]) return false;
  for (int64_t tw = 0; tw < p.kernel[2]; ++tw) {
    const int64_t t = tw * p.dilation[2] - p.padding[2];  // output w = 2 * input + t
    const int64_t delta = -FloorDiv(t, 2);                // phase r = t mod 2 reads c + delta
    if (delta < -1 || delta > 1) return false;
  }
  return true;
}

// Positions of one input channel plane.
int64_t InputVolume(const Problem& p) { return p.in[0] * p.in[1] * p.in[2]; }

// Whether a pixel shuffle's channel planes are not whole 16-byte units (an input volume that is
// not a multiple of 4, e.g. 9 x 9 x 7): a _prepx kernel then copies the input into the workspace
// with every (sample, channel) plane padded with zeros to PlaneVolume positions, the GEMM reads
// that copy, and the column buffer's planes (K splits) are as long.
bool PadsPlanes(const Problem& p) {
  return IsPixelShuffle(p) && InputVolume(p) > 1 && InputVolume(p) % 4 != 0;
}
// The positions of a channel plane the GEMM reads and writes (padded planes: a multiple of 4).
int64_t PlaneVolume(const Problem& p) {
  return PadsPlanes(p) ? CeilDiv(InputVolume(p), 4) * 4 : InputVolume(p);
}

// The column buffer's floats per K split: every (sample, group, output channel, tap, position),
// or folded (FoldsW) every (sample, group, output channel, D tap, H tap, input d, h, output w).
int64_t ColumnFloats(const Problem& p) {
  const int64_t per_channel = FoldsW(p)
                                  ? p.kernel[0] * p.kernel[1] * p.in[0] * p.in[1] * 2 * p.in[2]
                                  : p.kernel[0] * p.kernel[1] * p.kernel[2] * PlaneVolume(p);
  return p.n * p.c_out * per_channel;
}

// The column buffer's round trip against the GEMM's FFMA time: 8 bytes per column float against
// 2 x C_in/groups FLOPs per product at ~12 FLOP per byte (FFMA peak over copy bandwidth on an H100
// or H200), times the buffer's floats per product (folded: 2 / kW).
double ColumnTrafficShare(const Problem& p, int sk) {
  const double per_product = FoldsW(p) ? 2.0 / static_cast<double>(p.kernel[2]) : 1.0;
  return 48.0 * sk * per_product / static_cast<double>(p.c_in / p.groups);
}

// Whether the input stays in L2 while the column slices reread it (16 MB of the H100's 50).
bool InputStaysInL2(const Problem& p) { return p.InputElements() * 4 <= (int64_t{16} << 20); }

// Derived sizes of a shuffle_simt candidate, shared by ranking, preamble and launches.
struct SimtShuffleShape {
  int bm = 32, bs = 64, threads = 64, taps = 1;
  int64_t smem_bytes = 0;
  bool staged = false;
  bool latent = false;   // input volume 1: the rows are the samples
  bool columns = false;  // the sums go to the column buffer, then an overlap-add sums them
  bool fold_w = false;   // W taps summed in the tiles (FoldsW): columns are W-tap runs
  int64_t ncols = 0, slices = 1, m_tiles_per_sample = 1, units = 0;
  int samples_per_tile = 1;  // kNT: a row tile holds bm / kNT positions of each of kNT samples
  int64_t k_split = 0;       // input channels per K split (all of the group's without a split)
};

SimtShuffleShape ShapeOf(const Problem& p, const Config& c) {
  SimtShuffleShape s;
  const int64_t cin_g = p.c_in / p.groups, cout_g = p.c_out / p.groups;
  s.bm = 32 * c.wm;
  s.threads = 32 * c.wm * c.wn + 32;
  s.taps = static_cast<int>(p.kernel[0] * p.kernel[1] * p.kernel[2]);
  s.ncols = cout_g * s.taps;
  s.columns = !IsPixelShuffle(p) || c.sk > 1;
  s.fold_w = FoldsW(p);
  // A slice: 64 columns per warp along N, or folded 32 W-tap runs (kW columns each).
  s.bs = s.fold_w ? 32 * c.wn * static_cast<int>(p.kernel[2]) : 64 * c.wn;
  s.slices = CeilDiv(s.ncols, s.bs);
  const int64_t vol = InputVolume(p);
  s.latent = vol == 1;
  // Row tiles: per sample, or over the samples when latent (one "sample" of n rows).
  s.m_tiles_per_sample = s.latent ? CeilDiv(p.n, s.bm) : CeilDiv(vol, s.bm);
  s.k_split = cin_g / c.sk;
  // Tensor maps (not folded): a row tile may hold kPS = bm / kNT positions of each of kNT
  // samples (whole position quads), where that takes fewer row tiles over the batch (MUN-1's
  // 4 x 216 positions: 9 tiles of 96 rather than 12).
  if (c.ws && !s.latent && !s.fold_w) {
    int64_t best = p.n * s.m_tiles_per_sample;
    for (int nt = 2; nt <= p.n; ++nt) {
      if (p.n % nt != 0 || s.bm % (4 * nt) != 0) continue;
      const int64_t tiles = p.n / nt * CeilDiv(vol, s.bm / nt);
      if (tiles < best) best = tiles, s.samples_per_tile = nt;
    }
    s.m_tiles_per_sample = CeilDiv(vol, s.bm / s.samples_per_tile);
  }
  s.units =
      p.groups * s.slices * c.sk * (s.latent ? 1 : p.n / s.samples_per_tile) * s.m_tiles_per_sample;
  s.staged = StagedSums(p, c.sk);
  // The slice's B (the split's K), the A slots (kKC channels x kBM positions, folded with 4 more
  // on each side: the W neighbours; latent: kBM samples x kKC + 4 channels), 2 mbarriers per slot
  // and 2 for B.
  const int64_t slot_floats = s.latent   ? int64_t{s.bm} * (c.ck + 4)
                              : s.fold_w ? int64_t{c.ck} * (s.bm + 8)
                                         : int64_t{c.ck} * s.bm;
  // B by stage (bst 1): room for whole stages of rows; streamed (bst 2): a stage's rows a slot.
  const int64_t b_rows = c.bst == 2 ? int64_t{c.st} * c.ck
                         : c.bst    ? CeilDiv(s.k_split, int64_t{c.ck}) * c.ck
                                    : s.k_split;
  s.smem_bytes = b_rows * s.bs * 4 + c.st * slot_floats * 4 + 16 * (int64_t{c.st} + 1);
  return s;
}

// Whether the column buffer may hold sk parts of K: whole parts, all within kMaxColumnBytes and
// costing at most the GEMM's own time.
bool SplitFits(const Problem& p, int sk) {
  return p.c_in / p.groups % sk == 0 && ColumnFloats(p) * 4 * sk <= kMaxColumnBytes &&
         ColumnTrafficShare(p, sk) <= 1.0;
}

// The rows of one box of the slice's B under a tensor map: the largest divisor of the split's
// input channels that is at most 256 (a box's limit), so that whole boxes fill B exactly.
int64_t BoxRows(int64_t k_split) {
  for (int64_t r = std::min<int64_t>(k_split, 256); r > 1; --r)
    if (k_split % r == 0) return r;
  return 1;
}

// Whether a tile can take its stages and B through tensor maps (Config::ws): channel planes read
// in place (not latent, not padded), slices and slot rows of at most 256 floats (a box's side),
// B in at most 8 boxes, and positions that a box's (32-bit) coordinate reaches.
bool MapsFit(const Problem& p, const SimtShuffleShape& s, const Config& c) {
  const int64_t slot_row = s.fold_w ? s.bm + 8 : s.bm;
  return !s.latent && !PadsPlanes(p) && s.bs <= 256 && slot_row <= 256 && c.ck <= 256 &&
         s.k_split / BoxRows(s.k_split) <= 8 && InputVolume(p) < (int64_t{1} << 31);
}

// The tensor map over x, innermost first: position, sample, channel (strides 4 bytes, C_in x
// the volume, the volume); a box of a stage's channels x kNT samples x their positions of the
// slot row (lands [channel][sample][position]).
TiledMapShape InputMap(const Problem& p, const SimtShuffleShape& s, const Config& c) {
  TiledMapShape m;
  m.rank = 5;
  m.swizzle_bytes = 0;
  const uint64_t vol = static_cast<uint64_t>(InputVolume(p));
  const uint64_t dims[5] = {vol, static_cast<uint64_t>(p.n), static_cast<uint64_t>(p.c_in), 1, 1};
  std::copy(dims, dims + 5, m.dims);
  const uint64_t total = vol * 4 * p.n * p.c_in;
  const uint64_t strides[4] = {static_cast<uint64_t>(p.c_in) * vol * 4, vol * 4, total, total};
  std::copy(strides, strides + 4, m.strides_bytes);
  m.box[0] = static_cast<uint32_t>(s.fold_w ? s.bm + 8 : s.bm / s.samples_per_tile);
  m.box[1] = static_cast<uint32_t>(s.samples_per_tile);
  m.box[2] = static_cast<uint32_t>(c.ck);
  return m;
}

// The tensor map over w: [input channel][column] (rank 0, no map, where a row is not whole
// 16-byte units), a box of BoxRows rows x the slice's columns (B by stage: a stage's rows).
TiledMapShape WeightMap(const Problem& p, const SimtShuffleShape& s, const Config& c) {
  TiledMapShape m;
  if (s.ncols % 4 != 0) return m;
  m.rank = 5;
  m.swizzle_bytes = 0;
  const uint64_t dims[5] = {static_cast<uint64_t>(s.ncols), static_cast<uint64_t>(p.c_in), 1, 1, 1};
  std::copy(dims, dims + 5, m.dims);
  uint64_t stride = 4;
  for (int i = 0; i < 4; ++i) m.strides_bytes[i] = stride *= dims[i];
  m.box[0] = static_cast<uint32_t>(s.bs);
  m.box[1] = static_cast<uint32_t>(c.bst ? c.ck : BoxRows(s.k_split));
  return m;
}

constexpr const char* kTensorMapLabels[] = {"", "_tma"};
constexpr const char* kBStagedLabels[] = {"", "_bst", "_bss"};

// Strict fp32 layers whose channel planes, or (input volume 1) sample rows of a group's
// channels, are whole 16-byte units (one bulk copy each): pixel shuffles (pixel_shuffle.h; other
// volumes through padded planes, PadsPlanes), and other layers with an input of more than one
// position where the column buffer fits (SplitFits); Hopper (bulk copies and mbarriers).
bool Applies(const Problem& p, const DeviceLimits& limits) {
  if (!limits.wgmma || p.dtype != DType::kF32 || p.precision != Precision::kFp32) return false;
  const int64_t vol = InputVolume(p);
  if (!IsPixelShuffle(p)) return vol > 1 && vol % 4 == 0 && SplitFits(p, 1);
  return vol == 1 ? p.c_in / p.groups % 4 == 0 : true;
}

// Shared memory a block may take at mb blocks per SM (1 KB of each SM's share is the system's).
int SmemCap(const DeviceLimits& limits, int mb) {
  return std::min(limits.max_smem_per_block, kSmemPerSm / mb - 1024);
}

// Lower is better: column and row padding, the input reread once per extra column slice, the
// idle share of the last wave, fewer stages in flight, and fewer than 8 consumer warps per SM
// (one block of 4 ran NNU-4 at 0.41 ms, two of 4 or one of 8 at 0.24-0.25). The FFMA tiles are
// bound by their products, so rereads of an input that stays in L2 are not counted (NNU-2: 32
// slices of 64 columns ran 0.053 ms, 16 of 128 0.055).
double Score(const Problem& p, const Config& c, const SimtShuffleShape& s) {
  const int64_t rows = s.latent ? p.n : InputVolume(p);
  const double reread_weight = InputStaysInL2(p) ? 0.0 : 2.0;
  return ShuffleTilingWaste(p, s.ncols, s.slices, s.bs, rows, s.bm / s.samples_per_tile, s.units,
                            int64_t{kRankSms} * c.mb, reread_weight) +
         0.2 / c.st + (c.wm * c.wn * c.mb < 8 ? 0.3 : 0.0) +
         (s.columns ? ColumnTrafficShare(p, c.sk) : 0.0);
}

// Warp tiles of 32 positions x 64 columns, 4-8 consumer warps (2-4 along the positions, 1 for
// latent batches of up to 32 samples; 1-4 along the columns), stages of 16 or 32 input channels,
// 2-6 stages as shared memory allows, one or two blocks per SM; the six best by Score, then the
// four best with a side of 3 warps (96 positions or 192 columns: other row tile and slice
// counts, so other last waves; one block of 6 warps ran NNU-1 14% under every other tile, NNU-4
// 13% over the best, SWU-3 even with it); each copying by tensor maps where they fit (B's rows
// with the stages); and the two best of 4 warps at two or three blocks per SM that stream B.
std::vector<Config> SimtShuffleCandidates(const Problem& p, const DeviceLimits& limits) {
  if (!Applies(p, limits)) return {};
  const int64_t cin_g = p.c_in / p.groups;
  std::vector<std::pair<double, Config>> scored;
  const bool few_rows = InputVolume(p) == 1 && p.n <= 32;
  // K splits: none, or 2-8 parts where the column buffer allows: where taps overlap (the
  // buffer is there anyway), or on pixel shuffles (not latent) whose sums would go stage-wise or
  // whose tiles would fill less than two waves of two blocks per SM.
  std::vector<int> splits = {1};
  Config probe;
  probe.wm = 2, probe.wn = 2, probe.ck = 32;
  const bool split_shuffle =
      InputVolume(p) > 1 && (StagedSums(p) || ShapeOf(p, probe).units < 4 * kRankSms);
  if (!IsPixelShuffle(p) || split_shuffle)
    for (int sk : {2, 4, 8})
      if (SplitFits(p, sk)) splits.push_back(sk);
  for (int sk : splits)
    for (int wm : {4, 3, 2, 1})
      for (int wn : {1, 2, 3, 4})
        for (int ck : {32, 16})
          for (int mb : {2, 1}) {
            const int64_t k_split = cin_g / sk;
            const bool staged = StagedSums(p, sk);
            if (wm * wn < 4 || wm * wn > 8 || (ck == 16 && k_split % 32 == 0)) continue;
            if (wm == 1 && !few_rows) continue;  // 32-row tiles only for latent batches up to 32
            Config c;
            c.family = "shuffle_simt";
            c.wm = wm, c.wn = wn, c.ck = ck, c.mb = mb, c.sk = sk;
            // Two blocks of 4 consumer warps with plain sums (126-143 registers; 8 warps at two
            // blocks spilled under their 96-register cap; three blocks of 4 fit 126 registers but
            // ran NNU-5 at 0.62 ms against 0.54 for two). The stage-wise sums (twice 64) take 4
            // warps at one block.
            if ((mb > 1 || staged) && wm * wn > 4) continue;
            if (mb > 1 && staged) continue;
            if (staged && FoldsW(p)) continue;  // folded tiles sum plainly: K goes in parts
            const int cap = SmemCap(limits, mb);
            for (c.st = 6; c.st > 2 && ShapeOf(p, c).smem_bytes > cap;) --c.st;
            // Copies by tensor maps where they fit (one thread issues a stage's box): beside
            // their bulk-copy twins on an H200 they won 92 of 94 pairs over 10 strict model
            // layers, by up to 24% (NNU-2); the others (latent rows, padded planes, wider
            // slices) copy in bulk.
            c.ws = MapsFit(p, ShapeOf(p, c), c) ? 1 : 0;
            // And with maps, B's rows by stage where whole stages of rows fit: the first products
            // wait for one stage, not the slice's B (up to 196 KB a block). Beside their twins on
            // an H200 they won 61 of 84 pairs over 10 strict model layers, and each layer's best
            // tile was one (MUN-1 by 6%, NNU-2 by 6%, the many-unit layers by under 1.5%).
            // (Not where B's rows are not whole 16-byte units: the consumers load B there.)
            c.bst = c.ws && ShapeOf(p, c).ncols % 4 == 0 ? 1 : 0;
            if (c.bst && ShapeOf(p, c).smem_bytes > cap) c.bst = 0;
            const SimtShuffleShape s = ShapeOf(p, c);
            if (s.smem_bytes > cap || s.threads > limits.max_threads_per_block) continue;
            // Each slice past the first rereads the input: at most the layer's own traffic again,
            // or any number of times where the input stays in L2.
            if (!SliceRereadsWithinTraffic(p, s.slices) && !InputStaysInL2(p)) continue;
            scored.push_back({Score(p, c, s), c});
          }
  const auto three = std::stable_partition(scored.begin(), scored.end(), [](const auto& e) {
    return e.second.wm != 3 && e.second.wn != 3;
  });
  std::vector<Config> out = LowestScored({scored.begin(), three}, 6);
  for (const Config& c : LowestScored({three, scored.end()}, 4)) out.push_back(c);
  // And the two best tiles of 4 consumer warps that stream B with every stage (bst 2): without a
  // resident slice, two or three blocks fit an SM, so a layer of few units (one wave at one
  // block of 6-8 warps: MUN-1, NNU-2) spreads its K parts and row tiles over more blocks, 2-3
  // consumer warps a scheduler.
  std::vector<std::pair<double, Config>> streamed;
  for (int sk : splits)
    for (const auto& [wm, wn] : {std::pair{4, 1}, std::pair{2, 2}})
      for (int ck : {32, 16})
        for (int mb : {3, 2}) {
          if (StagedSums(p, sk) || (ck == 16 && cin_g / sk % 32 == 0)) continue;
          Config c;
          c.family = "shuffle_simt";
          c.wm = wm, c.wn = wn, c.ck = ck, c.mb = mb, c.sk = sk, c.ws = 1, c.bst = 2;
          const int cap = SmemCap(limits, mb);
          for (c.st = 6; c.st > 2 && ShapeOf(p, c).smem_bytes > cap;) --c.st;
          const SimtShuffleShape s = ShapeOf(p, c);
          if (!MapsFit(p, s, c) || s.ncols % 4 != 0 || s.smem_bytes > cap) continue;
          if (!SliceRereadsWithinTraffic(p, s.slices) && !InputStaysInL2(p)) continue;
          streamed.push_back({Score(p, c, s), c});
        }
  for (const Config& c : LowestScored(streamed, 2)) out.push_back(c);
  return out;
}

class ShuffleSimt final : public Family {
 public:
  std::string_view name() const override { return "shuffle_simt"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        {"wm", &Config::wm, "_w", nullptr, Field::kRequired, 1, 4},     // warps along positions
        {"wn", &Config::wn, "x", nullptr, Field::kRequired, 1, 4},      // warps along columns
        {"ck", &Config::ck, "_k", nullptr, Field::kRequired, 1, 64},    // input channels per stage
        {"st", &Config::st, "_s", nullptr, Field::kRequired, 2, 8},     // stages in flight
        {"mb", &Config::mb, "_b", nullptr, Field::kRequired, 1, 3},     // blocks per SM
        {"sk", &Config::sk, "_sk", nullptr, 1, 1, 8, true},             // K splits (column buffer)
        {"ws", &Config::ws, nullptr, kTensorMapLabels, 0, 0, 1, true},  // 1: copies by tensor maps
        // B's rows: 0 the slice's up front, 1 by stage (kept), 2 streamed (with every stage)
        {"bst", &Config::bst, nullptr, kBStagedLabels, 0, 0, 2, true},
    };
    return f;
  }
  Status CheckFields(const Config& c) const override {
    if (c.wm * c.wn > 8 || c.ck % 4 != 0 || (c.sk & (c.sk - 1)) != 0)
      return InvalidArgument(StrCat("shuffle_simt: at most 8 consumer warps (wm x wn) and ck a ",
                                    "multiple of 4 (16-byte copies), sk a power of two, got ",
                                    c.ToJson()));
    return Status();
  }
  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext&) const override {
    return SimtShuffleCandidates(p, limits);
  }
  // First where the sums are plain (at most 512 input channels per group) and taps do not
  // overlap: it won NNU-2/3/4/5/A and SWU-3/5 in strict fp32, 1.1-4x cuDNN. Deeper layers keep
  // their B in many narrow slices, and overlapping taps add the column buffer's round trip:
  // last. (Split candidates of pixel shuffles follow the unsplit ones: the score adds the
  // buffer's traffic.)
  Placement Place(const Problem& p, const RankContext&) const override {
    return {StagedSums(p) || !IsPixelShuffle(p) ? Placement::kBack : Placement::kFront};
  }
  // Where it is first, its tile is the pick over the phase-channel GEMMs: they re-lay the input,
  // this reads it in place.
  bool PickOverPhaseChannels(const Problem& p, const Config& first) const override {
    return first.family == name() && Place(p, {}).where == Placement::kFront;
  }
  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    if (!Applies(p, {})) return NotApplicable(p, c);
    // K parts only through the column buffer where it fits, never for latent inputs (whose
    // epilogue writes the output directly); folded tiles only with plain sums.
    if (c.sk > 1 && (InputVolume(p) == 1 || !SplitFits(p, c.sk))) return NotApplicable(p, c);
    const SimtShuffleShape s = ShapeOf(p, c);
    if (s.fold_w && s.staged) return NotApplicable(p, c);
    if (c.ws && !MapsFit(p, s, c)) return NotApplicable(p, c);
    if (c.bst && !c.ws) return NotApplicable(p, c);  // B by stage: tensor maps only
    DefInt(os, "kWM", c.wm);
    DefInt(os, "kWN", c.wn);
    DefInt(os, "kKC", c.ck);
    DefInt(os, "kST", c.st);
    DefInt(os, "kSlices", s.slices);
    DefLong(os, "kMTS", s.m_tiles_per_sample);
    DefInt(os, "kNT", s.samples_per_tile);
    // The positions of a channel plane of the input the GEMM reads (padded planes: the copy's).
    DefLong(os, "kXVol", PlaneVolume(p));
    DefInt(os, "kMinBlocks", c.mb);
    os << "constexpr bool kStaged = " << (s.staged ? "true" : "false") << ";\n";
    os << "constexpr bool kColumns = " << (s.columns ? "true" : "false") << ";\n";
    os << "constexpr bool kFoldW = " << (s.fold_w ? "true" : "false") << ";\n";
    DefInt(os, "kSK", c.sk);
    DefInt(os, "kKS", s.k_split);
    DefInt(os, "kDilD", p.dilation[0]);
    DefInt(os, "kDilH", p.dilation[1]);
    DefInt(os, "kDilW", p.dilation[2]);
    os << "#define SHUFFLE_MAPS " << c.ws << "\n";
    os << "constexpr bool kBStaged = " << (c.bst == 1 ? "true" : "false") << ";\n";
    os << "constexpr bool kBStream = " << (c.bst == 2 ? "true" : "false") << ";\n";
    DefInt(os, "kBRows", BoxRows(s.k_split));
    return Status();
  }
  // The overlap-add (column buffer -> y) is its "_post" kernel; the padded planes' copy its
  // "_prepx".
  KernelSet Kernels(const Problem& p, const Config& c) const override {
    return {false, PadsPlanes(p), ShapeOf(p, c).columns};
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh", "wgmma.cuh", "shuffle.cuh", "shuffle_simt.cu"};
  }

  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    const SimtShuffleShape s = ShapeOf(p, c);
    LaunchStep main = Step(named.Name(), s.units, s.threads, static_cast<unsigned>(s.smem_bytes),
                           {Arg::kX, Arg::kW, Arg::kBias, s.columns ? Arg::kWorkspace : Arg::kY});
    main.blocks_per_sm = c.mb;
    if (c.ws) {
      main.args.push_back(Arg::kXMap);
      main.args.push_back(Arg::kWMap);
      main.x_map = InputMap(p, s, c);
      main.w_map = WeightMap(p, s, c);
    }
    LaunchPlan plan;
    plan.x_alignment = 16;  // channel planes are copied 16 bytes at a time
    // The workspace: the column buffer (where there is one), then the padded planes' copy.
    const int64_t column_bytes = s.columns ? ColumnFloats(p) * 4 * c.sk : 0;
    plan.workspace_bytes = static_cast<size_t>(column_bytes);
    if (PadsPlanes(p)) {
      // The padded copy of the input first; the GEMM reads it as a programmatic dependent (it
      // waits for the copy in the kernel: WaitForPreviousKernel). The copy reads the input
      // element by element: any alignment of a float.
      const int64_t floats = p.n * p.c_in * PlaneVolume(p);
      plan.x_offset_bytes = static_cast<size_t>(CeilDiv(column_bytes, int64_t{256}) * 256);
      plan.workspace_bytes = plan.x_offset_bytes + static_cast<size_t>(floats * 4);
      plan.x_alignment = 1;
      plan.steps.push_back(
          GridStride(named.Name() + "_prepx", floats, 8192, {Arg::kX, Arg::kXRelaid}));
      main.args[0] = Arg::kXRelaid;
      main.overlaps_previous = true;
    }
    plan.steps.push_back(main);
    if (s.columns) {  // the GEMM writes the column buffer; the overlap-add sums it into y
      // The overlap-add: a thread per 4 consecutive outputs of an output row, the rows taken
      // per H phase (the last row of a phase may lie past the output).
      const Dim3 out = p.OutSize();
      const int64_t rows = p.stride[1] * CeilDiv(out[1], p.stride[1]);
      plan.steps.push_back(GridStride(named.Name() + "_post",
                                      p.n * p.c_out * out[0] * rows * CeilDiv(out[2], 4), 16384,
                                      {Arg::kWorkspace, Arg::kBias, Arg::kY}));
      // Its blocks wait for the GEMM's buffer (griddepcontrol.wait), so it is launched as a
      // programmatic dependent: it starts as the GEMM's blocks exit, without the kernel
      // boundary's gap (1-2 us on the small layers). The GEMM does not signal earlier
      // (launch_dependents at its start): waiting overlap-add blocks then slowed the GEMMs with
      // two blocks per SM by up to 5%.
      plan.steps.back().overlaps_previous = true;
    }
    return plan;
  }
};

}  // namespace

const Family& ShuffleSimtFamily() { return FamilyInstance<ShuffleSimt>(); }

}  // namespace convt3d::gen
