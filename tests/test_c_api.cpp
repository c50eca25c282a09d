// test_c_api.cpp: the C API (convt3d_c.h): validation, messages, handles; a GPU part skips.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "convt3d/convt3d_c.h"
#include "runtime/runtime.h"
#include "src/reference.h"
#include "tests/status_matchers.h"
#include "tests/test_util.h"

namespace {

convt3d_problem_t Small() {
  convt3d_problem_t p;
  convt3d_problem_init(&p);
  p.n = 2;
  p.c_in = 4;
  p.c_out = 6;
  p.in[0] = 3, p.in[1] = 4, p.in[2] = 5;
  for (int i = 0; i < 3; ++i) p.kernel[i] = 3;
  return p;
}

convt3d_options_t MemoryOptions(convt3d_policy_t policy) {
  convt3d_options_t o;
  convt3d_options_init(&o);
  o.policy = policy;
  o.cache_path = ":memory:";
  return o;
}

// Returns "" when a GPU is usable, else why not.
std::string NoGpuReason() {
  auto dev = convt3d::rt::QueryDevice(0);
  return dev.ok() ? std::string() : dev.status().message();
}

TEST(CApi, VersionAndNames) {
  EXPECT_STREQ(convt3d_version(), "0.1.0");
  EXPECT_EQ(convt3d_abi_version(), CONVT3D_C_ABI_VERSION);
  EXPECT_STREQ(convt3d_status_name(CONVT3D_OK), "OK");
  EXPECT_STREQ(convt3d_status_name(CONVT3D_INVALID_ARGUMENT), "INVALID_ARGUMENT");
  EXPECT_STREQ(convt3d_status_name(CONVT3D_FAILED_PRECONDITION), "FAILED_PRECONDITION");
  EXPECT_STREQ(convt3d_status_name(CONVT3D_NOT_FOUND), "NOT_FOUND");
  EXPECT_STREQ(convt3d_status_name(CONVT3D_UNAVAILABLE), "UNAVAILABLE");
  EXPECT_STREQ(convt3d_status_name(CONVT3D_INTERNAL), "INTERNAL");
  EXPECT_STREQ(convt3d_status_name(static_cast<convt3d_status_t>(42)), "UNKNOWN");
}

TEST(CApi, ProblemInitIsPyTorchDefaults) {
  convt3d_problem_t p;
  std::memset(&p, 0x7f, sizeof p);
  convt3d_problem_init(&p);
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.groups, 1);
  EXPECT_EQ(p.has_bias, 0);
  EXPECT_EQ(p.dtype, CONVT3D_DTYPE_F32);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(p.stride[i], 1);
    EXPECT_EQ(p.dilation[i], 1);
    EXPECT_EQ(p.padding[i], 0);
    EXPECT_EQ(p.output_padding[i], 0);
  }
  EXPECT_EQ(convt3d_validate(&p), CONVT3D_OK);
  EXPECT_STREQ(convt3d_last_error(), "");
}

TEST(CApi, OutputSize) {
  convt3d_problem_t p = Small();
  p.in[0] = 5, p.in[1] = 7, p.in[2] = 9;
  p.kernel[0] = 2, p.kernel[1] = 3, p.kernel[2] = 4;
  p.stride[0] = 2, p.stride[1] = 3, p.stride[2] = 1;
  p.padding[0] = 1, p.padding[1] = 0, p.padding[2] = 2;
  p.output_padding[0] = 1, p.output_padding[1] = 2, p.output_padding[2] = 0;
  p.dilation[0] = 1, p.dilation[1] = 1, p.dilation[2] = 3;
  int64_t out[3] = {0, 0, 0};
  ASSERT_EQ(convt3d_output_size(&p, out), CONVT3D_OK) << convt3d_last_error();
  EXPECT_EQ(out[0], 9);  // same hand-worked case as test_problem
  EXPECT_EQ(out[1], 23);
  EXPECT_EQ(out[2], 14);
}

