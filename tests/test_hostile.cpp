// test_hostile.cpp: the hostile-input tier (CPU only, well under two minutes): every input a user
// or a file can give ends in a result or a one-line error within bounded time and memory.
//   - problem files: nesting far too deep, huge values, long tokens;
//   - the generator at Validate's limits (ProblemLimits) and on random valid problems: each
//     gen::Candidates (plus HeuristicPick) within 1 s and 100 MB, never empty;
//   - a handful of random valid problems and the extremes: the first candidate and the
//     direct_phase fallback NVRTC-compile for sm_90, and every candidate of two random valid
//     problems, one with a stride at the limit (CONVT3D_TEST_RANDOM_COMPILE sets how many);
//   - the CLI: one decimal rule, limits named, every bad flag at once, names that cannot escape
//     --emit or drive the terminal, unknown subcommands named, read-only cache commands that
//     create nothing, `cache check` one line per problem, `cache import` counts.
// (The damaged-cache fixtures against every Store operation are in test_cache_damage.cpp.)
#include <gtest/gtest.h>
#include <malloc.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/source.h"
#include "runtime/runtime.h"
#include "src/problem_io.h"
#include "tests/cache_test_util.h"
#include "tests/cli_helpers.h"
#include "tests/status_matchers.h"
#include "tests/test_util.h"

// ---- Heap accounting: every operator new of this binary, so that a test can bound the peak
// bytes one call holds at a time.
// The whole replaceable set is replaced (plain, array, nothrow; the aligned forms keep the
// library's own pair): a sanitizer's allocator reports a block from its new freed by our delete.
namespace {
std::atomic<int64_t> g_heap_now{0}, g_heap_peak{0};

void* Allocate(size_t n) noexcept {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) return nullptr;
  const int64_t now = g_heap_now += static_cast<int64_t>(malloc_usable_size(p));
  for (int64_t peak = g_heap_peak.load();
       now > peak && !g_heap_peak.compare_exchange_weak(peak, now);) {
  }
  return p;
}
void Free(void* p) noexcept {
  if (p == nullptr) return;
  g_heap_now -= static_cast<int64_t>(malloc_usable_size(p));
  std::free(p);
}
}  // namespace

