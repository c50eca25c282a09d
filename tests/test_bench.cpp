// test_bench.cpp: the parts of `convt3d bench` that need no GPU: writers, bf16, mapping, cuDNN.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/cudnn.h"
#include "convt3d/convt3d.h"
#include "tests/cli_helpers.h"
#include "tests/status_matchers.h"

namespace convt3d {
namespace {

using bench::Mode;
using test::CliResult;
using test::RunCli;
using test::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// ---- Synthetic report --------------------------------------------------------------------------

bench::Row MakeRow(const std::string& impl, Mode mode, double ms, double rel) {
  bench::Row r;
  r.impl = impl;
  r.mode = mode;
  r.ok = ms > 0;
  r.ms = r.min_ms = r.p20_ms = r.p80_ms = ms;
  r.repeats = 20;
  r.err.rel_l2 = rel;
  r.err.max_abs = rel * 10;
  r.detail = impl == "cudnn" ? "ALGO_1, FMA_MATH, workspace 0.0 MiB" : "direct_phase_x (cache)";
  return r;
}

io::NamedProblem L1_72() {
  io::NamedProblem np;
  np.name = "L1-72";
  Problem& p = np.problem;
  p.n = 8, p.c_in = 32, p.c_out = 32, p.in = {12, 24, 48};
  p.kernel = {3, 5, 7}, p.stride = {2, 2, 2}, p.padding = {1, 2, 3};
  p.output_padding = {1, 1, 1}, p.groups = 4;
  return np;
}

bench::Report SyntheticReport() {
  bench::Report rep;
  rep.version = "test";
  rep.date = "2026-01-01T00:00:00Z";
  rep.gpu = "NVIDIA H200 <test & co>";
  rep.cudnn_version = "9.19.0";
  rep.warmup = 5;
  rep.repeats = 20;
  bench::ProblemResult a;
  a.problem = L1_72();
  a.rows = {MakeRow("convt3d", Mode::kFp32, 2.0, 1e-7), MakeRow("cudnn", Mode::kTf32, 3.0, 1e-3),
            MakeRow("cudnn", Mode::kFp32, 4.0, 2e-7), MakeRow("cudnn", Mode::kBf16, 0.5, 4e-3)};
  bench::ProblemResult b;
  b.problem = L1_72();
  b.problem.name = "tiny,\"quoted\"";  // a name that needs CSV quoting and XML escaping
  b.problem.problem.n = 1;
  b.rows = {MakeRow("convt3d", Mode::kFp32, 1.0, 1e-7), MakeRow("cudnn", Mode::kTf32, 0.25, 1e-3),
            MakeRow("cudnn", Mode::kFp32, -1, -1)};
  b.rows.back().error = "cudnnFindConvolutionBackwardDataAlgorithmEx: CUDNN_STATUS_NOT_SUPPORTED";
  bench::Derive(&a);
  bench::Derive(&b);
  rep.problems = {a, b};
  return rep;
}

TEST(BenchDerive, SpeedUpsTflopsAndCeilings) {
  const bench::Report rep = SyntheticReport();
  const bench::Row& ours = rep.problems[0].rows[0];
  EXPECT_DOUBLE_EQ(ours.speedup_vs_match, 2.0);  // cuDNN fp32 4 ms / ours 2 ms
  EXPECT_DOUBLE_EQ(ours.speedup_vs_tf32, 1.5);   // cuDNN tf32 3 ms / ours 2 ms
  const double flops = L1_72().problem.Flops();
  EXPECT_NEAR(ours.tflops, flops / 2.0 / 1e9, 1e-9);
  EXPECT_NEAR(ours.ceiling_frac, ours.tflops / bench::kFfmaCeilingTflops, 1e-12);
  const bench::Row& bf16 = rep.problems[0].rows[3];
  EXPECT_NEAR(bf16.ceiling_frac, bf16.tflops / bench::kBf16CeilingTflops, 1e-12);
  EXPECT_LT(bf16.speedup_vs_match, 0);  // cuDNN rows carry no speed-up
  // A cuDNN row without a time leaves its speed-up empty, not 0 or inf.
  const bench::Row& ours_b = rep.problems[1].rows[0];
  EXPECT_LT(ours_b.speedup_vs_match, 0);
  EXPECT_DOUBLE_EQ(ours_b.speedup_vs_tf32, 0.25);
}

// Bytes by hand for L1-72 (input 8x32x12x24x48, weight 32x8x3x5x7, output 8x32x24x48x96, no
// bias): 4 bytes per element, 2 in bf16 rows; the copy fraction only with a measured copy.
TEST(BenchDerive, BandwidthAndCopyFraction) {
  bench::ProblemResult r;
  r.problem = L1_72();
  r.rows = {MakeRow("convt3d", Mode::kFp32, 2.0, 1e-7), MakeRow("convt3d", Mode::kBf16, 1.0, 4e-3)};
  const double elements = 8.0 * 32 * 12 * 24 * 48 + 32.0 * 8 * 3 * 5 * 7 + 8.0 * 32 * 24 * 48 * 96;
  bench::Derive(&r, 3000);
  EXPECT_NEAR(r.rows[0].gbps, elements * 4 / 2e-3 / 1e9, 1e-9);
  EXPECT_NEAR(r.rows[1].gbps, elements * 2 / 1e-3 / 1e9, 1e-9);
  EXPECT_NEAR(r.rows[0].copy_frac, r.rows[0].gbps / 3000, 1e-12);
  bench::Derive(&r);  // no copy measured
  EXPECT_LT(r.rows[0].copy_frac, 0);
  EXPECT_GT(r.rows[0].gbps, 0);
}

TEST(BenchModes, TableIsConsistent) {
  EXPECT_EQ(bench::OurModes(),
            (std::vector<Mode>{Mode::kFp32, Mode::kFp32x3, Mode::kTf32, Mode::kBf16}));
  EXPECT_EQ(bench::CudnnModes(), (std::vector<Mode>{Mode::kTf32, Mode::kFp32, Mode::kBf16}));
  EXPECT_STREQ(bench::ModeName(Mode::kFp32x3), "fp32x3");
  EXPECT_EQ(bench::Info(Mode::kFp32).ceiling_tflops, 51);
  EXPECT_EQ(bench::Info(Mode::kTf32).ceiling_tflops, 402);
  EXPECT_EQ(bench::Info(Mode::kBf16).ceiling_tflops, 793);
  EXPECT_EQ(bench::Info(Mode::kFp32x3).cudnn_match, Mode::kFp32);
  EXPECT_EQ(bench::Info(Mode::kBf16).cudnn_match, Mode::kBf16);
}

TEST(BenchWriters, JsonIsWellFormedAndComplete) {
  const bench::Report rep = SyntheticReport();
  const auto j = nlohmann::json::parse(bench::ToJson(rep));  // throws if malformed
  ASSERT_EQ(j["problems"].size(), 2u);
  EXPECT_EQ(j["problems"][0]["name"], "L1-72");
  EXPECT_EQ(j["problems"][1]["name"], "tiny,\"quoted\"");
  std::set<std::string> seen;
  for (const auto& p : j["problems"])
    for (const auto& r : p["rows"])
      seen.insert(r["impl"].get<std::string>() + "/" + r["mode"].get<std::string>());
  for (const char* k : {"convt3d/fp32", "cudnn/tf32", "cudnn/fp32", "cudnn/bf16"})
    EXPECT_TRUE(seen.count(k)) << k;
  const auto& ours = j["problems"][0]["rows"][0];
  EXPECT_DOUBLE_EQ(ours["speedup_vs_cudnn_match"].get<double>(), 2.0);
  EXPECT_EQ(ours["match_mode"], "fp32");
  EXPECT_TRUE(j["problems"][1]["rows"][2]["ms"].is_null());
  EXPECT_FALSE(j["problems"][1]["rows"][2]["ok"].get<bool>());
  EXPECT_EQ(j["ceilings_tflops"]["tf32"], 402);
  EXPECT_EQ(j["protocol"]["repeats"], 20);
}

// Splits one CSV line, honouring quotes.
std::vector<std::string> CsvSplit(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

TEST(BenchWriters, CsvHasOneRowPerResultAndEqualColumns) {
  const std::string csv = bench::ToCsv(SyntheticReport());
  std::istringstream in(csv);
  std::vector<std::vector<std::string>> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(CsvSplit(l));
  ASSERT_EQ(lines.size(), 1u + 4u + 3u);
  const size_t cols = lines[0].size();
  EXPECT_EQ(lines[0][0], "problem");
  for (const auto& l : lines) EXPECT_EQ(l.size(), cols);
  std::set<std::string> problems, modes;
  for (size_t i = 1; i < lines.size(); ++i) {
    problems.insert(lines[i][0]);
    modes.insert(lines[i][1] + "/" + lines[i][2]);
  }
  EXPECT_EQ(problems, (std::set<std::string>{"L1-72", "tiny,\"quoted\""}));
  EXPECT_EQ(modes,
            (std::set<std::string>{"convt3d/fp32", "cudnn/tf32", "cudnn/fp32", "cudnn/bf16"}));
  EXPECT_EQ(lines[1][4], "2");  // ms of ours on L1-72
}

// A minimal XML well-formedness check: tags balance, attributes are quoted, no stray '<' or
// '&' in text. Enough to catch a writer that forgets to close or escape.
::testing::AssertionResult WellFormedXml(const std::string& s) {
  std::vector<std::string> stack;
  size_t i = 0;
  if (s.rfind("<?xml", 0) == 0) i = s.find("?>") + 2;
  for (; i < s.size(); ++i) {
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      const std::string ent = s.substr(i, semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;")
        return ::testing::AssertionFailure() << "bad entity at " << i << ": " << ent;
      continue;
    }
    if (s[i] != '<') continue;
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return ::testing::AssertionFailure() << "unclosed tag at " << i;
    std::string tag = s.substr(i + 1, end - i - 1);
    if (tag.find('<') != std::string::npos)
      return ::testing::AssertionFailure() << "'<' inside a tag at " << i;
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0)
      return ::testing::AssertionFailure() << "unbalanced quotes in <" << tag << ">";
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name)
        return ::testing::AssertionFailure() << "</" << name << "> closes nothing open";
      stack.pop_back();
    } else if (tag.back() != '/') {
      stack.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
    }
    i = end;
  }
  if (!stack.empty()) return ::testing::AssertionFailure() << "<" << stack.back() << "> unclosed";
  return ::testing::AssertionSuccess();
}

