// fft.cpp: tiling, candidates and preamble of the FFT-tiling family (templates/fft_tiling.cu).
#include "generator/families/fft.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "base/math.h"
#include "base/status.h"
#include "generator/family.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

// X and Y of one chunk stay under this; larger batches run in several chunks.
constexpr int64_t kChunkBytes = int64_t{1} << 30;
// No candidate needs more workspace than this (one sample's spectra or the weight spectra of a
// wide layer can exceed the chunk size), nor more shared memory per block in any of its kernels
// (100 KB: two blocks per SM; the 3xTF32 GEMM tiles of 16 mmas per warp, 104 KB in stages of
// 16, drop out).
constexpr int64_t kWorkspaceBytes = int64_t{3} << 30;
constexpr int kSmemBytes = 100 * 1024;
// The tensor-core GEMM tiles (block M x N complex, warps along M x N), 8 warps each.
constexpr int kMmaTiles[][4] = {{128, 64, 4, 2}, {64, 64, 2, 4},  {256, 32, 8, 1},
                                {128, 32, 4, 2}, {256, 16, 8, 1}, {128, 16, 8, 1}};
// The FFMA GEMM tiles (block M x N, thread M x N, in complex elements), 256 threads each. No
// 256 x 32 tile of 8 x 4: it spilled in NVRTC builds at the 128-register cap (two blocks of 256
// threads per SM). Block N 48 and 24 fit groups of 48 and 24 channels exactly, where the next
// power of two would spend a quarter of the products on padding channels and a smaller one
// would read the input spectra once per N tile.
constexpr int kGemmTiles[][4] = {{128, 64, 8, 4}, {64, 64, 4, 4},  {128, 48, 4, 6}, {128, 32, 4, 4},
                                 {256, 24, 4, 6}, {256, 16, 8, 2}, {128, 16, 4, 2}};

int Extent(const Problem& p, int dim) {
  return static_cast<int>(p.dilation[dim] * (p.kernel[dim] - 1) + 1);
}

// Spectral points per output of transform t on an output extent `out` with kernel extent e,
// including the last tile's overhang: what the GEMM pays per output along that dimension.
double Cost(int t, int e, int64_t out, bool half) {
  const int l = t - e + 1;
  const double points = half ? t / 2 + 1 : t;
  return points * static_cast<double>(CeilDiv(out, l)) / static_cast<double>(out);
}

}  // namespace

bool FftApplies(const Problem& p) {
  if (p.dtype != DType::kF32) return false;
  for (int i = 0; i < 3; ++i)
    if (p.stride[i] != 1) return false;
  return p.kernel[1] * p.kernel[2] >= 9 && Extent(p, 1) <= 17 && Extent(p, 2) <= 17;
}

