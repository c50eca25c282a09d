// test_cli.cpp: runs the built convt3d binary (no GPU needed) and the problem-list parser it uses.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "convt3d/convt3d.h"
#include "src/problem_io.h"
#include "tests/cache_test_util.h"
#include "tests/cli_helpers.h"
#include "tests/status_matchers.h"
#include "tests/temp_dir.h"
#include "tests/test_util.h"

namespace convt3d {
namespace {

namespace fs = std::filesystem;
using test::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

using Result = test::CliResult;

// Every test gets its own directory, and CONVT3D_CACHE points into it unless a test says
// otherwise, so that no run touches the user's real cache.
class CliTest : public test::TempDirTest {
 protected:
  // Runs `convt3d <args>` with CONVT3D_CACHE in this test's directory, then `env`.
  Result Run(const std::string& args, const std::string& env = "") const {
    return test::RunCli(args, "CONVT3D_CACHE='" + Path("default.sqlite") + "' " + env);
  }

  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(Path(name)) << text;
  }
};

bool Has(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

TEST_F(CliTest, HelpListsSubcommands) {
  const Result r = Run("--help");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "tune")) << r.out;
  EXPECT_TRUE(Has(r.out, "cache")) << r.out;
  EXPECT_TRUE(Has(r.out, "info")) << r.out;
}

TEST_F(CliTest, TuneHelpMentionsShapeFlags) {
  const Result r = Run("tune --help");
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* flag :
       {"--kernel-size", "--input", "--out-channels", "--output-padding", "--problems",
        "--compile-only", "--require-gpu", "--cache", "--devices", "--wait"}) {
    EXPECT_TRUE(Has(r.out, flag)) << flag << " missing from:\n" << r.out;
  }
  EXPECT_EQ(Run("cache --help").code, 0);
  EXPECT_EQ(Run("cache list --help").code, 0);
  EXPECT_EQ(Run("info --help").code, 0);
}

TEST_F(CliTest, NoSubcommandOrUnknownFlagIsUsageError) {
  Result r = Run("");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("convt3d: ", 0), 0u) << r.err;
  r = Run("tune --no-such-flag");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("convt3d: ", 0), 0u) << r.err;
  r = Run("tune");  // neither a shape nor --problems
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "--problems")) << r.err;
}

TEST_F(CliTest, InvalidProblemNamesFieldAndValue) {
  const Result r =
      Run("tune --input 1,4,3,3,3 --out-channels 4 --kernel-size 3 --stride 2 --output-padding 2");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_EQ(r.err.rfind("convt3d: ", 0), 0u) << r.err;
  EXPECT_TRUE(Has(r.err, "output_padding")) << r.err;
  EXPECT_TRUE(Has(r.err, "2")) << r.err;
}

TEST_F(CliTest, MalformedShapeFlagsAreUsageErrors) {
  Result r = Run("tune --input 1,4,3,3 --out-channels 4 --kernel-size 3");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "--input")) << r.err;
  r = Run("tune --input 1,4,3,3,3 --out-channels 4 --kernel-size 3,5");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "--kernel-size")) << r.err;
  r = Run("tune --input 1,4,3,3,3 --in-channels 5 --out-channels 4 --kernel-size 3");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "--in-channels")) << r.err;
}

TEST_F(CliTest, InvalidProblemInListIsNamed) {
  Write("bad.json", R"({"problems": [{"name": "tiny-bad", "input": [1, 4, 3, 3, 3],
      "out_channels": 4, "kernel": 3, "stride": 2, "output_padding": 2}]})");
  Result r = Run("tune --problems '" + Path("bad.json") + "'");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_TRUE(Has(r.err, "tiny-bad")) << r.err;
  EXPECT_TRUE(Has(r.err, "output_padding")) << r.err;

  Write("mismatch.json", R"([{"name": "chan", "input": [1, 4, 3, 3, 3], "in_channels": 8,
      "out_channels": 4, "kernel": 3}])");
  r = Run("tune --problems '" + Path("mismatch.json") + "'");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_TRUE(Has(r.err, "chan")) << r.err;
  EXPECT_TRUE(Has(r.err, "in_channels")) << r.err;

  r = Run("tune --problems '" + Path("missing.json") + "'");
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(Has(r.err, "missing.json")) << r.err;
}

TEST_F(CliTest, CachePathFlag) {
  const Result r = Run("cache path --cache /tmp/x.sqlite");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "/tmp/x.sqlite\n");
}

