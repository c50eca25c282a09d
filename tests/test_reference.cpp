// test_reference.cpp: the CPU references against hand-worked cases, and gather against scatter.
//
// Every expected value below was worked out by hand from y[o] += x[i] * w[k] at
// o = i*stride - padding + k*dilation, never by running the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "src/reference.h"
#include "tests/test_util.h"

namespace convt3d::ref {
namespace {

// A problem that only varies along one spatial axis (the others are 1 with kernel 1).
Problem Line(int axis, int64_t in, int64_t k, int64_t s, int64_t p, int64_t op, int64_t d) {
  Problem pr;
  pr.in[axis] = in;
  pr.kernel[axis] = k;
  pr.stride[axis] = s;
  pr.padding[axis] = p;
  pr.output_padding[axis] = op;
  pr.dilation[axis] = d;
  return pr;
}

// Checks both formulations against the hand-worked answer.
void ExpectBoth(const Problem& p, const std::vector<double>& x, const std::vector<double>& w,
                const std::vector<double>& bias, const std::vector<double>& expected) {
  ASSERT_EQ(static_cast<int64_t>(x.size()), p.InputElements());
  ASSERT_EQ(static_cast<int64_t>(w.size()), p.WeightElements());
  ASSERT_EQ(p.OutputElements(), static_cast<int64_t>(expected.size()));
  const double* b = bias.empty() ? nullptr : bias.data();
  const std::vector<double> g = ForwardGather(p, x.data(), w.data(), b);
  const std::vector<double> s = ForwardScatter(p, x.data(), w.data(), b);
  ASSERT_EQ(g.size(), expected.size());
  ASSERT_EQ(s.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_DOUBLE_EQ(g[i], expected[i]) << "gather, element " << i;
    EXPECT_DOUBLE_EQ(s[i], expected[i]) << "scatter, element " << i;
  }
}

TEST(ReferenceHand, StrideLargerThanKernelInterleaves) {
  // W: (3-1)*2 + (2-1) + 1 = 6; x[i] lands at 2i (w=10) and 2i+1 (w=1).
  const Problem p = Line(2, 3, 2, 2, 0, 0, 1);
  ExpectBoth(p, {1, 2, 3}, {10, 1}, {}, {10, 1, 20, 2, 30, 3});
}

TEST(ReferenceHand, PaddingCropsBothEnds) {
  // Same as above with padding 1: the full row [10,1,20,2,30,3] loses one element at each end.
  ExpectBoth(Line(2, 3, 2, 2, 1, 0, 1), {1, 2, 3}, {10, 1}, {}, {1, 20, 2, 30});
  // Stride 1, kernel 3, padding 1 ("same" size): o = i - 1 + k.
  //   o=0: x0*w1 + x1*w0 = 2 + 2 = 4
  //   o=1: x0*w2 + x1*w1 + x2*w0 = 3 + 4 + 3 = 10
  //   o=2: x1*w2 + x2*w1 = 6 + 6 = 12
  ExpectBoth(Line(2, 3, 3, 1, 1, 0, 1), {1, 2, 3}, {1, 2, 3}, {}, {4, 10, 12});
}

TEST(ReferenceHand, DilationSpreadsTaps) {
  // Along H: in 2, kernel 2, dilation 3 -> out (2-1) + 3*(2-1) + 1 = 5; o = i + 3k.
  //   (i0,k0)->0: 10, (i1,k0)->1: 20, (i0,k1)->3: 1, (i1,k1)->4: 2, nothing at 2.
  ExpectBoth(Line(1, 2, 2, 1, 0, 0, 3), {1, 2}, {10, 1}, {}, {10, 20, 0, 1, 2});
}

TEST(ReferenceHand, OutputPaddingAddsATrailingRow) {
  // Along D: in 2, kernel 1, stride 2, output_padding 1 -> out (2-1)*2 + 0 + 1 + 1 = 4.
  // x0*5 at 0, x1*5 at 2, positions 1 and 3 get nothing.
  ExpectBoth(Line(0, 2, 1, 2, 0, 1, 1), {1, 2}, {5}, {}, {5, 0, 10, 0});
}

TEST(ReferenceHand, WeightLayoutIsKdKhKw) {
  // One input value, kernel 2x2x2 with stride 2: the output is x times the kernel, laid out
  // in the same (kD, kH, kW) order.
  Problem p;
  p.kernel = {2, 2, 2};
  p.stride = {2, 2, 2};
  std::vector<double> w = {0, 1, 2, 3, 4, 5, 6, 7};
  ExpectBoth(p, {2}, w, {}, {0, 2, 4, 6, 8, 10, 12, 14});
}

TEST(ReferenceHand, InputChannelsAreSummed) {
  // C_in 2 -> C_out 1, all sizes 1: y = x0*w[0][0] + x1*w[1][0] = 1*3 + 2*5 = 13, + bias 0.25.
  Problem p;
  p.c_in = 2;
  p.bias = true;
  ExpectBoth(p, {1, 2}, {3, 5}, {0.25}, {13.25});
}

TEST(ReferenceHand, BatchesAreIndependent) {
  Problem p;
  p.n = 2;
  ExpectBoth(p, {3, -4}, {2}, {}, {6, -8});
}

TEST(ReferenceHand, GroupsAndBias) {
  // C_in 2, C_out 4, groups 2: input channel 0 feeds outputs 0,1; channel 1 feeds 2,3.
  // Weight [C_in=2][C_out/groups=2]: w[0] = {1, 10}, w[1] = {100, 1000}. W = 2, kernel 1.
  //   co0 = x0*1 + 0.5      = [1.5, 2.5]
  //   co1 = x0*10 + 1.5     = [11.5, 21.5]
  //   co2 = x1*100 + 2.5    = [302.5, 402.5]
  //   co3 = x1*1000 + 3.5   = [3003.5, 4003.5]
  Problem p;
  p.c_in = 2;
  p.c_out = 4;
  p.groups = 2;
  p.bias = true;
  p.in = {1, 1, 2};
  ExpectBoth(p, {1, 2, 3, 4}, {1, 10, 100, 1000}, {0.5, 1.5, 2.5, 3.5},
             {1.5, 2.5, 11.5, 21.5, 302.5, 402.5, 3003.5, 4003.5});
}

TEST(ReferenceHand, NoBiasPointerMeansZero) {
  Problem p;
  p.bias = false;
  const std::vector<double> x = {2}, w = {3}, bias = {100};
  // A bias array passed for a layer without bias must be ignored.
  EXPECT_DOUBLE_EQ(ForwardGather(p, x.data(), w.data(), bias.data())[0], 6);
  EXPECT_DOUBLE_EQ(ForwardScatter(p, x.data(), w.data(), bias.data())[0], 6);
}

// ---- gather vs scatter ----------------------------------------------------------------------

void ExpectAgree(const Problem& p, uint64_t seed) {
  const Dim3 o = p.OutSize();
  for (int a = 0; a < 3; ++a) ASSERT_GT(o[a], 0) << "test generated an empty output";
  std::vector<double> x(p.InputElements()), w(p.WeightElements()), b(p.c_out);
  FillRandom(x, seed * 3 + 0);
  FillRandom(w, seed * 3 + 1);
  FillRandom(b, seed * 3 + 2);
  const std::vector<double> g = ForwardGather(p, x.data(), w.data(), b.data());
  const std::vector<double> s = ForwardScatter(p, x.data(), w.data(), b.data());
  ASSERT_EQ(static_cast<int64_t>(g.size()), p.OutputElements());
  const ErrorStats e = Compare(g.data(), s);
  EXPECT_LT(e.rel_l2, 1e-12) << "seed " << seed;
  EXPECT_EQ(e.nonfinite, 0);
  // Guards against both sides being trivially zero.
  EXPECT_GT(e.max_ref, 0) << "seed " << seed;
}

// Every field in Problem's order, so that the shapes below read as a table.
Problem Make(int64_t n, int64_t ci, int64_t co, Dim3 in, Dim3 k, Dim3 s, Dim3 pad, Dim3 op, Dim3 d,
             int64_t g, bool bias) {
  return test::MakeProblem(n, ci, co, in, k)
      .Stride(s)
      .Padding(pad)
      .OutputPadding(op)
      .Dilation(d)
      .Groups(g)
      .Bias(bias);
}

TEST(ReferenceAgree, HandPickedShapes) {
  const std::vector<Problem> ps = {
      // asymmetric kernel, like KernelBench L1-58
      Make(2, 3, 2, {3, 4, 5}, {3, 5, 7}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, 1, false),
      // stride larger than the kernel leaves holes
      Make(1, 2, 3, {3, 3, 2}, {2, 1, 2}, {3, 4, 3}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, 1, true),
      // L1-72-like: groups 4, per-axis padding, output_padding
      Make(1, 8, 8, {3, 4, 5}, {3, 5, 7}, {2, 2, 2}, {1, 2, 3}, {1, 1, 1}, {1, 1, 1}, 4, false),
      // L1-77-like: stride 2 with dilation 2
      Make(2, 2, 4, {4, 3, 3}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {2, 2, 2}, 1, true),
      // output_padding allowed by dilation rather than stride
      Make(1, 2, 2, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {1, 0, 2}, {2, 3, 3}, 1, false),
      // padding equal to the dilated kernel reach crops heavily; output_padding up to stride-1
      Make(1, 3, 3, {5, 6, 7}, {3, 3, 3}, {3, 2, 1}, {2, 2, 2}, {2, 1, 0}, {1, 2, 1}, 3, true),
      // depthwise
      Make(2, 4, 4, {3, 5, 4}, {3, 3, 3}, {2, 1, 2}, {1, 0, 1}, {1, 0, 0}, {1, 1, 1}, 4, true),
      // kernel 1 everywhere, only stride
      Make(1, 3, 5, {2, 3, 4}, {1, 1, 1}, {2, 3, 2}, {0, 0, 0}, {1, 2, 0}, {1, 1, 1}, 1, true),
      // mid-size, exercises the thread pool with many (n, co) tasks
      Make(2, 8, 12, {6, 7, 8}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 0, 1}, {1, 1, 1}, 2, true),
  };
  for (size_t i = 0; i < ps.size(); ++i) {
    SCOPED_TRACE("hand-picked shape " + std::to_string(i));
    ExpectAgree(ps[i], 100 + i);
  }
}

TEST(ReferenceAgree, RandomSmallShapes) {
  std::mt19937_64 rng(20261122);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int done = 0, with_op = 0, with_dil = 0, with_groups = 0, stride_gt_k = 0, with_pad = 0;
  while (done < 45) {
    Problem p;
    p.n = uni(1, 2);
    p.groups = uni(1, 3);
    p.c_in = p.groups * uni(1, 3);
    p.c_out = p.groups * uni(1, 3);
    p.bias = uni(0, 1) == 1;
    for (int a = 0; a < 3; ++a) {
      p.in[a] = uni(1, 5);
      p.kernel[a] = uni(1, 4);
      p.stride[a] = uni(1, 4);
      p.dilation[a] = uni(1, 3);
      p.padding[a] = uni(0, p.dilation[a] * (p.kernel[a] - 1));
      // PyTorch requires output_padding < stride or < dilation.
      p.output_padding[a] = uni(0, std::max(p.stride[a], p.dilation[a]) - 1);
    }
    const Dim3 o = p.OutSize();
    if (o[0] <= 0 || o[1] <= 0 || o[2] <= 0) continue;
    SCOPED_TRACE("random shape " + std::to_string(done));
    ExpectAgree(p, 1000 + done);
    ++done;
    for (int a = 0; a < 3; ++a) {
      with_op += p.output_padding[a] > 0;
      with_dil += p.dilation[a] > 1;
      stride_gt_k += p.stride[a] > p.kernel[a];
      with_pad += p.padding[a] > 0;
    }
    with_groups += p.groups > 1;
  }
  // The random draw must actually cover the features it is meant to.
  EXPECT_GT(with_op, 5);
  EXPECT_GT(with_dil, 5);
  EXPECT_GT(with_groups, 5);
  EXPECT_GT(stride_gt_k, 5);
  EXPECT_GT(with_pad, 5);
}

// ---- Compare and FillRandom -----------------------------------------------------------------

TEST(ReferenceCompare, ExactMatchIsZero) {
  const std::vector<double> ref = {1, -2, 3};
  const std::vector<float> out = {1, -2, 3};
  const ErrorStats e = Compare(out.data(), ref);
  EXPECT_EQ(e.rel_l2, 0);
  EXPECT_EQ(e.max_abs, 0);
  EXPECT_EQ(e.max_ref, 3);
  EXPECT_EQ(e.nonfinite, 0);
  EXPECT_EQ(e.count, 3);
}

TEST(ReferenceCompare, DetectsOneWrongElement) {
  std::vector<double> ref(1000, 1.0);
  std::vector<float> out(1000, 1.0f);
  out[637] = 1.5f;
  const ErrorStats e = Compare(out.data(), ref);
  // ||diff|| = 0.5, ||ref|| = sqrt(1000)
  EXPECT_NEAR(e.rel_l2, 0.5 / std::sqrt(1000.0), 1e-12);
  EXPECT_DOUBLE_EQ(e.max_abs, 0.5);
  EXPECT_EQ(e.nonfinite, 0);
}

TEST(ReferenceCompare, NanAndInfFail) {
  const std::vector<double> ref = {1, 2, 3, 4};
  std::vector<float> out = {1, 2, std::numeric_limits<float>::quiet_NaN(), 4};
  ErrorStats e = Compare(out.data(), ref);
  EXPECT_EQ(e.nonfinite, 1);
  EXPECT_TRUE(std::isinf(e.rel_l2));
  EXPECT_FALSE(e.rel_l2 < 1e-3);  // any tolerance check rejects it
  std::vector<double> outd = {1, 2, 3, -std::numeric_limits<double>::infinity()};
  e = Compare(outd.data(), ref);
  EXPECT_EQ(e.nonfinite, 1);
  EXPECT_TRUE(std::isinf(e.rel_l2));
}

TEST(ReferenceCompare, ZeroReferenceUsesAbsoluteError) {
  const std::vector<double> ref = {0, 0};
  const std::vector<double> out = {3, 4};
  EXPECT_DOUBLE_EQ(Compare(out.data(), ref).rel_l2, 5);
}

TEST(ReferenceFill, DeterministicInRangeAndNonZero) {
  std::vector<double> a(4096), b(4096), c(4096);
  FillRandom(a, 7);
  FillRandom(b, 7);
  FillRandom(c, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double lo = 1e9, hi = -1e9;
  for (double v : a) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, -1);
  EXPECT_LT(hi, 1);
  EXPECT_LT(lo, -0.9);  // spread over the range, not stuck near one value
  EXPECT_GT(hi, 0.9);
  std::vector<double> z(16);
  FillRandom(z, 1, 0, 0);
  bool any = false;
  for (double v : z) any |= v != 0;
  EXPECT_TRUE(any);
  std::vector<double> r(1000);
  FillRandom(r, 3, 2, 5);
  for (double v : r) {
    EXPECT_GE(v, 2);
    EXPECT_LT(v, 5);
  }
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Half, Bf16RoundsToNearestEvenAtEveryEdge) {
  struct Case {
    uint32_t in;
    uint16_t out;
  } cases[] = {
      {0x3f800000, 0x3f80},                        // 1.0 exact
      {0x3f808000, 0x3f80},                        // halfway, kept bit even: stays
      {0x3f818000, 0x3f82},                        // halfway, kept bit odd: up to even
      {0x3f808001, 0x3f81},                        // just above half: up
      {0x3f807fff, 0x3f80},                        // just below half: down
      {0xbf808001, 0xbf81},                        // sign is carried, magnitude rounds the same way
      {0xbf818000, 0xbf82}, {0x3fffffff, 0x4000},  // carry into the exponent
      {0x7f7fffff, 0x7f80},                        // largest float rounds to +inf
      {0x7f800000, 0x7f80},                        // +inf
      {0xff800000, 0xff80},                        // -inf
      {0x00000000, 0x0000},                        // +0
      {0x80000000, 0x8000},                        // -0
      {0x00008000, 0x0000},                        // subnormal halfway, even: down to 0
      {0x00018000, 0x0002},                        // subnormal halfway, odd: up
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FloatToBf16(FromBits(c.in)), c.out) << std::hex << "0x" << c.in;
  }
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0xc040), -3.0f);
}

