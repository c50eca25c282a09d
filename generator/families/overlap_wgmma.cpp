// overlap_wgmma.cpp: strided layers with few output channels whose taps overlap, on Hopper wgmma
// (templates/overlap_wgmma.cu, sm_90a): each input position's tap products on the tensor cores
// (no zero taps), summed into the outputs in shared memory; the input read in place.
#include <algorithm>

#include "base/math.h"
#include "base/status.h"
#include "generator/families/pixel_shuffle.h"
#include "generator/families/wgmma_call.h"
#include "generator/family.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

constexpr int kSmemCap = 227 * 1024;
constexpr int kSmemTwoBlocks = 113 * 1024;
constexpr int kRankSms = 132;
constexpr int64_t kMaxCols = 128;  // output channels x taps per group: 64 accumulators a thread
constexpr int kMaxMTiles = 12;     // m64 tiles of one slab
constexpr int kMaxRingRegs = 48;   // a thread's ring of output sums
constexpr int kMaxItems = 4;       // output items a thread sums in turn (each a serial chain)

// Derived sizes of a candidate, shared by ranking, preamble and launches.
struct OverlapShape {
  int eb = 4, row_b = 128, kp = 0, chunks = 0, taps = 1, bn = 8;
  int64_t ncols = 0;
  int ih_off = 0, hs = 0, m_tiles = 0, lda = 0, ldt = 0, ring = 1, pad_l = 0, pad_r = 0;
  int items_per_thread = 1;
  int64_t ring_regs = 0;
  int64_t h_tiles = 0, d_tiles = 0, units = 0, planes_per_block = 0;
  int a_slot_bytes = 0, b_bytes = 0, smem_bytes = 0, threads = 256;
  int64_t w_bytes = 0;
};

