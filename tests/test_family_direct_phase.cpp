// test_family_direct_phase.cpp: the direct_phase family (generator/families/direct_phase.cpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/family.h"
#include "generator/source.h"
#include "tests/generator_test_util.h"

namespace convt3d::gen {
namespace {

TEST(Candidates, Fp64ProblemsGetFp64Kernels) {
  Problem p = L1_72();
  p.dtype = DType::kF64;
  // Only the direct family has an fp64 variant (it is also the GPU reference).
  for (const auto& c : Candidates(p)) EXPECT_EQ(c.Name().rfind("direct_phase_f64_", 0), 0u);
}

// New with the split (the moved tests cover the family only beside others): the fallback keeps
// every tile where no other family applies (f64), six behind other families' candidates and two
// behind tensor-core tiles; its plan is one launch of bx x by threads.
TEST(DirectPhase, FallbackPlacementAndLaunch) {
  auto mine = [](const std::vector<Config>& all) {
    std::vector<Config> out;
    for (const Config& c : all)
      if (c.family == "direct_phase") out.push_back(c);
    return out;
  };
  Problem p = L1_72();
  EXPECT_EQ(mine(Candidates(p)).size(), 6u);
  p.precision = Precision::kTf32;
  EXPECT_EQ(mine(Candidates(p)).size(), 2u);
  p.precision = Precision::kFp32;
  p.dtype = DType::kF64;
  const auto all = Candidates(p);
  const auto f64 = mine(all);
  EXPECT_EQ(f64.size(), all.size());
  EXPECT_GT(f64.size(), 6u);
  for (const Config& c : f64) {
    const LaunchPlan plan = Launches(p, c);
    ASSERT_EQ(plan.steps.size(), 1u) << c.Name();
    EXPECT_EQ(plan.steps[0].symbol, c.Name());
    EXPECT_EQ(plan.steps[0].block[0], static_cast<unsigned>(c.bx)) << c.Name();
    EXPECT_EQ(plan.steps[0].block[1], static_cast<unsigned>(c.by)) << c.Name();
    EXPECT_EQ(plan.workspace_bytes, 0u) << c.Name();
    auto src = BuildSource(p, c);
    ASSERT_TRUE(src.ok()) << src.status().message();
    EXPECT_NE(src->find("constexpr int kOPT = " + std::to_string(c.opt) + ";"), std::string::npos);
    EXPECT_NE(src->find("constexpr int kCOB = " + std::to_string(c.cob) + ";"), std::string::npos);
    EXPECT_NE(src->find("#line 1 \"templates/direct_phase.cu\""), std::string::npos);
  }
}

}  // namespace
}  // namespace convt3d::gen