TEST_F(CliTest, CachePathHonoursEnvironment) {
  const std::string p = Path("from_env.sqlite");
  const Result r = Run("cache path", "CONVT3D_CACHE='" + p + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, p + "\n");
  // The flag wins over the environment.
  EXPECT_EQ(Run("cache path --cache /tmp/y.sqlite", "CONVT3D_CACHE='" + p + "'").out,
            "/tmp/y.sqlite\n");
}

TEST_F(CliTest, InfoPrintsNvrtc) {
  const Result r = Run("info --cache '" + Path("info.sqlite") + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "NVRTC")) << r.out;
  EXPECT_TRUE(Has(r.out, Version())) << r.out;
}

TEST_F(CliTest, CacheListOnEmptyCache) {
  const Result r = Run("cache list --cache '" + Path("empty.sqlite") + "'");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(Has(r.out, "0 entries")) << r.out;
}

TEST_F(CliTest, CacheListFitsATerminalUnlessWideAndHasJson) {
  const std::string db = Path("list.sqlite");
  const cache::Key key = cache::MakeKey();  // a 63-character problem key
  {
    auto store = cache::Store::Open(db);
    ASSERT_TRUE(store->warning().empty()) << store->warning();
    ASSERT_TRUE(store->Record(key, cache::MakeWinner(1), {}).ok());
  }
  Result r = Run("cache list --cache '" + db + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
  EXPECT_FALSE(Has(r.out, key.problem)) << r.out;
  EXPECT_TRUE(Has(r.out, key.problem.substr(0, 37) + "...")) << r.out;
  r = Run("cache list --wide --cache '" + db + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, key.problem) && Has(r.out, "NVIDIA H200") && Has(r.out, "why not"))
      << r.out;
  r = Run("cache list --json --cache '" + db + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  const auto json = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(json.is_object()) << r.out;
  ASSERT_EQ(json["entries"].size(), 1u) << r.out;
  EXPECT_EQ(json["entries"][0]["problem"], key.problem);
  EXPECT_EQ(json["entries"][0]["gpu"], "NVIDIA H200");
  EXPECT_EQ(json["entries"][0]["winner"], cache::MakeWinner(1).candidate);
  EXPECT_EQ(json["cache"], db);
}

TEST_F(CliTest, CacheShowNeedsAProblem) {
  const Result r = Run("cache show --cache '" + Path("empty.sqlite") + "'");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("convt3d: ", 0), 0u) << r.err;
}

TEST_F(CliTest, CompileOnlyTinyProblem) {
  const Result r =
      Run("tune --compile-only --input 1,4,4,4,4 --out-channels 4 --kernel-size 3 "
          "--cache '" +
          Path("c.sqlite") + "' --json '" + Path("out.json") + "'");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(Has(r.out + r.err, "compiled")) << r.out << r.err;
  EXPECT_TRUE(fs::exists(Path("out.json")));
}

// fp32x3's scaled 3xFP16 tiles are an opt-in (--fp32x3-fp16, or $CONVT3D_FP32X3_FP16=1):
// without it the first candidate of a dense strided layer is a 3xTF32 tile, with it a 3xFP16 one.
TEST_F(CliTest, Fp32x3TakesThe3xFp16TilesOnlyByOptIn) {
  enum { kNone, kVariable, kFlag };
  for (const int how : {kNone, kVariable, kFlag}) {
    const bool opt_in = how != kNone;
    test::ScopedEnv env("CONVT3D_FP32X3_FP16", how == kVariable ? "1" : "0");
    const std::string dir = Path("emit" + std::to_string(how));
    fs::create_directories(dir);
    const Result r =
        Run("tune --compile-only --input 1,128,4,4,4 --out-channels 64 --kernel-size 4 --stride 2 "
            "--padding 1 --name gan --precision fp32x3 --max-candidates 1 --emit '" +
            dir + "'" + (how == kFlag ? " --fp32x3-fp16" : ""));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    std::string names;
    for (const auto& e : fs::directory_iterator(fs::path(dir) / "gan_fp32x3"))
      names += e.path().filename().string() + " ";
    EXPECT_TRUE(Has(names, opt_in ? "gemm_wgmma_3xf16_" : "gemm_wgmma_3xtf32_")) << names;
    EXPECT_FALSE(Has(names, opt_in ? "3xtf32" : "3xf16")) << names;
  }
}

