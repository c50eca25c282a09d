// candidates.cpp: enumerates, prunes, names and ranks the candidates of every kernel family.
#include "generator/candidates.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "base/status.h"
#include "generator/fft.h"
#include "generator/lattice.h"
#include "generator/phases.h"
#include "generator/winograd.h"

namespace convt3d::gen {
namespace {

// The thread-block shapes tried: wide rows for long W, taller blocks for short W.
constexpr int kBlockShapes[][2] = {{64, 2}, {128, 1}, {32, 4}, {32, 8}};
constexpr int kOutputsPerThread[] = {1, 2, 4};
constexpr int kChannelsPerThread[] = {1, 2, 4, 8, 16};

// A rough register estimate: accumulators plus the per-tap weight registers plus addressing.
int EstimatedRegs(const Config& c) {
  const int words = c.dtype == DType::kF64 ? 2 : 1;  // accumulators are f32 unless f64
  return (c.cob * c.opt + c.cob) * words + 40;
}

int64_t QCountW(const Problem& p) {
  const Dim3 out = p.OutSize();
  return PhasesOf(p.in[2], p.kernel[2], p.stride[2], p.padding[2], p.dilation[2], out[2])
      .max_q_count;
}

bool Fits(const Config& c, const DeviceLimits& l) {
  const int threads = c.bx * c.by;
  const int regs = EstimatedRegs(c);
  return threads <= l.max_threads_per_block && regs <= l.max_regs_per_thread &&
         regs * threads <= l.max_regs_per_block;
}

}  // namespace

std::string Config::Name() const {
  if (lattice) return (lattice == 2 ? "subpixel_" : "lattice_") + Plain().Name();
  const char* t = DTypeName(dtype);
  if (family == Family::kIgemmWgmma)
    return StrCat("igemm_wgmma_",
                  dtype != DType::kF32 ? t
                  : split == 3         ? "3xtf32"
                                       : "tf32",
                  "_q", bqd, "x", bqh, "x", bqw, "_g", wg, "_m", mt, "_n", bn, "_k", ck,
                  sr > 1 ? StrCat("_r", sr) : std::string());
  if (family == Family::kIgemmMma)
    return StrCat("igemm_mma_",
                  dtype != DType::kF32 ? t
                  : split == 3         ? "3xtf32"
                                       : "tf32",
                  "_q", bqd, "x", bqh, "x", bqw, "_w", wm, "x", wn, "_m", mt, "n", nt8, "_k", ck,
                  pa == 2 ? "_pa_st"
                  : pa    ? "_pa"
                          : "");
  if (family == Family::kDirectTile)
    return StrCat("direct_tile_", t, "_x", bx, "y", by, "z", bz, "_v", vw, "_c", cob, "_k", ck,
                  pa ? "_pa" : "",
                  !mma         ? ""
                  : split == 3 ? "_3xtf32"
                               : "_tf32");
  if (family == Family::kWinograd)
    return StrCat("winograd_", t, "_q", bqd, "x", bqh, "x", bqw, "_n", bn, "_t", tm, "x", tn, "_k",
                  ck);
  if (family == Family::kFft)
    return StrCat("fft_",
                  !mma         ? t
                  : split == 3 ? "3xtf32"
                               : "tf32",
                  "_t", ft_h, "x", ft_w, "_m", bm, "n", bn,
                  mma ? StrCat("_w", wm, "x", wn) : StrCat("_r", tm, "x", tn), gauss ? "_3m" : "",
                  fc ? StrCat("_c", fc) : std::string(), fd ? StrCat("_d", fd) : std::string());
  if (family == Family::kIgemmSimt)
    return StrCat("igemm_simt_", t, "_q", bqd, "x", bqh, "x", bqw, "_t", tm, "x", tn, "_n", nt,
                  "_k", ck);
  return StrCat("direct_phase_", t, "_x", bx, "y", by, "_o", opt, "_c", cob);
}

std::string Config::PrepSymbol() const {
  const bool relaid = family == Family::kIgemmMma || family == Family::kIgemmWgmma ||
                      family == Family::kWinograd || family == Family::kFft;
  return relaid ? Name() + "_prep" : std::string();
}

std::string Config::PrepXSymbol() const {
  const bool half = dtype == DType::kBF16 || dtype == DType::kF16;
  if (family == Family::kIgemmWgmma || family == Family::kFft) return Name() + "_prepx";
  return family == Family::kIgemmMma && half ? Name() + "_prepx" : std::string();
}

std::string Config::PostSymbol() const {
  return family == Family::kFft ? Name() + "_post" : std::string();
}

std::string Config::FillSymbol() const { return lattice == 1 ? Name() + "_fill" : std::string(); }

std::string Config::ToJson() const {
  nlohmann::json j = {{"dtype", DTypeName(dtype)}};
  if (lattice) j["lattice"] = lattice;
  if (family == Family::kIgemmWgmma) {
    j["family"] = "igemm_wgmma";
    for (auto [k, v] : {std::pair{"bqd", bqd},
                        {"bqh", bqh},
                        {"bqw", bqw},
                        {"wg", wg},
                        {"mt", mt},
                        {"bn", bn},
                        {"ck", ck},
                        {"split", split},
                        {"sr", sr}})
      j[k] = v;
  } else if (family == Family::kIgemmMma) {
    j["family"] = "igemm_mma";
    for (auto [k, v] : {std::pair{"bqd", bqd},
                        {"bqh", bqh},
                        {"bqw", bqw},
                        {"wm", wm},
                        {"wn", wn},
                        {"mt", mt},
                        {"nt8", nt8},
                        {"ck", ck},
                        {"split", split},
                        {"pa", pa}})
      j[k] = v;
  } else if (family == Family::kIgemmSimt) {
    j["family"] = "igemm_simt";
    for (auto [k, v] : {std::pair{"bqd", bqd},
                        {"bqh", bqh},
                        {"bqw", bqw},
                        {"tm", tm},
                        {"tn", tn},
                        {"nt", nt},
                        {"ck", ck}})
      j[k] = v;
  } else if (family == Family::kWinograd) {
    j["family"] = "winograd";
    for (auto [k, v] : {std::pair{"bqd", bqd},
                        {"bqh", bqh},
                        {"bqw", bqw},
                        {"bn", bn},
                        {"tm", tm},
                        {"tn", tn},
                        {"ck", ck}})
      j[k] = v;
  } else if (family == Family::kFft) {
    j["family"] = "fft";
    for (auto [k, v] :
         {std::pair{"ft_h", ft_h}, {"ft_w", ft_w}, {"bm", bm}, {"bn", bn}, {"tm", tm}, {"tn", tn}})
      j[k] = v;
    if (fc) j["fc"] = fc;
    if (fd) j["fd"] = fd;
    if (gauss) j["gauss"] = gauss;
    if (mma) j["mma"] = mma, j["split"] = split, j["wm"] = wm, j["wn"] = wn;
  } else if (family == Family::kDirectTile) {
    j["family"] = "direct_tile";
    for (auto [k, v] : {std::pair{"bx", bx},
                        {"by", by},
                        {"bz", bz},
                        {"vw", vw},
                        {"cob", cob},
                        {"ck", ck},
                        {"pa", pa}})
      j[k] = v;
    if (mma) j["mma"] = mma, j["split"] = split;
  } else {
    j["family"] = "direct_phase";
    for (auto [k, v] : {std::pair{"bx", bx}, {"by", by}, {"opt", opt}, {"cob", cob}}) j[k] = v;
  }
  return j.dump();
}

StatusOr<Config> Config::FromJson(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    Config c;
    bool known = false;
    for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16})
      if (j.at("dtype") == DTypeName(t)) c.dtype = t, known = true;
    if (!known) return InvalidArgument(StrCat("unknown dtype in ", text));
    std::vector<int*> fields;
    if (j.at("family") == "direct_phase") {
      c.family = Family::kDirectPhase;
      c.bx = j.at("bx"), c.by = j.at("by"), c.opt = j.at("opt"), c.cob = j.at("cob");
      fields = {&c.bx, &c.by, &c.opt, &c.cob};
    } else if (j.at("family") == "direct_tile") {
      c.family = Family::kDirectTile;
      c.bx = j.at("bx"), c.by = j.at("by"), c.bz = j.at("bz"), c.vw = j.at("vw");
      c.cob = j.at("cob"), c.ck = j.at("ck"), c.pa = j.value("pa", 0);
      fields = {&c.bx, &c.by, &c.bz, &c.vw, &c.cob, &c.ck};
      if (c.pa < 0 || c.pa > 1) return InvalidArgument(StrCat("bad pa in ", text));
      c.mma = j.value("mma", 0);
      c.split = j.value("split", 1);
      if (c.mma < 0 || c.mma > 1 || (c.split != 1 && c.split != 3) || (c.mma && !c.pa))
        return InvalidArgument(StrCat("bad mma/split in ", text));
    } else if (j.at("family") == "winograd") {
      c.family = Family::kWinograd;
      c.bqd = j.at("bqd"), c.bqh = j.at("bqh"), c.bqw = j.at("bqw"), c.bn = j.at("bn");
      c.tm = j.at("tm"), c.tn = j.at("tn"), c.ck = j.at("ck");
      fields = {&c.bqd, &c.bqh, &c.bqw, &c.bn, &c.tm, &c.tn, &c.ck};
    } else if (j.at("family") == "fft") {
      c.family = Family::kFft;
      c.ft_h = j.at("ft_h"), c.ft_w = j.at("ft_w"), c.bm = j.at("bm"), c.bn = j.at("bn");
      c.tm = j.at("tm"), c.tn = j.at("tn");
      c.fc = j.value("fc", 0);
      c.fd = j.value("fd", 0);
      c.gauss = j.value("gauss", 0);
      c.mma = j.value("mma", 0);
      fields = {&c.ft_h, &c.ft_w, &c.bm, &c.bn, &c.tm, &c.tn};
      if (c.mma) {
        c.split = j.at("split"), c.wm = j.at("wm"), c.wn = j.at("wn");
        fields.push_back(&c.wm), fields.push_back(&c.wn);
      }
      if (c.mma < 0 || c.mma > 1 || (c.mma && c.split != 1 && c.split != 3))
        return InvalidArgument(StrCat("bad fft mma/split in ", text));
      if (c.fc < 0 || c.fd < 0) return InvalidArgument(StrCat("bad fc/fd in ", text));
      if (c.gauss < 0 || c.gauss > 1 || (c.gauss && c.mma))
        return InvalidArgument(StrCat("bad gauss in ", text));
      for (int t : {c.ft_h, c.ft_w})
        if (t != 8 && t != 16 && t != 32) return InvalidArgument(StrCat("bad fft size in ", text));
      if (!c.mma && (c.tm % 2 || c.tn % 2))
        return InvalidArgument(StrCat("bad fft thread tile in ", text));
    } else if (j.at("family") == "igemm_simt") {
      c.family = Family::kIgemmSimt;
      c.bqd = j.at("bqd"), c.bqh = j.at("bqh"), c.bqw = j.at("bqw"), c.tm = j.at("tm");
      c.tn = j.at("tn"), c.nt = j.at("nt"), c.ck = j.at("ck");
      fields = {&c.bqd, &c.bqh, &c.bqw, &c.tm, &c.tn, &c.nt, &c.ck};
    } else if (j.at("family") == "igemm_wgmma") {
      c.family = Family::kIgemmWgmma;
      c.bqd = j.at("bqd"), c.bqh = j.at("bqh"), c.bqw = j.at("bqw"), c.wg = j.at("wg");
      c.mt = j.at("mt"), c.bn = j.at("bn"), c.ck = j.at("ck"), c.split = j.at("split");
      c.sr = j.value("sr", 1);
      fields = {&c.bqd, &c.bqh, &c.bqw, &c.wg, &c.mt, &c.bn, &c.ck, &c.split, &c.sr};
      if (c.split != 1 && c.split != 3) return InvalidArgument(StrCat("bad split in ", text));
      if (c.bqh % 8 != 0 || c.bqw % 8 != 0 || c.bn % 8 != 0 || c.bn > 256 ||
          c.bqd * (c.bqh / 8) * (c.bqw / 8) != c.wg * c.mt)
        return InvalidArgument(StrCat("inconsistent igemm_wgmma tile in ", text));
    } else if (j.at("family") == "igemm_mma") {
      c.family = Family::kIgemmMma;
      c.bqd = j.at("bqd"), c.bqh = j.at("bqh"), c.bqw = j.at("bqw"), c.wm = j.at("wm");
      c.wn = j.at("wn"), c.mt = j.at("mt"), c.nt8 = j.at("nt8"), c.ck = j.at("ck");
      c.split = j.at("split");
      fields = {&c.bqd, &c.bqh, &c.bqw, &c.wm, &c.wn, &c.mt, &c.nt8, &c.ck, &c.split};
      if (c.split != 1 && c.split != 3) return InvalidArgument(StrCat("bad split in ", text));
      c.pa = j.value("pa", 0);
      if (c.pa < 0 || c.pa > 2) return InvalidArgument(StrCat("bad pa in ", text));
    } else {
      return InvalidArgument(StrCat("unknown kernel family ", j.at("family").dump()));
    }
    for (int* f : fields)
      if (*f <= 0) return InvalidArgument(StrCat("bad candidate parameters ", text));
    c.lattice = j.value("lattice", 0);
    if (c.lattice < 0 || c.lattice > 2 || (c.lattice && !LatticeFamily(c, c.lattice)))
      return InvalidArgument(StrCat("bad lattice in ", text));
    return c;
  } catch (const std::exception& e) {
    return InvalidArgument(StrCat("bad candidate JSON ", text, ": ", e.what()));
  }
}

