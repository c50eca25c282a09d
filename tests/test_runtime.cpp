// test_runtime.cpp: NVRTC compiles everywhere; driver tests run on a GPU and skip without one.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/runtime.h"
#include "tests/status_matchers.h"

namespace convt3d::rt {
namespace {

using test::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

constexpr const char* kScaleSource = R"(
extern "C" __global__ void scale2(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}
)";

CompileRequest ScaleRequest(const std::string& name, const std::string& arch) {
  CompileRequest r;
  r.name = name;
  r.source = kScaleSource;
  r.arch = arch;
  r.kernels = {"scale2"};
  return r;
}

CompileRequest BrokenRequest(const std::string& name) {
  CompileRequest r;
  r.name = name;
  r.source = "extern \"C\" __global__ void broken(float* y) { y[0] = 1.0f }  // missing ';'\n";
  r.arch = "sm_90";
  return r;
}

bool IsElf(const std::vector<char>& cubin) {
  return cubin.size() > 4 && std::memcmp(cubin.data(),
                                         "\x7f"
                                         "ELF",
                                         4) == 0;
}

// Empty when a GPU is usable, else why not (for GTEST_SKIP).
std::string NoGpuReason() {
  StatusOr<DeviceInfo> info = QueryDevice(0);
  return info.ok() ? std::string() : info.status().message();
}

#define SKIP_WITHOUT_GPU()                                               \
  do {                                                                   \
    std::string reason = NoGpuReason();                                  \
    if (!reason.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << reason; \
  } while (0)

// ---- NVRTC (no GPU needed) -------------------------------------------------------------------

TEST(Nvrtc, VersionIsAtLeast12) {
  ASSERT_OK_AND_ASSIGN(const int v, NvrtcVersion());
  EXPECT_GE(v, 12000);
}

TEST(Nvrtc, CompilesValidKernelToElfCubin) {
  CompileResult r = Compile(ScaleRequest("scale2_ok", "sm_90"));
  ASSERT_OK(r.status);
  EXPECT_EQ(r.name, "scale2_ok");
  EXPECT_TRUE(IsElf(r.cubin)) << "cubin of " << r.cubin.size() << " bytes";
  EXPECT_GT(r.compile_ms, 0);
  ASSERT_EQ(r.lowered_names.size(), 1u);
  EXPECT_EQ(r.lowered_names[0], "scale2");  // extern "C": the symbol is the name
}

TEST(Nvrtc, FindsToolkitHeaders) {
  // NVRTC 13 bundles no headers: this only compiles if the toolkit include dir is passed.
  CompileRequest r = ScaleRequest("with_fp16_header", "sm_90");
  r.source = "#include <cuda_fp16.h>\n" + r.source;
  EXPECT_OK(Compile(r).status);
}

TEST(Nvrtc, SyntaxErrorNamesCandidateAndCarriesLog) {
  CompileResult r = Compile(BrokenRequest("broken_candidate_7"));
  ASSERT_THAT(r.status, StatusIs(Code::kInternal,
                                 AllOf(StartsWith("broken_candidate_7"),
                                       HasSubstr("NVRTC_ERROR_COMPILATION"), HasSubstr("error"))));
  EXPECT_NE(r.log.find("error"), std::string::npos) << r.log;
  EXPECT_TRUE(r.cubin.empty());
}

TEST(Nvrtc, MissingKernelNameFailsAtCompileTime) {
  CompileRequest req = ScaleRequest("misspelt", "sm_90");
  req.kernels = {"scale3"};
  EXPECT_THAT(Compile(req).status,
              StatusIs(Code::kInternal, AllOf(StartsWith("misspelt"), HasSubstr("scale3"))));
}

TEST(Nvrtc, UnknownOptionFailsWithoutCrashing) {
  CompileRequest req = ScaleRequest("bad_option", "sm_90");
  req.extra_options = {"--no-such-option"};
  EXPECT_THAT(Compile(req).status, StatusIs(Code::kInternal, StartsWith("bad_option")));
}

TEST(Nvrtc, CompileAllKeepsOrderAndIsolatesFailures) {
  std::vector<CompileRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(i == 3 ? BrokenRequest("cand3")
                          : ScaleRequest("cand" + std::to_string(i), "sm_90"));
  }
  for (int threads : {0, 1, 3, 16}) {
    std::vector<CompileResult> results = CompileAll(reqs, threads);
    ASSERT_EQ(results.size(), reqs.size());
    int ok = 0;
    for (size_t i = 0; i < results.size(); ++i) {
      EXPECT_EQ(results[i].name, reqs[i].name) << "threads=" << threads;
      if (results[i].status.ok()) {
        ++ok;
        EXPECT_TRUE(IsElf(results[i].cubin));
      }
    }
    EXPECT_EQ(ok, 5) << "threads=" << threads;
    EXPECT_THAT(results[3].status, StatusIs(Code::kInternal, StartsWith("cand3")))
        << "threads=" << threads;
  }
  EXPECT_TRUE(CompileAll({}, 4).empty());
}

TEST(Nvrtc, CompileAllReportsProgressOnTheCallingThread) {
  std::vector<CompileRequest> reqs;
  for (int i = 0; i < 5; ++i) reqs.push_back(ScaleRequest("p" + std::to_string(i), "sm_90"));
  for (int threads : {1, 2, 8}) {
    std::vector<size_t> seen;
    bool other_thread = false;
    const std::thread::id caller = std::this_thread::get_id();
    const auto results = CompileAll(reqs, threads, [&](size_t done) {
      other_thread |= std::this_thread::get_id() != caller;
      seen.push_back(done);
    });
    ASSERT_EQ(results.size(), reqs.size());
    for (const CompileResult& r : results) EXPECT_TRUE(r.status.ok()) << r.status.message();
    EXPECT_FALSE(other_thread) << "threads=" << threads;
    ASSERT_FALSE(seen.empty()) << "threads=" << threads;
    EXPECT_EQ(seen.back(), reqs.size()) << "threads=" << threads;
    for (size_t i = 1; i < seen.size(); ++i) EXPECT_GT(seen[i], seen[i - 1]);
  }
}

// ---- Driver ----------------------------------------------------------------------------------

TEST(Driver, QueryDeviceSucceedsOrSaysWhyInOneLine) {
  StatusOr<DeviceInfo> info = QueryDevice(0);
  if (info.ok()) {
    EXPECT_FALSE(info->name.empty());
    EXPECT_GE(info->cc_major, 7);
    EXPECT_GT(info->sm_count, 0);
    EXPECT_GT(info->l2_bytes, 0);
    EXPECT_GT(info->driver_version, 0);
    EXPECT_EQ(info->arch().rfind("sm_", 0), 0u);
    return;
  }
  EXPECT_THAT(info,
              StatusIs(Code::kFailedPrecondition, AllOf(Not(IsEmpty()), Not(HasSubstr("\n")))));
  // The first failure is cached; asking again gives the same answer, not a crash.
  EXPECT_THAT(QueryDevice(0), StatusIs(Code::kFailedPrecondition, info.status().message()));
}

TEST(Driver, NoSuchDeviceIsFailedPrecondition) {
  EXPECT_THAT(QueryDevice(4096), StatusIs(Code::kFailedPrecondition));
}

TEST(Driver, WithoutDriverEverythingFailsCleanly) {
  std::string reason = NoGpuReason();
  if (reason.empty()) GTEST_SKIP() << "a GPU is present; covered by the GPU tests";
  EXPECT_THAT(Context::Create(0), StatusIs(Code::kFailedPrecondition));
  EXPECT_THAT(DeviceBuffer::Alloc(1024), StatusIs(Code::kFailedPrecondition));
  CompileResult compiled = Compile(ScaleRequest("scale2", "sm_90"));
  ASSERT_OK(compiled.status);
  EXPECT_THAT(Kernel::Load(compiled.cubin, "scale2"), StatusIs(Code::kFailedPrecondition));
  EXPECT_THAT(Synchronize(), StatusIs(Code::kFailedPrecondition));
  auto launch = [] { return Status(); };
  EXPECT_THAT(TimeIt(launch, 1, 3, 1 << 20), StatusIs(Code::kFailedPrecondition));
  DeviceBuffer empty;  // destroying an empty buffer must not touch the driver
  EXPECT_EQ(empty.size(), 0u);
}

TEST(Gpu, BufferRoundTripAndKernelLaunch) {
  SKIP_WITHOUT_GPU();
  ASSERT_OK_AND_ASSIGN(const std::shared_ptr<Context> ctx, Context::Create(0));
  const DeviceInfo& info = ctx->info();

  constexpr int kN = 100003;  // not a multiple of the block size: exercises the bounds check
  std::vector<float> x(kN), y(kN, -1.0f);
  for (int i = 0; i < kN; ++i) x[i] = 0.25f * static_cast<float>(i % 977) - 3.0f;
  StatusOr<DeviceBuffer> dx = DeviceBuffer::Alloc(kN * sizeof(float));
  StatusOr<DeviceBuffer> dy = DeviceBuffer::Alloc(kN * sizeof(float));
  ASSERT_OK(dx);
  ASSERT_OK(dy);
  ASSERT_OK(dx->Upload(x.data(), kN * sizeof(float)));
  std::vector<float> back(kN, 0.0f);
  ASSERT_OK(dx->Download(back.data(), kN * sizeof(float)));
  EXPECT_EQ(back, x);
  EXPECT_THAT(dx->Upload(x.data(), 2 * kN * sizeof(float)),
              StatusIs(Code::kInvalidArgument, HasSubstr("upload of")));

  ASSERT_OK(dy->FillBytes(0xFF));  // NaN poison: unwritten outputs would show
  std::vector<unsigned char> poison(16);
  ASSERT_OK(dy->Download(poison.data(), poison.size()));
  for (unsigned char b : poison) EXPECT_EQ(b, 0xFF);

  CompileResult compiled = Compile(ScaleRequest("scale2_device", info.arch()));
  ASSERT_OK(compiled.status);
  StatusOr<std::shared_ptr<Kernel>> kernel = Kernel::Load(compiled.cubin, "scale2");
  ASSERT_OK(kernel);
  EXPECT_GT((*kernel)->num_regs(), 0);
  EXPECT_EQ((*kernel)->local_bytes(), 0);
  EXPECT_GE((*kernel)->max_threads_per_block(), 256);
  EXPECT_EQ((*kernel)->symbol(), "scale2");

  void* px = dx->get();
  void* py = dy->get();
  int n = kN;
  void* args[] = {&px, &py, &n};
  const unsigned block[3] = {256, 1, 1};
  const unsigned grid[3] = {(kN + 255) / 256, 1, 1};
  ASSERT_OK((*kernel)->Launch(grid, block, 0, nullptr, args));
  ASSERT_OK(Synchronize());
  ASSERT_OK(dy->Download(y.data(), kN * sizeof(float)));
  for (int i = 0; i < kN; ++i) ASSERT_EQ(y[i], 2.0f * x[i]) << "i=" << i;

  // A block larger than the device allows is a launch error that names the kernel.
  const unsigned huge_block[3] = {4096, 1, 1};
  EXPECT_THAT((*kernel)->Launch(grid, huge_block, 0, nullptr, args),
              StatusIs(Code::kInternal, AllOf(HasSubstr("scale2"), HasSubstr("cuLaunchKernel"))));
  ASSERT_OK(Synchronize());  // a rejected launch leaves the context usable

  // Another thread works on the same context once it has activated it.
  Status from_thread;
  std::thread worker([&] {
    from_thread = ctx->Activate();
    if (!from_thread.ok()) return;
    StatusOr<DeviceBuffer> b = DeviceBuffer::Alloc(4096);
    from_thread = b.ok() ? b->FillBytes(7) : b.status();
  });
  worker.join();
  EXPECT_OK(from_thread);
}

TEST(Gpu, LoadErrorsNameSymbolAndDriverError) {
  SKIP_WITHOUT_GPU();
  ASSERT_OK_AND_ASSIGN(const std::shared_ptr<Context> ctx, Context::Create(0));
  CompileResult compiled = Compile(ScaleRequest("scale2_device", ctx->info().arch()));
  ASSERT_OK(compiled.status);

  EXPECT_THAT(Kernel::Load(compiled.cubin, "no_such_kernel"),
              StatusIs(Code::kInternal,
                       AllOf(HasSubstr("no_such_kernel"), HasSubstr("CUDA_ERROR_NOT_FOUND"))));

  std::vector<char> garbage(256, 'x');
  EXPECT_THAT(
      Kernel::Load(garbage, "scale2"),
      StatusIs(Code::kInternal, AllOf(HasSubstr("cuModuleLoadData"), HasSubstr("CUDA_ERROR_"))));
}

TEST(Gpu, TimeItGivesOrderedStatistics) {
  SKIP_WITHOUT_GPU();
  ASSERT_OK_AND_ASSIGN(const std::shared_ptr<Context> ctx, Context::Create(0));
  const DeviceInfo& info = ctx->info();
  CompileResult compiled = Compile(ScaleRequest("scale2_timed", info.arch()));
  ASSERT_OK(compiled.status);
  StatusOr<std::shared_ptr<Kernel>> kernel = Kernel::Load(compiled.cubin, "scale2");
  ASSERT_OK(kernel);

  constexpr int kN = 1 << 22;
  StatusOr<DeviceBuffer> dx = DeviceBuffer::Alloc(kN * sizeof(float));
  StatusOr<DeviceBuffer> dy = DeviceBuffer::Alloc(kN * sizeof(float));
  ASSERT_OK(dx);
  ASSERT_OK(dy);
  ASSERT_OK(dx->FillBytes(0));
  void* px = dx->get();
  void* py = dy->get();
  int n = kN;
  void* args[] = {&px, &py, &n};
  const unsigned block[3] = {256, 1, 1};
  const unsigned grid[3] = {kN / 256, 1, 1};
  int launches = 0;
  auto launch = [&] {
    ++launches;
    return (*kernel)->Launch(grid, block, 0, nullptr, args);
  };
  StatusOr<Timing> t = TimeIt(launch, 2, 9, 2 * static_cast<size_t>(info.l2_bytes));
  ASSERT_OK(t);
  EXPECT_EQ(launches, 11);
  EXPECT_EQ(t->repeats, 9);
  EXPECT_GT(t->median_ms, 0);
  EXPECT_LE(t->min_ms, t->p20_ms);
  EXPECT_LE(t->p20_ms, t->median_ms);
  EXPECT_LE(t->median_ms, t->p80_ms);

  // A failing launch stops the protocol with that launch's error.
  auto failing = [] { return Status(Code::kInternal, "planted failure"); };
  EXPECT_THAT(TimeIt(failing, 0, 3, 0), StatusIs(Code::kInternal, "planted failure"));
  EXPECT_THAT(TimeIt(launch, 0, 0, 0), StatusIs(Code::kInvalidArgument, HasSubstr("repeats=0")));
}

}  // namespace
}  // namespace convt3d::rt
