// test_bench.cpp: the parts of `convt3d bench` that need no GPU: modes, roofline, problem lists,
// writers, 16-bit comparison, the cuDNN mapping and loading, the CLI's refusals.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/strings.h"
#include "bench/bench.h"
#include "runtime/cudnn.h"
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
  rep.copy_gbps = 3000;
  rep.copy_bytes = size_t{1} << 30;
  bench::Derive(&a, rep.copy_gbps, rep.peaks);
  bench::Derive(&b, rep.copy_gbps, rep.peaks);
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
  EXPECT_NEAR(ours.ceiling_frac, ours.tflops / 51, 1e-12);  // the H200's FFMA peak
  const bench::Row& bf16 = rep.problems[0].rows[3];
  EXPECT_NEAR(bf16.ceiling_frac, bf16.tflops / 793, 1e-12);
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
            (std::vector<Mode>{Mode::kFp32, Mode::kFp32x3, Mode::kTf32, Mode::kBf16, Mode::kF16}));
  EXPECT_EQ(bench::CudnnModes(),
            (std::vector<Mode>{Mode::kTf32, Mode::kFp32, Mode::kBf16, Mode::kF16}));
  EXPECT_STREQ(bench::ModeName(Mode::kFp32x3), "fp32x3");
  EXPECT_STREQ(bench::ModeName(Mode::kF16), "f16");
  EXPECT_EQ(bench::Info(Mode::kFp32x3).cudnn_match, Mode::kFp32);
  EXPECT_EQ(bench::Info(Mode::kBf16).cudnn_match, Mode::kBf16);
  EXPECT_EQ(bench::Info(Mode::kF16).cudnn_match, Mode::kF16);
  EXPECT_EQ(bench::Info(Mode::kF16).dtype, DType::kF16);
  EXPECT_EQ(bench::Info(Mode::kBf16).dtype, DType::kBF16);
  EXPECT_EQ(bench::Info(Mode::kTf32).dtype, DType::kF32);
  EXPECT_EQ(bench::ElementBytes(Mode::kF16), 2);
  EXPECT_EQ(bench::ElementBytes(Mode::kFp32x3), 4);
  for (Mode m : bench::OurModes()) EXPECT_LE(bench::Info(m).tolerance, 3e-2) << bench::ModeName(m);
}

TEST(BenchModes, ParseAcceptsF16AndFp16AndKeepsTableOrder) {
  auto m = bench::ParseModes("f16,fp32");
  ASSERT_OK(m);
  EXPECT_EQ(*m, (std::vector<Mode>{Mode::kFp32, Mode::kF16}));
  m = bench::ParseModes("fp16,bf16,f16");
  ASSERT_OK(m);
  EXPECT_EQ(*m, (std::vector<Mode>{Mode::kBf16, Mode::kF16}));
  m = bench::ParseModes("fp32,fp32x3,tf32,bf16,fp16");
  ASSERT_OK(m);
  EXPECT_EQ(*m, bench::OurModes());
  EXPECT_THAT(bench::ParseModes("tf32,half"),
              StatusIs(Code::kInvalidArgument, HasSubstr("--precision=half")));
  EXPECT_THAT(bench::ParseModes(","), StatusIs(Code::kInvalidArgument, HasSubstr("no mode")));
}

