// test_compile.cpp: NVRTC compiles every candidate of the seven level-1 problems to sm_90 cubins.
#include <gtest/gtest.h>

#include "convt3d/convt3d.h"
#include "problem_io.h"

namespace convt3d {
namespace {

TEST(Compile, EveryLevel1CandidateCompilesForSm90) {
  auto problems = io::LoadProblems(CONVT3D_SOURCE_DIR "/problems/kernelbench_l1.json");
  ASSERT_TRUE(problems.ok()) << problems.status().message();
  ASSERT_EQ(problems->size(), 7u);
  for (const auto& np : problems.value()) {
    for (DType t : {DType::kF32, DType::kF64}) {
      Problem p = np.problem;
      p.dtype = t;
      auto rep = CompileCandidates(p, "sm_90");
      ASSERT_TRUE(rep.ok()) << rep.status().message();
      EXPECT_GT(rep->candidates, 0) << np.name;
      EXPECT_EQ(rep->compiled, rep->candidates)
          << np.name << ": " << (rep->failures.empty() ? "" : rep->failures[0]);
      // The f64 set is only needed for the reference; one f64 check per problem is enough.
      if (t == DType::kF64) break;
    }
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
