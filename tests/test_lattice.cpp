// test_lattice.cpp: the lattice and subpixel (phase-channel) forms of strided problems
// (generator/lattice.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/family.h"
#include "generator/lattice.h"
#include "generator/source.h"
#include "src/reference.h"
#include "tests/generator_test_util.h"

namespace convt3d::gen {
namespace {

// L1-77 (kernel 3, stride = dilation = 2, padding 1): the odd outputs, a stride-1 problem.
TEST(Lattice, L1_77IsASubLattice) {
  const Lattice l = LatticeOf(L1_77());
  ASSERT_EQ(l.kind, Lattice::kSubLattice);
  EXPECT_EQ(l.sub.OutSize(), (Dim3{16, 32, 32}));
  EXPECT_EQ(l.offset[0], 1);
}

// The lattice sub-problem against brute force: on random stride == dilation problems, every
// (input, tap) pair that reaches output o of the real problem reaches exactly output (o - r) / s
// of the stride-1 sub-problem (o on the lattice), and the outputs off the lattice get none; the
// sub-problem's output is the lattice's whole extent.
TEST(Lattice, SubProblemHasExactlyTheRealProblemsProducts) {
  std::mt19937 rng(17);
  int checked = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    Problem p;
    for (int i = 0; i < 3; ++i) {
      p.in[i] = 1 + rng() % 7, p.kernel[i] = 1 + rng() % 5;
      p.stride[i] = p.dilation[i] = 1 + rng() % 3;
      p.padding[i] = rng() % (p.dilation[i] * (p.kernel[i] - 1) + 2);
      p.output_padding[i] = rng() % p.stride[i];
    }
    if (!Validate(p).ok()) continue;
    const Lattice l = LatticeOf(p);
    const bool strided = p.stride[0] * p.stride[1] * p.stride[2] > 1;
    if (l.kind == Lattice::kNone) {
      // Only output_padding past the last lattice row, an empty lattice (no output gets any
      // product) or no stride at all rule it out.
      bool empty = false;
      for (int i = 0; i < 3; ++i) {
        const int64_t r = ((-p.padding[i]) % p.stride[i] + p.stride[i]) % p.stride[i];
        empty = empty || p.OutSize()[i] <= r;
      }
      EXPECT_TRUE(!strided || empty ||
                  p.output_padding[0] + p.output_padding[1] + p.output_padding[2] > 0)
          << p.Signature();
      continue;
    }
    ASSERT_TRUE(strided);
    ASSERT_TRUE(Validate(l.sub).ok());
    const Dim3 out = p.OutSize(), sub_out = l.sub.OutSize();
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(l.sub.stride[i], 1);
      ASSERT_EQ(l.sub.dilation[i], 1);
      const int64_t s = l.step[i], r = l.offset[i];
      ASSERT_EQ(sub_out[i], out[i] > r ? (out[i] - r + s - 1) / s : 0) << p.Signature();
      for (int64_t o = 0; o < out[i]; ++o) {
        const auto real = Pairs(p.in[i], p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], o);
        if ((o - r) % s != 0 || o < r) {
          ASSERT_TRUE(real.empty()) << p.Signature() << " o=" << o;
          continue;
        }
        ASSERT_EQ(real, Pairs(l.sub.in[i], l.sub.kernel[i], 1, l.sub.padding[i], 1, (o - r) / s))
            << p.Signature() << " o=" << o;
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 500);
}

// Lattice candidates: offered first on lattice problems only, named and JSON-round-tripped as
// such, with the sub-problem's launch plus a fill over every output row.
TEST(Lattice, CandidatesAndGeometry) {
  Problem p = L1_77();
  for (Precision m : {Precision::kFp32, Precision::kTf32}) {
    p.precision = m;
    const auto all = Candidates(p);
    ASSERT_FALSE(all.empty());
    EXPECT_TRUE(all.front().lattice);
    int n = 0;
    for (const Config& c : all) {
      if (!c.lattice) continue;
      ++n;
      EXPECT_TRUE(LatticeFamily(c, 1)) << c.Name();
      EXPECT_EQ(c.Name().rfind("lattice_", 0), 0u) << c.Name();
      auto back = Config::FromJson(c.ToJson());
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_EQ(back->Name(), c.Name());
      const PlanView g = Geometry(p, c);
      EXPECT_GE(g.fill_grid[0], 1u);
      auto src = BuildSource(p, c);
      ASSERT_TRUE(src.ok()) << src.status().message();
      EXPECT_NE(src->find("#define FILL_KERNEL_NAME " + FillSymbol(c)), std::string::npos);
    }
    EXPECT_GE(n, 2);
    EXPECT_TRUE(HeuristicPick(p).lattice);
  }
  // L1-73 (stride 2, dilation 1): no sub-lattice; subpixel_ tiles (FFMA in strict fp32), which
  // round-trip through JSON as such and need no fill.
  for (Precision m : {Precision::kFp32, Precision::kTf32, Precision::kFp32x3}) {
    p = L1_73();
    p.precision = m;
    int subpixel = 0;
    for (const Config& c : Candidates(p)) {
      EXPECT_NE(c.lattice, 1) << c.Name();
      if (c.lattice != 2) continue;
      ++subpixel;
      EXPECT_TRUE(c.Name().rfind("subpixel_igemm_wgmma_", 0) == 0 ||
                  c.Name().rfind("subpixel_gemm_wgmma_", 0) == 0 ||
                  (m == Precision::kFp32 && c.Name().rfind("subpixel_gemm_simt_", 0) == 0))
          << c.Name();
      auto back = Config::FromJson(c.ToJson());
      ASSERT_TRUE(back.ok()) << back.status().message();
      EXPECT_EQ(back->Name(), c.Name());
      EXPECT_EQ(Geometry(p, c).fill_grid[0], 0u) << c.Name();
      EXPECT_TRUE(FillSymbol(c).empty());
    }
    EXPECT_GT(subpixel, 0);
  }
  // A lattice kernel indexes the real output, which may need 64-bit offsets where the
  // sub-problem's own tensors would not (L1-77 at N = 256: 2.3e9 outputs, 2.9e8 on the lattice).
  p = L1_77();
  p.n = 256;
  p.precision = Precision::kTf32;
  ASSERT_GE(p.OutputElements(), int64_t{1} << 31);
  ASSERT_LT(LatticeOf(p).sub.OutputElements(), int64_t{1} << 31);
  const Config pick = HeuristicPick(p);
  ASSERT_EQ(pick.lattice, 1);
  auto big = BuildSource(p, pick);
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_NE(big->find("typedef long long idx_t;"), std::string::npos);
  EXPECT_FALSE(
      Config::FromJson(
          R"({"dtype":"f32","family":"igemm_mma","bqd":1,"bqh":4,"bqw":16,"wm":2,"wn":2,"mt":1,"nt8":2,"ck":8,"split":1,"lattice":1})")
          .ok());
}

// The phase-channel form against the CPU reference, on random strided problems (stride and
// dilation independent, groups, bias, cropping padding, output_padding): the sub-problem's
// scatter-form output, with each sub weight taken from the real tap RealTap names (zero where
// none) and each sub output placed at (s*q + r) of channel co*S + phase, equals the real
// problem's gather-form output everywhere. The generated WeightIndex/OutputIndex follow the same
// definitions; the GPU suite (RandomSubpixel) checks them.
TEST(Lattice, PhaseChannelFormMatchesTheReference) {
  std::mt19937 rng(29);
  int checked = 0;
  for (int trial = 0; trial < 400 && checked < 120; ++trial) {
    Problem p = RandomChannels(rng);
    for (int i = 0; i < 3; ++i) {
      p.in[i] = 1 + rng() % 5, p.kernel[i] = 1 + rng() % 4;
      p.stride[i] = 1 + rng() % 3, p.dilation[i] = 1 + rng() % 3;
      p.padding[i] = rng() % (p.dilation[i] * (p.kernel[i] - 1) + 2);
      p.output_padding[i] = rng() % std::max(p.stride[i], p.dilation[i]);
    }
    if (!Validate(p).ok()) continue;
    const Lattice l = PhaseChannelsOf(p);
    if (l.kind == Lattice::kNone) {
      EXPECT_TRUE(p.stride[0] * p.stride[1] * p.stride[2] == 1 ||
                  LatticeOf(p).kind == Lattice::kSubLattice)
          << p.Signature();
      continue;
    }
    const Problem& q = l.sub;
    ASSERT_EQ(q.c_out, p.c_out * l.phases);
    std::vector<double> x(p.InputElements()), w(p.WeightElements()), b(p.c_out);
    ref::FillRandom(x, 1 + trial), ref::FillRandom(w, 1000 + trial), ref::FillRandom(b, 7);
    const int64_t cout_g = p.c_out / p.groups;
    std::vector<double> ws(q.WeightElements(), 0.0);
    for (int64_t ci = 0; ci < p.c_in; ++ci)
      for (int64_t cog = 0; cog < cout_g; ++cog)
        for (int64_t ph = 0; ph < l.phases; ++ph) {
          const int64_t r[3] = {ph / (p.stride[1] * p.stride[2]), ph / p.stride[2] % p.stride[1],
                                ph % p.stride[2]};
          for (int64_t a = 0; a < q.kernel[0]; ++a)
            for (int64_t bb = 0; bb < q.kernel[1]; ++bb)
              for (int64_t c = 0; c < q.kernel[2]; ++c) {
                const int64_t td = l.RealTap(p, 0, r[0], a), th = l.RealTap(p, 1, r[1], bb),
                              tw = l.RealTap(p, 2, r[2], c);
                if (td < 0 || th < 0 || tw < 0) continue;
                ws[(((ci * cout_g + cog) * l.phases + ph) * q.kernel[0] + a) * q.kernel[1] *
                       q.kernel[2] +
                   bb * q.kernel[2] + c] =
                    w[((ci * cout_g + cog) * p.kernel[0] + td) * p.kernel[1] * p.kernel[2] +
                      th * p.kernel[2] + tw];
              }
        }
    std::vector<double> bs(q.c_out);
    for (int64_t co = 0; co < q.c_out; ++co) bs[co] = b[co / l.phases];
    const auto want = ref::ForwardGather(p, x.data(), w.data(), p.bias ? b.data() : nullptr);
    const auto got = ref::ForwardScatter(q, x.data(), ws.data(), p.bias ? bs.data() : nullptr);
    const Dim3 out = p.OutSize(), qo = q.OutSize();
    std::vector<double> placed(want.size(), NAN);
    for (int64_t n = 0; n < p.n; ++n)
      for (int64_t co = 0; co < q.c_out; ++co)
        for (int64_t a = 0; a < qo[0]; ++a)
          for (int64_t bb = 0; bb < qo[1]; ++bb)
            for (int64_t c = 0; c < qo[2]; ++c) {
              const int64_t ph = co % l.phases;
              const int64_t yd = p.stride[0] * a + ph / (p.stride[1] * p.stride[2]);
              const int64_t yh = p.stride[1] * bb + ph / p.stride[2] % p.stride[1];
              const int64_t yw = p.stride[2] * c + ph % p.stride[2];
              if (yd >= out[0] || yh >= out[1] || yw >= out[2]) continue;
              placed[(((n * p.c_out + co / l.phases) * out[0] + yd) * out[1] + yh) * out[2] + yw] =
                  got[(((n * q.c_out + co) * qo[0] + a) * qo[1] + bb) * qo[2] + c];
            }
    for (size_t e = 0; e < want.size(); ++e)
      ASSERT_NEAR(placed[e], want[e], 1e-9) << p.Signature() << " element " << e;
    ++checked;
  }
  EXPECT_GE(checked, 100);
}

}  // namespace
}  // namespace convt3d::gen