FftShape FftShapeOf(const Problem& p, const Config& c) {
  FftShape s;
  if (!FftApplies(p) || c.family != "fft") return s;
  const Dim3 out = p.OutSize();
  s.t[0] = c.ft_h, s.t[1] = c.ft_w;
  for (int i = 0; i < 2; ++i) {
    s.e[i] = Extent(p, i + 1);
    s.l[i] = s.t[i] - s.e[i] + 1;
    if (s.l[i] < 1) return s;
    s.tiles[i] = CeilDiv(out[i + 1], s.l[i]);
  }
  s.fw = s.t[1] / 2 + 1;
  s.freqs = s.t[0] * s.fw;
  s.tp = s.tiles[0] * s.tiles[1];
  // A transform block: whole tile rows of up to 8 tiles, about 48 tiles in all, the rows split
  // evenly between the plane's blocks; fewer tiles (rows first) where that would not fit
  // kSmemBytes (32-point transforms of large planes).
  s.tb[1] = static_cast<int>(std::min<int64_t>(s.tiles[1], 8));
  s.tb[0] = static_cast<int>(CeilDiv(s.tiles[0], CeilDiv(s.tiles[0], std::max(1, 48 / s.tb[1]))));
  for (;;) {
    const int tb = s.tb[0] * s.tb[1];
    // Odd strides (in floats for the region and the output, in float2 for a tile's spectrum)
    // keep the threads of one row or column stage on different banks.
    s.rh = (s.tb[0] - 1) * s.l[0] + s.t[0];
    s.rws = ((s.tb[1] - 1) * s.l[1] + s.t[1]) | 1;
    s.tss_fwd = (s.t[0] * s.fw) | 1;
    s.tss_inv = (s.l[0] * s.fw) | 1;
    s.ows = (s.tb[1] * s.l[1]) | 1;
    s.fwd_smem = 4 * ((s.rh * s.rws + 1) & ~1) + 8 * tb * s.tss_fwd;
    s.inv_smem = 8 * tb * s.tss_inv + 4 * s.tb[0] * s.l[0] * s.ows;
    if (std::max(s.fwd_smem, s.inv_smem) <= kSmemBytes || tb == 1) break;
    if (s.tb[0] > 1)
      s.tb[0] = (s.tb[0] + 1) / 2;
    else
      s.tb[1] = (s.tb[1] + 1) / 2;
  }
  s.tblocks = CeilDiv(s.tiles[0], s.tb[0]) * CeilDiv(s.tiles[1], s.tb[1]);
  const int64_t cin_g = p.c_in / p.groups, cout_g = p.c_out / p.groups;
  s.k = p.kernel[0] * cin_g;
  // Each part starts on a 512-byte boundary (the GEMM stores Y in 16-byte vectors). The
  // tensor-core GEMM's weights are the real B' (2 floats per complex k and channel, rows of np
  // floats: channel pairs), once or, for 3xTF32, twice (big and small parts).
  const int64_t np = (cout_g + 1) / 2 * 4;
  s.prep_elems = c.mma ? static_cast<int64_t>(s.freqs) * p.groups * s.k * (np / 2)
                       : static_cast<int64_t>(s.freqs) * p.kernel[0] * p.c_in * cout_g;
  const int64_t g_floats = c.mma
                               ? (c.split == 3 ? 2 : 1) * int64_t{s.freqs} * p.groups * 2 * s.k * np
                               : (c.gauss ? 3 : 2) * s.prep_elems;
  s.g_elems = (g_floats / 2 + 63) / 64 * 64;
  const int64_t per_sample = static_cast<int64_t>(s.freqs) * s.tp *
                             (p.c_in * p.in[0] + p.c_out * out[0]);  // X + Y, float2
  s.nc = c.fc > 0 ? std::min<int64_t>(c.fc, p.n)
                  : std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(8 * per_sample, 1), 1, p.n);
  // Plane-range chunks (dc output planes of one sample) read dc + (kD - 1) * dilD input planes:
  // where one sample's spectra exceed kChunkBytes, or as asked (fd). Chunks are not cut down to
  // keep the spectra in L2 (~24 MB): each launch would then be a fraction of a wave, and the ramp
  // and tail of many small launches cost more than the L2 hits save.
  const int64_t x_plane = 8 * int64_t{s.freqs} * s.tp * p.c_in;
  const int64_t y_plane = 8 * int64_t{s.freqs} * s.tp * p.c_out;
  int64_t dc = out[0];
  if (c.fd > 0)
    dc = c.fd;
  else if (8 * per_sample > kChunkBytes)
    dc = (kChunkBytes - (p.kernel[0] - 1) * p.dilation[0] * x_plane) / (x_plane + y_plane);
  s.dc = std::clamp<int64_t>(dc, 1, out[0]);
  s.xd = s.dc == out[0] ? p.in[0] : s.dc + (p.kernel[0] - 1) * p.dilation[0];
  if (s.dc < out[0]) s.nc = 1;
  s.dchunks = CeilDiv(out[0], s.dc);
  s.chunks = CeilDiv(p.n, s.nc) * s.dchunks;
  s.m = s.nc * s.dc * s.tp;
  s.mx = s.nc * s.xd * s.tp;
  s.x_elems = (static_cast<int64_t>(s.freqs) * p.c_in * s.mx + 63) / 64 * 64;
  s.y_elems = static_cast<int64_t>(s.freqs) * p.c_out * s.m;
  s.mtiles = CeilDiv(s.m, c.bm);
  s.ntiles = CeilDiv(cout_g, c.bn);
  s.fwd_blocks = s.tblocks * p.c_in * s.nc * s.xd;
  s.inv_blocks = s.tblocks * p.c_out * s.nc * s.dc;
  s.gemm_blocks = s.mtiles * s.ntiles * s.freqs * p.groups;
  // A stage of 8 K rows must give every thread at least one A element (bm >= 32).
  bool tile_ok = 256 % c.bm == 0 && c.bm >= 32 && c.bn % 2 == 0;
  if (c.mma) {
    tile_ok =
        tile_ok && c.wm * c.wn == 8 && c.bm % (16 * c.wm) == 0 && (2 * c.bn) % (8 * c.wn) == 0;
    const int asf = 2 * c.bm + 16, bsf = 2 * c.bn + 8, parts = c.split == 3 ? 2 : 1;
    s.bk = 16;
    s.gemm_smem = 4 * (2 * s.bk * asf + 2 * parts * 2 * s.bk * bsf);
  } else {
    tile_ok =
        tile_ok && c.bm % c.tm == 0 && c.bn % c.tn == 0 && (c.bm / c.tm) * (c.bn / c.tn) == 256;
    // FFMA stages of 16 complex K: half the barriers and per-stage overhead of 8, where barrier
    // and dispatch stalls cost these GEMMs time; but 8 for thread tiles of 64 sums or more (8 x 4
    // without Gauss), whose A copies spill at the 128-register cap with stages of 16.
    const int sums = c.gauss ? 3 : 2;
    s.bk = c.tm * c.tn * sums < 64 ? 16 : 8;
    // Static shared memory (gemm_smem 0) where it fits 48 KB, else dynamic.
    const int bytes = 4 * 2 * s.bk * (2 * c.bm + sums * c.bn);
    s.gemm_smem = bytes <= 48 * 1024 ? 0 : bytes;
  }
  // Every part of the workspace is bounded: the weight spectra are freqs x the weights (times 2
  // or 4 for the real and 3xTF32 forms), which for wide layers can be gigabytes.
  const int64_t ws_bytes = 8 * (s.g_elems + s.x_elems + s.y_elems);
  s.fits = tile_ok && s.fwd_smem <= kSmemBytes && s.inv_smem <= kSmemBytes &&
           s.gemm_smem <= kSmemBytes && ws_bytes <= kWorkspaceBytes &&
           s.gemm_blocks < (int64_t{1} << 31) && s.fwd_blocks < (int64_t{1} << 31) &&
           s.inv_blocks < (int64_t{1} << 31);
  return s;
}