// A problem's dtype is honoured: 16-bit problems run their own mode (ours and cuDNN's), f32
// problems every requested mode with cuDNN in each match and in TF32.
TEST(BenchModes, DtypeDecidesTheModes) {
  const std::vector<Mode> all = bench::OurModes();
  EXPECT_EQ(bench::OurModesFor(DType::kF16, all), (std::vector<Mode>{Mode::kF16}));
  EXPECT_EQ(bench::OurModesFor(DType::kBF16, all), (std::vector<Mode>{Mode::kBf16}));
  EXPECT_EQ(bench::OurModesFor(DType::kF32, all), all);
  EXPECT_EQ(bench::OurModesFor(DType::kF64, all), all);
  EXPECT_TRUE(bench::OurModesFor(DType::kF16, {Mode::kFp32, Mode::kBf16}).empty());
  EXPECT_EQ(bench::CudnnModesFor({Mode::kF16}), (std::vector<Mode>{Mode::kF16}));
  EXPECT_EQ(bench::CudnnModesFor({Mode::kBf16}), (std::vector<Mode>{Mode::kBf16}));
  EXPECT_EQ(bench::CudnnModesFor(all), bench::CudnnModes());
  EXPECT_EQ(bench::CudnnModesFor({Mode::kFp32x3}), (std::vector<Mode>{Mode::kTf32, Mode::kFp32}));
  // The f16 and bf16 rows of models.json.
  auto models = io::LoadProblems(std::string(CONVT3D_SOURCE_DIR) + "/problems/models.json");
  ASSERT_OK(models);
  int f16 = 0, bf16 = 0;
  for (const auto& np : *models) {
    const std::vector<Mode> modes = bench::OurModesFor(np.problem.dtype, all);
    if (np.name == "NNU-5h") {
      EXPECT_EQ(np.problem.dtype, DType::kF16);
      EXPECT_EQ(modes, (std::vector<Mode>{Mode::kF16}));
      ++f16;
    } else if (np.name == "GAN-4b") {
      EXPECT_EQ(modes, (std::vector<Mode>{Mode::kBf16}));
      ++bf16;
    }
  }
  EXPECT_EQ(f16, 1);
  EXPECT_EQ(bf16, 1);
}

// ---- Roofline
// ------------------------------------------------------------------------------------

TEST(BenchRoofline, PeaksByDeviceName) {
  const bench::Peaks h200 = bench::PeaksFor("NVIDIA H200");
  EXPECT_EQ(h200.device, "H200");
  EXPECT_FALSE(h200.assumed);
  for (auto [mode, tflops] : {std::pair{Mode::kFp32, 51},
                              {Mode::kTf32, 402},
                              {Mode::kFp32x3, 134},
                              {Mode::kBf16, 793},
                              {Mode::kF16, 793}})
    EXPECT_EQ(bench::PeakTflops(h200, mode), tflops);
  const bench::Peaks h100 = bench::PeaksFor("NVIDIA H100 80GB HBM3");
  EXPECT_EQ(h100.device, "H100 SXM");
  EXPECT_FALSE(h100.assumed);
  for (auto [mode, tflops] :
       {std::pair{Mode::kFp32, 51}, {Mode::kTf32, 378}, {Mode::kFp32x3, 126}, {Mode::kF16, 756}})
    EXPECT_EQ(bench::PeakTflops(h100, mode), tflops);
  const bench::Peaks other = bench::PeaksFor("NVIDIA A100-SXM4-80GB");
  EXPECT_TRUE(other.assumed);
  EXPECT_EQ(bench::PeakTflops(other, Mode::kTf32), 402);
}

const io::NamedProblem& Named(const std::vector<io::NamedProblem>& list, const std::string& name) {
  for (const auto& np : list)
    if (np.name == name) return np;
  ADD_FAILURE() << "no problem " << name;
  return list.front();
}

// Every problem's FLOPs are the files' "gflop" (2 per input-by-weight multiply-add) and its
// bytes in its own dtype the files' "min_mbytes", to their rounding.
TEST(BenchRoofline, FlopsAndBytesMatchTheProblemFiles) {
  for (const char* file : {"kernelbench_l1.json", "models.json"}) {
    const std::string path = std::string(CONVT3D_SOURCE_DIR) + "/problems/" + file;
    auto list = io::LoadProblems(path);
    ASSERT_OK(list);
    // min_mbytes is not a field of io::NamedProblem: read it from the file itself.
    std::ifstream in(path);
    const auto raw = nlohmann::json::parse(in)["problems"];
    ASSERT_EQ(raw.size(), list->size());
    for (size_t i = 0; i < list->size(); ++i) {
      const io::NamedProblem& np = (*list)[i];
      ASSERT_EQ(raw[i]["name"], np.name);
      EXPECT_NEAR(np.problem.Flops() / 1e9, np.gflop, 0.0005 + 1e-9) << file << " " << np.name;
      // The mode a problem runs in by its dtype moves its bytes in that dtype.
      const Mode m = bench::OurModesFor(np.problem.dtype, bench::OurModes()).front();
      EXPECT_NEAR(bench::MinBytes(np.problem, m) / 1e6, raw[i]["min_mbytes"].get<double>(),
                  0.05 + 1e-9)
          << file << " " << np.name;
    }
  }
}