namespace {

// igemm_wgmma (stride 1): the halo of a bqd x bqh x bqw output box, in 16-byte units of kEPW
// channels (templates/igemm_wgmma.cu), double-buffered with the step's weight tile.
IgemmShape WgmmaShapeOf(const Problem& p, const Config& c) {
  const Dim3 out = p.OutSize();
  const bool half = c.dtype == DType::kBF16 || c.dtype == DType::kF16;
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

}  // namespace

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

IgemmShape IgemmShapeOf(const Problem& p, const Config& c) {
  if (HaloTooBig(p, c)) {
    IgemmShape s;
    s.smem_bytes = INT32_MAX;  // every candidate filter rejects it
    return s;
  }
  if (c.family == Family::kIgemmWgmma) return WgmmaShapeOf(p, c);
  const Dim3 out = p.OutSize();
  IgemmShape s;
  DimPhases dp[3];
  for (int i = 0; i < 3; ++i) {
    dp[i] = PhasesOf(p.in[i], p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], out[i]);
    s.jmax[i] = dp[i].max_taps;
    s.dred[i] = dp[i].d_red;
    s.qmax[i] = dp[i].max_q_count;
  }
  s.lpad = ((s.jmax[2] - 1) * s.dred[2] + 3) / 4 * 4;
  s.chunks = (p.c_in / p.groups + c.ck - 1) / c.ck;
  s.share = c.family == Family::kIgemmMma && c.pa && s.chunks == 1;
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
  if (c.family == Family::kIgemmMma) {
    // Strides = 8 or 24 (mod 32) words make the fragment reads conflict-free: the 4 lanes of a
    // quad read 4 channels (one stride apart) of 8 consecutive positions or columns. For 16-bit
    // halos a quad's lanes read channels 2*tg, so the same rule holds in elements.
    auto conflict_free = [](int words) {
      words = (words + 7) / 8 * 8;
      return words % 16 == 0 ? words + 8 : words;
    };
    const bool half = c.dtype == DType::kBF16 || c.dtype == DType::kF16;
    s.bn = c.wn * c.nt8 * 8;
    // The halo is copied in aligned vectors of `vec` W positions (16 bytes when the input width
    // is a multiple of it), so a row starts up to vec-1 positions early and reads shift.
    s.vec = p.in[2] % 4 == 0 ? 4 : 1;  // 32-bit words: f32 inputs or 16-bit channel pairs
    s.hws = (hw + s.vec - 1 + s.vec - 1) / s.vec * s.vec;
    s.plane = conflict_free(hd * hh * s.hws);
    // (The weight tile's B fragments are laid per lane since session 13, conflict-free without
    // this padding; it stays until a device run measures the smaller tiles.)
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

TileShape TileShapeOf(const Problem& p, const Config& c) {
  TileShape s;
  const Dim3 out = p.OutSize();
  DimPhases dp[3];
  for (int i = 0; i < 3; ++i) {
    dp[i] = PhasesOf(p.in[i], p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], out[i]);
    s.jmax[i] = dp[i].max_taps;
    s.dred[i] = dp[i].d_red;
  }
  const int64_t sw = p.stride[2];
  if (c.vw % sw != 0) return s;
  if (c.pa && c.ck < p.c_in / p.groups) return s;  // all-phases blocks stage one chunk
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
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (int64_t k = 0; k < c.vw; ++k)
    for (int64_t kw = 0; kw < p.kernel[2]; ++kw) {
      const int64_t e = k + p.padding[2] - kw * p.dilation[2];
      if (e % sw != 0) continue;
      lo = std::min(lo, e / sw), hi = std::max(hi, e / sw);
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
  const int64_t words =
      int64_t{c.ck} * (pad8(hd * hh * s.hws) + pad8(wrows * p.kernel[2] * c.cob) + hd * hh);
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
// best per-phase tiles, then (strided in D or H) the `keep_pa` best all-phases ones.
std::vector<Config> TileCandidates(const Problem& p, const DeviceLimits& limits, size_t keep,
                                   size_t keep_pa, bool pow2_too) {
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
  const int split = p.precision == Precision::kFp32x3 ? 3 : 1;
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
    // Several chunks keep a partial sum beside the running one: at 64 accumulators that took
    // L1-73's tiles to 193-199 registers, one block of 8 warps per SM.
    if (chunks && c.vw * c.cob > 32) return;
    // All-phases tiles with 64 accumulators spilled in bf16 on L1-73 (32 channels x 27 taps
    // staged) and were its slowest tiles in fp32 (6.0-6.5 ms vs 3.9); they pay off where an
    // output has few products (WB-64: 32).
    if (c.pa && c.vw * c.cob > 32 && s.k_chunk > 64) return;
    const int regs = c.vw * c.cob * (chunks ? 2 : 1) + s.win_n + c.cob + 40;
    if (regs > limits.max_regs_per_thread || regs * threads > limits.max_regs_per_block) return;
    const double waste = overhang(c, s);
    // Blocks of 128 threads won on all four shapes of session 7's first H100 runs (L1-72/73/77,
    // WB-64), 256 came within 10-25%, 64 further off.
    const double score = -std::min(c.vw * c.cob, 64) / 16.0 + waste * 3 +
                         halo_per_output(c, s) * 0.2 +
                         (threads == 128 ? 0
                          : threads > 64 ? 0.1
                                         : 0.3) +
                         (c.bx < 4 ? 0.3 : 0);
    scored[c.pa].push_back({score, waste * 3, c});
  };
  // Box sides need not be powers of two: a tile that fits the output exactly does no work on
  // padding (power-of-two boxes computed 24-41% padding outputs on the dense level-1 shapes).
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
            c.family = Family::kDirectTile;
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
    // The overhang term does not predict time well (session 8, L1-68: boxes that fit the output
    // lost 5-10% to an 8x8x16 box computing 36% padding, which stages less halo per output), so
    // the best power-of-two boxes of the first candidate's thread tile, ranked without it, are
    // timed too.
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
  std::vector<Config> out;
  for (size_t i = 0; i < mma.size() && i < 3; ++i) out.push_back(mma[i].c);
  for (const auto& k : kept) out.push_back(k.c);
  return out;
}

}  // namespace

namespace {

// igemm_simt candidates: block N covers the group's channels (up to 64), 4 or 8 consecutive W
// outputs per thread, 128-512 threads, and a stage depth that fits 48 KB of shared memory.
std::vector<Config> IgemmCandidates(const Problem& p, const DeviceLimits& limits) {
  std::vector<std::pair<double, Config>> scored;
  if (p.dtype != DType::kF32) return {};
  const int64_t cout_g = p.c_out / p.groups;
  for (int tn : {8, 4, 2, 1}) {
    for (int nt : {8, 6, 4, 3, 2, 1}) {
      const int bn = tn * nt;
      if (cout_g % bn != 0 || bn > 64) continue;
      for (int tm : {4, 8}) {
        for (int bqw : {16, 32, 64}) {
          for (int bqh : {1, 2, 4, 8}) {
            for (int ck : {1, 2, 4, 8}) {
              Config c;
              c.family = Family::kIgemmSimt;
              c.tn = tn, c.nt = nt, c.tm = tm, c.bqw = bqw, c.bqh = bqh, c.bqd = 1, c.ck = ck;
              // 8x8 outputs per thread (128 accumulator registers with the two-level sum) was
              // 1.2-2.6x slower than the winner on all seven level-1 shapes (bench/NOTES.md).
              if (bqw % tm != 0 || bqw / tm < 2 || tm * tn > 32) continue;
              const IgemmShape s = IgemmShapeOf(p, c);
              const int regs = 2 * tm * tn + s.lpad + tm + tn + 48;
              if (s.threads < 64 || s.threads > std::min(512, limits.max_threads_per_block) ||
                  s.smem_bytes > std::min(48 * 1024, limits.max_smem_per_block) ||
                  regs > limits.max_regs_per_thread || regs * s.threads > limits.max_regs_per_block)
                continue;
              // Rank by the tile's shape: many outputs per thread (reuse), the whole channel
              // group per block (input halo read once), little W tile waste, enough threads.
              const double waste =
                  static_cast<double>(s.tiles[2] * bqw - s.qmax[2]) / (s.tiles[2] * bqw);
              const double reuse = std::min(tm * tn, 32) / 32.0;
              const double full_n = static_cast<double>(bn) / std::min<int64_t>(cout_g, 64);
              const double threads = s.threads >= 128 && s.threads <= 256 ? 1.0 : 0.7;
              const double stage = s.smem_bytes >= 8 * 1024 ? 1.0 : 0.8;
              const double score = reuse * 3 + full_n * 2 + threads + stage - waste * 2;
              scored.push_back({-score, c});
            }
          }
        }
      }
    }
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Config> out;
  for (size_t i = 0; i < scored.size() && out.size() < 16; ++i) out.push_back(scored[i].second);
  return out;
}

// igemm_mma candidates (tf32, fp32x3, bf16, f16): block N covers the group's channels (rounded up
// to 8, or tiles of 64/128 beyond 128), 64-256 outputs per block, 2-8 warps; ranked by the shared
// memory bytes each mma needs (the bound at small N), then tile waste.
std::vector<Config> MmaCandidates(const Problem& p, const DeviceLimits& limits) {
  std::vector<std::pair<double, Config>> scored;
  const bool half = p.dtype == DType::kBF16 || p.dtype == DType::kF16;
  if (!half && (p.dtype != DType::kF32 || p.precision == Precision::kFp32)) return {};
  const int split = p.precision == Precision::kFp32x3 ? 3 : 1;
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
              c.family = Family::kIgemmMma;
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
  // The best-ranked tiles are the largest, and their shared memory allows 2-3 blocks per SM:
  // 1-1.5 warps per scheduler in Nsight Compute on L1-73 and L1-68 (bench/NOTES.md). Also try
  // the best four that leave room for four blocks per SM.
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
  // it per phase (on L1-73 the per-phase halos were ~2 GB of L2 reads for 1 GB of output). Try
  // them as they are (pa 1) and with the output stage (pa 2, "_pa_st": whole output rows instead
  // of fragment stores; measured faster on L1-73, slower on L1-72/77 and WB-64 16-bit): each kind
  // the four best tiles that allow two blocks per SM and the four best that allow four (three
  // when staged: the stage adds 16-66 KB).
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
  // warp half the M or N fragments): the same shared memory for twice the warps per SM. L1-73's
  // tf32 winner (q1x2x32_w2x1_m2n4_k32_pa_st, 67 KB for 2 warps) ran 6 warps per SM, 9% of warps
  // active, at 1.2 instructions per cycle (ncu, session 12).
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

// igemm_wgmma candidates (stride 1; tf32, fp32x3, bf16, f16 on an sm_90 target; at most 256
// channels per group): block N is the group's channels rounded up to 8, 1-2 warpgroups of 1-2 m64
// tiles (8 W x 8 H outputs each) stacked along W, H or D, one or two wgmma K steps per chunk;
// ranked by tile waste, then by halo positions loaded per output.
std::vector<Config> WgmmaCandidates(const Problem& p, const DeviceLimits& limits,
                                    int bn_cap = 256) {
  const bool half = p.dtype == DType::kBF16 || p.dtype == DType::kF16;
  if (!limits.wgmma || p.stride[0] * p.stride[1] * p.stride[2] != 1) return {};
  if (!half && (p.dtype != DType::kF32 || p.precision == Precision::kFp32)) return {};
  const int split = p.precision == Precision::kFp32x3 && !half ? 3 : 1;
  const int kstep = half ? 16 : 8;
  const int64_t cout_g = p.c_out / p.groups, cin_g = p.c_in / p.groups;
  // At most 256 channels per group. Several channel tiles (bn_cap below the group's channels)
  // run only for phase-channel sub-problems, which RandomSubpixel covers; plain problems get one
  // tile (RandomWgmma draws at most 150 channels per group).
  if (cout_g > 256) return {};
  const int bn = static_cast<int>(std::min<int64_t>((cout_g + 7) / 8 * 8, bn_cap));
  const Dim3 out = p.OutSize();
  std::vector<std::pair<double, Config>> scored[2];  // one tap row per step, all kH rows
  for (int whole_rows = 0; whole_rows < (p.kernel[1] > 1 ? 2 : 1); ++whole_rows)
    for (int wg : {2, 1}) {
      for (int mt : {1, 2}) {
        const int tiles = wg * mt;
        for (int bqd : {1, 2, 4}) {
          for (int th : {1, 2, 4}) {
            if (tiles % (bqd * th) != 0) continue;
            const int tw = tiles / (bqd * th);
            for (int ck : {kstep, 2 * kstep}) {
              if (ck > kstep && cin_g <= kstep) continue;
              Config c;
              c.family = Family::kIgemmWgmma;
              c.dtype = p.dtype;
              c.bqd = bqd, c.bqh = 8 * th, c.bqw = 8 * tw, c.wg = wg, c.mt = mt, c.bn = bn;
              c.ck = ck, c.split = split;
              c.sr = whole_rows ? static_cast<int>(p.kernel[1]) : 1;
              const IgemmShape s = IgemmShapeOf(p, c);
              // 3xTF32 keeps a per-step partial sum beside the running one.
              const int regs = mt * bn / 2 * (split == 3 ? 2 : 1) + 48;
              if (s.threads > limits.max_threads_per_block || regs > limits.max_regs_per_thread ||
                  regs * s.threads > limits.max_regs_per_block ||
                  s.smem_bytes > std::min(113 * 1024, limits.max_smem_per_block))
                continue;
              double waste = 0;
              for (int i = 0; i < 3; ++i) {
                const int64_t covered = s.tiles[i] * (i == 0 ? c.bqd : i == 1 ? c.bqh : c.bqw);
                waste += static_cast<double>(covered - out[i]) / covered;
              }
              waste += static_cast<double>(s.co_tiles * bn - cout_g) / (s.co_tiles * bn);
              const double halo_per_output = static_cast<double>(s.plane) / (c.bqd * c.bqh * c.bqw);
              const double score = waste * 2 + halo_per_output * 0.1 + (wg == 2 ? 0 : 0.1) +
                                   (ck == kstep ? 0 : 0.05);
              scored[whole_rows].push_back({score, c});
            }
          }
        }
      }
    }
  // The eight best with one tap row per step, then the four best with all kH rows per step (a
  // kH times larger weight tile, kH times fewer barriers: small N gives a step little work).
  std::vector<Config> out_configs;
  for (int whole_rows = 0; whole_rows < 2; ++whole_rows) {
    auto& list = scored[whole_rows];
    std::stable_sort(list.begin(), list.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < list.size() && i < (whole_rows ? 4u : 8u); ++i)
      out_configs.push_back(list[i].second);
  }
  return out_configs;
}

}  // namespace

bool HasWgmma(const std::string& arch) { return arch == "sm_90"; }

std::string CompileArch(const Config& c, const std::string& arch) {
  return c.family == Family::kIgemmWgmma && HasWgmma(arch) ? arch + "a" : arch;
}

namespace {

std::vector<Config> PlainCandidates(const Problem& p, const DeviceLimits& limits) {
  const int64_t cout_g = p.c_out / p.groups;
  const int64_t qw = QCountW(p);
  const int64_t rows = p.OutSize()[1];
  std::vector<std::pair<double, Config>> scored;
  for (const auto& shape : kBlockShapes) {
    for (int opt : kOutputsPerThread) {
      for (int cob : kChannelsPerThread) {
        Config c;
        c.dtype = p.dtype;
        c.bx = shape[0];
        c.by = shape[1];
        c.opt = opt;
        c.cob = cob;
        if (cout_g % cob != 0 || !Fits(c, limits)) continue;
        // A W tile far longer than a phase's row only adds idle threads.
        if (opt > 1 && static_cast<int64_t>(c.bx) * (opt / 2) >= qw) continue;
        if (c.by > 1 && c.by / 2 >= rows) continue;
        if (c.cob * c.opt > (p.dtype == DType::kF64 ? 16 : 32)) continue;
        // Rank: reuse of each input load across output channels matters most, then outputs
        // per thread, then fuller W tiles. Only ordering, never correctness, depends on it.
        const double waste =
            static_cast<double>((c.bx * c.opt - qw % (c.bx * c.opt)) % (c.bx * c.opt)) /
            static_cast<double>(qw + c.bx * c.opt);
        const double score = -std::min(c.cob, 8) * 1.0 - std::min(c.opt, 2) * 0.5 + waste * 4 +
                             (c.cob == 16 ? 0.25 : 0) + (c.opt == 4 ? 0.25 : 0);
        scored.push_back({score, c});
      }
    }
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  // The implicit GEMM is expected to beat the direct kernel wherever it applies (see
  // bench/NOTES.md); the direct family stays as the fallback for every dtype and shape.
  // Stride-1 tensor-core problems: the wgmma tiles first, then the mma.sync ones.
  std::vector<Config> out = WgmmaCandidates(p, limits);
  for (const Config& c : MmaCandidates(p, limits)) out.push_back(c);
  const bool tensor = !out.empty();
  // The strict kernels also meet the looser contracts; with tensor cores allowed a few of each
  // stay as the fallback for shapes where the tensor-core tiles waste most of their work.
  std::vector<Config> simt = IgemmCandidates(p, limits);
  int64_t products = p.c_in / p.groups;
  for (int i = 0; i < 3; ++i)
    products *=
        PhasesOf(p.in[i], p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], p.OutSize()[i])
            .max_taps;
  const bool dense = products > 1024;
  std::vector<Config> tile = TileCandidates(p, limits, tensor ? 2 : dense ? 3 : 4, 3, !tensor);
  if (tensor && simt.size() > 2) simt.resize(2);
  // Strict dense shapes: direct_tile won all four level-1 ones by 1.1-1.5x (session 8), the
  // implicit GEMM stays as the fallback.
  if (!tensor && dense && !tile.empty() && simt.size() > 4) simt.resize(4);
  // direct_tile: in strict fp32 it won every level-1 shape (session 8; the dense stride-1 ones
  // by 1.1-1.5x over igemm_simt once offered) and WB-64 in every mode, where a tensor-core tile
  // has almost no K to work on; with tensor cores allowed it is a fallback after their tiles.
  if (dense && tensor) tile.clear();  // the tensor-core tiles' ground
  out.insert(products <= 64 ? out.begin() : out.end(), tile.begin(), tile.end());
  out.insert(out.end(), simt.begin(), simt.end());
  // winograd (stride 1, kernel <= 3): a third of the direct sum's FFMAs on 3x3x3 kernels; first
  // in strict fp32, after the tensor-core tiles in fp32x3 (its error meets either contract).
  const std::vector<Config> wino = WinogradCandidates(p, limits);
  out.insert(tensor ? out.begin() + std::min<size_t>(out.size(), 4) : out.begin(), wino.begin(),
             wino.end());
  // fft (stride 1, H x W kernel >= 9 taps): first in strict fp32 (it won all four stride-1
  // level-1 shapes there, 3x3x3 ones over winograd by 1.02-1.3x), in fp32x3 (all four since
  // session 14: L1-61 3.80 vs 4.00 ms for the best wgmma tile, L1-70 6.31 vs 8.73) and on 5x5 or
  // larger H x W kernels in every mode (L1-58, L1-68: by 1.2-5x), else after the first four (the
  // tensor-core tiles won the 3x3x3 ones in tf32; session 11).
  const std::vector<Config> fft = FftCandidates(p, limits);
  const bool fft_first =
      p.kernel[1] * p.kernel[2] >= 25 || !tensor || p.precision == Precision::kFp32x3;
  out.insert(fft_first ? out.begin() : out.begin() + std::min<size_t>(out.size(), 4), fft.begin(),
             fft.end());
  // Where the implicit GEMM applies, the direct kernel won only on L1-72 (and came within 6% on
  // L1-73), always with one of its first ranked configurations: keep a few as the fallback.
  const size_t direct_cap = out.empty() ? scored.size() : tensor ? 2 : 6;
  for (size_t i = 0; i < scored.size() && i < direct_cap; ++i) out.push_back(scored[i].second);
  return out;
}

}  // namespace

bool LatticeFamily(const Config& c, int kind) {
  if (kind == 2) return c.family == Family::kIgemmWgmma;
  return c.family == Family::kIgemmWgmma || c.family == Family::kWinograd ||
         c.family == Family::kFft || (c.family == Family::kDirectTile && !c.pa && !c.mma);
}

// Stride == dilation problems (generator/lattice.h) also get the best-ranked stride-1 kernels of
// their sub-lattice, first (on L1-77 they won every mode by 1.6-2x: no empty phases to walk);
// other strided problems, last, the wgmma tiles of their phase-channel form.
std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits) {
  std::vector<Config> out = PlainCandidates(p, limits);
  if (const Lattice l = LatticeOf(p); l.kind == Lattice::kSubLattice) {
    std::vector<Config> lat;
    std::map<Family, int> per_family;
    int whole_rows = 0;
    for (Config c : PlainCandidates(l.sub, limits)) {
      // Six of each family (fft eight: its first two Gauss tiles too), and the first two wgmma
      // tiles with all kH tap rows per step (ranked after the eight others, they were never
      // reached; they won L1-61 and L1-70, and L1-77 tf32 by 2%: 0.490 vs 0.499 ms, session
      // 13). The phase-channel form's gained nothing on L1-72 and L1-73 (0.131 vs 0.118 ms) and
      // is left without them.
      const bool rows = c.family == Family::kIgemmWgmma && c.sr > 1;
      const int cap = c.family == Family::kFft ? 8 : 6;
      if (!LatticeFamily(c, 1) || (rows ? whole_rows++ >= 2 : per_family[c.family]++ >= cap))
        continue;
      c.lattice = 1;
      lat.push_back(c);
    }
    out.insert(out.begin(), lat.begin(), lat.end());
  } else if (const Lattice pc = PhaseChannelsOf(p); pc.kind == Lattice::kPhaseChannels) {
    int n = 0;
    // N tiles of at most 128 channels: at 256 (L1-73's 8 phases x 32) ptxas spilled 1.1 KB.
    for (Config c : WgmmaCandidates(pc.sub, limits, 128)) {
      if (n++ == 6) break;
      c.lattice = 2;
      out.push_back(c);
    }
  }
  return out;
}

Config HeuristicPick(const Problem& p, const DeviceLimits& limits) {
  // Candidates() is ordered best guess first; it is never empty because (64,2,1,1) always fits.
  auto all = Candidates(p, limits);
  if (all.empty()) {
    Config c;
    c.dtype = p.dtype;
    return c;
  }
  // Lattice problems: the sub-problem's own pick, where it is one of the lattice candidates (on
  // GPUs without wgmma the sub-problem's pick may be igemm_mma, which cannot run it: then the
  // plain problem's rules below, on the plain candidates).
  if (all.front().lattice == 1) {
    Config c = HeuristicPick(LatticeOf(p).sub, limits);
    c.lattice = 1;
    for (const Config& o : all)
      if (o == c) return o;
    // A pick of a lattice family that is not among the lattice candidates (six per family):
    // the first lattice candidate.
    if (LatticeFamily(c, 1)) return all.front();
  }
  // Phase-channel (subpixel_) tiles won all three tensor modes of L1-72 (one channel tile of
  // 64, 8 input channels per group) by 1.06-1.47x, and lost L1-73 (two tiles of 128: 1.4x
  // slower) and WB-64 (4 input channels: write-bound); the first-ranked one came within 1.17x
  // of the winner (session 10 H100 trials). So: the first, where it needs one channel tile and
  // has at least 8 input channels per group.
  if (p.c_in / p.groups >= 8)
    for (const Config& o : all)
      if (o.lattice == 2) {
        if (IgemmShapeOf(PhaseChannelsOf(p).sub, o.Plain()).co_tiles == 1) return o;
        break;
      }
  // The rules below rank the plain candidates.
  all.erase(std::remove_if(all.begin(), all.end(), [](const Config& o) { return o.lattice != 0; }),
            all.end());
  // On strided problems: the best-ranked all-phases tile of four warps, staged if there is one
  // with a shared halo (staging alone lost on L1-77, where 7 of 8 phases are empty).
  // Fitted to the session-5 H100 trials of L1-72/73/77 in tf32, bf16 and fp32x3
  // (bench/NOTES.md): within 1.36x of the tuned winner on all nine, where the generic first tile
  // was up to 2.3x off (latency-bound strided shapes want more, smaller warps' tiles).
  // Without a shared-halo staged tile (3xTF32 on L1-73: its shared ones exceed the shared
  // memory), a staged one still beats the unstaged: 1.64 vs 2.48 ms (session 13 trials).
  if (all.front().family == Family::kIgemmMma && p.stride[0] * p.stride[1] * p.stride[2] > 1) {
    // In order: staged with a shared halo, staged, all-phases.
    for (const int rule : {0, 1, 2})
      for (const Config& o : all)
        if (o.family == Family::kIgemmMma && o.wm * o.wn == 4 && o.pa == (rule == 2 ? 1 : 2) &&
            (rule != 0 || IgemmShapeOf(p, o).share))
          return o;
    for (const Config& o : all)
      if (o.family == Family::kIgemmMma && o.pa) return o;
  }
  // Stride-1 wgmma tiles: with at most 48 output channels a step of one tap row is little work
  // for its barrier, and the best-ranked tile taking all kH rows per step won or came within
  // 1.2x in every mode of L1-58/61/70 (session 6 H100 trials); at 64 channels one row won.
  if (all.front().family == Family::kIgemmWgmma && all.front().bn <= 48)
    for (const Config& o : all)
      if (o.family == Family::kIgemmWgmma && o.sr > 1) return o;
  return all.front();
}

LaunchGeometry Geometry(const Problem& p, const Config& c) {
  if (c.lattice) {
    const Lattice l = LatticeFor(p, c.lattice);
    LaunchGeometry g = Geometry(l.sub, c.Plain());
    if (l.kind != Lattice::kSubLattice) return g;  // phase channels write every output
    // The fill's 16-byte stores, grid-stride: 8 blocks of 256 threads per SM cover them.
    const int64_t vectors = p.OutputElements() * DTypeBytes(p.dtype) / 16;
    g.fill_grid[0] = static_cast<unsigned>(std::clamp<int64_t>((vectors + 255) / 256, 1, 1056));
    g.fill_grid[1] = g.fill_grid[2] = 1;
    return g;
  }
  LaunchGeometry g;
  if (c.family == Family::kFft) {
    const FftShape s = FftShapeOf(p, c);
    auto clamp = [](int64_t v) { return static_cast<unsigned>(std::min<int64_t>(v, 0x7fffffff)); };
    g.grid[0] = clamp(s.gemm_blocks);
    g.block[0] = 256;
    g.smem_bytes = s.gemm_smem;
    g.workspace_bytes = static_cast<size_t>(s.g_elems + s.x_elems + s.y_elems) * 8;
    g.prep_grid[0] =
        static_cast<unsigned>(std::clamp<int64_t>((s.prep_elems + 255) / 256, 1, 4096));
    g.prepx_grid[0] = clamp(s.fwd_blocks);
    g.prepx_smem = s.fwd_smem;
    g.post_grid[0] = clamp(s.inv_blocks);
    g.post_smem = s.inv_smem;
    g.chunks = static_cast<int>(s.chunks);
    return g;
  }
  if (c.family == Family::kWinograd) {
    const WinoShape s = WinoShapeOf(p, c);
    g.grid[0] = static_cast<unsigned>(std::min<int64_t>(s.blocks, 0x7fffffff));
    g.block[0] = s.threads;
    g.smem_bytes = s.smem_bytes;
    g.workspace_bytes = static_cast<size_t>(s.workspace_words) * 4;
    g.prep_grid[0] =
        static_cast<unsigned>(std::clamp<int64_t>((s.workspace_words + 255) / 256, 1, 4096));
    return g;
  }
  if (c.family == Family::kDirectTile) {
    const TileShape s = TileShapeOf(p, c);
    g.grid[0] = static_cast<unsigned>(std::min<int64_t>(s.blocks, 0x7fffffff));
    g.block[0] = s.threads;
    g.smem_bytes = s.smem_bytes;
    return g;
  }
  if (c.family != Family::kDirectPhase) {
    const IgemmShape s = IgemmShapeOf(p, c);
    g.grid[0] = static_cast<unsigned>(std::min<int64_t>(s.blocks, 0x7fffffff));
    g.block[0] = s.threads;
    // igemm_simt declares its shared memory statically; the tensor-core families' is dynamic.
    if (c.family != Family::kIgemmSimt) {
      g.smem_bytes = s.smem_bytes;
      g.workspace_bytes = static_cast<size_t>(s.workspace_words) * 4;
      g.prep_grid[0] =
          static_cast<unsigned>(std::clamp<int64_t>((s.weight_words + 255) / 256, 1, 2048));
      if (s.x_words > 0) {
        g.x_offset_bytes = static_cast<size_t>(s.weight_words) * 4;
        g.x_bytes = static_cast<size_t>(s.x_words) * 4;
        g.prepx_grid[0] =
            static_cast<unsigned>(std::clamp<int64_t>((s.x_words + 255) / 256, 1, 8192));
      }
    }
    return g;
  }
  const Dim3 out = p.OutSize();
  const int64_t qw = QCountW(p);
  const int64_t wtiles = (qw + c.bx * c.opt - 1) / (c.bx * c.opt);
  const int64_t htiles = (out[1] + c.by - 1) / c.by;
  const int64_t blocks = wtiles * p.stride[2] * htiles * out[0] * (p.c_out / c.cob) * p.n;
  g.grid[0] = static_cast<unsigned>(std::min<int64_t>(blocks, 0x7fffffff));
  g.block[0] = c.bx;
  g.block[1] = c.by;
  return g;
}

}  // namespace convt3d::gen