void* operator new(size_t n) {
  if (void* p = Allocate(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return Allocate(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return Allocate(n); }
void operator delete(void* p) noexcept { Free(p); }
void operator delete[](void* p) noexcept { Free(p); }
void operator delete(void* p, size_t) noexcept { Free(p); }
void operator delete[](void* p, size_t) noexcept { Free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { Free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { Free(p); }

namespace convt3d {
namespace {

namespace fs = std::filesystem;
using test::MakeProblem;
using test::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

#ifdef CONVT3D_SANITIZE
// Instrumented -O0 code runs several times slower: the 1 s bound holds for the Release build,
// which runs the same tests; here they check memory and undefined behaviour.
constexpr double kMaxSeconds = 5.0;
#else
constexpr double kMaxSeconds = 1.0;
#endif
constexpr int64_t kMaxHeapBytes = int64_t{100} << 20;

bool Has(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// ---- Problem files ------------------------------------------------------------------------

// A one-line error: no newline, short, and nothing below the terminal's printable range.
void ExpectOneLine(const Status& s, size_t max_bytes = 400) {
  EXPECT_FALSE(s.ok());
  const std::string& m = s.message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m.substr(0, 200);
  EXPECT_LE(m.size(), max_bytes) << m.substr(0, 200);
  EXPECT_TRUE(std::none_of(m.begin(), m.end(), [](char c) { return c >= 0 && c < 0x20; }))
      << m.substr(0, 200);
}

TEST(HostileProblemFile, DeepNestingIsOneLineErrorNotCrash) {
  // 75,000 levels: nlohmann parses them iteratively, but the error message used to dump the
  // offending value recursively and overflow the stack.
  const std::string deep = std::string(75000, '[') + std::string(75000, ']');
  auto r = io::ParseProblems(deep, "deep.json");
  EXPECT_THAT(r, StatusIs(Code::kInvalidArgument, HasSubstr("nested deeper than 64")));
  ExpectOneLine(r.status());
  // The same depth inside a problem's field, and inside a string (which does not count).
  const std::string in_field = R"({"problems": [{"name": "x", "input": )" +
                               std::string(75000, '[') + std::string(75000, ']') + "}]}";
  ExpectOneLine(io::ParseProblems(in_field, "f.json").status());
  const std::string in_string = R"([{"name": ")" + std::string(1000, '[') +
                                R"(", "input": [1, 1, 1, 1, 1], "out_channels": 1, "kernel": 1}])";
  EXPECT_OK(io::ParseProblems(in_string, "s.json"));
  // Deep but within the limit: the field's error quotes a bounded rendering.
  const std::string ok_depth = R"([{"name": "x", "input": )" + std::string(60, '[') +
                               std::string(60, ']') + R"(, "out_channels": 1, "kernel": 1}])";
  auto r2 = io::ParseProblems(ok_depth, "d.json");
  EXPECT_THAT(r2, StatusIs(Code::kInvalidArgument, HasSubstr("\"input\"")));
  ExpectOneLine(r2.status());
}

TEST(HostileProblemFile, HugeValuesAreCutInMessages) {
  std::string wide = R"([{"name": ")" + std::string(1 << 20, 'n') + R"(", "input": [)";
  for (int i = 0; i < 200000; ++i) wide += "1,";
  wide += R"(1], "out_channels": 1, "kernel": 1}])";
  ExpectOneLine(io::ParseProblems(wide, "wide.json").status());
  // A parse error quotes the token it stopped at: a 1 MB string with a raw newline.
  const std::string token = R"([{"name": ")" + std::string(1 << 20, 'a') + "\n\"}]";
  ExpectOneLine(io::ParseProblems(token, "tok.json").status());
  // Numbers beyond int64 are refused, not clamped.
  auto big = io::ParseProblems(
      R"([{"input": [1, 1, 1, 1, 1], "out_channels": 9223372036854775808, "kernel": 1}])", "b");
  EXPECT_THAT(big, StatusIs(Code::kInvalidArgument, HasSubstr("out_channels")));
  // Control characters in a name are escaped in the message.
  auto esc = io::ParseProblems(R"([{"name": "\u001b[31m", "input": 3}])", "e.json");
  ExpectOneLine(esc.status());
  EXPECT_THAT(esc, StatusIs(Code::kInvalidArgument, HasSubstr("\\x1b[31m")));
}

TEST(HostileProblemFile, DecimalIsTheOneIntegerRule) {
  using io::IntText;
  const struct {
    const char* text;
    IntText want;
    int64_t value;
  } cases[] = {
      {"10", IntText::kOk, 10},
      {"010", IntText::kOk, 10},  // leading zeros are decimal, never octal
      {"08", IntText::kOk, 8},
      {" -3 ", IntText::kOk, -3},
      {"9223372036854775807", IntText::kOk, INT64_MAX},
      {"-9223372036854775808", IntText::kOk, INT64_MIN},
      {"9223372036854775808", IntText::kOutOfRange, 0},
      {"-9223372036854775809", IntText::kOutOfRange, 0},
      {"99999999999999999999999", IntText::kOutOfRange, 0},
      {"0x10", IntText::kNotDecimal, 0},
      {"1e3", IntText::kNotDecimal, 0},
      {"+1", IntText::kNotDecimal, 0},
      {"1.0", IntText::kNotDecimal, 0},
      {"-", IntText::kNotDecimal, 0},
      {"", IntText::kNotDecimal, 0},
      {"1 2", IntText::kNotDecimal, 0},
  };
  for (const auto& c : cases) {
    int64_t v = 0;
    EXPECT_EQ(io::ParseDecimal(c.text, &v), c.want) << c.text;
    if (c.want == IntText::kOk) {
      EXPECT_EQ(v, c.value) << c.text;
    }
  }
  Status st;
  io::ParseTriple("1,0x2,3", "--stride", &st);
  EXPECT_THAT(st, StatusIs(Code::kInvalidArgument, HasSubstr("\"0x2\" is not a decimal")));
  Status st2;
  io::ParseTriple("9223372036854775808", "--stride", &st2);
  EXPECT_THAT(st2, StatusIs(Code::kInvalidArgument,
                            HasSubstr("out of range (at most 9223372036854775807)")));
}

// ---- The generator at the limits ----------------------------------------------------------

// Candidates(p) and HeuristicPick(p) within kMaxSeconds and kMaxHeapBytes, and not empty.
void ExpectBoundedCandidates(const Problem& p) {
  ASSERT_OK(Validate(p)) << p.Signature();
  const int64_t base = g_heap_now.load();
  g_heap_peak = base;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<gen::Config> all = gen::Candidates(p);
  const gen::Config pick = gen::HeuristicPick(p);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t heap = g_heap_peak.load() - base;
  EXPECT_LT(seconds, kMaxSeconds) << p.Signature();
  EXPECT_LT(heap, kMaxHeapBytes) << p.Signature();
  EXPECT_FALSE(all.empty()) << p.Signature();
  EXPECT_TRUE(std::find(all.begin(), all.end(), pick) != all.end()) << p.Signature();
}

// The problems at Validate's limits, each in every mode (strict, tf32, fp32x3, bf16, f16).
std::vector<Problem> Extremes() {
  constexpr int64_t kE = ProblemLimits::kExtent, kS = ProblemLimits::kStride;
  const std::vector<Problem> base = {
      // The largest stride in every dimension, with a dilation that shares no factor with it
      // (every phase distinct), and with dilation == stride (the sub-lattice form).
      MakeProblem(1, 4, 4, {4, 4, 4}, {3, 3, 3}).Stride({kS, kS, kS}).Dilation({3, 3, 3}),
      MakeProblem(1, 4, 4, {2, 2, 2}, {2, 2, 2}).Stride({kS, kS, kS}).Dilation({kS, kS, kS}),
      MakeProblem(1, 8, 8, {8, 8, 8}, {3, 5, 7})
          .Stride({kS, kS - 1, 2})
          .Dilation({7, 5, 3})
          .OutputPadding({6, 4, 1}),
      // The widest kernel, and the widest kernel in two dimensions within 2^31 weights.
      MakeProblem(1, 1, 1, {1, 1, 1}, {1, 1, kE}),
      MakeProblem(1, 1, 1, {1, 1, 1}, {1, 1, kE}).Padding({0, 0, kE / 2 - 1}),
      MakeProblem(1, 1, 1, {1, 64, 64}, {1, 4096, 4096}),
      // The largest dilation (the output reaches 2^24), and the largest padding.
      MakeProblem(1, 2, 2, {1, 1, 1}, {1, 1, 2}).Dilation({1, 1, kE - 1}),
      MakeProblem(1, 2, 2, {1, 2, 1}, {1, 1, 3}).Dilation({1, 1, kE / 2 - 1}).Stride({1, kS, 2}),
      MakeProblem(1, 1, 1, {1, 1, kE}, {1, 1, 3}).Padding({0, 0, kE / 2 - 1}),
      // The largest input (the output stays within 2^24), strided.
      MakeProblem(1, 1, 1, {1, 1, kE / kS}, {1, 1, 2}).Stride({1, 1, kS}),
      // The most channels (depthwise, so the weight fits).
      MakeProblem(1, ProblemLimits::kChannels, ProblemLimits::kChannels, {1, 1, 2}, {1, 1, 2})
          .Groups(ProblemLimits::kChannels)
          .Stride({1, 1, 2}),
  };
  std::vector<Problem> all;
  for (const Problem& p : base)
    for (int mode = 0; mode < 5; ++mode) {
      Problem q = p;
      test::SetMode(q, mode);
      all.push_back(q);
    }
  return all;
}

TEST(HostileGenerator, ExtremesAreBoundedInTimeAndMemory) {
  for (const Problem& p : Extremes()) ASSERT_NO_FATAL_FAILURE(ExpectBoundedCandidates(p));
}

TEST(HostileGenerator, JustPastTheLimitsIsRefusedNamingTheLimit) {
  const Problem ok = MakeProblem(1, 1, 1, {2, 2, 2}, {1, 1, 1});
  Problem p = ok;
  p.stride[1] = ProblemLimits::kStride + 1;
  EXPECT_THAT(Validate(p), StatusIs(Code::kInvalidArgument,
                                    AllOf(HasSubstr("stride[1]=513"), HasSubstr("512"))));
  p = ok;
  p.in[2] = 1, p.kernel[2] = 2, p.dilation[2] = ProblemLimits::kExtent;
  EXPECT_THAT(Validate(p), StatusIs(Code::kInvalidArgument,
                                    AllOf(HasSubstr("output size along W"), HasSubstr("2^24"))));
  p = ok;
  p.kernel[0] = ProblemLimits::kExtent + 1;
  EXPECT_THAT(Validate(p), StatusIs(Code::kInvalidArgument, HasSubstr("kernel[0]=16777217")));
  p = ok;
  p.c_out = ProblemLimits::kChannels + 1;
  EXPECT_THAT(Validate(p), StatusIs(Code::kInvalidArgument, HasSubstr("c_out=16777217")));
  // Saturated element counts are shown as their factors, never as INT64_MAX.
  p = MakeProblem(1 << 30, 1 << 24, 1, {1 << 24, 1 << 24, 1 << 24}, {1, 1, 1});
  const Status s = Validate(p);
  EXPECT_THAT(s, StatusIs(Code::kInvalidArgument, HasSubstr("too many elements")));
  EXPECT_FALSE(Has(s.message(), "9223372036854775807")) << s.message();
}

// A random problem that Validate accepts, drawn toward the limits.
Problem RandomValid(std::mt19937_64& rng) {
  auto pick = [&](std::initializer_list<int64_t> v) { return *(v.begin() + rng() % v.size()); };
  while (true) {
    Problem p;
    p.n = pick({1, 2, 7});
    p.groups = pick({1, 1, 2, 4});
    p.c_in = p.groups * pick({1, 3, 8, 64});
    p.c_out = p.groups * pick({1, 5, 16, 128});
    p.bias = rng() % 2;
    p.dtype = static_cast<DType>(rng() % 4);
    p.precision = p.dtype == DType::kF32 ? static_cast<Precision>(rng() % 3) : Precision::kFp32;
    for (int i = 0; i < 3; ++i) {
      p.stride[i] = pick({1, 2, 3, 7, 16, 63, 64, 511, ProblemLimits::kStride});
      p.dilation[i] = pick({1, 2, 3, 64, 1000, 1 << 12});
      p.kernel[i] = pick({1, 2, 3, 5, 64, 4096, 1 << 20});
      p.in[i] = pick({1, 2, 5, 64, 1000});
      p.padding[i] = pick({0, 0, 1, 3, 100});
      p.output_padding[i] = static_cast<int64_t>(rng() % std::max(p.stride[i], p.dilation[i]) % 4);
    }
    if (Validate(p).ok()) return p;
  }
}

TEST(HostileGenerator, RandomValidProblemsAreBounded) {
  std::mt19937_64 rng(23);
  for (int i = 0; i < 300; ++i) ASSERT_NO_FATAL_FAILURE(ExpectBoundedCandidates(RandomValid(rng)));
}

// ---- Every valid problem has a candidate that compiles --------------------------------------

// Each of `configs` (candidates of p) NVRTC-compiles for sm_90 (sm_90a where it needs it).
void ExpectCompile(const Problem& p, const std::vector<gen::Config>& configs) {
  std::vector<rt::CompileRequest> reqs;
  for (const gen::Config& c : configs) {
    ASSERT_OK_AND_ASSIGN(std::string source, gen::BuildSource(p, c));
    std::vector<std::string> kernels;
    for (const gen::LaunchStep& s : gen::Launches(p, c).steps)
      if (std::find(kernels.begin(), kernels.end(), s.symbol) == kernels.end())
        kernels.push_back(s.symbol);
    reqs.push_back({p.Signature() + "/" + c.Name(),
                    std::move(source),
                    gen::CompileArch(c, "sm_90"),
                    std::move(kernels),
                    {}});
  }
  for (const rt::CompileResult& r : rt::CompileAll(reqs, 0)) {
    EXPECT_OK(r.status) << r.name;
    EXPECT_FALSE(r.cubin.empty()) << r.name;
  }
}

// The first candidate (what a max_candidates cut tunes first) and the first direct_phase one
// (the fallback) of p compile for sm_90.
void ExpectFirstAndFallbackCompile(const Problem& p) {
  const std::vector<gen::Config> all = gen::Candidates(p);
  ASSERT_FALSE(all.empty()) << p.Signature();
  const auto fallback = std::find_if(
      all.begin(), all.end(), [](const gen::Config& c) { return c.family == "direct_phase"; });
  ASSERT_NE(fallback, all.end()) << p.Signature() << ": no direct_phase candidate";
  std::vector<gen::Config> picked = {all.front()};
  if (fallback != all.begin()) picked.push_back(*fallback);
  ExpectCompile(p, picked);
}

TEST(HostileCompile, ExtremesCompileTheirFirstCandidateAndFallback) {
  const std::vector<Problem> extremes = Extremes();
  // Strict f32 and bf16 of each shape (the tensor modes' first candidates are covered below).
  for (size_t i = 0; i < extremes.size(); i += 5) {
    ASSERT_NO_FATAL_FAILURE(ExpectFirstAndFallbackCompile(extremes[i]));
    ASSERT_NO_FATAL_FAILURE(ExpectFirstAndFallbackCompile(extremes[i + 3]));
  }
  // Every mode of the largest strides (the phase tables are the biggest constants there).
  for (size_t i = 1; i < 5; ++i)
    ASSERT_NO_FATAL_FAILURE(ExpectFirstAndFallbackCompile(extremes[i]));
}

TEST(HostileCompile, RandomValidProblemsCompileTheirFirstCandidate) {
  std::mt19937_64 rng(2300);
  for (int i = 0; i < 6; ++i)
    ASSERT_NO_FATAL_FAILURE(ExpectFirstAndFallbackCompile(RandomValid(rng)));
}

// Every candidate of random valid problems compiles, strides up to the limit included (one
// problem per draw has a stride of ProblemLimits::kStride in some dimension).
TEST(HostileCompile, RandomValidProblemsCompileEveryCandidate) {
  std::mt19937_64 rng(2301);
  const char* knob = std::getenv("CONVT3D_TEST_RANDOM_COMPILE");  // how many problems
  const int count = knob != nullptr ? std::atoi(knob) : 2;
  for (int i = 0; i < count; ++i) {
    Problem p = RandomValid(rng);
    while (i == 0 && std::max({p.stride[0], p.stride[1], p.stride[2]}) != ProblemLimits::kStride)
      p = RandomValid(rng);
    const std::vector<gen::Config> all = gen::Candidates(p);
    std::cout << p.Signature() << ": " << all.size() << " candidates\n";
    ASSERT_NO_FATAL_FAILURE(ExpectCompile(p, all));
  }
}

// ---- The CLI --------------------------------------------------------------------------------

using Result = test::CliResult;

class HostileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "convt3d_hostile_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  Result Run(const std::string& args) const {
    return test::RunCli(args, "CONVT3D_CACHE='" + Path("default.sqlite") + "'");
  }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(Path(name), std::ios::binary) << text;
  }
  fs::path dir_;
};

// Each line of stderr starts "convt3d: "; how many there are.
int ErrorLines(const Result& r) {
  std::istringstream ss(r.err);
  int n = 0;
  for (std::string line; std::getline(ss, line);) {
    EXPECT_EQ(line.rfind("convt3d: ", 0), 0u) << line;
    ++n;
  }
  return n;
}

const char* kShape = "--input 1,4,4,4,4 --kernel-size 3 ";

TEST_F(HostileCli, DeepProblemFileIsOneLine) {
  Write("deep.json", std::string(75000, '[') + std::string(75000, ']'));
  const Result r = Run("tune --problems '" + Path("deep.json") + "'");
  EXPECT_EQ(r.code, 2) << r.err.substr(0, 300);
  EXPECT_EQ(ErrorLines(r), 1) << r.err.substr(0, 300);
  EXPECT_TRUE(Has(r.err, "nested deeper than 64")) << r.err.substr(0, 300);
}

TEST_F(HostileCli, NumbersAreDecimalOnly) {
  for (const char* bad : {"0x10", "1e3", "+4", "4.0", "", "4 4"}) {
    const Result r = Run(std::string("info --device '") + bad + "'");
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_TRUE(Has(r.err, "--device")) << bad << ": " << r.err;
  }
  // Leading zeros are decimal, whatever the flag: "08" is 8, and "010" is 10, not 8.
  EXPECT_EQ(Run("info --device 08").code, 0);
  // (output_padding 10 is refused, and the message shows how both numbers were read.)
  const Result r =
      Run(std::string("tune ") + kShape + "--out-channels 4 --stride 010 --output-padding 010");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "output_padding[0]=10 must be smaller than stride[0]=10")) << r.err;
}