std::vector<Config> FftCandidates(const Problem& p, const DeviceLimits& limits) {
  std::vector<Config> out;
  if (!FftApplies(p)) return out;
  const Dim3 o = p.OutSize();
  // The two cheapest transform-size pairs, by spectral points per output.
  std::vector<std::pair<double, std::pair<int, int>>> sizes;
  for (int th : {8, 16, 32})
    for (int tw : {8, 16, 32}) {
      if (th - Extent(p, 1) + 1 < 1 || tw - Extent(p, 2) + 1 < 1) continue;
      Config probe;  // the transform blocks' fit does not depend on the GEMM tile
      probe.family = "fft";
      probe.ft_h = th, probe.ft_w = tw;
      const FftShape s = FftShapeOf(p, probe);
      if (std::max(s.fwd_smem, s.inv_smem) > std::min(kSmemBytes, limits.max_smem_per_block))
        continue;
      sizes.push_back(
          {Cost(th, Extent(p, 1), o[1], false) * Cost(tw, Extent(p, 2), o[2], true), {th, tw}});
    }
  std::stable_sort(sizes.begin(), sizes.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  if (sizes.size() > 2) sizes.resize(2);
  const int64_t cout_g = p.c_out / p.groups;
  // Per transform size, up to three GEMM tiles: block N at most twice the group's channels (16
  // at least: no block mostly idle) and, below them, a divisor of them; the tightest block N
  // first (it covers the group's channels in one tile with the least padding: the input
  // spectra are read once and few products are spent on padding channels), then in list order.
  const int64_t want_bn = std::min<int64_t>(64, std::max<int64_t>(16, cout_g));
  auto add = [&](const auto& tiles, int mma, int gauss) {
    std::vector<std::array<int, 4>> order;
    for (const auto& g : tiles)
      if (g[1] <= std::max<int64_t>(16, 2 * cout_g) && (g[1] >= want_bn || cout_g % g[1] == 0) &&
          (!gauss || (g[2] == 4 && g[3] == 4)))
        order.push_back({g[0], g[1], g[2], g[3]});
    auto tight = [&](const std::array<int, 4>& g) { return g[1] >= want_bn ? g[1] : 1000; };
    std::stable_sort(order.begin(), order.end(),
                     [&](const auto& a, const auto& b) { return tight(a) < tight(b); });
    for (const auto& [cost, t] : sizes) {
      int kept = 0;
      for (const auto& g : order) {
        if (kept == 3) break;
        Config c;
        c.family = "fft";
        c.dtype = p.dtype;
        c.ft_h = t.first, c.ft_w = t.second;
        c.bm = g[0], c.bn = g[1];
        if (mma) {
          c.mma = 1;
          c.split = p.precision == Precision::kFp32x3 ? 3 : 1;
          c.wm = g[2], c.wn = g[3];
        } else {
          c.tm = g[2], c.tn = g[3];
          c.gauss = gauss;
        }
        const FftShape s = FftShapeOf(p, c);
        if (!s.fits || std::max({s.fwd_smem, s.inv_smem, s.gemm_smem}) > limits.max_smem_per_block)
          continue;
        out.push_back(c);
        ++kept;
      }
    }
  };
  // Tensor-core GEMMs in tf32 (TF32) and fp32x3 (3xTF32, first: three mmas per product still
  // outrun the FFMA GEMM); FFMA in strict fp32 and fp32x3.
  if (p.precision != Precision::kFp32) add(kMmaTiles, 1, 0);
  if (p.precision != Precision::kTf32) {
    add(kGemmTiles, 0, 0);
    // Gauss's three real products per complex one (a quarter fewer FFMAs; in an f32 simulation
    // the GEMM's error is that of four products), only for the 4 x 4 thread tiles: their 48
    // sums fit two blocks per SM. 8 x 4's 96 sums leave one block per SM, too few warps to turn
    // the saved FFMAs into time, and 4 x 6 spills in Gauss form.
    add(kGemmTiles, 0, 1);
  }
  return out;
}

namespace {

// Radix-2 decimation-in-time FFT of n points, straight-line, twiddles as literals:
// v[k] <- sum_j v[j] exp(sign * 2 pi i j k / n), unnormalised.
void EmitFft(std::ostream& os, const char* name, int n, int sign) {
  int bits = 0;
  while ((1 << bits) < n) ++bits;
  os << "__device__ __forceinline__ void " << name << "(float2 (&v)[" << n << "]) {\n";
  os << "  float2 a[" << n << "];\n";
  for (int i = 0; i < n; ++i) {
    int r = 0;
    for (int b = 0; b < bits; ++b)
      if (i & (1 << b)) r |= 1 << (bits - 1 - b);
    os << "  a[" << i << "] = v[" << r << "];\n";
  }
  char buf[160];
  for (int s = 2; s <= n; s *= 2) {
    for (int k = 0; k < n; k += s)
      for (int j = 0; j < s / 2; ++j) {
        const int u = k + j, w = k + j + s / 2;
        os << "  { float2 t = a[" << w << "];";
        if (j == 0) {
        } else if (4 * j == s) {  // exp(sign * i pi / 2) = sign * i
          os << (sign > 0 ? " t = make_float2(-t.y, t.x);" : " t = make_float2(t.y, -t.x);");
        } else {
          const double ang = sign * 2.0 * M_PI * j / s;
          snprintf(buf, sizeof buf,
                   " t = make_float2(t.x * %.9ef - t.y * %.9ef, t.x * %.9ef + t.y * %.9ef);",
                   std::cos(ang), std::sin(ang), std::sin(ang), std::cos(ang));
          os << buf;
        }
        os << " a[" << w << "] = make_float2(a[" << u << "].x - t.x, a[" << u << "].y - t.y);"
           << " a[" << u << "] = make_float2(a[" << u << "].x + t.x, a[" << u << "].y + t.y); }\n";
      }
  }
  for (int i = 0; i < n; ++i) os << "  v[" << i << "] = a[" << i << "];\n";
  os << "}\n";
}

void EmitTwiddles(std::ostream& os, const char* name, int n) {
  os << "__constant__ double " << name << "[" << 2 * n << "] = {";
  char buf[64];
  for (int j = 0; j < n; ++j) {
    snprintf(buf, sizeof buf, "%.17g, %.17g, ", std::cos(2.0 * M_PI * j / n),
             std::sin(2.0 * M_PI * j / n));
    os << buf;
  }
  os << "};\n";
}

}  // namespace

Status FftPreamble(const Problem& p, const Config& c, std::ostream& os) {
  const FftShape s = FftShapeOf(p, c);
  if (!s.fits) return NotApplicable(p, c);
  for (int i = 0; i < 3; ++i) DefInt(os, DimName("kDil", i), p.dilation[i]);
  DefInt(os, "kTH", s.t[0]);
  DefInt(os, "kTW", s.t[1]);
  DefInt(os, "kEH", s.e[0]);
  DefInt(os, "kEW", s.e[1]);
  DefInt(os, "kQH", s.l[0]);
  DefInt(os, "kQW", s.l[1]);
  DefInt(os, "kFW", s.fw);
  DefInt(os, "kF", s.freqs);
  DefLong(os, "kTilesH", s.tiles[0]);
  DefLong(os, "kTilesW", s.tiles[1]);
  DefLong(os, "kTP", s.tp);
  DefInt(os, "kTBH", s.tb[0]);
  DefInt(os, "kTBW", s.tb[1]);
  DefLong(os, "kTBlocksW", CeilDiv(s.tiles[1], s.tb[1]));
  DefLong(os, "kTBlocks", s.tblocks);
  const bool narrow = std::max({s.g_elems, s.x_elems, s.y_elems}) < (int64_t{1} << 31);
  os << "typedef " << (narrow ? "int" : "long long") << " woff_t;\n";
  DefInt(os, "kRH", s.rh);
  DefInt(os, "kRWS", s.rws);
  DefInt(os, "kTSSF", s.tss_fwd);
  DefInt(os, "kTSSI", s.tss_inv);
  DefInt(os, "kOWS", s.ows);
  DefLong(os, "kNC", s.nc);
  DefInt(os, "kDC", s.dc);
  DefInt(os, "kXD", s.xd);
  DefInt(os, "kDChunks", s.dchunks);
  DefLong(os, "kM", s.m);
  DefLong(os, "kMX", s.mx);
  DefInt(os, "kK", s.k);
  DefLong(os, "kMTiles", s.mtiles);
  DefLong(os, "kNTiles", s.ntiles);
  DefLong(os, "kGElems", s.g_elems);
  DefLong(os, "kPrepElems", s.prep_elems);
  DefLong(os, "kXElems", s.x_elems);
  os << "#define FFT_SPLIT " << (c.mma ? c.split : 0) << "\n";
  os << "#define FFT_3M " << (c.mma ? 0 : c.gauss) << "\n";
  DefInt(os, "kWM", c.wm);
  DefInt(os, "kWN", c.wn);
  DefInt(os, "kBK", s.bk);
  os << "#define FFT_GEMM_DYNAMIC " << (!c.mma && s.gemm_smem > 0 ? 1 : 0) << "\n";
  DefInt(os, "kBM", c.bm);
  DefInt(os, "kBN", c.bn);
  DefInt(os, "kTM", c.tm);
  DefInt(os, "kTN", c.tn);
  EmitFft(os, "FftFwdH", s.t[0], -1);
  EmitFft(os, "FftInvH", s.t[0], +1);
  EmitFft(os, "FftFwdW", s.t[1], -1);
  EmitFft(os, "FftInvW", s.t[1], +1);
  EmitTwiddles(os, "kTwH", s.t[0]);
  EmitTwiddles(os, "kTwW", s.t[1]);
  return Status();
}

namespace {

bool HasMma(const Config& c) { return c.mma != 0; }
bool NoMma(const Config& c) { return c.mma == 0; }
constexpr const char* kGaussLabels[] = {"", "_3m"};

class Fft final : public Family {
 public:
  std::string_view name() const override { return "fft"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        // 1: tensor-core (mma.sync) GEMMs; first, as the fields below depend on it
        {"mma", &Config::mma, nullptr, nullptr, 0, 0, 1, true},
        {"ft_h", &Config::ft_h, "_t"},  // transform points along H and W
        {"ft_w", &Config::ft_w, "x"},
        {"bm", &Config::bm, "_m"},  // GEMM block rows and channels
        {"bn", &Config::bn, "n"},
        {"wm", &Config::wm, "_w", nullptr, Field::kRequired, 1, INT_MAX, false, HasMma, HasMma},
        {"wn", &Config::wn, "x", nullptr, Field::kRequired, 1, INT_MAX, false, HasMma, HasMma},
        {"tm", &Config::tm, "_r", nullptr, Field::kRequired, 1, INT_MAX, false, NoMma},
        {"tn", &Config::tn, "x", nullptr, Field::kRequired, 1, INT_MAX, false, NoMma},
        // 1: Gauss's three real products per complex one (FFMA GEMMs)
        {"gauss", &Config::gauss, nullptr, kGaussLabels, 0, 0, 1, true},
        {"fc", &Config::fc, "_c", nullptr, 0, 0, INT_MAX, true},  // samples per chunk (0: all)
        {"fd", &Config::fd, "_d", nullptr, 0, 0, INT_MAX, true},  // planes per chunk (0: all)
        {"split", &Config::split, nullptr, nullptr, Field::kRequired, 1, 3, false, nullptr, HasMma},
    };
    return f;
  }
  std::string Token(const Config& c) const override {
    return c.mma ? OperandToken(c) : DTypeName(c.dtype);
  }
  Status CheckFields(const Config& c) const override {
    if (c.mma && c.split == 2) return InvalidArgument(StrCat("bad fft mma/split in ", c.ToJson()));
    if (c.gauss && c.mma) return InvalidArgument(StrCat("bad gauss in ", c.ToJson()));
    for (int t : {c.ft_h, c.ft_w})
      if (t != 8 && t != 16 && t != 32)
        return InvalidArgument(StrCat("bad fft size in ", c.ToJson()));
    if (!c.mma && (c.tm % 2 || c.tn % 2))
      return InvalidArgument(StrCat("bad fft thread tile in ", c.ToJson()));
    return Status();
  }

  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext&) const override {
    return FftCandidates(p, limits);
  }
  // First in strict fp32 and fp32x3, and on H x W kernels of 5x5 or more in every mode (its
  // cost per output hardly grows with the kernel); else after the first tensor-core tiles.
  Placement Place(const Problem& p, const RankContext& ctx) const override {
    const bool first =
        p.kernel[1] * p.kernel[2] >= 25 || !ctx.tensor_tiles || p.precision == Precision::kFp32x3;
    return {first ? Placement::kFront : Placement::kAfterFirstFour};
  }
  int SubLatticeQuota(const Config&, std::string*) const override { return 8; }

  KernelSet Kernels(const Problem&, const Config&) const override { return {true, true, true}; }
  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    return FftPreamble(p, c, os);
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh", "operands.cuh", "fft_tiling.cu"};
  }

  // The weight spectra once (prep), then per chunk of samples: input spectra (prepx), the
  // complex GEMMs (main) and the inverse transform into y (post), reusing the workspace.
  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    const FftShape s = FftShapeOf(p, c);
    const std::string name = named.Name();
    LaunchPlan plan;
    plan.workspace_bytes = static_cast<size_t>(s.g_elems + s.x_elems + s.y_elems) * 8;
    plan.steps.push_back(WeightPrep(name + "_prep", s.prep_elems, 4096));
    const LaunchStep per_chunk[] = {
        Step(name + "_prepx", s.fwd_blocks, 256, s.fwd_smem,
             {Arg::kX, Arg::kWorkspace, Arg::kChunk}),
        Step(name, s.gemm_blocks, 256, s.gemm_smem, {Arg::kWorkspace, Arg::kChunk}),
        Step(name + "_post", s.inv_blocks, 256, s.inv_smem,
             {Arg::kWorkspace, Arg::kBias, Arg::kY, Arg::kChunk}),
    };
    for (int chunk = 0; chunk < static_cast<int>(s.chunks); ++chunk)
      for (LaunchStep step : per_chunk) {
        step.chunk = chunk;
        plan.steps.push_back(step);
      }
    return plan;
  }
};

}  // namespace

const Family& FftFamily() { return FamilyInstance<Fft>(); }

}  // namespace convt3d::gen
