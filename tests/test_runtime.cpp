// test_runtime.cpp: NVRTC compiles everywhere; driver tests run on a GPU and skip without one.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/runtime.h"

namespace convt3d::rt {
namespace {

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

#define ASSERT_OK(expr)                                              \
  do {                                                               \
    const Status status_ = (expr);                                   \
    ASSERT_TRUE(status_.ok()) << #expr << ": " << status_.message(); \
  } while (0)

#define SKIP_WITHOUT_GPU()                                               \
  do {                                                                   \
    std::string reason = NoGpuReason();                                  \
    if (!reason.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << reason; \
  } while (0)

// ---- NVRTC (no GPU needed) -------------------------------------------------------------------

TEST(Nvrtc, VersionIsAtLeast12) {
  StatusOr<int> v = NvrtcVersion();
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_GE(*v, 12000);
}

TEST(Nvrtc, CompilesValidKernelToElfCubin) {
  CompileResult r = Compile(ScaleRequest("scale2_ok", "sm_90"));
  ASSERT_TRUE(r.status.ok()) << r.status.message();
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
  CompileResult result = Compile(r);
  EXPECT_TRUE(result.status.ok()) << result.status.message();
}

TEST(Nvrtc, SyntaxErrorNamesCandidateAndCarriesLog) {
  CompileResult r = Compile(BrokenRequest("broken_candidate_7"));
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(r.status.code(), Code::kInternal);
  const std::string& m = r.status.message();
  EXPECT_EQ(m.rfind("broken_candidate_7", 0), 0u) << m;
  EXPECT_NE(m.find("NVRTC_ERROR_COMPILATION"), std::string::npos) << m;
  EXPECT_NE(m.find("error"), std::string::npos) << m;
  EXPECT_NE(r.log.find("error"), std::string::npos) << r.log;
  EXPECT_TRUE(r.cubin.empty());
}

TEST(Nvrtc, MissingKernelNameFailsAtCompileTime) {
  CompileRequest req = ScaleRequest("misspelt", "sm_90");
  req.kernels = {"scale3"};
  CompileResult r = Compile(req);
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(r.status.message().rfind("misspelt", 0), 0u) << r.status.message();
  EXPECT_NE(r.status.message().find("scale3"), std::string::npos) << r.status.message();
}

TEST(Nvrtc, UnknownOptionFailsWithoutCrashing) {
  CompileRequest req = ScaleRequest("bad_option", "sm_90");
  req.extra_options = {"--no-such-option"};
  CompileResult r = Compile(req);
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(r.status.message().rfind("bad_option", 0), 0u) << r.status.message();
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
    EXPECT_FALSE(results[3].status.ok());
    EXPECT_EQ(results[3].status.message().rfind("cand3", 0), 0u);
  }
  EXPECT_TRUE(CompileAll({}, 4).empty());
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
  EXPECT_EQ(info.status().code(), Code::kFailedPrecondition);
  const std::string m = info.status().message();
  EXPECT_FALSE(m.empty());
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  // The first failure is cached; asking again gives the same answer, not a crash.
  StatusOr<DeviceInfo> again = QueryDevice(0);
  EXPECT_EQ(again.status().message(), m);
}

TEST(Driver, NoSuchDeviceIsFailedPrecondition) {
  StatusOr<DeviceInfo> info = QueryDevice(4096);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), Code::kFailedPrecondition);
}