TEST_F(HostileCli, OutOfRangeNamesTheFlagAndTheLimit) {
  Result r = Run(std::string("tune ") + kShape + "--out-channels 9223372036854775808");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "--out-channels=9223372036854775808: out of range")) << r.err;
  EXPECT_TRUE(Has(r.err, "16777216")) << r.err;
  r = Run(std::string("tune ") + kShape + "--out-channels 4 --stride 99999999999999999999");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "--stride")) << r.err;
  EXPECT_TRUE(Has(r.err, "out of range (at most 9223372036854775807)")) << r.err;
  r = Run(std::string("tune ") + kShape + "--out-channels 4 --stride 513");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "stride[0]=513 exceeds the supported 512")) << r.err;
  r = Run(std::string("tune ") + kShape + "--out-channels 4 --repeats 0 --warmup 1000001");
  EXPECT_TRUE(Has(r.err, "--repeats=0: must be positive")) << r.err;
  EXPECT_TRUE(Has(r.err, "--warmup=1000001: must be at most 1000000")) << r.err;
}

TEST_F(HostileCli, ZeroOutChannelsIsNotMissing) {
  Result r = Run(std::string("tune ") + kShape + "--out-channels 0");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "--out-channels=0: must be positive")) << r.err;
  EXPECT_FALSE(Has(r.err, "required")) << r.err;
  r = Run(std::string("tune ") + kShape);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "--out-channels is required")) << r.err;
}