// The opt-in's flag is on every command that lists fp32x3 candidates, and says what it trades.
TEST_F(CliTest, TheFp32x3Fp16FlagIsDocumented) {
  for (const char* cmd : {"tune --help", "bench --help", "cache explain --help"}) {
    const Result r = Run(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.err;
    EXPECT_TRUE(Has(r.out, "--fp32x3-fp16")) << cmd << "\n" << r.out;
    EXPECT_TRUE(Has(r.out, "CONVT3D_FP32X3_FP16")) << cmd << "\n" << r.out;
  }
  EXPECT_TRUE(Has(Run("tune --help").out, "2^22")) << "tune --help states the range caveat";
}

TEST_F(CliTest, EmitWritesOneFolderPerProblemAndMode) {
  // Candidates of different modes share names: each mode gets its own subfolder, so no cubin
  // overwrites another's.
  fs::create_directories(Path("emit"));
  const Result r =
      Run("tune --compile-only --input 1,4,4,4,4 --out-channels 4 --kernel-size 3 --stride 2 "
          "--name tiny --precision tf32,bf16 --max-candidates 2 --emit '" +
          Path("emit") + "'");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  for (const char* sub : {"tiny_tf32", "tiny_bf16"}) {
    const fs::path dir = fs::path(Path("emit")) / sub;
    ASSERT_TRUE(fs::is_directory(dir)) << dir << "\n" << r.out << r.err;
    int cu = 0, cubin = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
      cu += e.path().extension() == ".cu";
      cubin += e.path().extension() == ".cubin";
    }
    EXPECT_EQ(cu, 2) << dir;
    EXPECT_EQ(cubin, 2) << dir;
  }
}

// ---- problem_io -----------------------------------------------------------------------------

TEST(ProblemIo, LoadsKernelBenchList) {
  const std::string file = std::string(CONVT3D_SOURCE_DIR) + "/problems/kernelbench_l1.json";
  auto loaded = io::LoadProblems(file);
  ASSERT_OK(loaded);
  ASSERT_EQ(loaded->size(), 7u);
  const io::NamedProblem* l72 = nullptr;
  for (const auto& np : *loaded) {
    if (np.name == "L1-72") l72 = &np;
    EXPECT_OK(Validate(np.problem)) << np.name;
    EXPECT_GT(np.gflop, 0) << np.name;
    EXPECT_EQ(np.cudnn_ms.count("fp32_strict"), 1u) << np.name;
  }
  ASSERT_NE(l72, nullptr);
  const Problem& p = l72->problem;
  EXPECT_EQ(p.n, 8);
  EXPECT_EQ(p.c_in, 32);
  EXPECT_EQ(p.c_out, 32);
  EXPECT_EQ(p.in, (Dim3{12, 24, 48}));
  EXPECT_EQ(p.kernel, (Dim3{3, 5, 7}));
  EXPECT_EQ(p.stride, (Dim3{2, 2, 2}));
  EXPECT_EQ(p.padding, (Dim3{1, 2, 3}));
  EXPECT_EQ(p.output_padding, (Dim3{1, 1, 1}));
  EXPECT_EQ(p.groups, 4);
  EXPECT_FALSE(p.bias);
  EXPECT_EQ(p.dtype, DType::kF32);
  EXPECT_DOUBLE_EQ(l72->cudnn_ms.at("fp32_strict"), 2.437);
  EXPECT_DOUBLE_EQ(l72->gflop, 5.945);
  // The file's "output" field was produced by PyTorch; OutSize must agree.
  EXPECT_EQ(p.OutSize(), (Dim3{24, 48, 96}));
}

TEST(ProblemIo, ScalarsDefaultsAndBareArray) {
  auto r = io::ParseProblems(R"([{"input": [2, 6, 3, 4, 5], "out_channels": 9, "kernel_size": 3,
      "groups": 3, "bias": true, "dtype": "f64", "dilation": [1, 2, 3]}])",
                             "inline");
  ASSERT_OK(r);
  ASSERT_EQ(r->size(), 1u);
  const io::NamedProblem& np = (*r)[0];
  EXPECT_EQ(np.name, "problem0");
  EXPECT_EQ(np.problem.kernel, (Dim3{3, 3, 3}));
  EXPECT_EQ(np.problem.stride, (Dim3{1, 1, 1}));
  EXPECT_EQ(np.problem.padding, (Dim3{0, 0, 0}));
  EXPECT_EQ(np.problem.dilation, (Dim3{1, 2, 3}));
  EXPECT_EQ(np.problem.groups, 3);
  EXPECT_TRUE(np.problem.bias);
  EXPECT_EQ(np.problem.dtype, DType::kF64);
  EXPECT_TRUE(np.cudnn_ms.empty());
}

