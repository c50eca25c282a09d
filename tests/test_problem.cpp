// test_problem.cpp: output-size math and validation against PyTorch's rules (no GPU needed).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "convt3d/convt3d.h"
#include "tests/status_matchers.h"
#include "tests/test_util.h"

namespace convt3d {
namespace {

using test::MakeProblem;
using test::StatusIs;
using ::testing::HasSubstr;

Problem Small() { return MakeProblem(2, 4, 6, {3, 4, 5}, {3, 3, 3}); }

// The output shapes in the shared problem file were produced by PyTorch itself.
TEST(Problem, OutSizeMatchesPyTorchOnLevel1) {
  std::ifstream f(test::kLevel1File);
  ASSERT_TRUE(f.good());
  const auto doc = nlohmann::json::parse(f);
  int checked = 0;
  for (const auto& j : doc.at("problems")) {
    Problem p;
    p.n = j["input"][0];
    p.c_in = j["in_channels"];
    p.c_out = j["out_channels"];
    for (int i = 0; i < 3; ++i) {
      p.in[i] = j["input"][2 + i];
      p.kernel[i] = j["kernel"][i];
      p.stride[i] = j["stride"][i];
      p.padding[i] = j["padding"][i];
      p.output_padding[i] = j["output_padding"][i];
      p.dilation[i] = j["dilation"][i];
    }
    p.groups = j["groups"];
    EXPECT_OK(Validate(p)) << j["name"];
    const Dim3 o = p.OutSize();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(o[i], j["output"][2 + i].get<int64_t>()) << j["name"];
    EXPECT_NEAR(p.Flops() / 1e9, j["gflop"].get<double>(), 1e-3 * j["gflop"].get<double>());
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

TEST(Problem, OutSizeFormulaByHand) {
  const Problem p = MakeProblem(2, 4, 6, {5, 7, 9}, {2, 3, 4})
                        .Stride({2, 3, 1})
                        .Padding({1, 0, 2})
                        .OutputPadding({1, 2, 0})
                        .Dilation({1, 1, 3});
  // D: 4*2 - 2 + 1*1 + 1 + 1 = 9; H: 6*3 - 0 + 2 + 2 + 1 = 23; W: 8*1 - 4 + 3*3 + 0 + 1 = 14
  EXPECT_EQ(p.OutSize(), (Dim3{9, 23, 14}));
  EXPECT_OK(Validate(p));
}

TEST(Problem, SignatureIsReadableAndDistinct) {
  Problem a = Small(), b = Small();
  b.bias = true;
  EXPECT_EQ(a.Signature(), "f32_n2_ci4_co6_i3x4x5_k3x3x3_s1x1x1_p0x0x0_op0x0x0_d1x1x1_g1_b0");
  EXPECT_NE(a.Signature(), b.Signature());
  b = a;
  b.dtype = DType::kF64;
  EXPECT_NE(a.Signature(), b.Signature());
  b.dtype = DType::kBF16;
  EXPECT_EQ(b.Signature().rfind("bf16_n2_", 0), 0u) << b.Signature();
  b.dtype = DType::kF16;
  EXPECT_EQ(b.Signature().rfind("f16_n2_", 0), 0u) << b.Signature();
}

TEST(Problem, SixteenBitTensorsAccumulateInFp32) {
  Problem p = Small();
  p.dtype = DType::kBF16;
  EXPECT_OK(Validate(p));
  EXPECT_EQ(ToleranceOf(p), 1e-2);
  EXPECT_EQ(DTypeBytes(p.dtype), 2);
  p.precision = Precision::kTf32;  // precisions choose how f32 is computed; 16-bit has one way
  EXPECT_THAT(Validate(p),
              StatusIs(Code::kInvalidArgument, HasSubstr("precision=tf32 needs dtype f32")));
  p = Small();
  EXPECT_EQ(ToleranceOf(p), 1e-6);
  p.precision = Precision::kFp32x3;
  EXPECT_EQ(ToleranceOf(p), 1e-5);
  p.dtype = DType::kF64;
  p.precision = Precision::kFp32;
  EXPECT_EQ(ToleranceOf(p), 1e-12);
}

struct BadCase {
  const char* what;
  void (*mutate)(Problem&);
  const char* expect;  // substring of the message: the field and the value
};

TEST(Problem, InvalidProblemsNameFieldAndValue) {
  const BadCase cases[] = {
      {"zero batch", [](Problem& p) { p.n = 0; }, "n=0"},
      {"neg c_in", [](Problem& p) { p.c_in = -3; }, "c_in=-3"},
      {"groups c_in", [](Problem& p) { p.groups = 3; }, "c_in=4 must be divisible by groups=3"},
      {"groups c_out",
       [](Problem& p) {
         p.groups = 2;
         p.c_out = 5;
       },
       "c_out=5"},
      {"kernel 0", [](Problem& p) { p.kernel[1] = 0; }, "kernel[1]=0"},
      {"stride 0", [](Problem& p) { p.stride[2] = 0; }, "stride[2]=0"},
      {"dilation 0", [](Problem& p) { p.dilation[0] = 0; }, "dilation[0]=0"},
      {"neg pad", [](Problem& p) { p.padding[0] = -1; }, "padding[0]=-1"},
      {"outpad", [](Problem& p) { p.output_padding[2] = 1; },
       "output_padding[2]=1 must be smaller than stride[2]=1 or dilation[2]=1"},
      {"outpad vs stride",
       [](Problem& p) {
         p.stride[0] = 2;
         p.output_padding[0] = 2;
       },
       "output_padding[0]=2"},
      {"empty output", [](Problem& p) { p.padding[1] = 5; }, "output size along H"},
      {"in 0", [](Problem& p) { p.in[0] = 0; }, "in[0]=0"},
      {"huge",
       [](Problem& p) {
         p.n = 1 << 20;
         p.c_in = 1 << 20;
         p.in = {1 << 20, 1 << 20, 1 << 20};
       },
       "too many elements"},
  };
  for (const auto& c : cases) {
    Problem p = Small();
    c.mutate(p);
    EXPECT_THAT(Validate(p), StatusIs(Code::kInvalidArgument, HasSubstr(c.expect))) << c.what;
  }
}

TEST(Problem, OutputPaddingBelowDilationIsValid) {
  // PyTorch allows output_padding < dilation even when it is not < stride.
  Problem p = Small();
  p.dilation = {2, 2, 2};
  p.output_padding = {1, 1, 1};
  EXPECT_OK(Validate(p));
}

TEST(Problem, StatusToStringHasCodeName) {
  Status s(Code::kInvalidArgument, "stride[1]=0 must be positive");
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: stride[1]=0 must be positive");
  EXPECT_EQ(Status().ToString(), "OK");
}

}  // namespace
}  // namespace convt3d