TEST_F(HostileCli, EveryBadFlagIsReportedAtOnce) {
  const Result r =
      Run("tune --input 1,4,4,x,4 --out-channels 0x4 --kernel-size 3,3 --stride 1,2 "
          "--dilation 1e2 --dtype f8 --repeats 0 --warmup y --policy never");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(ErrorLines(r), 9) << r.err;
  for (const char* flag : {"--input", "--out-channels", "--kernel-size", "--stride", "--dilation",
                           "--dtype", "--repeats", "--warmup", "--policy"})
    EXPECT_TRUE(Has(r.err, flag)) << flag << " missing from:\n" << r.err;
}

TEST_F(HostileCli, UnknownSubcommandIsNamed) {
  Result r = Run("frobnicate");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "unknown command 'frobnicate'")) << r.err;
  EXPECT_TRUE(Has(r.err, "tune")) << r.err;
  r = Run("cache frobnicate");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "unknown command 'frobnicate' for convt3d cache")) << r.err;
  EXPECT_TRUE(Has(r.err, "export")) << r.err;
}

TEST_F(HostileCli, EscapeCodesInNamesAreNotEchoed) {
  // An invalid problem is reported by name; a valid one shows in the table.
  Write("esc.json",
        R"([{"name": "\u001b]0;owned\u0007\u001b[31m", "input": [1, 1, 1, 1, 1],
            "out_channels": 0, "kernel": 1}])");
  Result r = Run("tune --problems '" + Path("esc.json") + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(Has(r.err + r.out, "\x1b")) << r.err;
  EXPECT_TRUE(Has(r.err, "\\x1b]0;owned\\x07")) << r.err;
  r = Run(std::string("tune ") + kShape +
          "--out-channels 4 --compile-only --max-candidates 1 --name '\x1b[2J\x9b" + "1m'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(Has(r.err + r.out, "\x1b")) << r.out;
  EXPECT_FALSE(Has(r.err + r.out, "\x9b")) << r.out;
  EXPECT_TRUE(Has(r.out, "\\x1b[2J\\x9b1m")) << r.out;
}

TEST_F(HostileCli, NamesCannotEscapeEmit) {
  fs::create_directories(Path("emit/inner"));
  Write("names.json", R"([
    {"name": "..", "input": [1, 1, 2, 2, 2], "out_channels": 1, "kernel": 1},
    {"name": "../../x", "input": [1, 1, 2, 2, 2], "out_channels": 1, "kernel": 1},
    {"name": "/abs", "input": [1, 1, 2, 2, 2], "out_channels": 1, "kernel": 1},
    {"name": "_..", "input": [1, 1, 2, 2, 2], "out_channels": 1, "kernel": 1}])");
  const Result r = Run("tune --problems '" + Path("names.json") +
                       "' --compile-only --max-candidates 1 --emit '" + Path("emit/inner") + "'");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // Everything written is one level below emit/inner, in four distinct folders.
  std::vector<std::string> subs;
  for (const auto& e : fs::directory_iterator(Path("emit/inner"))) {
    EXPECT_TRUE(e.is_directory()) << e.path();
    subs.push_back(e.path().filename().string());
  }
  EXPECT_EQ(subs.size(), 4u);
  for (const std::string& s : subs) {
    EXPECT_NE(s, "..");
    EXPECT_EQ(s.find('/'), std::string::npos);
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(Path("emit")), fs::directory_iterator()), 1);
  EXPECT_FALSE(fs::exists(Path("x")));
}