TEST(Driver, WithoutDriverEverythingFailsCleanly) {
  std::string reason = NoGpuReason();
  if (reason.empty()) GTEST_SKIP() << "a GPU is present; covered by the GPU tests";
  EXPECT_EQ(Context::Create(0).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(DeviceBuffer::Alloc(1024).status().code(), Code::kFailedPrecondition);
  CompileResult compiled = Compile(ScaleRequest("scale2", "sm_90"));
  ASSERT_TRUE(compiled.status.ok()) << compiled.status.message();
  EXPECT_EQ(Kernel::Load(compiled.cubin, "scale2").status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(Synchronize().code(), Code::kFailedPrecondition);
  auto launch = [] { return Status(); };
  EXPECT_EQ(TimeIt(launch, 1, 3, 1 << 20).status().code(), Code::kFailedPrecondition);
  DeviceBuffer empty;  // destroying an empty buffer must not touch the driver
  EXPECT_EQ(empty.size(), 0u);
}

TEST(Gpu, BufferRoundTripAndKernelLaunch) {
  SKIP_WITHOUT_GPU();
  StatusOr<std::shared_ptr<Context>> ctx = Context::Create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  const DeviceInfo& info = (*ctx)->info();

  constexpr int kN = 100003;  // not a multiple of the block size: exercises the bounds check
  std::vector<float> x(kN), y(kN, -1.0f);
  for (int i = 0; i < kN; ++i) x[i] = 0.25f * static_cast<float>(i % 977) - 3.0f;
  StatusOr<DeviceBuffer> dx = DeviceBuffer::Alloc(kN * sizeof(float));
  StatusOr<DeviceBuffer> dy = DeviceBuffer::Alloc(kN * sizeof(float));
  ASSERT_TRUE(dx.ok()) << dx.status().message();
  ASSERT_TRUE(dy.ok()) << dy.status().message();
  ASSERT_OK(dx->Upload(x.data(), kN * sizeof(float)));
  std::vector<float> back(kN, 0.0f);
  ASSERT_OK(dx->Download(back.data(), kN * sizeof(float)));
  EXPECT_EQ(back, x);
  EXPECT_EQ(dx->Upload(x.data(), 2 * kN * sizeof(float)).code(), Code::kInvalidArgument);

  ASSERT_OK(dy->FillBytes(0xFF));  // NaN poison: unwritten outputs would show
  std::vector<unsigned char> poison(16);
  ASSERT_OK(dy->Download(poison.data(), poison.size()));
  for (unsigned char b : poison) EXPECT_EQ(b, 0xFF);

  CompileResult compiled = Compile(ScaleRequest("scale2_device", info.arch()));
  ASSERT_TRUE(compiled.status.ok()) << compiled.status.message();
  StatusOr<std::shared_ptr<Kernel>> kernel = Kernel::Load(compiled.cubin, "scale2");
  ASSERT_TRUE(kernel.ok()) << kernel.status().message();
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
  Status bad = (*kernel)->Launch(grid, huge_block, 0, nullptr, args);
  EXPECT_EQ(bad.code(), Code::kInternal);
  EXPECT_NE(bad.message().find("scale2"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("cuLaunchKernel"), std::string::npos) << bad.message();
  ASSERT_OK(Synchronize());  // a rejected launch leaves the context usable

  // Another thread works on the same context once it has activated it.
  Status from_thread;
  std::thread worker([&] {
    from_thread = (*ctx)->Activate();
    if (!from_thread.ok()) return;
    StatusOr<DeviceBuffer> b = DeviceBuffer::Alloc(4096);
    from_thread = b.ok() ? b->FillBytes(7) : b.status();
  });
  worker.join();
  EXPECT_TRUE(from_thread.ok()) << from_thread.message();
}

TEST(Gpu, LoadErrorsNameSymbolAndDriverError) {
  SKIP_WITHOUT_GPU();
  StatusOr<std::shared_ptr<Context>> ctx = Context::Create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  CompileResult compiled = Compile(ScaleRequest("scale2_device", (*ctx)->info().arch()));
  ASSERT_TRUE(compiled.status.ok()) << compiled.status.message();

  StatusOr<std::shared_ptr<Kernel>> missing = Kernel::Load(compiled.cubin, "no_such_kernel");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kInternal);
  EXPECT_NE(missing.status().message().find("no_such_kernel"), std::string::npos);
  EXPECT_NE(missing.status().message().find("CUDA_ERROR_NOT_FOUND"), std::string::npos)
      << missing.status().message();

  std::vector<char> garbage(256, 'x');
  StatusOr<std::shared_ptr<Kernel>> bad = Kernel::Load(garbage, "scale2");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cuModuleLoadData"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("CUDA_ERROR_"), std::string::npos);
}

TEST(Gpu, TimeItGivesOrderedStatistics) {
  SKIP_WITHOUT_GPU();
  StatusOr<std::shared_ptr<Context>> ctx = Context::Create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  const DeviceInfo& info = (*ctx)->info();
  CompileResult compiled = Compile(ScaleRequest("scale2_timed", info.arch()));
  ASSERT_TRUE(compiled.status.ok()) << compiled.status.message();
  StatusOr<std::shared_ptr<Kernel>> kernel = Kernel::Load(compiled.cubin, "scale2");
  ASSERT_TRUE(kernel.ok()) << kernel.status().message();

  constexpr int kN = 1 << 22;
  StatusOr<DeviceBuffer> dx = DeviceBuffer::Alloc(kN * sizeof(float));
  StatusOr<DeviceBuffer> dy = DeviceBuffer::Alloc(kN * sizeof(float));
  ASSERT_TRUE(dx.ok() && dy.ok());
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
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(launches, 11);
  EXPECT_EQ(t->repeats, 9);
  EXPECT_GT(t->median_ms, 0);
  EXPECT_LE(t->min_ms, t->p20_ms);
  EXPECT_LE(t->p20_ms, t->median_ms);
  EXPECT_LE(t->median_ms, t->p80_ms);

  // A failing launch stops the protocol with that launch's error.
  auto failing = [] { return Status(Code::kInternal, "planted failure"); };
  StatusOr<Timing> f = TimeIt(failing, 0, 3, 0);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), "planted failure");
  EXPECT_EQ(TimeIt(launch, 0, 0, 0).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace convt3d::rt
