// test_golden.cpp: the generator's output for every problem of problems/*.json is pinned.
//
// For each problem, mode and candidate the golden file holds the candidate's name and hashes of
// its JSON, its NVRTC source and the launches a plan makes (kernel, grid, block, shared memory,
// arguments, workspace, input alignment). A change that moves any of them fails here; a
// deliberate one regenerates the file with CONVT3D_UPDATE_GOLDEN=1 and says why in its commit.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
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

// The launches a plan of candidate c makes, in order, as text.
std::string LaunchText(const Problem& p, const gen::Config& c) {
  const gen::LaunchGeometry g = gen::Geometry(p, c);
  std::ostringstream os;
  os << "ws=" << g.workspace_bytes;
  if (c.family == gen::Family::kIgemmMma && g.x_bytes == 0 && g.workspace_bytes > 0)
    os << " align=" << gen::IgemmShapeOf(p, c).vec * DTypeBytes(p.dtype);
  auto launch = [&](const std::string& symbol, const unsigned (&grid)[3],
                    const unsigned (&block)[3], unsigned smem, const std::string& args) {
    os << " | " << symbol << " g" << Dim(grid) << " b" << Dim(block) << " s" << smem << " ("
       << args << ")";
  };
  const unsigned b256[3] = {256, 1, 1};
  if (!c.FillSymbol().empty()) launch(c.FillSymbol(), g.fill_grid, b256, 0, "bias,y");
  if (!c.PostSymbol().empty()) {
    launch(c.PrepSymbol(), g.prep_grid, g.prep_block, 0, "w,ws");
    for (int chunk = 0; chunk < g.chunks; ++chunk) {
      const std::string k = std::to_string(chunk);
      launch(c.PrepXSymbol(), g.prepx_grid, b256, g.prepx_smem, "x,ws," + k);
      launch(c.Name(), g.grid, b256, g.smem_bytes, "ws," + k);
      launch(c.PostSymbol(), g.post_grid, b256, g.post_smem, "ws,bias,y," + k);
    }
    return os.str();
  }
  if (g.workspace_bytes > 0) {
    std::string x = "x";
    if (g.x_bytes > 0) {
      x = "ws+" + std::to_string(g.x_offset_bytes);
      launch(c.PrepXSymbol(), g.prepx_grid, g.prep_block, 0, "x," + x);
    }
    launch(c.PrepSymbol(), g.prep_grid, g.prep_block, 0, "w,ws");
    launch(c.Name(), g.grid, g.block, g.smem_bytes, x + ",ws,bias,y");
    return os.str();
  }
  launch(c.Name(), g.grid, g.block, g.smem_bytes, "x,w,bias,y");
  return os.str();
}

struct Mode {
  const char* name;
  DType dtype;
  Precision precision;
  bool wgmma;
};
constexpr Mode kModes[] = {
    {"fp32", DType::kF32, Precision::kFp32, true},
    {"fp32x3", DType::kF32, Precision::kFp32x3, true},
    {"tf32", DType::kF32, Precision::kTf32, true},
    {"tf32-sm80", DType::kF32, Precision::kTf32, false},
    {"bf16", DType::kBF16, Precision::kFp32, true},
    {"f16", DType::kF16, Precision::kFp32, true},
    {"f64", DType::kF64, Precision::kFp32, true},
};

std::string GoldenText() {
  std::ostringstream os;
  for (const char* file : {"kernelbench_l1.json", "bench.json", "models.json"}) {
    auto problems = io::LoadProblems(std::string(CONVT3D_SOURCE_DIR "/problems/") + file);
    if (!problems.ok()) return "cannot load " + std::string(file);
    for (const auto& np : *problems)
      for (const Mode& m : kModes) {
        Problem p = np.problem;
        p.dtype = m.dtype;
        p.precision = m.precision;
        if (!Validate(p).ok()) continue;
        gen::DeviceLimits limits;
        limits.wgmma = m.wgmma;
        const std::vector<gen::Config> all = gen::Candidates(p, limits);
        os << "# " << file << " " << np.name << " " << m.name << ": " << all.size()
           << " candidates, pick " << gen::HeuristicPick(p, limits).Name() << "\n";
        for (const gen::Config& c : all) {
          auto src = gen::BuildSource(p, c);
          os << c.Name() << " j=" << Hash(c.ToJson())
             << " s=" << (src.ok() ? Hash(*src) : "error:" + src.status().message())
             << " l=" << Hash(LaunchText(p, c)) << "\n";
        }
      }
  }
  return os.str();
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