TEST_F(HostileCli, StrideAtTheLimitCompiles) {
  const Result r = Run(
      "tune --compile-only --max-candidates 1 --input 1,2,3,3,3 --out-channels 2 --kernel-size 3 "
      "--stride 512 --dilation 3 --precision fp32,tf32,bf16");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(Has(r.out, "cli/bf16")) << r.out;
}

// ---- The cache commands ---------------------------------------------------------------------

cache::Key KeyOf(int i) { return cache::MakeKey("f32_sig" + std::to_string(i)); }

// A cache of `n` sound entries at `path`.
void MakeCache(const std::string& path, int n) {
  auto store = cache::Store::Open(path);
  ASSERT_TRUE(store->warning().empty()) << store->warning();
  for (int i = 0; i < n; ++i) {
    cache::Winner w;
    w.candidate = "direct_phase_f32_x64y2_o1_c" + std::to_string(i + 1);
    w.params_json = R"({"family": "direct_phase"})";
    w.kernel_symbol = w.candidate;
    w.cubin = std::vector<char>(64 + i, static_cast<char>('a' + i));
    w.median_ms = 1, w.rel_err = 1e-7;
    cache::Trial t;
    t.candidate = w.candidate, t.outcome = "ok";
    ASSERT_OK(store->Record(KeyOf(i), w, {t}));
  }
}

