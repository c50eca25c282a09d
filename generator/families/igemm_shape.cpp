// igemm_shape.cpp: tile sizes, halos, shared memory and workspace of the implicit-GEMM families.
#include "generator/families/igemm_shape.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>

#include "generator/family.h"
#include "generator/phases.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

// igemm_wgmma (stride 1): the halo of a bqd x bqh x bqw output box, in 16-byte units of kEPW
// channels (templates/igemm_wgmma.cu), double-buffered with the step's weight tile.
IgemmShape WgmmaShapeOf(const Problem& p, const Config& c) {
  const Dim3 out = p.OutSize();
  const bool half = IsHalf(c.dtype);
  const int epw = half ? 8 : 4, parts = !half && c.split == 3 ? 2 : 1;
  const int64_t cin_g = p.c_in / p.groups, cout_g = p.c_out / p.groups;
  IgemmShape s;
  for (int i = 0; i < 3; ++i) {
    s.jmax[i] = static_cast<int>(p.kernel[i]);
    s.dred[i] = static_cast<int>(p.dilation[i]);
    s.qmax[i] = out[i];
  }
  s.halo_d = c.bqd + (s.jmax[0] - 1) * s.dred[0];
  s.halo_h = c.bqh + (s.jmax[1] - 1) * s.dred[1];
  s.hws = c.bqw + (s.jmax[2] - 1) * s.dred[2];
  s.plane = s.halo_d * s.halo_h * s.hws;
  s.kp = c.ck / epw;
  s.cg = static_cast<int>((cin_g + epw - 1) / epw);
  s.chunks = (cin_g + c.ck - 1) / c.ck;
  s.bn = c.bn;
  s.wtile = parts * c.sr * s.jmax[2] * s.kp * c.bn;
  const int64_t rows = p.kernel[0] * (p.kernel[1] / c.sr);  // steps per chunk
  const int64_t halo_units = static_cast<int64_t>(parts) * s.kp * s.plane;
  // Two halo buffers; four weight tiles when the wgmmas run asynchronously across steps (kAsync:
  // not 3xTF32, three or more steps per chunk), else two.
  const int wbufs = parts == 1 && rows >= 3 ? 4 : 2;
  s.smem_bytes = static_cast<int>(
      std::min<int64_t>(16 * (2 * halo_units + static_cast<int64_t>(wbufs) * s.wtile), INT32_MAX));
  s.threads = 128 * c.wg;
  s.tiles[0] = (out[0] + c.bqd - 1) / c.bqd;
  s.tiles[1] = (out[1] + c.bqh - 1) / c.bqh;
  s.tiles[2] = (out[2] + c.bqw - 1) / c.bqw;
  s.co_tiles = (cout_g + c.bn - 1) / c.bn;
  s.blocks = s.tiles[0] * s.tiles[1] * s.tiles[2] * s.co_tiles * p.groups * p.n;
  s.woff = {0};
  s.weight_words = p.groups * s.co_tiles * s.chunks * rows * static_cast<int64_t>(s.wtile) * 4;
  s.x_words = parts * p.n * p.groups * static_cast<int64_t>(s.cg) * p.in[0] * p.in[1] * p.in[2] * 4;
  s.workspace_words = s.weight_words + s.x_words;
  return s;
}

// True when a tile's input halo could not fit any shared memory: some extent above 2^16 or
// more than 2^24 positions (bounds on the box plus (kernel-1)*dilation, the phases' spread and
// alignment). The shape arithmetic below is in int; with kernel and dilation up to 2^24 each
// (Validate) its products would wrap, possibly into a size that looks small enough to launch.
bool HaloTooBig(const Problem& p, const Config& c) {
  const int64_t box[3] = {c.bqd, c.bqh, c.bqw};
  int64_t positions = 1;
  for (int i = 0; i < 3; ++i) {
    const int64_t extent = box[i] + (p.kernel[i] - 1) * p.dilation[i] + p.stride[i] + 8;
    if (extent > (int64_t{1} << 16)) return true;
    positions *= extent;
  }
  return positions > (int64_t{1} << 24);
}

}  // namespace