TEST(Half, Bf16NanStaysNanWithItsSign) {
  for (uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fffffffu, 0x7f80ffffu}) {
    const uint16_t b = FloatToBf16(FromBits(nan));
    EXPECT_TRUE(std::isnan(Bf16ToFloat(b))) << std::hex << "0x" << nan << " -> 0x" << b;
    EXPECT_EQ(b & 0x8000, (nan >> 16) & 0x8000);  // sign kept
  }
}

// Bit patterns from the IEEE formats, worked by hand: bf16 is the top half of an f32; f16 has
// 5 exponent bits (bias 15) and 10 mantissa bits.
TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to the even one.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f + 0x1p-16f), 0x3f81);  // above halfway: up
  EXPECT_EQ(Bf16ToFloat(0x3f81), 1.0f + 0x1p-7f);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Half, F16RoundsToNearestEvenWithSubnormalsAndOverflow) {
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToF16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);         // the largest finite f16
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);         // halfway to 2^16: rounds to infinity
  EXPECT_EQ(FloatToF16(0x1p-24f), 0x0001);         // the smallest subnormal
  EXPECT_EQ(FloatToF16(0x1p-25f), 0x0000);         // half of it: ties to even (zero)
  EXPECT_EQ(FloatToF16(3 * 0x1p-25f), 0x0002);     // 1.5 units: to even (2)
  EXPECT_EQ(FloatToF16(1.0f + 0x1p-11f), 0x3c00);  // halfway: to even
  EXPECT_EQ(F16ToFloat(0x3c01), 1.0f + 0x1p-10f);
  EXPECT_EQ(F16ToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(F16ToFloat(0xfc00), -std::numeric_limits<float>::infinity());
}

TEST(Half, NarrowAndWidenRoundTripTheRoundedValues) {
  const std::vector<double> v = {0.1, -0.3333, 1.0, 1e-3, -7.25};
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    const auto bytes = Narrow(t, v);
    ASSERT_EQ(bytes.size(), v.size() * DTypeBytes(t));
    const auto back = Widen(t, bytes.data(), v.size());
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(back[i], RoundTo(t, v[i])) << DTypeName(t);
  }
  EXPECT_NE(RoundTo(DType::kBF16, 0.1), RoundTo(DType::kF16, 0.1));  // different formats
}

}  // namespace
}  // namespace convt3d::ref
