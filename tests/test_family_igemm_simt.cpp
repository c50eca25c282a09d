// test_family_igemm_simt.cpp: the igemm_simt family (generator/families/igemm_simt.cpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/families/igemm_shape.h"
#include "generator/family.h"
#include "generator/source.h"
#include "tests/generator_test_util.h"

namespace convt3d::gen {
namespace {

// New with the split (the moved tests cover the family only beside others): f32 storage only,
// at most 16 tiles of 64-512 threads whose static shared memory fits the device's (the launch
// asks for none), two left where tensor-core tiles are offered; its plan is one launch.
TEST(IgemmSimt, TilesPlacementAndLaunch) {
  auto mine = [](const Problem& p, const DeviceLimits& limits) {
    std::vector<Config> out;
    for (const Config& c : Candidates(p, limits))
      if (c.family == "igemm_simt") out.push_back(c);
    return out;
  };
  Problem p = L1_72();
  const auto simt = mine(p, {});
  EXPECT_GE(simt.size(), 2u);
  EXPECT_LE(simt.size(), 16u);
  int big = 0;
  for (const Config& c : simt) {
    const IgemmShape sh = IgemmShapeOf(p, c);
    EXPECT_GE(sh.threads, 64) << c.Name();
    EXPECT_LE(sh.threads, 512) << c.Name();
    big += sh.smem_bytes > 8 * 1024;
    const LaunchPlan plan = Launches(p, c);
    ASSERT_EQ(plan.steps.size(), 1u) << c.Name();
    EXPECT_EQ(plan.steps[0].symbol, c.Name());
    EXPECT_EQ(plan.steps[0].block[0], static_cast<unsigned>(sh.threads)) << c.Name();
    EXPECT_EQ(plan.steps[0].smem_bytes, 0u) << c.Name() << ": static shared memory";
    EXPECT_EQ(plan.workspace_bytes, 0u) << c.Name();
    auto src = BuildSource(p, c);
    ASSERT_TRUE(src.ok()) << src.status().message();
    EXPECT_NE(src->find("constexpr int kTM = " + std::to_string(c.tm) + ";"), std::string::npos);
    EXPECT_NE(src->find("constexpr int kNT = " + std::to_string(c.nt) + ";"), std::string::npos);
  }
  ASSERT_GT(big, 0) << "the limit below must prune something";
  DeviceLimits small;
  small.max_smem_per_block = 8 * 1024;
  const auto pruned = mine(p, small);
  EXPECT_FALSE(pruned.empty());
  for (const Config& c : pruned) EXPECT_LE(IgemmShapeOf(p, c).smem_bytes, 8 * 1024) << c.Name();
  Problem tf32 = p;
  tf32.precision = Precision::kTf32;
  EXPECT_EQ(mine(tf32, {}).size(), 2u);
  for (DType t : {DType::kF64, DType::kBF16, DType::kF16}) {
    Problem q = p;
    q.dtype = t;
    EXPECT_TRUE(mine(q, {}).empty()) << DTypeName(t);
  }
}

}  // namespace
}  // namespace convt3d::gen