// Each bad field is refused with the field and the value in the message.
TEST(CApi, ValidationErrorsNameTheField) {
  struct Case {
    void (*mutate)(convt3d_problem_t&);
    const char* expected;
  };
  const Case cases[] = {
      {[](convt3d_problem_t& p) { p.n = 0; }, "n=0 must be positive"},
      {[](convt3d_problem_t& p) { p.c_in = -3; }, "c_in=-3 must be positive"},
      {[](convt3d_problem_t& p) { p.stride[1] = 0; }, "stride[1]=0 must be positive"},
      {[](convt3d_problem_t& p) { p.padding[2] = -1; }, "padding[2]=-1 must be >= 0"},
      {[](convt3d_problem_t& p) { p.dilation[0] = 0; }, "dilation[0]=0 must be positive"},
      {[](convt3d_problem_t& p) { p.groups = 4; }, "c_out=6 must be divisible by groups=4"},
      {[](convt3d_problem_t& p) { p.output_padding[0] = 1; }, "output_padding[0]=1"},
      {[](convt3d_problem_t& p) { p.padding[0] = 5; }, "output size along D"},
      {[](convt3d_problem_t& p) { p.dtype = 7; }, "dtype=7 is not supported"},
      {[](convt3d_problem_t& p) { p.has_bias = 2; }, "has_bias=2 must be 0 or 1"},
  };
  for (const Case& c : cases) {
    convt3d_problem_t p = Small();
    c.mutate(p);
    EXPECT_EQ(convt3d_validate(&p), CONVT3D_INVALID_ARGUMENT) << c.expected;
    EXPECT_NE(std::string(convt3d_last_error()).find(c.expected), std::string::npos)
        << "message: " << convt3d_last_error() << "\nexpected: " << c.expected;
    int64_t out[3];
    EXPECT_EQ(convt3d_output_size(&p, out), CONVT3D_INVALID_ARGUMENT) << c.expected;
  }
  EXPECT_EQ(convt3d_validate(nullptr), CONVT3D_INVALID_ARGUMENT);
  EXPECT_STREQ(convt3d_last_error(), "problem is NULL");
  convt3d_problem_t p = Small();
  EXPECT_EQ(convt3d_output_size(&p, nullptr), CONVT3D_INVALID_ARGUMENT);
  // A success clears the message.
  EXPECT_EQ(convt3d_validate(&p), CONVT3D_OK);
  EXPECT_STREQ(convt3d_last_error(), "");
}

TEST(CApi, LastErrorIsPerThread) {
  convt3d_problem_t bad = Small();
  bad.n = 0;
  ASSERT_EQ(convt3d_validate(&bad), CONVT3D_INVALID_ARGUMENT);
  std::string other;
  std::thread t([&] { other = convt3d_last_error(); });
  t.join();
  EXPECT_EQ(other, "");
  EXPECT_STREQ(convt3d_last_error(), "n=0 must be positive");
}

TEST(CApi, Signature) {
  convt3d_problem_t p = Small();
  size_t needed = 0;
  ASSERT_EQ(convt3d_problem_signature(&p, nullptr, 0, &needed), CONVT3D_OK);
  const std::string expected = "f32_n2_ci4_co6_i3x4x5_k3x3x3_s1x1x1_p0x0x0_op0x0x0_d1x1x1_g1_b0";
  EXPECT_EQ(needed, expected.size() + 1);
  std::vector<char> buf(needed);
  ASSERT_EQ(convt3d_problem_signature(&p, buf.data(), buf.size(), nullptr), CONVT3D_OK);
  EXPECT_EQ(std::string(buf.data()), expected);
  char small[4];
  ASSERT_EQ(convt3d_problem_signature(&p, small, sizeof small, nullptr), CONVT3D_OK);
  EXPECT_STREQ(small, "f32");  // truncated, still terminated
  EXPECT_EQ(convt3d_problem_signature(&p, nullptr, 8, nullptr), CONVT3D_INVALID_ARGUMENT);
}