// Runs SQL on the file directly, as a hostile editor would.
void Sql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

TEST_F(HostileCli, ReadOnlyCommandsCreateNothing) {
  const std::string missing = Path("none/a/b.sqlite");
  for (const char* cmd :
       {"cache list", "cache check", "cache export -", "cache show --problem x", "info"}) {
    const Result r = Run(std::string(cmd) + " --cache '" + missing + "'");
    EXPECT_LE(r.code, 1) << cmd << ": " << r.err;
    EXPECT_FALSE(fs::exists(Path("none"))) << cmd;
  }
  EXPECT_TRUE(Has(Run("cache list --cache '" + missing + "'").out, "no file yet, 0 entries"));
}

TEST_F(HostileCli, ReadOnlyCommandsCreateNothingUnderDefaultPaths) {
  // No --cache: the path comes from $CONVT3D_CACHE, $XDG_CACHE_HOME or $HOME.
  const std::vector<std::string> envs = {
      "CONVT3D_CACHE='" + Path("env/a/c.sqlite") + "'",
      "CONVT3D_CACHE= XDG_CACHE_HOME='" + Path("xdg") + "'",  // empty reads as unset
      "CONVT3D_CACHE= XDG_CACHE_HOME= HOME='" + Path("home") + "'"};
  for (const std::string& env : envs)
    for (const char* cmd : {"info", "cache check", "cache list", "cache path"}) {
      const Result r = test::RunCli(cmd, env);
      EXPECT_LE(r.code, 1) << cmd << ": " << r.err;
      EXPECT_TRUE(fs::is_empty(dir_)) << env << " " << cmd;
    }
}