// GAN-4 (N=32, 128->64, k4 s2 p1, 16^3 -> 32^3) is compute-bound; NNU-4 (N=2, 128->64, k2 s2,
// 32^3 -> 64^3) is memory-bound in TF32 and BF16 but compute-bound in strict fp32. Worked by
// hand with the H200 peaks and a 4000 GB/s copy.
TEST(BenchRoofline, ComputeAndMemoryBoundByHand) {
  auto models = io::LoadProblems(std::string(CONVT3D_SOURCE_DIR) + "/problems/models.json");
  ASSERT_OK(models);
  const bench::Peaks h200;
  const Problem& gan4 = Named(*models, "GAN-4").problem;
  // FLOPs = 2 * 32 * 128 * 16^3 * 64 * 4^3 = 137,438,953,472.
  EXPECT_DOUBLE_EQ(gan4.Flops(), 137438953472.0);
  // Elements: x 32*128*4096 = 16,777,216; w 128*64*64 = 524,288; y 32*64*32768 = 67,108,864.
  EXPECT_DOUBLE_EQ(bench::MinBytes(gan4, Mode::kTf32), 84410368.0 * 4);
  bench::Floor f = bench::RooflineFloor(gan4, Mode::kTf32, h200, 4000);
  EXPECT_NEAR(f.compute_ms, 0.341888, 1e-6);  // 137.439e9 / 402e12 s
  EXPECT_NEAR(f.memory_ms, 0.084410, 1e-6);   // 337.64e6 / 4000e9 s
  EXPECT_NEAR(f.ms, 0.341888, 1e-6);
  EXPECT_STREQ(f.bound, "compute");
  f = bench::RooflineFloor(gan4, Mode::kFp32x3, h200, 4000);
  EXPECT_NEAR(f.ms, 1.025664, 1e-6);  // 137.439e9 / 134e12 s
  EXPECT_STREQ(f.bound, "compute");

  const Problem& nnu4 = Named(*models, "NNU-4").problem;
  // FLOPs = 2 * 2 * 128 * 32^3 * 64 * 2^3 = 8,589,934,592.
  EXPECT_DOUBLE_EQ(nnu4.Flops(), 8589934592.0);
  // Elements: x 2*128*32768 = 8,388,608; w 128*64*8 = 65,536; y 2*64*262144 = 33,554,432.
  f = bench::RooflineFloor(nnu4, Mode::kTf32, h200, 4000);
  EXPECT_NEAR(f.compute_ms, 0.021368, 1e-6);  // 8.59e9 / 402e12 s
  EXPECT_NEAR(f.memory_ms, 0.042009, 1e-6);   // 42,008,576 * 4 B / 4000e9 B/s
  EXPECT_NEAR(f.ms, 0.042009, 1e-6);
  EXPECT_STREQ(f.bound, "memory");
  f = bench::RooflineFloor(nnu4, Mode::kBf16, h200, 4000);
  EXPECT_NEAR(f.compute_ms, 0.010832, 1e-6);  // 8.59e9 / 793e12 s
  EXPECT_NEAR(f.ms, 0.021004, 1e-6);          // 42,008,576 * 2 B / 4000e9 B/s
  EXPECT_STREQ(f.bound, "memory");
  f = bench::RooflineFloor(nnu4, Mode::kFp32, h200, 4000);
  EXPECT_NEAR(f.ms, 0.168430, 1e-6);  // 8.59e9 / 51e12 s
  EXPECT_STREQ(f.bound, "compute");
  // Without a measured copy bandwidth there is no floor.
  f = bench::RooflineFloor(nnu4, Mode::kTf32, h200, -1);
  EXPECT_LT(f.ms, 0);
  EXPECT_STREQ(f.bound, "");

  // The row's fractions: ours 0.084 ms and cuDNN 0.060 ms on a floor of 0.042 ms.
  bench::ProblemResult r;
  r.problem = Named(*models, "NNU-4");
  r.rows = {MakeRow("convt3d", Mode::kTf32, 0.084018, 1e-4),
            MakeRow("cudnn", Mode::kTf32, 0.060013, 1e-4)};
  bench::Derive(&r, 4000, h200);
  EXPECT_NEAR(r.rows[0].roofline_frac, 0.5, 1e-4);
  EXPECT_NEAR(r.rows[0].cudnn_roofline_frac, 0.7, 1e-4);
  EXPECT_NEAR(r.rows[1].roofline_frac, 0.7, 1e-4);
  EXPECT_LT(r.rows[1].cudnn_roofline_frac, 0);  // only ours carry cuDNN's fraction
  EXPECT_NEAR(r.rows[0].roofline_frac / r.rows[0].speedup_vs_match, r.rows[0].cudnn_roofline_frac,
              1e-12);
}

