// test_golden.cpp: the generator's output for every problem of problems/*.json is pinned.
//
// For each problem, mode and candidate the golden file holds the candidate's name and hashes of
// its JSON, its NVRTC source and the launches a plan makes (kernel, grid, block, shared memory,
// arguments, weight-only marks, workspace, input alignment). A change that moves any of them fails
// here; a deliberate one regenerates the file with CONVT3D_UPDATE_GOLDEN=1 and says why in its
// commit.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/source.h"
#include "src/problem_io.h"

namespace convt3d {
namespace {

constexpr const char* kGoldenPath = CONVT3D_SOURCE_DIR "/tests/golden/candidates.txt";

std::string Hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  char buf[9];  // 32 bits: enough to notice a change, short enough for a small file
  snprintf(buf, sizeof buf, "%08llx", static_cast<unsigned long long>(h >> 32));
  return buf;
}

std::string Dim(const unsigned (&d)[3]) {
  std::ostringstream os;
  os << d[0] << "x" << d[1] << "x" << d[2];
  return os.str();
}

// Argument names in gen::Arg's order (kChunk prints the step's chunk instead, the maps the
// map's shape after its name).
constexpr const char* kArgNames[] = {"x", "w", "bias", "y", "ws", "ws+", "", "map", "xmap", "wmap"};
static_assert(std::size(kArgNames) == static_cast<size_t>(gen::Arg::kWMap) + 1);
const char* ArgName(gen::Arg a) { return kArgNames[static_cast<int>(a)]; }

// A tensor map's shape: element bytes, dims, box and swizzle, innermost first.
std::string MapText(const TiledMapShape& m) {
  std::ostringstream os;
  os << "[" << m.elem_bytes << "B";
  for (int i = 0; i < m.rank; ++i) os << (i ? "x" : " ") << m.dims[i];
  for (int i = 0; i < m.rank; ++i) os << (i ? "x" : " box ") << m.box[i];
  os << " sw" << m.swizzle_bytes << "]";
  return os.str();
}

// The launches a plan of candidate c makes, in order, as text.
std::string LaunchText(const Problem& p, const gen::Config& c) {
  const gen::LaunchPlan plan = gen::Launches(p, c);
  std::ostringstream os;
  os << "ws=" << plan.workspace_bytes;
  if (plan.x_alignment > 1) os << " align=" << plan.x_alignment;
  for (const gen::LaunchStep& s : plan.steps) {
    os << " | " << s.symbol << " g" << Dim(s.grid) << " b" << Dim(s.block) << " s" << s.smem_bytes
       << " (";
    for (size_t i = 0; i < s.args.size(); ++i) {
      os << (i ? "," : "");
      if (s.args[i] == gen::Arg::kChunk)
        os << s.chunk;
      else
        os << ArgName(s.args[i]);
      if (s.args[i] == gen::Arg::kXRelaid) os << plan.x_offset_bytes;
      if (s.args[i] == gen::Arg::kXRelaidMap || s.args[i] == gen::Arg::kXMap)
        os << MapText(s.x_map);
      if (s.args[i] == gen::Arg::kWMap) os << MapText(s.w_map);
    }
    os << ")";
    if (s.weight_only) os << " w-only";
    if (s.overlaps_previous) os << " overlaps";
  }
  return os.str();
}

struct Mode {
  const char* name;
  DType dtype;
  Precision precision;
  bool wgmma;
  bool fp16_split = false;  // gen::DeviceLimits::fp16_split (the opt-in 3xFP16 tiles)
};
constexpr Mode kModes[] = {
    {"fp32", DType::kF32, Precision::kFp32, true},
    {"fp32x3", DType::kF32, Precision::kFp32x3, true},
    {"fp32x3-fp16", DType::kF32, Precision::kFp32x3, true, true},
    {"tf32", DType::kF32, Precision::kTf32, true},
    {"tf32-sm80", DType::kF32, Precision::kTf32, false},
    {"bf16", DType::kBF16, Precision::kFp32, true},
    {"f16", DType::kF16, Precision::kFp32, true},
    {"f64", DType::kF64, Precision::kFp32, true},
};

// Calls f(file, name, mode, problem, limits) for every valid problem of the lists in every mode;
// false when a list cannot be loaded.
template <typename F>
bool ForEachProblem(F f) {
  for (const char* file : {"kernelbench_l1.json", "bench.json", "models.json"}) {
    auto problems = io::LoadProblems(std::string(CONVT3D_SOURCE_DIR "/problems/") + file);
    if (!problems.ok()) return false;
    for (const auto& np : *problems)
      for (const Mode& m : kModes) {
        Problem p = np.problem;
        p.dtype = m.dtype;
        p.precision = m.precision;
        if (!Validate(p).ok()) continue;
        gen::DeviceLimits limits;
        limits.wgmma = m.wgmma;
        limits.fp16_split = m.fp16_split;
        f(file, np.name, m, p, limits);
      }
  }
  return true;
}

std::string GoldenText() {
  std::ostringstream os;
  const bool loaded = ForEachProblem([&os](const char* file, const std::string& name, const Mode& m,
                                           const Problem& p, const gen::DeviceLimits& limits) {
    const std::vector<gen::Config> all = gen::Candidates(p, limits);
    os << "# " << file << " " << name << " " << m.name << ": " << all.size() << " candidates, pick "
       << gen::HeuristicPick(p, limits).Name() << "\n";
    for (const gen::Config& c : all) {
      auto src = gen::BuildSource(p, c);
      os << c.Name() << " j=" << Hash(c.ToJson())
         << " s=" << (src.ok() ? Hash(*src) : "error:" + src.status().message())
         << " l=" << Hash(LaunchText(p, c)) << "\n";
    }
  });
  return loaded ? os.str() : "cannot load a problem list";
}

// Plan::Run skips the weight-only steps while the weights are unchanged (same pointer and
// version): such a step may read nothing but the weights and write nothing but the workspace,
// and every step that does only that must be marked, or the plan re-packs for nothing.
TEST(Golden, WeightOnlyStepsReadOnlyTheWeights) {
  int marked = 0, plans = 0;
  const bool loaded = ForEachProblem([&](const char*, const std::string& name, const Mode& m,
                                         const Problem& p, const gen::DeviceLimits& limits) {
    for (const gen::Config& c : gen::Candidates(p, limits)) {
      const gen::LaunchPlan plan = gen::Launches(p, c);
      bool main_kernel = false;
      for (const gen::LaunchStep& s : plan.steps) {
        const bool w_to_ws = s.args == std::vector<gen::Arg>{gen::Arg::kW, gen::Arg::kWorkspace};
        EXPECT_EQ(s.weight_only, w_to_ws) << name << " " << m.name << " " << s.symbol;
        marked += s.weight_only;
        main_kernel |= !s.weight_only;
      }
      EXPECT_TRUE(main_kernel) << name << " " << m.name << " " << c.Name();
      ++plans;
    }
  });
  ASSERT_TRUE(loaded);
  EXPECT_GT(marked, 100) << "of " << plans << " plans";  // the tensor-core, winograd, fft families
}

// A step launched as a programmatic dependent of the previous one (overlaps_previous) may start
// before that kernel's stores are visible: its kernel must wait for them (griddepcontrol.wait),
// and it is never a plan's first step.
TEST(Golden, OverlappingStepsWaitForThePreviousKernel) {
  int overlapping = 0;
  const bool loaded = ForEachProblem([&](const char*, const std::string& name, const Mode& m,
                                         const Problem& p, const gen::DeviceLimits& limits) {
    for (const gen::Config& c : gen::Candidates(p, limits)) {
      const gen::LaunchPlan plan = gen::Launches(p, c);
      bool any = false;
      for (size_t i = 0; i < plan.steps.size(); ++i) {
        if (!plan.steps[i].overlaps_previous) continue;
        EXPECT_GT(i, 0u) << name << " " << m.name << " " << c.Name();
        any = true;
      }
      if (!any) continue;
      ++overlapping;
      auto src = gen::BuildSource(p, c);
      ASSERT_TRUE(src.ok()) << src.status().message();
      // A call, not just the definition (templates/elem.cuh, in every source).
      EXPECT_NE(src->find("WaitForPreviousKernel();"), std::string::npos) << c.Name();
    }
  });
  ASSERT_TRUE(loaded);
  EXPECT_GT(overlapping, 0);  // gemm_wgmma, shuffle_wgmma, overlap_wgmma, shuffle_simt's columns
}

TEST(Golden, CandidatesSourcesAndLaunchesMatchTheGoldenFile) {
  const std::string now = GoldenText();
  if (std::getenv("CONVT3D_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(kGoldenPath, std::ios::binary) << now;
    GTEST_SKIP() << "wrote " << kGoldenPath;
  }
  std::ifstream in(kGoldenPath, std::ios::binary);
  ASSERT_TRUE(in) << "no golden file " << kGoldenPath << " (CONVT3D_UPDATE_GOLDEN=1 writes it)";
  std::stringstream golden;
  golden << in.rdbuf();
  // Compare line by line so a failure names the first candidate that moved.
  std::istringstream a(golden.str()), b(now);
  std::string la, lb;
  int line = 0;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(a, la));
    const bool more_b = static_cast<bool>(std::getline(b, lb));
    ++line;
    if (!more_a && !more_b) break;
    ASSERT_EQ(la, lb) << "first difference at line " << line << " of " << kGoldenPath;
  }
}

}  // namespace
}  // namespace convt3d
