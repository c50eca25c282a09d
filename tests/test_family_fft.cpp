// test_family_fft.cpp: the fft family (generator/families/fft.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <random>
#include <vector>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/families/fft.h"
#include "generator/family.h"
#include "generator/source.h"
#include "src/reference.h"
#include "tests/generator_test_util.h"

namespace convt3d::gen {
namespace {

Problem L1_58() {  // kernelbench_l1.json's L1-58: 16 x 32 x 16x32x64, 16 out, kernel 3x5x7
  return test::MakeProblem(16, 32, 16, {16, 32, 64}, {3, 5, 7});
}

TEST(Fft, WhereTheFamilyApplies) {
  for (const Problem& base : {L1_58(), L1_68()}) {
    // Every f32 mode: the fft candidates come first (they won all three on both, session 11),
    // FFMA GEMMs in strict fp32, TF32 ones in tf32, both kinds in fp32x3 (3xTF32 first).
    for (Precision m : {Precision::kFp32, Precision::kTf32, Precision::kFp32x3}) {
      Problem p = base;
      p.precision = m;
      const auto all = Candidates(p);
      ASSERT_FALSE(all.empty());
      EXPECT_EQ(all.front().family, "fft") << p.Signature();
      EXPECT_EQ(all.front().mma, m != Precision::kFp32 ? 1 : 0) << p.Signature();
      EXPECT_EQ(HeuristicPick(p).Name(), all.front().Name());
      int ffma = 0, tf32 = 0, x3 = 0;
      for (const Config& c : all)
        if (c.family == "fft") ++(!c.mma ? ffma : c.split == 3 ? x3 : tf32);
      EXPECT_EQ(ffma > 0, m != Precision::kTf32) << p.Signature();
      EXPECT_EQ(tf32 > 0, m == Precision::kTf32) << p.Signature();
      EXPECT_EQ(x3 > 0, m == Precision::kFp32x3) << p.Signature();
    }
    Problem h = base;  // 16-bit tensors: not an fft family type
    h.dtype = DType::kBF16;
    for (const Config& c : Candidates(h)) EXPECT_NE(c.family, "fft") << c.Name();
  }
  // Strided problems, and kernels under 9 H x W taps, get none.
  for (const Config& c : Candidates(L1_72())) EXPECT_NE(c.family, "fft") << c.Name();
  Problem small = L1_68();
  small.kernel = {3, 1, 5};
  for (const Config& c : Candidates(small)) EXPECT_NE(c.family, "fft") << c.Name();
  // 3x3 H x W kernels: first in strict fp32, after the tensor-core tiles in tf32.
  EXPECT_EQ(Candidates(L1_61()).front().family, "fft");
  Problem l61 = L1_61();
  l61.precision = Precision::kTf32;
  const auto t61 = Candidates(l61);
  EXPECT_EQ(t61.front().family, "igemm_wgmma");
  EXPECT_TRUE(
      std::any_of(t61.begin(), t61.end(), [](const Config& c) { return c.family == "fft"; }));
}

TEST(Fft, ShapeCoversTheOutputAndRoundTrips) {
  std::mt19937 rng(77);
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Problem p;
    p.groups = 1 + rng() % 3;
    p.c_in = p.groups * (1 + rng() % 9), p.c_out = p.groups * (1 + rng() % 20);
    p.n = 1 + rng() % 40;
    for (int i = 0; i < 3; ++i) {
      p.kernel[i] = 1 + rng() % 8, p.dilation[i] = 1 + rng() % 2;
      p.padding[i] = rng() % (p.dilation[i] * (p.kernel[i] - 1) + 1);
      p.in[i] = 1 + rng() % 150;
    }
    if (!Validate(p).ok()) continue;
    const Dim3 out = p.OutSize();
    for (Config c : Candidates(p)) {
      if (c.family != "fft") continue;
      const FftShape s = FftShapeOf(p, c);
      ASSERT_TRUE(s.fits) << c.Name();
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(s.l[i], s.t[i] - s.e[i] + 1);
        EXPECT_GE(s.tiles[i] * s.l[i], out[i + 1]);        // every output in some tile ...
        EXPECT_LT((s.tiles[i] - 1) * s.l[i], out[i + 1]);  // ... and no tile wholly past it
      }
      ASSERT_EQ(s.chunks % s.dchunks, 0);  // chunks: sample groups x ranges of output planes
      EXPECT_EQ(s.chunks / s.dchunks, (p.n + s.nc - 1) / s.nc);
      EXPECT_GE(s.dchunks * s.dc, out[0]);
      EXPECT_LT((s.dchunks - 1) * s.dc, out[0]);
      EXPECT_EQ(s.g_elems % 64, 0);  // Y starts 16-byte aligned
      EXPECT_EQ(s.x_elems % 64, 0);
      const PlanView g = Geometry(p, c);
      EXPECT_EQ(g.chunks, s.chunks);
      EXPECT_EQ(g.workspace_bytes, static_cast<size_t>(s.g_elems + s.x_elems + s.y_elems) * 8);
      if (!c.mma) {
        // FFMA: Gauss's form on 4 x 4 thread tiles only, its weight spectra three floats per
        // complex weight; stages of 16 K but for the 64-sum tiles; shared memory static up to
        // 48 KB (gemm_smem 0), dynamic beyond.
        const int sums = c.gauss ? 3 : 2;
        EXPECT_TRUE(!c.gauss || (c.tm == 4 && c.tn == 4)) << c.Name();
        EXPECT_GE(2 * s.g_elems, sums * s.prep_elems) << c.Name();
        EXPECT_EQ(s.bk, c.tm * c.tn * sums < 64 ? 16 : 8) << c.Name();
        EXPECT_TRUE(s.gemm_smem == 0 || s.gemm_smem > 48 * 1024) << c.Name();
        Config mixed = c;
        mixed.gauss = 1, mixed.mma = 1, mixed.split = 1, mixed.wm = 4, mixed.wn = 2;
        EXPECT_FALSE(Config::FromJson(mixed.ToJson()).ok()) << "Gauss's form is FFMA-only";
      }
      c.fc = 2, c.fd = 1;
      auto back = Config::FromJson(c.ToJson());
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_EQ(back.value().Name(), c.Name());
      EXPECT_EQ(back.value().fc, 2);
      EXPECT_EQ(back.value().fd, 1);
      const FftShape planes = FftShapeOf(p, c);  // one output plane of one sample per chunk
      if (out[0] > 1) {
        EXPECT_EQ(planes.chunks, p.n * out[0]) << c.Name();
        EXPECT_EQ(planes.xd, 1 + (p.kernel[0] - 1) * p.dilation[0]) << c.Name();
      }
      EXPECT_TRUE(BuildSource(p, c).ok()) << c.Name();
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
  // Large planes: the transform blocks shrink until they fit (32-point tiles of a 128 x 128
  // plane with a 7x7 kernel needed 179 KB at ~48 tiles per block).
  Problem big;
  big.c_in = 4, big.c_out = 4, big.in = {2, 122, 122}, big.kernel = {1, 7, 7};
  const auto cands = FftCandidates(big, DeviceLimits{});
  ASSERT_FALSE(cands.empty());
  bool t32 = false;
  for (const Config& c : cands) {
    const FftShape s = FftShapeOf(big, c);
    EXPECT_LE(std::max(s.fwd_smem, s.inv_smem), 100 * 1024) << c.Name();
    t32 = t32 || c.ft_w == 32;
  }
  EXPECT_TRUE(t32);
  // Hand-written tiles the kernels cannot run do not fit: a block of 16 rows stages no A, and a
  // block N that is not a multiple of the thread N leaves channels uncomputed.
  Config bad = cands.front();
  bad.mma = 0, bad.bm = 16, bad.tm = 1, bad.bn = 64, bad.tn = 4;
  EXPECT_FALSE(FftShapeOf(big, bad).fits);
  bad.bm = 128, bad.tm = 8, bad.bn = 33, bad.tn = 2;
  EXPECT_FALSE(FftShapeOf(big, bad).fits);
  // One sample's spectra over the 1 GiB chunk bound: chunks of a range of output planes.
  Problem deep = big;
  deep.c_in = deep.c_out = 64, deep.in = {64, 192, 192}, deep.kernel = {3, 5, 5};
  const auto dcands = FftCandidates(deep, DeviceLimits{});
  ASSERT_FALSE(dcands.empty());
  for (const Config& c : dcands) {
    const FftShape s = FftShapeOf(deep, c);
    EXPECT_LT(s.dc, deep.OutSize()[0]) << c.Name();
    EXPECT_LE(8 * (s.x_elems + s.y_elems), (int64_t{1} << 30) + 1024) << c.Name();
    EXPECT_EQ(s.chunks, deep.n * s.dchunks) << c.Name();
  }
  // A wide layer's weight spectra alone pass the workspace bound: no candidate.
  Problem wide = big;
  wide.c_in = wide.c_out = 1024, wide.in = {2, 20, 20}, wide.kernel = {3, 5, 5};
  EXPECT_TRUE(FftCandidates(wide, DeviceLimits{}).empty());
}

// The family's arithmetic, emulated in f64 with plain DFTs on the candidate's own tiling
// (tile starts, kept points, D taps, cropping padding, groups): equal to the gather reference.
TEST(Fft, TilingMatchesTheReference) {
  using cd = std::complex<double>;
  std::mt19937 rng(5);
  int checked = 0;
  for (int trial = 0; checked < 12 && trial < 200; ++trial) {
    Problem p = RandomChannels(rng);
    for (int i = 0; i < 3; ++i) {
      p.kernel[i] = i == 0 ? 1 + rng() % 3 : 3 + rng() % 5;
      p.dilation[i] = 1 + rng() % 2;
      p.padding[i] = rng() % (p.dilation[i] * (p.kernel[i] - 1) + 2);
      p.in[i] = i == 0 ? 1 + rng() % 3 : 2 + rng() % 20;
    }
    if (!Validate(p).ok()) continue;
    const auto cands = FftCandidates(p, DeviceLimits{});
    if (cands.empty()) continue;
    const FftShape s = FftShapeOf(p, cands.back());  // the largest transforms of the list
    std::vector<double> x(p.InputElements()), w(p.WeightElements()), b(p.c_out);
    ref::FillRandom(x, 10 + trial), ref::FillRandom(w, 20 + trial), ref::FillRandom(b, 30);
    const auto want = ref::ForwardGather(p, x.data(), w.data(), p.bias ? b.data() : nullptr);
    const Dim3 out = p.OutSize();
    const int64_t cig = p.c_in / p.groups, cog = p.c_out / p.groups;
    const int th = s.t[0], tw = s.t[1];
    auto dft2 = [&](const std::vector<cd>& a, int sign) {  // th x tw, row-major
      std::vector<cd> r(a.size());
      for (int u = 0; u < th; ++u)
        for (int v = 0; v < tw; ++v) {
          cd acc = 0;
          for (int i = 0; i < th; ++i)
            for (int j = 0; j < tw; ++j)
              acc += a[i * tw + j] *
                     std::polar(1.0, sign * 2 * M_PI * (double(u * i) / th + double(v * j) / tw));
          r[u * tw + v] = acc;
        }
      return r;
    };
    std::vector<double> got(want.size(), NAN);
    for (int64_t n = 0; n < p.n; ++n)
      for (int64_t co = 0; co < p.c_out; ++co)
        for (int64_t od = 0; od < out[0]; ++od)
          for (int64_t tr = 0; tr < s.tiles[0]; ++tr)
            for (int64_t tc = 0; tc < s.tiles[1]; ++tc) {
              const int64_t g = co / cog;
              std::vector<cd> acc(th * tw, 0.0);
              for (int64_t kd = 0; kd < p.kernel[0]; ++kd) {
                const int64_t id = od + p.padding[0] - kd * p.dilation[0];
                if (id < 0 || id >= p.in[0]) continue;
                for (int64_t cl = 0; cl < cig; ++cl) {
                  const int64_t ci = g * cig + cl;
                  std::vector<cd> win(th * tw, 0.0), ker(th * tw, 0.0);
                  for (int i = 0; i < th; ++i)
                    for (int j = 0; j < tw; ++j) {
                      const int64_t ih = tr * s.l[0] + p.padding[1] - (s.e[0] - 1) + i;
                      const int64_t iw = tc * s.l[1] + p.padding[2] - (s.e[1] - 1) + j;
                      if (ih >= 0 && ih < p.in[1] && iw >= 0 && iw < p.in[2])
                        win[i * tw + j] =
                            x[(((n * p.c_in + ci) * p.in[0] + id) * p.in[1] + ih) * p.in[2] + iw];
                    }
                  for (int64_t kh = 0; kh < p.kernel[1]; ++kh)
                    for (int64_t kw = 0; kw < p.kernel[2]; ++kw)
                      ker[kh * p.dilation[1] * tw + kw * p.dilation[2]] =
                          w[(((ci * cog + co % cog) * p.kernel[0] + kd) * p.kernel[1] + kh) *
                                p.kernel[2] +
                            kw];
                  const auto X = dft2(win, -1), G = dft2(ker, -1);
                  for (int f = 0; f < th * tw; ++f) acc[f] += X[f] * G[f];
                }
              }
              const auto c = dft2(acc, +1);
              for (int i = s.e[0] - 1; i < th; ++i)
                for (int j = s.e[1] - 1; j < tw; ++j) {
                  const int64_t oh = tr * s.l[0] + i - (s.e[0] - 1);
                  const int64_t ow = tc * s.l[1] + j - (s.e[1] - 1);
                  if (oh >= out[1] || ow >= out[2]) continue;
                  got[(((n * p.c_out + co) * out[0] + od) * out[1] + oh) * out[2] + ow] =
                      c[i * tw + j].real() / (th * tw) + (p.bias ? b[co] : 0.0);
                }
            }
    const ref::ErrorStats e = ref::Compare(got.data(), want);
    EXPECT_LT(e.rel_l2, 1e-12) << p.Signature() << " " << cands.back().Name();
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}

}  // namespace
}  // namespace convt3d::gen