// Geomeans over problems whose floor is at least 20 us: the synthetic report's "tiny" (L1-72 at
// N=1: 0.0146 ms strict fp32 floor) is left out, L1-72 (0.1166 ms) counts.
TEST(BenchRoofline, GeomeansSkipSmallFloors) {
  bench::Report rep = SyntheticReport();
  const double floor = L1_72().problem.Flops() / 51e9;  // compute-bound at 3000 GB/s
  ASSERT_NEAR(rep.problems[0].rows[0].floor.ms, floor, 1e-12);
  ASSERT_LT(rep.problems[1].rows[0].floor.ms, bench::kGeomeanMinFloorMs);
  std::vector<bench::ModeSummary> s = bench::Summarize(rep);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].mode, Mode::kFp32);
  EXPECT_EQ(s[0].problems, 1);
  EXPECT_NEAR(s[0].roofline_geomean, floor / 2.0, 1e-12);
  EXPECT_NEAR(s[0].roofline_min, floor / 2.0, 1e-12);
  EXPECT_EQ(s[0].cudnn_mode, Mode::kFp32);
  EXPECT_EQ(s[0].cudnn_problems, 1);
  EXPECT_NEAR(s[0].cudnn_roofline_geomean, floor / 4.0, 1e-12);
  EXPECT_NEAR(s[0].speedup_geomean, 2.0, 1e-12);
  EXPECT_NEAR(s[0].speedup_tf32_geomean, 1.5, 1e-12);
  // With the limit at 0 both count: geomean of floor/2 and floor_tiny/1 (cuDNN's fp32 row of
  // tiny failed, so cuDNN's geomean keeps one problem).
  s = bench::Summarize(rep, 0);
  const double tiny = rep.problems[1].rows[0].floor.ms;
  EXPECT_EQ(s[0].problems, 2);
  EXPECT_NEAR(s[0].roofline_geomean, std::sqrt(floor / 2.0 * tiny / 1.0), 1e-12);
  EXPECT_NEAR(s[0].roofline_min, std::min(floor / 2.0, tiny), 1e-12);
  EXPECT_EQ(s[0].cudnn_problems, 1);
  EXPECT_EQ(s[0].tf32_problems, 2);
  EXPECT_NEAR(s[0].speedup_tf32_geomean, std::sqrt(1.5 * 0.25), 1e-12);
}

// ---- Problem lists ---------------------------------------------------------------------------

TEST(BenchLists, Level1AndModelsInTheirOrder) {
  const std::string dir = std::string(CONVT3D_SOURCE_DIR) + "/problems/";
  const std::vector<std::string> files = {dir + "kernelbench_l1.json", dir + "models.json"};
  auto all = bench::LoadProblemLists(files, "");
  ASSERT_OK(all);
  EXPECT_EQ(all->size(), 7u + 23u);
  EXPECT_EQ(all->front().name, "L1-58");
  EXPECT_EQ(all->back().name, "VID-1b");
  auto two = bench::LoadProblemLists(files, "GAN-3,L1-70");
  ASSERT_OK(two);
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].name, "L1-70");  // the lists' order, not --only's
  EXPECT_EQ((*two)[1].name, "GAN-3");
  EXPECT_THAT(bench::LoadProblemLists(files, "GAN-3,NOPE"),
              StatusIs(Code::kInvalidArgument, HasSubstr("no problem named \"NOPE\"")));
}