OverlapShape ShapeOf(const Problem& p, const Config& c) {
  OverlapShape s;
  const Dim3 out = p.OutSize();
  s.eb = IsHalf(c.dtype) ? 2 : 4;
  s.row_b = c.ck * s.eb;
  const int64_t cin_g = p.c_in / p.groups, cout_g = p.c_out / p.groups;
  s.kp = static_cast<int>(CeilDiv(cin_g, c.ck) * c.ck);
  s.chunks = s.kp / c.ck;
  s.taps = static_cast<int>(p.kernel[0] * p.kernel[1] * p.kernel[2]);
  s.ncols = cout_g * s.taps;
  s.bn = static_cast<int>(CeilDiv(s.ncols, 8) * 8);
  // The slab: input rows [oh0 / sH + ih_off, ... + hs) reach output rows [oh0, oh0 + bqh).
  const int64_t sh = p.stride[1], ph = p.padding[1], reach_h = (p.kernel[1] - 1) * p.dilation[1];
  s.ih_off = static_cast<int>(-FloorDiv(reach_h - ph, sh));
  s.hs = static_cast<int>(FloorDiv(c.bqh - 1 + ph, sh) - s.ih_off + 1);
  s.m_tiles = static_cast<int>(CeilDiv(int64_t{s.hs} * p.in[2], 64));
  s.lda = s.m_tiles * 64 + 8;  // 8 more: conflict-free fragment loads
  // The W offsets of the taps: output qw * sW + rw takes input qw + off; the products' rows are
  // padded so that every qw < ceil(W_out / sW) reads inside them.
  const int64_t qw = CeilDiv(out[2], p.stride[2]);
  int64_t off_lo = 0, off_hi = 0;
  bool any = false;
  for (int64_t rw = 0; rw < p.stride[2]; ++rw)
    for (int64_t kw = 0; kw < p.kernel[2]; ++kw) {
      const int64_t nw = rw + p.padding[2] - kw * p.dilation[2];
      if (((nw % p.stride[2]) + p.stride[2]) % p.stride[2] != 0) continue;
      const int64_t off = nw / p.stride[2];
      off_lo = any ? std::min(off_lo, off) : off;
      off_hi = any ? std::max(off_hi, off) : off;
      any = true;
    }
  s.pad_l = static_cast<int>(std::max<int64_t>(0, -off_lo));
  s.pad_r = static_cast<int>(std::max<int64_t>(0, qw - 1 + off_hi - (p.in[2] - 1)));
  const int64_t win_t = s.pad_l + p.in[2] + s.pad_r;
  const int64_t rows_t = CeilDiv(int64_t{s.m_tiles} * 64, p.in[2]) * win_t;
  s.ldt = static_cast<int>(rows_t + ((4 - rows_t % 32) + 32) % 32);  // ldt % 32 == 4
  const int64_t reach_d = (p.kernel[0] - 1) * p.dilation[0];
  s.ring = static_cast<int>(std::max<int64_t>(reach_d + 1, p.stride[0]));
  s.h_tiles = CeilDiv(out[1], c.bqh);
  s.d_tiles = CeilDiv(out[0], c.bqd);
  s.units = p.n * p.groups * s.d_tiles * s.h_tiles;
  // Input planes a block walks: those reaching its bqd output planes.
  s.planes_per_block = FloorDiv(c.bqd - 1 + p.padding[0], p.stride[0]) +
                       FloorDiv(reach_d - p.padding[0], p.stride[0]) + 1;
  s.a_slot_bytes = static_cast<int>(CeilDiv(int64_t{s.kp} * s.lda * s.eb, 128) * 128);
  s.b_bytes = s.chunks * s.bn * s.row_b * (c.split == 3 ? 2 : 1);  // 3xTF32: big, small
  s.threads = 128 * (c.wg + 1);
  const int64_t t_bytes = s.ncols * s.ldt * 4;
  // B, the slab slots, the products, 2 mbarriers per slot + 1 for B, the alignment.
  s.smem_bytes = static_cast<int>(CeilDiv(s.b_bytes, 1024) * 1024 + c.st * int64_t{s.a_slot_bytes} +
                                  t_bytes + 16 * c.st + 8 + 1024);
  // Output items (co, qh, qw) per consumer thread, each kSH x kSW outputs of kR ring planes in
  // registers.
  const int64_t items = cout_g * (c.bqh / sh) * qw;
  s.items_per_thread = static_cast<int>(CeilDiv(items, 128 * c.wg));
  s.ring_regs = s.items_per_thread * s.ring * sh * p.stride[2];
  s.w_bytes = p.groups * int64_t{s.b_bytes};
  return s;
}

// Tensor-core modes; few output channels x taps per group (one wgmma N holds them all); taps
// that overlap along some dimension (kernel == stride layers are shuffle_wgmma's); input rows of
// whole 16-byte units (a slab is one bulk copy per channel).
bool Applies(const Problem& p, const DeviceLimits& limits) {
  if (!PlaneWgmmaMode(p, limits)) return false;
  if (p.c_out / p.groups * p.kernel[0] * p.kernel[1] * p.kernel[2] > kMaxCols) return false;
  bool overlap = false;
  for (int i = 0; i < 3; ++i)
    overlap = overlap || (p.kernel[i] - 1) * p.dilation[i] + 1 > p.stride[i];
  if (!overlap) return false;
  if (p.in[2] * DTypeBytes(p.dtype) % 16 != 0) return false;
  // Positions within an input or output plane are ints in the template.
  const Dim3 out = p.OutSize();
  return p.in[1] * p.in[2] < (int64_t{1} << 30) && out[1] * out[2] < (int64_t{1} << 30);
}