TEST(ProblemIo, ErrorsNameFileProblemAndField) {
  auto expect_error = [](const std::string& json, const std::string& field) {
    EXPECT_THAT(io::ParseProblems(json, "list.json"),
                StatusIs(Code::kInvalidArgument, AllOf(HasSubstr("list.json"), HasSubstr(field))))
        << json;
  };
  const std::string ok = R"("input": [1, 4, 3, 3, 3], "out_channels": 4, "kernel": 3)";
  expect_error(R"([{"name": "a", "input": [1, 4, 3, 3, 3], "kernel": 3}])", "out_channels");
  expect_error(R"([{"name": "a", "out_channels": 4, "kernel": 3}])", "input");
  expect_error(R"([{"name": "a", "input": [1, 4, 3, 3], "out_channels": 4, "kernel": 3}])",
               "input");
  expect_error("[{" + ok + R"(, "in_channels": 5}])", "in_channels");
  expect_error("[{" + ok + R"(, "stride": [1, 2]}])", "stride");
  expect_error("[{" + ok + R"(, "padding": "1"}])", "padding");
  expect_error("[{" + ok + R"(, "dilation": 1.5}])", "dilation");
  expect_error("[{" + ok + R"(, "dtype": "f8"}])", "dtype");
  expect_error("[{" + ok + R"(, "bias": "yes"}])", "bias");
  expect_error("[{" + ok + R"(, "groups": [2]}])", "groups");
  expect_error("[{" + ok + "}, {\"name\": \"second\", " + ok + R"(, "output_padding": null}])",
               "output_padding");
  expect_error(R"({"problems": 3})", "problems");
  expect_error("{\"problems\": [", "JSON");
  expect_error("[]", "empty");
  // The index and the name of the offending problem are both given.
  EXPECT_THAT(
      io::ParseProblems("[{" + ok + "}, {\"name\": \"second\", " + ok + R"(, "stride": "x"}])",
                        "list.json"),
      StatusIs(Code::kInvalidArgument, AllOf(HasSubstr("problem 1"), HasSubstr("second"))));
}

TEST(ProblemIo, ParseTriple) {
  Status st;
  EXPECT_EQ(io::ParseTriple("3", "--kernel-size", &st), (Dim3{3, 3, 3}));
  EXPECT_EQ(io::ParseTriple("3,5,7", "--kernel-size", &st), (Dim3{3, 5, 7}));
  EXPECT_EQ(io::ParseTriple(" 1, 2 ,3", "--stride", &st), (Dim3{1, 2, 3}));
  EXPECT_OK(st);
  for (const char* bad : {"", "3,5", "a", "3,,5", "1,2,3,4", "2x"}) {
    Status s2;
    io::ParseTriple(bad, "--padding", &s2);
    EXPECT_THAT(s2, StatusIs(Code::kInvalidArgument, HasSubstr("--padding"))) << bad;
  }
}

TEST(ProblemIo, ToJsonRoundTrips) {
  io::NamedProblem np;
  np.name = "rt";
  np.problem = test::MakeProblem(2, 6, 9, {3, 4, 5}, {3, 5, 7})
                   .Stride({2, 1, 3})
                   .Padding({1, 2, 3})
                   .OutputPadding({1, 0, 2})
                   .Dilation({1, 2, 1})
                   .Groups(3)
                   .Bias()
                   .Type(DType::kF64);
  const Problem& p = np.problem;
  np.cudnn_ms["fp32_strict"] = 1.5;
  auto r = io::ParseProblems("[" + io::ToJson(np) + "]", "roundtrip");
  ASSERT_OK(r);
  const io::NamedProblem& q = (*r)[0];
  EXPECT_EQ(q.name, "rt");
  EXPECT_EQ(q.problem.Signature(), p.Signature());
  EXPECT_EQ(q.problem.output_padding, p.output_padding);
  EXPECT_EQ(q.problem.dilation, p.dilation);
  EXPECT_DOUBLE_EQ(q.cudnn_ms.at("fp32_strict"), 1.5);
}

}  // namespace
}  // namespace convt3d