// Permission errors read as such, never as "No such file or directory". Run as an unprivileged
// user: as root through setpriv (uid/gid 65534), since root passes every permission check.
TEST_F(HostileCli, PermissionErrorsSayPermissionDenied) {
  std::string as_user = "CONVT3D_CACHE='" + Path("ro/default.sqlite") + "'";
  if (geteuid() == 0) {
    if (std::system("setpriv --help >/dev/null 2>&1") != 0) GTEST_SKIP() << "root without setpriv";
    as_user += " setpriv --reuid=65534 --regid=65534 --clear-groups";
  }
  ASSERT_NO_FATAL_FAILURE(MakeCache(Path("good.sqlite"), 1));
  ASSERT_NO_FATAL_FAILURE(MakeCache(Path("secret.sqlite"), 1));
  fs::create_directories(Path("locked"));
  fs::create_directories(Path("ro"));
  Write("locked/p.json", "[]");
  Write("e.json", R"({"format": "convt3d-cache", "schema_version": 1, "entries": []})");
  using P = fs::perms;
  fs::permissions(dir_,
                  P::owner_all | P::group_read | P::group_exec | P::others_read | P::others_exec);
  fs::permissions(Path("good.sqlite"), P::owner_read | P::group_read | P::others_read);
  fs::permissions(Path("secret.sqlite"), P::none);
  fs::permissions(Path("locked"), P::none);
  fs::permissions(Path("ro"), P::owner_read | P::owner_exec | P::others_read | P::others_exec);
  const std::vector<std::string> cmds = {
      "cache list --cache '" + Path("locked/c.sqlite") + "'",
      "cache check --cache '" + Path("secret.sqlite") + "'",
      "info --cache '" + Path("secret.sqlite") + "'",
      "cache import '" + Path("e.json") + "' --cache '" + Path("ro/new.sqlite") + "'",
      "cache import '" + Path("e.json") + "' --cache '" + Path("locked/new.sqlite") + "'",
      "cache import '" + Path("e.json") + "' --cache '" + Path("ro/sub/new.sqlite") + "'",
      "cache import '" + Path("locked/p.json") + "' --cache '" + Path("good.sqlite") + "'",
      "cache export '" + Path("ro/out.json") + "' --cache '" + Path("good.sqlite") + "'",
      "tune --compile-only --problems '" + Path("locked/p.json") + "'",
  };
  for (const std::string& cmd : cmds) {
    const Result r = test::RunCli(cmd, as_user);
    EXPECT_TRUE(Has(r.err, "Permission denied")) << cmd << ":\n" << r.err;
    EXPECT_FALSE(Has(r.err, "No such file")) << cmd << ":\n" << r.err;
  }
  // A read-only file is served read-only, and the write says so.
  const Result r = test::RunCli(
      "cache import '" + Path("e.json") + "' --cache '" + Path("good.sqlite") + "'", as_user);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.err, "is read-only")) << r.err;
  fs::permissions(Path("locked"), P::owner_all);
  fs::permissions(Path("ro"), P::owner_all);
  EXPECT_FALSE(fs::exists(Path("ro/new.sqlite")));
  EXPECT_FALSE(fs::exists(Path("locked/new.sqlite")));
}