// Lower is better: the slab's halo rows (recomputed by the neighbouring block), the m64 padding,
// the input planes read again by the next block of planes, the rows and planes of partial
// blocks, the idle share of the last wave, and items a thread sums in turn.
double Score(const Problem& p, const Config& c, const OverlapShape& s) {
  const double own_rows = static_cast<double>(c.bqh) / p.stride[1];
  const double halo_h = s.hs / own_rows - 1.0;
  const double pad_m = static_cast<double>(s.m_tiles) * 64 / (s.hs * p.in[2]) - 1.0;
  const double halo_d = s.planes_per_block / (static_cast<double>(c.bqd) / p.stride[0]) - 1.0;
  const double fill =
      static_cast<double>(s.units) / (CeilDiv(s.units, kRankSms * c.mb) * kRankSms * c.mb);
  const Dim3 out = p.OutSize();
  const double tails = static_cast<double>(s.h_tiles * c.bqh) / out[1] +
                       static_cast<double>(s.d_tiles * c.bqd) / out[0] - 2.0;
  // Each item past the first lengthens the sums' serial chain.
  return halo_h + pad_m + std::max(0.0, halo_d) + tails + (1.0 - fill) +
         0.1 * (s.items_per_thread - 1) + 0.05 * (c.wg * c.mb == 1);
}

std::vector<Config> OverlapCandidates(const Problem& p, const DeviceLimits& limits) {
  if (!Applies(p, limits)) return {};
  const bool half = IsHalf(p.dtype);
  const int split = half ? 1 : OperandSplit(p.precision);
  const int64_t cin_g = p.c_in / p.groups;
  const Dim3 out = p.OutSize();
  const int cap = std::min(limits.max_smem_per_block, kSmemCap);
  // The best few of each block form (two consumer warpgroups; one; one, two blocks per SM).
  std::vector<std::pair<double, Config>> scored[3];
  for (int ck : PlaneWgmmaKRows(p, cin_g)) {
    for (int form = 0; form < 3; ++form)
      for (int64_t bqh = p.stride[1]; bqh <= std::min<int64_t>(out[1], 64) + p.stride[1] - 1;
           bqh += p.stride[1]) {
        // Output plane blocks: all planes, or fewer for more blocks.
        for (int64_t dt : {1, 2, 3, 4, 6, 8, 12, 16}) {
          const int64_t bqd = CeilDiv(out[0], dt);
          if (dt > 1 && CeilDiv(out[0], bqd) != dt) continue;
          Config c;
          c.family = "overlap_wgmma";
          c.dtype = p.dtype;
          const int wg = form == 0 ? 2 : 1, mb = form == 2 ? 2 : 1;
          c.wg = wg, c.mb = mb, c.ck = ck, c.split = split;
          c.bqh = static_cast<int>(bqh), c.bqd = static_cast<int>(bqd);
          c.st = 3;
          const int block_cap = mb == 2 ? std::min(cap, kSmemTwoBlocks) : cap;
          if (ShapeOf(p, c).smem_bytes > block_cap) c.st = 2;
          const OverlapShape s = ShapeOf(p, c);
          if (s.m_tiles > kMaxMTiles || s.smem_bytes > block_cap || s.ring_regs > kMaxRingRegs ||
              s.items_per_thread > kMaxItems)
            continue;
          if (s.threads > limits.max_threads_per_block) continue;
          scored[form].push_back({Score(p, c, s), c});
        }
      }
  }
  std::vector<Config> picked;
  for (int form = 0; form < 3; ++form)
    for (const Config& c : LowestScored(std::move(scored[form]), form == 0 ? 6 : 3))
      picked.push_back(c);
  return picked;
}