TEST(BenchWriters, SvgIsWellFormedAndLabelsEverything) {
  const std::string svg = bench::ToSvg(SyntheticReport());
  EXPECT_TRUE(WellFormedXml(svg));
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find(">L1-72</text>"), std::string::npos);
  EXPECT_NE(svg.find("tiny,&quot;quoted&quot;"), std::string::npos);
  EXPECT_NE(svg.find("convt3d fp32 vs cuDNN fp32"), std::string::npos);
  EXPECT_NE(svg.find("convt3d fp32 vs cuDNN tf32"), std::string::npos);
  EXPECT_NE(svg.find("2.00x"), std::string::npos);             // L1-72 vs fp32
  EXPECT_NE(svg.find("0.25x"), std::string::npos);             // tiny vs tf32: a bar below 1x
  EXPECT_NE(svg.find(">n/a<"), std::string::npos);             // tiny vs fp32: cuDNN failed
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);  // the 1x line
  EXPECT_NE(svg.find(">1x</text>"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(BenchWriters, SvgWithoutCudnnSaysSo) {
  bench::Report rep = SyntheticReport();
  rep.cudnn_error = "libcudnn.so.9 not found";
  for (auto& p : rep.problems) {
    p.rows.resize(1);
    bench::Derive(&p);
  }
  const std::string svg = bench::ToSvg(rep);
  EXPECT_TRUE(WellFormedXml(svg));
  EXPECT_NE(svg.find("no cuDNN rows"), std::string::npos);
  EXPECT_NE(svg.find(">L1-72</text>"), std::string::npos);
  const std::string text = bench::ToText(rep);
  EXPECT_NE(text.find("cuDNN: not available (libcudnn.so.9 not found)"), std::string::npos);
}

TEST(BenchWriters, TextTableHasEveryRow) {
  const std::string text = bench::ToText(SyntheticReport());
  EXPECT_NE(text.find("2.00x"), std::string::npos);
  EXPECT_NE(text.find("1.50x"), std::string::npos);
  EXPECT_NE(text.find("CUDNN_STATUS_NOT_SUPPORTED"), std::string::npos);
  size_t l172 = 0;
  for (size_t pos = 0; (pos = text.find("\nL1-72 ", pos)) != std::string::npos; ++pos) ++l172;
  EXPECT_EQ(l172, 4u);
}

// ---- inputs and comparison -------------------------------------------------------------------

TEST(BenchInputs, UniformIsDeterministicNonZeroAndThreadIndependent) {
  const int64_t n = 300000;
  std::vector<float> a(n), b(n), c(n);
  bench::FillUniform(a.data(), n, 7, 1);
  bench::FillUniform(b.data(), n, 7, 4);
  bench::FillUniform(c.data(), n, 8, 4);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double sum = 0;
  for (float v : a) {
    ASSERT_GT(v, -1.0f);
    ASSERT_LT(v, 1.0f);
    ASSERT_NE(v, 0.0f);
    sum += v;
  }
  EXPECT_LT(std::fabs(sum / n), 0.01);
}

TEST(BenchCompare, HandWorkedAndNonFinite) {
  const std::vector<double> ref = {3, 4, 0};
  const std::vector<float> y = {3, 4, 1};  // diff (0, 0, 1): ||d|| = 1, ||ref|| = 5
  bench::ErrorStats e = bench::Compare(y.data(), ref.data(), 3, 1);
  EXPECT_DOUBLE_EQ(e.rel_l2, 0.2);
  EXPECT_DOUBLE_EQ(e.max_abs, 1.0);
  EXPECT_EQ(e.nonfinite, 0);
  const std::vector<uint16_t> y16 = {0x4040, 0x4080, 0x7fc0};  // 3, 4, NaN
  e = bench::Compare(y16.data(), ref.data(), 3, 1);
  EXPECT_EQ(e.nonfinite, 1);
  EXPECT_TRUE(std::isinf(e.rel_l2));
  // Threads give the same answer as one thread, up to summation order.
  const int64_t n = 1 << 20;
  std::vector<float> big(n);
  std::vector<double> bref(n);
  bench::FillUniform(big.data(), n, 3, 1);
  for (int64_t i = 0; i < n; ++i) bref[i] = big[i] * (1 + 1e-6 * ((i % 7) - 3));
  const auto one = bench::Compare(big.data(), bref.data(), n, 1);
  const auto many = bench::Compare(big.data(), bref.data(), n, 8);
  EXPECT_NEAR(one.rel_l2, many.rel_l2, 1e-12);
  EXPECT_EQ(one.max_abs, many.max_abs);
}

// ---- cuDNN mapping -----------------------------------------------------------------------------

TEST(CudnnMapping, L1_72WithGroupsAndOutputPadding) {
  auto d = cudnn::MapConvTranspose3d(L1_72().problem);
  ASSERT_OK(d);
  // dy is our input [8, 32, 12, 24, 48]; dx our output [8, 32, 24, 48, 96]:
  // Do = (12-1)*2 - 2*1 + 1*(3-1) + 1 + 1 = 24, Ho = 23*2 - 4 + 4 + 2 = 48, Wo = 47*2 - 6 + 6 + 2.
  EXPECT_EQ(d->dy_dims, (std::array<int, 5>{8, 32, 12, 24, 48}));
  EXPECT_EQ(d->dy_strides, (std::array<int, 5>{442368, 13824, 1152, 48, 1}));
  EXPECT_EQ(d->dx_dims, (std::array<int, 5>{8, 32, 24, 48, 96}));
  EXPECT_EQ(d->dx_strides, (std::array<int, 5>{3538944, 110592, 4608, 96, 1}));
  // Filter [K = C_in, C_out / groups, kD, kH, kW]: exactly our weight layout.
  EXPECT_EQ(d->w_dims, (std::array<int, 5>{32, 8, 3, 5, 7}));
  EXPECT_EQ(d->pad, (std::array<int, 3>{1, 2, 3}));
  EXPECT_EQ(d->stride, (std::array<int, 3>{2, 2, 2}));
  EXPECT_EQ(d->dilation, (std::array<int, 3>{1, 1, 1}));
  EXPECT_EQ(d->groups, 4);
  EXPECT_EQ(d->bias_dims, (std::array<int, 5>{1, 32, 1, 1, 1}));
  EXPECT_EQ(d->bias_strides, (std::array<int, 5>{32, 1, 1, 1, 1}));
}

TEST(CudnnMapping, DilationAndAsymmetricKernel) {
  Problem p;  // L1-77: [16, 32, 16, 32, 32] -> 64 channels, k3, s2, p1, d2
  p.n = 16, p.c_in = 32, p.c_out = 64, p.in = {16, 32, 32};
  p.kernel = {3, 3, 3}, p.stride = {2, 2, 2}, p.padding = {1, 1, 1}, p.dilation = {2, 2, 2};
  auto d = cudnn::MapConvTranspose3d(p);
  ASSERT_OK(d);
  EXPECT_EQ(d->dx_dims, (std::array<int, 5>{16, 64, 33, 65, 65}));
  EXPECT_EQ(d->w_dims, (std::array<int, 5>{32, 64, 3, 3, 3}));
  EXPECT_EQ(d->dilation, (std::array<int, 3>{2, 2, 2}));
  EXPECT_EQ(d->groups, 1);
}

TEST(CudnnMapping, RefusesWhatCudnnCannotExpress) {
  Problem p;  // output_padding 1 >= stride 1 is legal in PyTorch (it is < dilation 2)
  p.n = 1, p.c_in = 2, p.c_out = 2, p.in = {4, 4, 4};
  p.kernel = {3, 3, 3}, p.dilation = {2, 1, 1}, p.output_padding = {1, 0, 0};
  ASSERT_OK(Validate(p));
  EXPECT_THAT(cudnn::MapConvTranspose3d(p),
              StatusIs(Code::kUnavailable, HasSubstr("output_padding[0]=1")));
  Problem big = p;  // more elements than cuDNN's int descriptors hold
  big.output_padding = {0, 0, 0};
  big.n = 1 << 20, big.in = {64, 64, 64};
  EXPECT_THAT(cudnn::MapConvTranspose3d(big),
              StatusIs(Code::kUnavailable, HasSubstr("int descriptors")));
  Problem bad = p;
  bad.groups = 3;
  EXPECT_THAT(cudnn::MapConvTranspose3d(bad),
              StatusIs(Code::kInvalidArgument, HasSubstr("groups=3")));
}

// ---- cuDNN loading -----------------------------------------------------------------------------

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old, had_ = true;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

TEST(CudnnLoad, MissingLibraryIsOneLineNamingThePath) {
  for (const char* where : {"/nonexistent/libcudnn.so.9", "/nonexistent_dir"}) {
    ScopedEnv env("CONVT3D_CUDNN", where);
    EXPECT_THAT(cudnn::Library::Load(),
                StatusIs(Code::kUnavailable, AllOf(HasSubstr(where), Not(HasSubstr("\n")))));
  }
}

TEST(CudnnLoad, LoadsAndResolvesEveryEntryPointWhenPresent) {
  ScopedEnv env("CONVT3D_CUDNN", nullptr);
  auto lib = cudnn::Library::Load();
  if (!lib.ok()) GTEST_SKIP() << "no cuDNN on this machine: " << lib.status().message();
  EXPECT_EQ((*lib)->version() / 10000, 9u);
  EXPECT_EQ((*lib)->VersionString().substr(0, 2), "9.");
  EXPECT_FALSE((*lib)->path().empty());
  // Pointing CONVT3D_CUDNN at the file found gives the same library.
  ScopedEnv exact("CONVT3D_CUDNN", (*lib)->path().c_str());
  auto again = cudnn::Library::Load();
  ASSERT_OK(again);
  EXPECT_EQ((*again)->version(), (*lib)->version());
}

TEST(CudnnLoad, CudnnAgreesWithTheMappingOnEveryLevel1Problem) {
  ScopedEnv env("CONVT3D_CUDNN", nullptr);
  auto lib = cudnn::Library::Load();
  if (!lib.ok()) GTEST_SKIP() << "no cuDNN on this machine: " << lib.status().message();
  auto problems =
      io::LoadProblems(std::string(CONVT3D_SOURCE_DIR) + "/problems/kernelbench_l1.json");
  ASSERT_OK(problems);
  std::vector<io::NamedProblem> all = *problems;
  io::NamedProblem odd;  // asymmetric everything, bias, output_padding on one axis
  odd.name = "odd";
  odd.problem.n = 3, odd.problem.c_in = 6, odd.problem.c_out = 9, odd.problem.in = {5, 7, 4};
  odd.problem.kernel = {2, 3, 4}, odd.problem.stride = {3, 1, 2}, odd.problem.padding = {1, 0, 2};
  odd.problem.output_padding = {2, 0, 1}, odd.problem.dilation = {1, 2, 3};
  odd.problem.groups = 3, odd.problem.bias = true;
  all.push_back(odd);
  for (const auto& np : all) {
    for (auto prec : {cudnn::Precision::kTf32, cudnn::Precision::kFp32, cudnn::Precision::kBf16}) {
      EXPECT_OK(cudnn::VerifyDescriptors(**lib, np.problem, prec))
          << np.name << " " << cudnn::PrecisionName(prec);
    }
  }
}

TEST(CudnnLoad, HandleWithoutGpuFailsInOneLineNamingTheCall) {
  if (DescribeEnvironment().driver_error.empty()) GTEST_SKIP() << "a GPU is present";
  ScopedEnv env("CONVT3D_CUDNN", nullptr);
  auto lib = cudnn::Library::Load();
  if (!lib.ok()) GTEST_SKIP() << "no cuDNN on this machine: " << lib.status().message();
  EXPECT_THAT(cudnn::Handle::Create(*lib),
              StatusIs(Code::kInternal,
                       AllOf(StartsWith("cudnnCreate: CUDNN_STATUS_"), Not(HasSubstr("\n")))));
}

// ---- The CLI without a GPU ---------------------------------------------------------------------

TEST(BenchCli, NoGpuAndNoCudnnAreOneLineEachAndExit2) {
  if (DescribeEnvironment().driver_error.empty())
    GTEST_SKIP() << "a GPU is present: the bench would run for real";
  const std::string problems = std::string(CONVT3D_SOURCE_DIR) + "/problems/kernelbench_l1.json";
  const CliResult r = RunCli("bench --problems '" + problems +
                                 "' --only L1-72 --json '' --csv '' "
                                 "--svg ''",
                             "CONVT3D_CUDNN=/nonexistent/libcudnn.so.9 CONVT3D_CACHE=:memory:");
  EXPECT_EQ(r.code, 2) << r.err;
  std::vector<std::string> lines;
  std::istringstream in(r.err);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 2u) << r.err;
  EXPECT_EQ(lines[0].rfind("convt3d: cuDNN not available (CONVT3D_CUDNN=/nonexistent/", 0), 0u)
      << lines[0];
  EXPECT_NE(lines[0].find("timing convt3d alone"), std::string::npos);
  EXPECT_EQ(lines[1].rfind("convt3d: no usable GPU (", 0), 0u) << lines[1];
}

TEST(BenchCli, UsageErrors) {
  const CliResult unknown =
      RunCli("bench --only NOPE --problems '" + std::string(CONVT3D_SOURCE_DIR) +
                 "/problems/kernelbench_l1.json'",
             "CONVT3D_CACHE=:memory:");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("no problem named \"NOPE\""), std::string::npos) << unknown.err;
  const CliResult few = RunCli("bench --repeats 5", "CONVT3D_CACHE=:memory:");
  EXPECT_EQ(few.code, 2) << few.err;  // the protocol takes the median of at least 20 runs
  const CliResult dtype = RunCli(
      "bench --input 1,2,4,4,4 --out-channels 2 --kernel-size 3 "
      "--dtype f64",
      "CONVT3D_CACHE=:memory:");
  EXPECT_EQ(dtype.code, 2);
  EXPECT_NE(dtype.err.find("--dtype does not apply"), std::string::npos) << dtype.err;
}

}  // namespace
}  // namespace convt3d