TEST_F(HostileCli, CheckPrintsOneLinePerProblem) {
  const std::string db = Path("c.sqlite");
  ASSERT_NO_FATAL_FAILURE(MakeCache(db, 3));
  Result r = Run("cache check --cache '" + db + "'");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(Has(r.out, ": ok (3 entries)")) << r.out;
  // Two damaged entries: a changed cubin, and a terminal escape in a key field.
  ASSERT_NO_FATAL_FAILURE(Sql(db,
                              "UPDATE binaries SET cubin = x'00' WHERE rowid = 1;"
                              "UPDATE entries SET gpu_name = char(27) || '[31mX' WHERE problem = "
                              "'f32_sig2'"));
  r = Run("cache check --cache '" + db + "'");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  std::istringstream ss(r.out);
  std::vector<std::string> lines;
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_TRUE(Has(lines[0], "entry f32_sig0") && Has(lines[0], "cubin")) << r.out;
  EXPECT_TRUE(Has(lines[1], "entry f32_sig2") && Has(lines[1], "\\x1b[31mX")) << r.out;
  EXPECT_TRUE(Has(lines[2], "2 problems (2 of 3 entries damaged)")) << r.out;
  EXPECT_FALSE(Has(r.out + r.err, "\x1b"));
  // list and show flag them, escaped.
  r = Run("cache list --cache '" + db + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(Has(r.out + r.err, "\x1b"));
  EXPECT_TRUE(Has(r.out, "damaged")) << r.out;
  r = Run("cache show --problem f32_sig2 --cache '" + db + "'");
  EXPECT_FALSE(Has(r.out + r.err, "\x1b"));
  EXPECT_TRUE(Has(r.out, "damaged:")) << r.out;
  // export leaves them out, names them, and writes the rest.
  r = Run("cache export '" + Path("out.json") + "' --cache '" + db + "'");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(Has(r.out, "exported 1 entries")) << r.out;
  EXPECT_EQ(ErrorLines(r), 2) << r.err;
}

TEST_F(HostileCli, ImportCountsKeysAndNamesSkippedEntries) {
  const std::string src = Path("src.sqlite");
  ASSERT_NO_FATAL_FAILURE(MakeCache(src, 2));
  Result r = Run("cache export '" + Path("e.json") + "' --cache '" + src + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream f(Path("e.json"));
  nlohmann::json doc = nlohmann::json::parse(f);
  auto& entries = doc["entries"];
  entries.push_back(entries[0]);  // the same key twice: counted once
  nlohmann::json bad = entries[1];
  bad["winner"].erase("cubin_hash");
  entries.push_back(bad);
  Write("e2.json", doc.dump());
  r = Run("cache import '" + Path("e2.json") + "' --cache '" + Path("dst.sqlite") + "'");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(Has(r.out, "imported 2, skipped 1")) << r.out;
  EXPECT_TRUE(Has(r.out, "entries[3].winner.cubin_hash")) << r.out;
}

}  // namespace
}  // namespace convt3d