TEST(BenchLists, DuplicatesAreKeptOnce) {
  // bench.json repeats the level-1 problems with the same shapes: each is kept once.
  const std::string dir = std::string(CONVT3D_SOURCE_DIR) + "/problems/";
  auto l1 = bench::LoadProblemLists({dir + "kernelbench_l1.json"}, "");
  auto bench_list = bench::LoadProblemLists({dir + "bench.json"}, "");
  auto both = bench::LoadProblemLists({dir + "kernelbench_l1.json", dir + "bench.json"}, "");
  ASSERT_OK(l1);
  ASSERT_OK(bench_list);
  ASSERT_OK(both);
  EXPECT_EQ(both->size(), bench_list->size());
  EXPECT_GT(bench_list->size(), l1->size());
  // The same name with another shape is refused, naming both files.
  char path[] = "/tmp/convt3d_bench_lists_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ofstream f(path);
    f << R"([{"name": "L1-72", "input": [1, 2, 4, 4, 4], "out_channels": 2, "kernel": 3}])";
  }
  EXPECT_THAT(bench::LoadProblemLists({dir + "kernelbench_l1.json", path}, ""),
              StatusIs(Code::kInvalidArgument,
                       AllOf(HasSubstr("\"L1-72\""), HasSubstr("kernelbench_l1.json"))));
  std::remove(path);
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