IgemmShape IgemmShapeOf(const Problem& p, const Config& c) {
  if (HaloTooBig(p, c)) {
    IgemmShape s;
    s.smem_bytes = INT32_MAX;  // every candidate filter rejects it
    return s;
  }
  if (c.family == "igemm_wgmma") return WgmmaShapeOf(p, c);
  const Dim3 out = p.OutSize();
  IgemmShape s;
  DimPhases dp[3];
  for (int i = 0; i < 3; ++i) {
    dp[i] = PhasesOf(p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], out[i]);
    s.jmax[i] = dp[i].max_taps;
    s.dred[i] = dp[i].d_red;
    s.qmax[i] = dp[i].max_q_count;
  }
  s.lpad = ((s.jmax[2] - 1) * s.dred[2] + 3) / 4 * 4;
  s.chunks = (p.c_in / p.groups + c.ck - 1) / c.ck;
  s.share = c.family == "igemm_mma" && c.pa && s.chunks == 1;
  int hd = c.bqd + (s.jmax[0] - 1) * s.dred[0];
  int hh = c.bqh + (s.jmax[1] - 1) * s.dred[1];
  int hw = c.bqw + s.lpad;
  if (s.share) {
    // Phase r of a dimension reads inputs [t*bq + b_r - (taps-1)*d', t*bq + b_r + bq - 1] for
    // tile t, with b_r = q_lo + c: the union over the phases that have taps.
    int64_t lo[3], blo[3], bhi[3];
    for (int i = 0; i < 3; ++i) {
      lo[i] = blo[i] = INT64_MAX, bhi[i] = INT64_MIN;
      for (const auto& ph : dp[i].phases) {
        if (ph.taps == 0) continue;
        const int64_t b = ph.q_lo + ph.c;
        lo[i] = std::min(lo[i], b - (ph.taps - 1) * dp[i].d_red);
        blo[i] = std::min(blo[i], b);
        bhi[i] = std::max(bhi[i], b);
      }
      if (lo[i] == INT64_MAX) lo[i] = blo[i] = bhi[i] = 0;  // no taps anywhere: all bias
    }
    s.u0[0] = lo[0], s.u0[1] = lo[1], s.u0[2] = blo[2];
    hd = c.bqd + static_cast<int>(bhi[0] - lo[0]);
    hh = c.bqh + static_cast<int>(bhi[1] - lo[1]);
    hw = c.bqw + static_cast<int>(bhi[2] - blo[2]) + s.lpad;
  }
  s.halo_d = hd, s.halo_h = hh;
  s.tiles[0] = (s.qmax[0] + c.bqd - 1) / c.bqd;
  s.tiles[1] = (s.qmax[1] + c.bqh - 1) / c.bqh;
  s.tiles[2] = (s.qmax[2] + c.bqw - 1) / c.bqw;
  const int64_t cout_g = p.c_out / p.groups;
  if (c.family == "igemm_mma") {
    // Strides = 8 or 24 (mod 32) words make the fragment reads conflict-free: the 4 lanes of a
    // quad read 4 channels (one stride apart) of 8 consecutive positions or columns. For 16-bit
    // halos a quad's lanes read channels 2*tg, so the same rule holds in elements.
    auto conflict_free = [](int words) {
      words = (words + 7) / 8 * 8;
      return words % 16 == 0 ? words + 8 : words;
    };
    const bool half = IsHalf(c.dtype);
    s.bn = c.wn * c.nt8 * 8;
    // The halo is copied in aligned vectors of `vec` W positions (16 bytes when the input width
    // is a multiple of it), so a row starts up to vec-1 positions early and reads shift.
    s.vec = p.in[2] % 4 == 0 ? 4 : 1;  // 32-bit words: f32 inputs or 16-bit channel pairs
    s.hws = (hw + s.vec - 1 + s.vec - 1) / s.vec * s.vec;
    s.plane = conflict_free(hd * hh * s.hws);
    // (The weight tile's B fragments are laid per lane, so their reads are conflict-free without
    // this padding; it stays, zeros copied every step, until a device run times the smaller
    // tiles.)
    s.wci = conflict_free(std::max(s.jmax[2], 1) * s.bn);
    s.kp = half ? c.ck / 2 : c.ck;
    s.wtile = s.kp * s.wci * (!half && c.split == 3 ? 2 : 1);
    // One halo buffer when it is shared by the phases (loaded once per block), else two; staged
    // all-phases blocks also hold one (D, H) phase's outputs (kSW W phases, odd stride).
    s.smem_bytes = (s.share ? 1 : 2) * 4 * s.kp * s.plane + 2 * 4 * s.wtile;
    if (c.pa == 2)
      s.smem_bytes += DTypeBytes(p.dtype) * s.bn * (c.bqd * c.bqh * p.stride[2] * c.bqw + 1);
    s.threads = c.wm * c.wn * 32;
    s.co_tiles = (cout_g + s.bn - 1) / s.bn;
    s.blocks = s.tiles[0] * s.tiles[1] * s.tiles[2] *
               (c.pa ? 1 : p.stride[0] * p.stride[1] * p.stride[2]) * s.co_tiles * p.groups * p.n;
    for (const auto& a : dp[0].phases)
      for (const auto& b : dp[1].phases)
        for (const auto& w : dp[2].phases) {
          s.woff.push_back(s.weight_words);
          if (a.taps > 0 && b.taps > 0 && w.taps > 0)
            s.weight_words +=
                p.groups * s.co_tiles * s.chunks * a.taps * b.taps * static_cast<int64_t>(s.wtile);
        }
    s.weight_words = (s.weight_words + 3) / 4 * 4;  // the input copy starts 16-byte aligned
    if (half)
      s.x_words = p.n * p.groups * ((p.c_in / p.groups + 1) / 2) * p.in[0] * p.in[1] * p.in[2];
    s.workspace_words = s.weight_words + s.x_words;
    return s;
  }
  // Two stages in flight (cp.async double buffering).
  const int bn_padded = c.tn * c.nt + (c.tn % 4 == 0 ? 4 : 1);  // as kBNP in the template
  s.smem_bytes =
      2 * 4 * (c.ck * hd * hh * hw + c.ck * s.jmax[0] * s.jmax[1] * s.jmax[2] * bn_padded);
  s.threads = c.bqw / c.tm * c.bqh * c.bqd * c.nt;
  s.bn = c.tn * c.nt;
  s.co_tiles = cout_g / s.bn;
  s.blocks = s.tiles[0] * s.tiles[1] * s.tiles[2] * p.stride[0] * p.stride[1] * p.stride[2] *
             s.co_tiles * p.groups * p.n;
  return s;
}