TEST(CApi, SixteenBitDtypes) {
  for (auto [dt, prefix] : {std::pair{CONVT3D_DTYPE_BF16, "bf16_"}, {CONVT3D_DTYPE_F16, "f16_"}}) {
    convt3d_problem_t p = Small();
    p.dtype = dt;
    EXPECT_EQ(convt3d_validate(&p), CONVT3D_OK) << convt3d_last_error();
    char buf[128];
    ASSERT_EQ(convt3d_problem_signature(&p, buf, sizeof buf, nullptr), CONVT3D_OK);
    EXPECT_EQ(std::string(buf).rfind(prefix, 0), 0u) << buf;
  }
  convt3d_problem_t p = Small();
  p.dtype = static_cast<convt3d_dtype_t>(7);
  EXPECT_EQ(convt3d_validate(&p), CONVT3D_INVALID_ARGUMENT);
  EXPECT_NE(std::string(convt3d_last_error()).find("dtype=7"), std::string::npos)
      << convt3d_last_error();
}

TEST(CApi, OptionsAreChecked) {
  convt3d_engine_t* e = reinterpret_cast<convt3d_engine_t*>(0x1);
  convt3d_options_t o = MemoryOptions(CONVT3D_POLICY_NEVER);
  o.precision = 3;  // not a precision: 16-bit compute is chosen by the tensors' dtype
  EXPECT_EQ(convt3d_engine_create(&o, &e), CONVT3D_INVALID_ARGUMENT);
  EXPECT_EQ(e, nullptr);
  EXPECT_NE(std::string(convt3d_last_error()).find("precision=3 is not supported"),
            std::string::npos)
      << convt3d_last_error();
  o = MemoryOptions(static_cast<convt3d_policy_t>(9));
  EXPECT_EQ(convt3d_engine_create(&o, &e), CONVT3D_INVALID_ARGUMENT);
  EXPECT_NE(std::string(convt3d_last_error()).find("policy=9"), std::string::npos);
  o = MemoryOptions(CONVT3D_POLICY_NEVER);
  o.repeats = 0;
  EXPECT_EQ(convt3d_engine_create(&o, &e), CONVT3D_INVALID_ARGUMENT);
  EXPECT_EQ(convt3d_engine_create(nullptr, &e), CONVT3D_INVALID_ARGUMENT);
  EXPECT_EQ(convt3d_engine_create(&o, nullptr), CONVT3D_INVALID_ARGUMENT);
}

// Options::fp32x3_fp16 through the C struct (ABI version 3): off by default; on, the engine
// opts in (its first log line says so, with or without a GPU).
TEST(CApi, Fp32x3Fp16ReachesTheEngine) {
  convt3d::test::ScopedEnv unset("CONVT3D_FP32X3_FP16", "0");
  convt3d_options_t o = MemoryOptions(CONVT3D_POLICY_NEVER);
  EXPECT_EQ(o.fp32x3_fp16, 0);
  EXPECT_EQ(o.vendor_candidates, 1);
  o.verbose = 1;
  for (const int on : {0, 1}) {
    o.fp32x3_fp16 = on;
    testing::internal::CaptureStderr();
    convt3d_engine_t* e = nullptr;
    const convt3d_status_t st = convt3d_engine_create(&o, &e);
    const std::string err = testing::internal::GetCapturedStderr();
    ASSERT_EQ(st, CONVT3D_OK) << convt3d_last_error();
    convt3d_engine_destroy(e);
    EXPECT_EQ(err.find("3xFP16 tiles (opt-in") != std::string::npos, on == 1) << err;
  }
}

