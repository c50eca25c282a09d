// test_compile.cpp: NVRTC compiles every candidate of the seven level-1 problems to sm_90 cubins.
#include <gtest/gtest.h>

#include <algorithm>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/source.h"
#include "runtime/runtime.h"
#include "src/problem_io.h"

namespace convt3d {
namespace {

// Every kernel a plan of c launches, once each: the symbols its module must define.
std::vector<std::string> KernelSymbols(const Problem& p, const gen::Config& c) {
  std::vector<std::string> out;
  for (const gen::LaunchStep& s : gen::Launches(p, c).steps)
    if (std::find(out.begin(), out.end(), s.symbol) == out.end()) out.push_back(s.symbol);
  return out;
}

// r compiled, has its cubin, and ptxas -v (which reports "N bytes spill stores" per kernel)
// spilled nothing: spilled accumulators (once, a fully unrolled step loop) cost 3x.
void ExpectCompiledWithoutSpills(const rt::CompileResult& r) {
  EXPECT_TRUE(r.status.ok()) << r.name << ": " << r.status.message();
  for (size_t at = r.log.find("bytes spill stores"); at != std::string::npos;
       at = r.log.find("bytes spill stores", at + 1))
    EXPECT_EQ(r.log.compare(at - 3, 3, " 0 "), 0) << r.name << ": " << r.log.substr(at - 40, 80);
  EXPECT_FALSE(r.cubin.empty()) << r.name;
}

TEST(Compile, EveryLevel1CandidateCompilesForSm90) {
  auto problems = io::LoadProblems(CONVT3D_SOURCE_DIR "/problems/kernelbench_l1.json");
  ASSERT_TRUE(problems.ok()) << problems.status().message();
  ASSERT_EQ(problems->size(), 7u);
  for (const auto& np : problems.value()) {
    auto rep = CompileCandidates(np.problem, "sm_90");
    ASSERT_TRUE(rep.ok()) << rep.status().message();
    EXPECT_GT(rep->candidates, 0) << np.name;
    EXPECT_EQ(rep->compiled, rep->candidates)
        << np.name << ": " << (rep->failures.empty() ? "" : rep->failures[0]);
  }
}

// The fp64 kernels (the GPU reference) share the template; one level-1 shape shows they build.
TEST(Compile, Fp64CandidatesCompileForSm90) {
  auto problems = io::LoadProblems(CONVT3D_SOURCE_DIR "/problems/kernelbench_l1.json");
  ASSERT_TRUE(problems.ok()) << problems.status().message();
  Problem p = problems->at(6).problem;  // L1-77: strided and dilated
  p.dtype = DType::kF64;
  auto rep = CompileCandidates(p, "sm_90");
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  EXPECT_EQ(rep->compiled, rep->candidates) << (rep->failures.empty() ? "" : rep->failures[0]);
}

// The wgmma family (sm_90a) on the four stride-1 level-1 problems, in every tensor-core mode:
// each candidate compiles, issues HGMMAs without ptxas serializing them (C7514: an accumulator
// touched while its wgmma is in flight turns the asynchronous pipeline into one-at-a-time) and
// without spills, and the weight and input re-layout kernels are there.
TEST(Compile, WgmmaCandidatesCompileForSm90aUnserialized) {
  auto problems = io::LoadProblems(CONVT3D_SOURCE_DIR "/problems/kernelbench_l1.json");
  ASSERT_TRUE(problems.ok()) << problems.status().message();
  std::vector<rt::CompileRequest> reqs;
  for (const auto& np : problems.value()) {
    if (np.problem.stride[0] * np.problem.stride[1] * np.problem.stride[2] != 1) continue;
    for (int mode = 0; mode < 4; ++mode) {
      Problem p = np.problem;
      if (mode == 0) p.precision = Precision::kTf32;
      if (mode == 1) p.precision = Precision::kFp32x3;
      if (mode == 2) p.dtype = DType::kBF16;
      if (mode == 3) p.dtype = DType::kF16;
      int wgmma = 0;
      for (const auto& c : gen::Candidates(p)) {
        if (c.family != "igemm_wgmma") continue;
        ++wgmma;
        auto src = gen::BuildSource(p, c);
        ASSERT_TRUE(src.ok()) << src.status().message();
        EXPECT_EQ(gen::CompileArch(c, "sm_90"), "sm_90a");
        reqs.push_back({np.name + "/" + c.Name(),
                        src.value(),
                        gen::CompileArch(c, "sm_90"),
                        KernelSymbols(p, c),
                        {"--ptxas-options=-v"}});
      }
      EXPECT_GE(wgmma, 2) << np.name << " mode " << mode;  // 3xTF32's halos are twice as big
    }
  }
  ASSERT_GE(reqs.size(), 64u);
  for (const auto& r : rt::CompileAll(reqs, 0)) {
    ExpectCompiledWithoutSpills(r);
    EXPECT_EQ(r.log.find("C7514"), std::string::npos) << r.name << ": " << r.log;
  }
}

// direct_tile on the level-1 shapes and the write-bound one, in strict f32, bf16, tf32 and fp32x3
// (WB-64's tensor-core variant): every candidate compiles without spills (its accumulators,
// window and weights, or its fragments, are all registers).
TEST(Compile, DirectTileCandidatesCompileWithoutSpills) {
  auto problems = io::LoadProblems(CONVT3D_SOURCE_DIR "/problems/bench.json");
  ASSERT_TRUE(problems.ok()) << problems.status().message();
  std::vector<rt::CompileRequest> reqs;
  for (const auto& np : problems.value()) {
    // Strict f32, bf16, and the tensor-core variant's tf32 and fp32x3.
    for (int mode = 0; mode < 4; ++mode) {
      Problem p = np.problem;
      if (mode == 1) p.dtype = DType::kBF16;
      if (mode == 2) p.precision = Precision::kTf32;
      if (mode == 3) p.precision = Precision::kFp32x3;
      for (const auto& c : gen::Candidates(p)) {
        if (c.family != "direct_tile") continue;
        auto src = gen::BuildSource(p, c);
        ASSERT_TRUE(src.ok()) << src.status().message();
        reqs.push_back(
            {np.name + "/" + c.Name(), src.value(), "sm_90", {c.Name()}, {"--ptxas-options=-v"}});
      }
    }
  }
  ASSERT_GE(reqs.size(), 32u);  // L1-72, L1-73, L1-77 and WB-64, 8 each in f32
  for (const auto& r : rt::CompileAll(reqs, 0)) ExpectCompiledWithoutSpills(r);
}

// winograd on the two level-1 shapes it takes (L1-61, L1-70) in strict fp32 and fp32x3, and on a
// grouped 2x3x3 shape with a bias and 6 channels per group (scalar weight copies): every
// candidate and its weight transform compile without spills.
TEST(Compile, WinogradCandidatesCompileWithoutSpills) {
  auto problems = io::LoadProblems(CONVT3D_SOURCE_DIR "/problems/bench.json");
  ASSERT_TRUE(problems.ok()) << problems.status().message();
  std::vector<std::pair<std::string, Problem>> shapes;
  for (const auto& np : problems.value())
    if (np.name == "L1-61" || np.name == "L1-70") {
      shapes.push_back({np.name, np.problem});
      shapes.push_back({np.name + "x3", np.problem});
      shapes.back().second.precision = Precision::kFp32x3;
    }
  Problem small;
  small.n = 2, small.c_in = 10, small.c_out = 12, small.groups = 2, small.bias = true;
  small.in = {5, 7, 9}, small.kernel = {2, 3, 3}, small.padding = {1, 0, 2};
  shapes.push_back({"small", small});
  std::vector<rt::CompileRequest> reqs;
  for (const auto& [name, p] : shapes)
    for (const auto& c : gen::Candidates(p)) {
      if (c.family != "winograd") continue;
      auto src = gen::BuildSource(p, c);
      ASSERT_TRUE(src.ok()) << src.status().message();
      reqs.push_back({name + "/" + c.Name(),
                      src.value(),
                      "sm_90",
                      KernelSymbols(p, c),
                      {"--ptxas-options=-v"}});
    }
  ASSERT_GE(reqs.size(), 20u);
  for (const auto& r : rt::CompileAll(reqs, 0)) ExpectCompiledWithoutSpills(r);
}

// Every fft candidate of L1-58 and L1-68 (FFMA and tensor-core GEMMs, every mode that takes
// them) compiles, all four kernels without spills (the GEMMs' launch bounds hold most of them
// to 128 registers: two blocks per SM).
TEST(Compile, FftCandidatesCompileWithoutSpills) {
  auto problems = io::LoadProblems(CONVT3D_SOURCE_DIR "/problems/kernelbench_l1.json");
  ASSERT_TRUE(problems.ok()) << problems.status().message();
  std::vector<rt::CompileRequest> reqs;
  for (const auto& np : problems.value()) {
    if (np.name != "L1-58" && np.name != "L1-68") continue;
    for (Precision m : {Precision::kFp32, Precision::kTf32, Precision::kFp32x3}) {
      Problem p = np.problem;
      p.precision = m;
      for (const auto& c : gen::Candidates(p)) {
        if (c.family != "fft") continue;
        auto src = gen::BuildSource(p, c);
        ASSERT_TRUE(src.ok()) << src.status().message();
        reqs.push_back({np.name + "/" + c.Name(),
                        src.value(),
                        "sm_90",
                        KernelSymbols(p, c),
                        {"--ptxas-options=-v"}});
      }
    }
  }
  ASSERT_GE(reqs.size(), 30u);
  for (const auto& r : rt::CompileAll(reqs, 0)) ExpectCompiledWithoutSpills(r);
}

// igemm_mma's staged tiles of L1-73 (the strided shape they win) in tf32 and bf16 compile, and
// the tf32 wide ones (a tile of the list again with twice the warps, half the fragments each)
// spill nothing. Some staged tiles spill 8-72 bytes: older ones (bf16 m4n4 tiles, tf32
// q1x1x64_w2x1_m2n4) and the bf16 wide tiles made from a spilling m4n4 one; they are timed like
// the others and have not won (session 12). Not asserted here.
TEST(Compile, StagedMmaCandidatesCompileAndWideOnesDoNotSpill) {
  auto problems = io::LoadProblems(CONVT3D_SOURCE_DIR "/problems/kernelbench_l1.json");
  ASSERT_TRUE(problems.ok()) << problems.status().message();
  std::vector<rt::CompileRequest> reqs;
  std::vector<bool> wide;
  for (const auto& np : problems.value()) {
    if (np.name != "L1-73") continue;
    for (int m = 0; m < 2; ++m) {
      Problem p = np.problem;
      if (m == 0) p.precision = Precision::kTf32;
      if (m == 1) p.dtype = DType::kBF16;
      const auto all = gen::Candidates(p);
      for (const auto& c : all) {
        if (c.family != "igemm_mma" || c.pa != 2) continue;
        bool has_parent = false;  // a tile of the list with half the warps and the same block
        for (const auto& o : all)
          has_parent =
              has_parent || (o.family == c.family && o.pa == 2 && o.bqh == c.bqh &&
                             o.bqw == c.bqw && o.ck == c.ck && 2 * o.wm * o.wn == c.wm * c.wn &&
                             o.wm * o.mt == c.wm * c.mt && o.wn * o.nt8 == c.wn * c.nt8);
        auto src = gen::BuildSource(p, c);
        ASSERT_TRUE(src.ok()) << src.status().message();
        const std::vector<std::string> kernels = KernelSymbols(p, c);
        reqs.push_back(
            {np.name + "/" + c.Name(), src.value(), "sm_90", kernels, {"--ptxas-options=-v"}});
        wide.push_back(has_parent && m == 0);
      }
    }
  }
  ASSERT_GE(std::count(wide.begin(), wide.end(), true), 7);  // tf32: seven wide tiles
  const auto results = rt::CompileAll(reqs, 0);
  for (size_t i = 0; i < results.size(); ++i) {
    if (wide[i])
      ExpectCompiledWithoutSpills(results[i]);
    else
      EXPECT_TRUE(results[i].status.ok()) << results[i].name << ": " << results[i].status.message();
  }
}

TEST(Compile, InvalidProblemIsRejectedBeforeCompiling) {
  Problem p;
  p.stride = {1, 1, 1};
  p.output_padding = {0, 0, 3};
  auto rep = CompileCandidates(p, "sm_90");
  EXPECT_EQ(rep.status().code(), Code::kInvalidArgument);
  EXPECT_NE(rep.status().message().find("output_padding[2]=3"), std::string::npos);
}

}  // namespace
}  // namespace convt3d