void IgemmPreambleHead(const Config& c, const IgemmShape& s, std::ostream& os) {
  const int box[3] = {c.bqd, c.bqh, c.bqw};
  for (int i = 0; i < 3; ++i) DefInt(os, DimName("kBQ", i), box[i]);
  DefInt(os, "kCK", c.ck);
  for (int i = 0; i < 3; ++i) DefLong(os, DimName("kQ", i, "Tiles"), s.tiles[i]);
  DefLong(os, "kCoTiles", s.co_tiles);
  DefLong(os, "kTotalBlocks", s.blocks);
}

IgemmShape PhaseTilePreamble(const Problem& p, const Config& c, std::ostream& os) {
  const IgemmShape s = IgemmShapeOf(p, c);
  IgemmPreambleHead(c, s, os);
  DefInt(os, "kALLPH", c.pa != 0);
  DefInt(os, "kSTAGE", c.pa == 2);
  DefInt(os, "kLPAD", s.lpad);
  return s;
}

void PhaseClasses(const Problem& p, std::ostream& os) {
  DimPhases ph[3];
  for (int i = 0; i < 3; ++i)
    ph[i] = PhasesOf(p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], p.OutSize()[i]);
  std::set<std::array<int, 3>> classes;
  for (const auto& a : ph[0].phases)
    for (const auto& b : ph[1].phases)
      for (const auto& w : ph[2].phases)
        if (a.taps > 0 && b.taps > 0 && w.taps > 0) classes.insert({a.taps, b.taps, w.taps});
  os << "#define CONVT3D_FOR_PHASE_CLASSES(X)";
  for (const auto& t : classes) os << " X(" << t[0] << ", " << t[1] << ", " << t[2] << ")";
  os << "\n";
}

LaunchPlan TensorCoreLaunches(const Problem& p, const Config& c, const Config& named) {
  const IgemmShape s = IgemmShapeOf(p, c);
  const std::string name = named.Name();
  LaunchPlan plan;
  plan.workspace_bytes = static_cast<size_t>(s.workspace_words) * 4;
  Arg x = Arg::kX;
  if (s.x_words > 0) {
    plan.x_offset_bytes = static_cast<size_t>(s.weight_words) * 4;
    plan.steps.push_back(GridStride(name + "_prepx", s.x_words, 8192, {Arg::kX, Arg::kXRelaid}));
    x = Arg::kXRelaid;
  }
  plan.steps.push_back(WeightPrep(name + "_prep", s.weight_words, 2048));
  plan.steps.push_back(
      Step(name, s.blocks, s.threads, s.smem_bytes, {x, Arg::kWorkspace, Arg::kBias, Arg::kY}));
  return plan;
}

}  // namespace convt3d::gen
