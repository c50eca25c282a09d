// test_compile.cpp: NVRTC compiles every candidate of the seven level-1 problems to sm_90 cubins.
#include <gtest/gtest.h>

#include <algorithm>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/source.h"
#include "runtime/runtime.h"
#include "src/problem_io.h"
#include "tests/status_matchers.h"
#include "tests/test_util.h"

namespace convt3d {
namespace {

using test::kBenchFile;
using test::kLevel1File;
using test::kModelsFile;
using test::SetMode;
using test::StatusIs;
using ::testing::HasSubstr;

// r compiled, has its cubin, and ptxas -v (which reports "N bytes spill stores" per kernel)
// spilled at most `bytes` a kernel.
void ExpectCompiledSpillingAtMost(const rt::CompileResult& r, int bytes) {
  EXPECT_OK(r.status) << r.name;
  for (size_t at = r.log.find("bytes spill stores"); at != std::string::npos;
       at = r.log.find("bytes spill stores", at + 1)) {
    const size_t start = r.log.find_last_of(", ", at - 2) + 1;
    EXPECT_LE(std::stoi(r.log.substr(start, at - 1 - start)), bytes)
        << r.name << ": " << r.log.substr(at - 40, 80);
  }
  EXPECT_FALSE(r.cubin.empty()) << r.name;
}

// And spilled nothing: spilled accumulators (once, a fully unrolled step loop) cost 3x.
void ExpectCompiledWithoutSpills(const rt::CompileResult& r) { ExpectCompiledSpillingAtMost(r, 0); }

// Appends the request that compiles candidate c of p: named "<name>/<candidate>", for sm_90
// (sm_90a where the family needs it), with every kernel its source defines (the candidate's and
// its re-layout and transform kernels) and ptxas -v, whose log reports spills.
void AddRequest(const std::string& name, const Problem& p, const gen::Config& c,
                std::vector<rt::CompileRequest>* reqs) {
  ASSERT_OK_AND_ASSIGN(std::string source, gen::BuildSource(p, c));
  std::vector<std::string> kernels;  // every kernel a plan of c launches, once each
  for (const gen::LaunchStep& s : gen::Launches(p, c).steps)
    if (std::find(kernels.begin(), kernels.end(), s.symbol) == kernels.end())
      kernels.push_back(s.symbol);
  reqs->push_back({name + "/" + c.Name(),
                   std::move(source),
                   gen::CompileArch(c, "sm_90"),
                   std::move(kernels),
                   {"--ptxas-options=-v"}});
}

// AddRequest for every candidate of p of `family`.
void AddFamily(const std::string& name, const Problem& p, std::string_view family,
               std::vector<rt::CompileRequest>* reqs) {
  for (const auto& c : gen::Candidates(p)) {
    if (c.family != family) continue;
    ASSERT_NO_FATAL_FAILURE(AddRequest(name, p, c, reqs));
  }
}

// p in mode m (see SetMode).
Problem InMode(Problem p, int m) {
  SetMode(p, m);
  return p;
}

TEST(Compile, EveryLevel1CandidateCompilesForSm90) {
  ASSERT_OK_AND_ASSIGN(const auto problems, io::LoadProblems(kLevel1File));
  ASSERT_EQ(problems.size(), 7u);
  for (const auto& np : problems) {
    ASSERT_OK_AND_ASSIGN(const auto rep, CompileCandidates(np.problem, "sm_90"));
    EXPECT_GT(rep.candidates, 0) << np.name;
    EXPECT_EQ(rep.compiled, rep.candidates)
        << np.name << ": " << (rep.failures.empty() ? "" : rep.failures[0]);
  }
}

// The fp64 kernels (the GPU reference) share the template; one level-1 shape shows they build.
TEST(Compile, Fp64CandidatesCompileForSm90) {
  ASSERT_OK_AND_ASSIGN(const auto problems, io::LoadProblems(kLevel1File));
  Problem p = problems.at(6).problem;  // L1-77: strided and dilated
  p.dtype = DType::kF64;
  ASSERT_OK_AND_ASSIGN(const auto rep, CompileCandidates(p, "sm_90"));
  EXPECT_EQ(rep.compiled, rep.candidates) << (rep.failures.empty() ? "" : rep.failures[0]);
}

// The wgmma family (sm_90a) on the four stride-1 level-1 problems, in every tensor-core mode:
// each candidate compiles, issues HGMMAs without ptxas serializing them (C7514: an accumulator
// touched while its wgmma is in flight turns the asynchronous pipeline into one-at-a-time) and
// without spills, and the weight and input re-layout kernels are there.
TEST(Compile, WgmmaCandidatesCompileForSm90aUnserialized) {
  ASSERT_OK_AND_ASSIGN(const auto problems, io::LoadProblems(kLevel1File));
  std::vector<rt::CompileRequest> reqs;
  for (const auto& np : problems) {
    if (np.problem.stride[0] * np.problem.stride[1] * np.problem.stride[2] != 1) continue;
    for (int mode : {1, 2, 3, 4}) {  // tf32, fp32x3, bf16, f16
      const Problem p = InMode(np.problem, mode);
      const size_t before = reqs.size();
      ASSERT_NO_FATAL_FAILURE(AddFamily(np.name, p, "igemm_wgmma", &reqs));
      EXPECT_GE(reqs.size() - before, 2u) << p.Signature();  // 3xTF32's halos are twice as big
    }
  }
  ASSERT_GE(reqs.size(), 64u);
  for (const auto& r : reqs) EXPECT_EQ(r.arch, "sm_90a") << r.name;
  for (const auto& r : rt::CompileAll(reqs, 0)) {
    ExpectCompiledWithoutSpills(r);
    EXPECT_EQ(r.log.find("C7514"), std::string::npos) << r.name << ": " << r.log;
  }
}

// The per-phase wgmma GEMM (sm_90a) on every layer of the model list and the strided level-1
// problems, in tf32, fp32x3 and bf16 in turn, plain, phase-channel and halo tiles: each candidate
// compiles without spills or serialized wgmmas, with its weight packing and input re-layout
// kernels.
TEST(Compile, GemmWgmmaCandidatesCompileForSm90aUnserialized) {
  std::vector<rt::CompileRequest> reqs;
  int halo_requests = 0;  // layers whose halo tiles are compiled
  for (const char* file : {kModelsFile, kLevel1File}) {
    ASSERT_OK_AND_ASSIGN(const auto problems, io::LoadProblems(file));
    for (size_t i = 0; i < problems.size(); ++i) {
      const auto& np = problems[i];
      if (file == kLevel1File && np.problem.stride[0] * np.problem.stride[1] == 1) continue;
      {
        const Problem p = InMode(np.problem, 1 + i % 3);  // tf32, fp32x3, bf16 in turn
        // The best-ranked plain and phase-channel tile (all of them: minutes on two cores), and
        // the best-ranked halo tile of positions and of channels on M.
        int taken[3] = {0, 0, 0}, halo[2] = {0, 0};
        for (const auto& c : gen::Candidates(p)) {
          if (c.family != "gemm_wgmma") continue;
          if ((c.hl == 0 && taken[c.lattice]++ < 1) ||
              (c.hl > 0 && c.lattice == 0 && halo[c.cm]++ < 1)) {
            ASSERT_NO_FATAL_FAILURE(AddRequest(np.name, p, c, &reqs));
          }
        }
        EXPECT_GE(taken[0], 1) << np.name << " " << p.Signature();
        halo_requests += halo[0] + halo[1] > 0 ? 1 : 0;
      }
    }
  }
  EXPECT_GT(halo_requests, 10);  // tf32 and bf16 layers offer halo tiles
  for (const auto& r : reqs) EXPECT_EQ(r.arch, "sm_90a") << r.name;
  for (const auto& r : rt::CompileAll(reqs, 0)) {
    ExpectCompiledWithoutSpills(r);
    EXPECT_EQ(r.log.find("C7514"), std::string::npos) << r.name << ": " << r.log;
  }
}

// The pixel-shuffle wgmma GEMM (sm_90a) on every layer of the model list it takes (kernel ==
// stride, and GAN-1's latent input), in
// tf32, fp32x3, bf16 and f16 in turn: its three best-ranked candidates compile without spills or
// serialized wgmmas (register-A wgmmas whose fragments load while the previous chunk's run).
TEST(Compile, ShuffleWgmmaCandidatesCompileForSm90aUnserialized) {
  std::vector<rt::CompileRequest> reqs;
  ASSERT_OK_AND_ASSIGN(const auto problems, io::LoadProblems(kModelsFile));
  int layers = 0;
  for (size_t i = 0; i < problems.size(); ++i) {
    const auto& np = problems[i];
    const Problem p = InMode(np.problem, 1 + i % 4);  // tf32, fp32x3, bf16, f16 in turn
    int taken = 0;
    for (const auto& c : gen::Candidates(p)) {
      if (c.family == "shuffle_wgmma" && taken++ < 3) {
        ASSERT_NO_FATAL_FAILURE(AddRequest(np.name, p, c, &reqs));
      }
    }
    if (taken > 0) ++layers;  // channel-rich layers whose B needs over 16 slices: none
  }
  EXPECT_GE(layers, 7);
  for (const auto& r : reqs) EXPECT_EQ(r.arch, "sm_90a") << r.name;
  for (const auto& r : rt::CompileAll(reqs, 0)) {
    ExpectCompiledWithoutSpills(r);
    EXPECT_EQ(r.log.find("C7514"), std::string::npos) << r.name << ": " << r.log;
  }
}

// The few-channel overlapping-tap wgmma family (sm_90a) on the model layers it takes (GAN-5,
// MUN-4) in tf32, fp32x3, bf16 and f16: every candidate compiles without spills or serialized
// wgmmas (two blocks per SM: at most 128 registers).
TEST(Compile, OverlapWgmmaCandidatesCompileForSm90aWithoutSpills) {
  std::vector<rt::CompileRequest> reqs;
  ASSERT_OK_AND_ASSIGN(const auto problems, io::LoadProblems(kModelsFile));
  int layers = 0;
  for (const auto& np : problems) {
    if (np.name != "GAN-5" && np.name != "MUN-4") continue;
    for (int mode = 1; mode <= 4; ++mode) {
      const Problem p = InMode(np.problem, mode);
      int taken = 0;
      for (const auto& c : gen::Candidates(p))
        if (c.family == "overlap_wgmma" && taken++ < 6)
          ASSERT_NO_FATAL_FAILURE(AddRequest(np.name, p, c, &reqs));
      layers += taken > 0;
    }
  }
  EXPECT_EQ(layers, 8);
  for (const auto& r : rt::CompileAll(reqs, 0)) {
    ExpectCompiledWithoutSpills(r);
    EXPECT_EQ(r.log.find("C7514"), std::string::npos) << r.name << ": " << r.log;
  }
}

// The strict FFMA pixel shuffle on the model list's kernel == stride layers: its three best
// candidates of each compile for sm_90 without spills (8 x 8 sums, two blocks per SM).
TEST(Compile, ShuffleSimtCandidatesCompileWithoutSpills) {
  std::vector<rt::CompileRequest> reqs;
  ASSERT_OK_AND_ASSIGN(const auto problems, io::LoadProblems(kModelsFile));
  int layers = 0;
  for (const auto& np : problems) {
    const Problem p = InMode(np.problem, 0);
    int taken = 0;
    for (const auto& c : gen::Candidates(p)) {
      if (c.family == "shuffle_simt" && taken++ < 3) {
        ASSERT_NO_FATAL_FAILURE(AddRequest(np.name, p, c, &reqs));
      }
    }
    if (taken > 0) ++layers;
  }
  EXPECT_GE(layers, 8);  // the pixel shuffles whose column slice of B fits (not SWU-1: K = 768)
  for (const auto& r : rt::CompileAll(reqs, 0)) ExpectCompiledWithoutSpills(r);
}

// The FFMA phase GEMM on every strided layer of the model list in strict fp32: its candidates
// compile for sm_90 without spills (the 8 x 8 tiles keep two sets of sums in registers).
TEST(Compile, GemmSimtCandidatesCompileWithoutSpills) {
  std::vector<rt::CompileRequest> reqs;
  ASSERT_OK_AND_ASSIGN(const auto problems, io::LoadProblems(kModelsFile));
  int layers = 0;
  for (const auto& np : problems) {
    if (np.problem.dtype != DType::kF32) continue;
    const Problem p = InMode(np.problem, 0);
    int taken = 0;
    for (const auto& c : gen::Candidates(p)) {
      if (c.family == "gemm_simt" && taken++ < 4) {
        ASSERT_NO_FATAL_FAILURE(AddRequest(np.name, p, c, &reqs));
      }
    }
    if (taken > 0) ++layers;
  }
  EXPECT_GE(layers, 15);
  for (const auto& r : reqs) EXPECT_EQ(r.arch, "sm_90") << r.name;
  for (const auto& r : rt::CompileAll(reqs, 0)) ExpectCompiledWithoutSpills(r);
}

// The model layers of few output channels (GAN-5, MUN-4) and small layers of one to four output
// channels with odd W extents (4-byte copies), stride 1 and 3, dilation and groups.
void FewChannelLayers(std::vector<std::pair<std::string, Problem>>* layers) {
  ASSERT_OK_AND_ASSIGN(const auto problems, io::LoadProblems(kModelsFile));
  for (const auto& np : problems)
    if (np.name == "GAN-5" || np.name == "MUN-4") layers->push_back({np.name, np.problem});
  ASSERT_EQ(layers->size(), 2u);
  layers->push_back({"k3s1", test::MakeProblem(2, 5, 3, {4, 6, 9}, {3, 3, 3}).Padding({1, 1, 1})});
  layers->push_back({"s3d2g2", test::MakeProblem(1, 6, 2, {3, 5, 10}, {2, 3, 4})
                                   .Stride({3, 2, 3})
                                   .Dilation({2, 1, 2})
                                   .Groups(2)
                                   .Bias()});
}

// narrow_gemm on the model layers it takes (GAN-5, MUN-4) in every mode, and on small layers of
// one to four output channels with odd W extents (4-byte copies), stride 1 and 3, dilation and
// groups: every candidate and its weight packing compile.
TEST(Compile, NarrowGemmCandidatesCompile) {
  std::vector<rt::CompileRequest> reqs;
  std::vector<std::pair<std::string, Problem>> layers;
  ASSERT_NO_FATAL_FAILURE(FewChannelLayers(&layers));
  for (const auto& [name, p] : layers)
    for (int mode : {0, 1, 2, 3, 4})
      ASSERT_NO_FATAL_FAILURE(AddFamily(name, InMode(p, mode), "narrow_gemm", &reqs));
  ASSERT_GE(reqs.size(), 40u);
  for (const auto& r : rt::CompileAll(reqs, 0)) {
    EXPECT_OK(r.status) << r.name;
    EXPECT_FALSE(r.cubin.empty()) << r.name;
  }
}

// Whether c is one of cell_simt's regular tiles: 2^k threads along H and D, whole warps, and
// each channel block whole warps where there are several.
bool RegularCellTile(const Problem& p, const gen::Config& c) {
  const auto pow2 = [](int v) { return (v & (v - 1)) == 0; };
  const int64_t cell_threads = int64_t{c.bx} * c.by * c.bz;
  const int64_t threads = cell_threads * (p.c_out / p.groups / c.cob);
  return pow2(c.by) && pow2(c.bz) && threads % 32 == 0 &&
         (threads == cell_threads || cell_threads % 32 == 0);
}

// cell_simt on the model layers it takes (GAN-5, MUN-4, MUN-3) and on small layers of one to four
// output channels per group with odd W extents (element-wise copies), stride 1 and 3, dilation
// and groups: every candidate compiles with its accumulators, row values and copy items in
// registers. The regular tiles spill nothing; the others (3 or 6 threads along H or D, channel
// blocks or blocks of part warps) may spill a word or two where ptxas keeps its own
// blocks-per-SM target (GAN-5's 192-thread 8 x 8 x 3 tile: 4 bytes; MUN-3's 144-thread ones: 24).
// Asking it for one block per SM instead took those spills away but ran MUN-3 0.108 -> 0.112 ms
// and L1-72 0.171 -> 0.174 on an H200, so they may spill up to 32 bytes.
TEST(Compile, CellSimtCandidatesCompileWithoutSpillsOrAFewWords) {
  std::vector<rt::CompileRequest> reqs;
  std::vector<int> allowed;  // spill bytes each request may have
  std::vector<std::pair<std::string, Problem>> layers;
  ASSERT_NO_FATAL_FAILURE(FewChannelLayers(&layers));
  ASSERT_OK_AND_ASSIGN(const auto models, io::LoadProblems(kModelsFile));
  for (const auto& np : models)
    if (np.name == "MUN-3") layers.push_back({np.name, np.problem});
  ASSERT_EQ(layers.size(), 5u);
  int regular = 0;
  for (const auto& [name, p] : layers)
    for (const auto& c : gen::Candidates(p)) {
      if (c.family != "cell_simt") continue;
      ASSERT_NO_FATAL_FAILURE(AddRequest(name, p, c, &reqs));
      regular += RegularCellTile(p, c);
      allowed.push_back(RegularCellTile(p, c) ? 0 : 32);
    }
  ASSERT_GE(reqs.size(), 16u);
  ASSERT_GT(regular, 0);
  ASSERT_LT(regular, static_cast<int>(reqs.size()));
  const auto results = rt::CompileAll(reqs, 0);
  for (size_t i = 0; i < results.size(); ++i) ExpectCompiledSpillingAtMost(results[i], allowed[i]);
}

// direct_tile on the level-1 shapes and the write-bound one, in strict f32, bf16, tf32 and fp32x3
// (WB-64's tensor-core variant): every candidate compiles without spills (its accumulators,
// window and weights, or its fragments, are all registers).
TEST(Compile, DirectTileCandidatesCompileWithoutSpills) {
  ASSERT_OK_AND_ASSIGN(const auto problems, io::LoadProblems(kBenchFile));
  std::vector<rt::CompileRequest> reqs;
  for (const auto& np : problems)
    for (int mode : {0, 3, 1, 2})  // strict f32, bf16, and the tensor-core variant's tf32, fp32x3
      ASSERT_NO_FATAL_FAILURE(AddFamily(np.name, InMode(np.problem, mode), "direct_tile", &reqs));
  ASSERT_GE(reqs.size(), 32u);  // L1-72, L1-73, L1-77 and WB-64, 8 each in f32
  for (const auto& r : rt::CompileAll(reqs, 0)) ExpectCompiledWithoutSpills(r);
}

// winograd on the two level-1 shapes it takes (L1-61, L1-70) in strict fp32 and fp32x3, on a
// grouped 2x3x3 shape with a bias and 6 channels per group (scalar weight copies) and on two
// strided model layers: every candidate and its weight transform compile without spills.
TEST(Compile, WinogradCandidatesCompileWithoutSpills) {
  ASSERT_OK_AND_ASSIGN(const auto problems, io::LoadProblems(kBenchFile));
  std::vector<std::pair<std::string, Problem>> shapes;
  for (const auto& np : problems)
    if (np.name == "L1-61" || np.name == "L1-70") {
      shapes.push_back({np.name, np.problem});
      shapes.push_back({np.name + "x3", InMode(np.problem, 2)});  // fp32x3
    }
  shapes.push_back(
      {"small",
       test::MakeProblem(2, 10, 12, {5, 7, 9}, {2, 3, 3}).Padding({1, 0, 2}).Groups(2).Bias()});
  // Strided: the 3D-GAN's k4 s2 p1 layer (8 phases of 2x2x2 taps) and the video decoder's
  // (3,4,4) s(1,2,2) (4 phases of 3x2x2 taps).
  ASSERT_OK_AND_ASSIGN(const auto models, io::LoadProblems(kModelsFile));
  for (const auto& np : models)
    if (np.name == "GAN-4" || np.name == "VID-1") shapes.push_back({np.name, np.problem});
  std::vector<rt::CompileRequest> reqs;
  for (const auto& [name, p] : shapes)
    ASSERT_NO_FATAL_FAILURE(AddFamily(name, p, "winograd", &reqs));
  ASSERT_GE(reqs.size(), 30u);
  for (const auto& r : rt::CompileAll(reqs, 0)) ExpectCompiledWithoutSpills(r);
}

// Every fft candidate of L1-58 and L1-68 (FFMA and tensor-core GEMMs, every mode that takes
// them) compiles, all four kernels without spills (the GEMMs' launch bounds hold most of them
// to 128 registers: two blocks per SM).
TEST(Compile, FftCandidatesCompileWithoutSpills) {
  ASSERT_OK_AND_ASSIGN(const auto problems, io::LoadProblems(kLevel1File));
  std::vector<rt::CompileRequest> reqs;
  for (const auto& np : problems) {
    if (np.name != "L1-58" && np.name != "L1-68") continue;
    for (int mode : {0, 1, 2})  // strict fp32, tf32, fp32x3
      ASSERT_NO_FATAL_FAILURE(AddFamily(np.name, InMode(np.problem, mode), "fft", &reqs));
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
  ASSERT_OK_AND_ASSIGN(const auto problems, io::LoadProblems(kLevel1File));
  std::vector<rt::CompileRequest> reqs;
  std::vector<bool> wide;
  for (const auto& np : problems) {
    if (np.name != "L1-73") continue;
    for (int mode : {1, 3}) {  // tf32, bf16
      const Problem p = InMode(np.problem, mode);
      const auto all = gen::Candidates(p);
      for (const auto& c : all) {
        if (c.family != "igemm_mma" || c.pa != 2) continue;
        bool has_parent = false;  // a tile of the list with half the warps and the same block
        for (const auto& o : all)
          has_parent =
              has_parent || (o.family == c.family && o.pa == 2 && o.bqh == c.bqh &&
                             o.bqw == c.bqw && o.ck == c.ck && 2 * o.wm * o.wn == c.wm * c.wn &&
                             o.wm * o.mt == c.wm * c.mt && o.wn * o.nt8 == c.wn * c.nt8);
        ASSERT_NO_FATAL_FAILURE(AddRequest(np.name, p, c, &reqs));
        wide.push_back(has_parent && mode == 1);
      }
    }
  }
  ASSERT_GE(std::count(wide.begin(), wide.end(), true), 7);  // tf32: seven wide tiles
  const auto results = rt::CompileAll(reqs, 0);
  for (size_t i = 0; i < results.size(); ++i) {
    if (wide[i])
      ExpectCompiledWithoutSpills(results[i]);
    else
      EXPECT_OK(results[i].status) << results[i].name;
  }
}

TEST(Compile, InvalidProblemIsRejectedBeforeCompiling) {
  Problem p;
  p.stride = {1, 1, 1};
  p.output_padding = {0, 0, 3};
  EXPECT_THAT(CompileCandidates(p, "sm_90"),
              StatusIs(Code::kInvalidArgument, HasSubstr("output_padding[2]=3")));
}

}  // namespace
}  // namespace convt3d