class OverlapWgmma final : public Family {
 public:
  std::string_view name() const override { return "overlap_wgmma"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        {"wg", &Config::wg, "_g", nullptr, Field::kRequired, 1, 2},          // consumer warpgroups
        {"mb", &Config::mb, "_b", nullptr, 1, 1, 2, true},                   // blocks per SM
        {"bqh", &Config::bqh, "_h", nullptr, Field::kRequired, 1, 4096},     // output rows a block
        {"bqd", &Config::bqd, "_d", nullptr, Field::kRequired, 1, 1 << 20},  // output planes
        {"ck", &Config::ck, "_k"},                                           // K per swizzle row
        {"st", &Config::st, "_s", nullptr, Field::kRequired, 2, 8},          // slabs in flight
        {"split", &Config::split, nullptr, nullptr, Field::kRequired, 1, 3},
    };
    return f;
  }
  std::string Token(const Config& c) const override { return OperandToken(c); }
  // The wgmma tile rules (bn and mt are derived here: their defaults pass), and at most 4
  // warpgroups a SM (two blocks of one consumer warpgroup and the producer's).
  Status CheckFields(const Config& c) const override {
    CONVT3D_RETURN_IF_ERROR(CheckWgmmaTile(c, name()));
    if (c.mb * (c.wg + 1) > 4)
      return InvalidArgument(StrCat("inconsistent overlap_wgmma tile in ", c.ToJson()));
    return Status();
  }
  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext&) const override {
    return OverlapCandidates(p, limits);
  }
  // First where K has at least 16 channels (H200: GAN-5, MUN-4 and held-out 16 -> 1 and 32 -> 1
  // layers ran faster than narrow_gemm and cell_simt; with 8 channels a K step is half padding
  // and igemm_wgmma or narrow_gemm won).
  Placement Place(const Problem& p, const RankContext&) const override {
    return {p.c_in / p.groups >= 16 ? Placement::kFront : Placement::kBack};
  }
  bool TensorCoreGemm() const override { return true; }
  // Where it is placed first it beats the phase-channel GEMMs: they run N of a few columns on a
  // re-laid input; this reads the input in place, once per block's plane rows.
  bool PickOverPhaseChannels(const Problem& p, const Config& first) const override {
    return first.family == name() && Place(p, {}).where == Placement::kFront;
  }

  KernelSet Kernels(const Problem&, const Config&) const override { return {true, false, false}; }
  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    if (!Applies(p, {}) || c.bqh % p.stride[1] != 0) return NotApplicable(p, c);
    const OverlapShape s = ShapeOf(p, c);
    DefInt(os, "kWG", c.wg);
    DefInt(os, "kMinBlocks", c.mb);
    DefInt(os, "kBN", s.bn);
    DefInt(os, "kBS", s.bn);  // one B image (plane_wgmma.cuh) of every column
    DefInt(os, "kSlices", 1);
    DefInt(os, "kKC", c.ck);
    DefInt(os, "kST", c.st);
    DefInt(os, "kKP", s.kp);
    DefInt(os, "kBHo", c.bqh);
    DefInt(os, "kBDo", c.bqd);
    DefInt(os, "kHs", s.hs);
    DefInt(os, "kIhOff", s.ih_off);
    DefInt(os, "kMTiles", s.m_tiles);
    DefInt(os, "kLDA", s.lda);
    DefInt(os, "kLDT", s.ldt);
    DefInt(os, "kPadL", s.pad_l);
    DefInt(os, "kPadR", s.pad_r);
    DefInt(os, "kASlot", s.a_slot_bytes);
    DefInt(os, "kR", s.ring);
    DefInt(os, "kDlD", p.dilation[0]);
    DefInt(os, "kDlH", p.dilation[1]);
    DefInt(os, "kDlW", p.dilation[2]);
    DefInt(os, "kSplit", c.split);
    os << WgmmaRegisterAFunction(c.dtype, s.bn);
    return Status();
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh",  "phases.cuh",      "operands.cuh",
            "wgmma.cuh", "plane_wgmma.cuh", "overlap_wgmma.cu"};
  }
  bool ArchSpecific() const override { return true; }

  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    const OverlapShape s = ShapeOf(p, c);
    const std::string name = named.Name();
    return PlaneWgmmaPlan(name, s.w_bytes, s.units, s.threads, s.smem_bytes, 0);
  }
};

}  // namespace

const Family& OverlapWgmmaFamily() { return FamilyInstance<OverlapWgmma>(); }

}  // namespace convt3d::gen