TEST(BenchWriters, RooflineColumnsInEveryFormat) {
  const bench::Report rep = SyntheticReport();
  const std::string text = bench::ToText(rep);
  for (const char* column : {"floor ms", "bound", "roofline", "cuDNN roofline"})
    EXPECT_NE(text.find(column), std::string::npos) << column;
  EXPECT_NE(text.find("Roofline geomeans per mode"), std::string::npos);
  EXPECT_NE(text.find("H200 table: FFMA 51, TF32 402, 3xTF32 134, BF16/FP16 793"),
            std::string::npos);
  // L1-72 strict fp32: floor 0.1166 ms (compute), ours 2 ms = 5.8%, cuDNN 4 ms = 2.9%.
  const double floor = L1_72().problem.Flops() / 51e9;
  EXPECT_NE(text.find(StrFormat("%.4f", floor)), std::string::npos) << text;
  EXPECT_NE(text.find("compute"), std::string::npos);
  EXPECT_NE(text.find("5.8%"), std::string::npos);
  EXPECT_NE(text.find("2.9%"), std::string::npos);

  std::istringstream csv(bench::ToCsv(rep));
  std::string header, first;
  std::getline(csv, header);
  std::getline(csv, first);
  const std::vector<std::string> h = CsvSplit(header), row = CsvSplit(first);
  auto col = [&](const std::string& name) {
    return static_cast<size_t>(std::find(h.begin(), h.end(), name) - h.begin());
  };
  for (const char* c : {"floor_ms", "bound", "roofline_frac", "cudnn_roofline_frac"})
    ASSERT_LT(col(c), h.size()) << c;
  EXPECT_NEAR(std::stod(row[col("floor_ms")]), floor, 1e-5);
  EXPECT_EQ(row[col("bound")], "compute");
  EXPECT_NEAR(std::stod(row[col("roofline_frac")]), floor / 2, 1e-5);
  EXPECT_NEAR(std::stod(row[col("cudnn_roofline_frac")]), floor / 4, 1e-5);

  const auto j = nlohmann::json::parse(bench::ToJson(rep));
  const auto& ours = j["problems"][0]["rows"][0];
  EXPECT_NEAR(ours["floor_ms"].get<double>(), floor, 1e-12);
  EXPECT_EQ(ours["bound"], "compute");
  EXPECT_NEAR(ours["roofline_frac"].get<double>(), floor / 2, 1e-12);
  EXPECT_NEAR(ours["cudnn_roofline_frac"].get<double>(), floor / 4, 1e-12);
  EXPECT_FALSE(j["problems"][0]["rows"][1].contains("cudnn_roofline_frac"));  // a cuDNN row
  const auto& geo = j["roofline"]["geomeans"];
  ASSERT_EQ(geo.size(), 1u);
  EXPECT_EQ(geo[0]["mode"], "fp32");
  EXPECT_EQ(geo[0]["problems"], 1);
  EXPECT_NEAR(geo[0]["speedup_vs_cudnn_match_geomean"].get<double>(), 2.0, 1e-12);
  EXPECT_EQ(j["roofline"]["peaks_device"], "H200");
  EXPECT_EQ(j["ceilings_tflops"]["f16"], 793);
  EXPECT_EQ(j["protocol"]["copy_bytes"], 1u << 30);
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
  const std::vector<uint16_t> y16 = {0x4040, 0x4080, 0x7fc0};  // bf16 3, 4, NaN
  e = bench::Compare(y16.data(), DType::kBF16, ref.data(), 3, 1);
  EXPECT_EQ(e.nonfinite, 1);
  EXPECT_TRUE(std::isinf(e.rel_l2));
  // IEEE half: 3, 4 and 0.5 (0x3800); read as bf16 these bits would be far off.
  const std::vector<uint16_t> yh = {0x4200, 0x4400, 0x3800};
  e = bench::Compare(yh.data(), DType::kF16, ref.data(), 3, 1);
  EXPECT_DOUBLE_EQ(e.rel_l2, 0.1);  // diff (0, 0, 0.5) over ||ref|| = 5
  EXPECT_DOUBLE_EQ(e.max_abs, 0.5);
  EXPECT_EQ(e.nonfinite, 0);
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

TEST(CudnnLoad, CudnnAgreesWithTheMappingOnEveryListedProblem) {
  ScopedEnv env("CONVT3D_CUDNN", nullptr);
  auto lib = cudnn::Library::Load();
  if (!lib.ok()) GTEST_SKIP() << "no cuDNN on this machine: " << lib.status().message();
  const std::string dir = std::string(CONVT3D_SOURCE_DIR) + "/problems/";
  const std::vector<std::string> files = {dir + "kernelbench_l1.json", dir + "models.json"};
  auto problems = bench::LoadProblemLists(files, "");
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
    for (auto prec : {cudnn::Precision::kTf32, cudnn::Precision::kFp32, cudnn::Precision::kBf16,
                      cudnn::Precision::kF16}) {
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
  EXPECT_NE(dtype.err.find("--dtype f64 has no bench mode"), std::string::npos) << dtype.err;
  const CliResult mode = RunCli("bench --precision tf32,fp17", "CONVT3D_CACHE=:memory:");
  EXPECT_EQ(mode.code, 2);
  EXPECT_NE(mode.err.find("--precision=fp17"), std::string::npos) << mode.err;
}

// An f16 problem runs in f16 only: asked for fp32 alone, the bench has nothing to run for it.
TEST(BenchCli, SixteenBitProblemOutsidePrecisionIsSkipped) {
  const std::string models = std::string(CONVT3D_SOURCE_DIR) + "/problems/models.json";
  const CliResult r =
      RunCli("bench --problems '" + models +
                 "' --only NNU-5h --precision fp32,bf16 --json '' --csv '' --svg ''",
             "CONVT3D_CACHE=:memory:");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("NNU-5h: dtype f16 is not among --precision=fp32,bf16 (skipped)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("no problem runs in the modes of --precision"), std::string::npos) << r.err;
}

// "fp16" names f16 in tune's --precision as in the bench's: only the unknown entry is refused.
TEST(BenchCli, Fp16IsAModeNameOfTuneToo) {
  const CliResult r =
      RunCli("tune --input 1,2,4,4,4 --out-channels 2 --kernel-size 3 --precision fp16,fp17",
             "CONVT3D_CACHE=:memory:");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--precision=fp17: expected fp32, fp32x3, tf32, bf16 or f16 (also fp16)"),
            std::string::npos)
      << r.err;
}

TEST(BenchCli, HelpShowsTheDefaultLists) {
  const CliResult r = RunCli("bench --help");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("kernelbench-l1,models"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp32,fp32x3,tf32,bf16,f16"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace convt3d
