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