// Without a GPU an engine still opens (so callers can validate through it) and plans fail with
// FAILED_PRECONDITION; an invalid problem is refused before the GPU is needed.
TEST(CApi, EngineAndPlanWithoutGpu) {
  convt3d_options_t o = MemoryOptions(CONVT3D_POLICY_NEVER);
  convt3d_engine_t* e = nullptr;
  ASSERT_EQ(convt3d_engine_create(&o, &e), CONVT3D_OK) << convt3d_last_error();
  EXPECT_STREQ(convt3d_engine_cache_path(e), ":memory:");
  EXPECT_EQ(convt3d_engine_nvrtc_compiles(e), 0);

  convt3d_problem_t bad = Small();
  bad.stride[2] = -1;
  convt3d_plan_t* plan = reinterpret_cast<convt3d_plan_t*>(0x1);
  EXPECT_EQ(convt3d_plan_create(e, &bad, &plan), CONVT3D_INVALID_ARGUMENT);
  EXPECT_EQ(plan, nullptr);
  EXPECT_STREQ(convt3d_last_error(), "stride[2]=-1 must be positive");
  EXPECT_EQ(convt3d_plan_create(nullptr, &bad, &plan), CONVT3D_INVALID_ARGUMENT);
  EXPECT_EQ(convt3d_plan_create(e, nullptr, &plan), CONVT3D_INVALID_ARGUMENT);
  EXPECT_EQ(convt3d_plan_run(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
            CONVT3D_INVALID_ARGUMENT);
  EXPECT_STREQ(convt3d_last_error(), "plan is NULL");
  EXPECT_EQ(convt3d_plan_run_versioned(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1),
            CONVT3D_INVALID_ARGUMENT);
  EXPECT_STREQ(convt3d_last_error(), "plan is NULL");

  // Accessors of a NULL handle are harmless.
  EXPECT_STREQ(convt3d_plan_kernel_name(nullptr), "");
  EXPECT_EQ(convt3d_plan_tuned_ms(nullptr), -1);
  convt3d_plan_destroy(nullptr);
  convt3d_engine_destroy(nullptr);

  const std::string reason = NoGpuReason();
  if (reason.empty()) {
    convt3d_engine_destroy(e);
    GTEST_SKIP() << "a GPU is present; the no-GPU path is not reachable here";
  }
  convt3d_problem_t p = Small();
  EXPECT_EQ(convt3d_plan_create(e, &p, &plan), CONVT3D_FAILED_PRECONDITION);
  EXPECT_NE(std::string(convt3d_last_error()).find("no usable GPU"), std::string::npos)
      << convt3d_last_error();
  convt3d_engine_destroy(e);
}

// CONVT3D_POLICY_BACKGROUND opens an engine (and destroying it with no worker started is
// immediate); the origin of a NULL plan is -1 and leaves the out-pointers alone.
TEST(CApi, BackgroundPolicyAndOriginOfNullPlan) {
  convt3d_options_t o = MemoryOptions(CONVT3D_POLICY_BACKGROUND);
  convt3d_engine_t* e = nullptr;
  ASSERT_EQ(convt3d_engine_create(&o, &e), CONVT3D_OK) << convt3d_last_error();
  convt3d_engine_destroy(e);
  o = MemoryOptions(static_cast<convt3d_policy_t>(5));
  EXPECT_EQ(convt3d_engine_create(&o, &e), CONVT3D_INVALID_ARGUMENT);
  EXPECT_NE(std::string(convt3d_last_error()).find("(0..4)"), std::string::npos)
      << convt3d_last_error();
  const char* name = "unset";
  const char* reason = "unset";
  EXPECT_EQ(convt3d_plan_origin(nullptr, &name, &reason), -1);
  EXPECT_STREQ(name, "unset");
  EXPECT_STREQ(reason, "unset");
  EXPECT_EQ(convt3d_plan_origin(nullptr, nullptr, nullptr), -1);
}

// GPU: the heuristic plan of a small problem with bias and groups against the CPU reference.
TEST(CApiGpu, PlanRunMatchesReference) {
  const std::string reason = NoGpuReason();
  if (!reason.empty()) GTEST_SKIP() << "no GPU: " << reason;
  convt3d_problem_t p = Small();
  p.c_in = 4, p.c_out = 6, p.groups = 2, p.has_bias = 1, p.dtype = CONVT3D_DTYPE_F64;
  p.stride[0] = 2, p.padding[1] = 1, p.output_padding[0] = 1, p.dilation[2] = 2;
  convt3d_options_t o = MemoryOptions(CONVT3D_POLICY_NEVER);
  convt3d_engine_t* e = nullptr;
  ASSERT_EQ(convt3d_engine_create(&o, &e), CONVT3D_OK) << convt3d_last_error();
  convt3d_plan_t* plan = nullptr;
  ASSERT_EQ(convt3d_plan_create(e, &p, &plan), CONVT3D_OK) << convt3d_last_error();
  EXPECT_STREQ(convt3d_plan_source(plan), "heuristic");
  const char* origin_name = nullptr;
  const char* origin_reason = nullptr;
  EXPECT_EQ(convt3d_plan_origin(plan, &origin_name, &origin_reason), 5);
  EXPECT_STREQ(origin_name, "heuristic");
  EXPECT_NE(std::string(origin_reason).find("policy kNever"), std::string::npos) << origin_reason;
  EXPECT_NE(std::string(convt3d_plan_kernel_name(plan)), "");
  convt3d_problem_t back;
  convt3d_plan_problem(plan, &back);
  EXPECT_EQ(std::memcmp(&back, &p, sizeof p), 0);
  // The plan outlives its engine.
  convt3d_engine_destroy(e);

  convt3d::Problem cp;
  cp.n = p.n, cp.c_in = p.c_in, cp.c_out = p.c_out, cp.groups = p.groups, cp.bias = true;
  cp.dtype = convt3d::DType::kF64;
  for (int i = 0; i < 3; ++i) {
    cp.in[i] = p.in[i], cp.kernel[i] = p.kernel[i], cp.stride[i] = p.stride[i];
    cp.padding[i] = p.padding[i], cp.output_padding[i] = p.output_padding[i];
    cp.dilation[i] = p.dilation[i];
  }
  std::vector<double> x(cp.InputElements()), w(cp.WeightElements()), b(cp.c_out);
  convt3d::ref::FillRandom(x, 1);
  convt3d::ref::FillRandom(w, 2);
  convt3d::ref::FillRandom(b, 3);
  const auto ref = convt3d::ref::ForwardGather(cp, x.data(), w.data(), b.data());
  ASSERT_OK_AND_ASSIGN(auto ctx, convt3d::rt::Context::Create(0));
  using convt3d::rt::DeviceBuffer;
  ASSERT_OK_AND_ASSIGN(DeviceBuffer dx, DeviceBuffer::Alloc(x.size() * 8));
  ASSERT_OK_AND_ASSIGN(DeviceBuffer dw, DeviceBuffer::Alloc(w.size() * 8));
  ASSERT_OK_AND_ASSIGN(DeviceBuffer db, DeviceBuffer::Alloc(b.size() * 8));
  ASSERT_OK_AND_ASSIGN(DeviceBuffer dy, DeviceBuffer::Alloc(ref.size() * 8));
  ASSERT_OK(dx.Upload(x.data(), x.size() * 8));
  ASSERT_OK(dw.Upload(w.data(), w.size() * 8));
  ASSERT_OK(db.Upload(b.data(), b.size() * 8));
  ASSERT_OK(dy.FillBytes(0xFF));  // NaN: an unwritten output fails the check
  ASSERT_EQ(convt3d_plan_run(plan, dx.get(), dw.get(), db.get(), dy.get(), nullptr), CONVT3D_OK)
      << convt3d_last_error();
  EXPECT_EQ(convt3d_plan_run(plan, dx.get(), dw.get(), nullptr, dy.get(), nullptr),
            CONVT3D_INVALID_ARGUMENT);  // the problem has a bias
  std::vector<double> y(ref.size());
  ASSERT_OK(dy.Download(y.data(), y.size() * 8));
  auto err = convt3d::ref::Compare(y.data(), ref);
  EXPECT_EQ(err.nonfinite, 0);
  EXPECT_LE(err.rel_l2, 1e-12);
  // With a weight version (this plan has no weights to pack: the same launches).
  ASSERT_OK(dy.FillBytes(0xFF));
  ASSERT_EQ(convt3d_plan_run_versioned(plan, dx.get(), dw.get(), db.get(), dy.get(), nullptr, 7),
            CONVT3D_OK)
      << convt3d_last_error();
  ASSERT_OK(dy.Download(y.data(), y.size() * 8));
  err = convt3d::ref::Compare(y.data(), ref);
  EXPECT_EQ(err.nonfinite, 0);
  EXPECT_LE(err.rel_l2, 1e-12);
  convt3d_plan_destroy(plan);
}

}  // namespace
