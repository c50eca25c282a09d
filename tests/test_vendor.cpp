// test_vendor.cpp: vendor arbitration without a GPU: cuDNN candidates' names, JSON and keys, the
// switch, the cache and CLI with a cuDNN winner, the lookup tiers' fallback, a pure generator.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "cache_test_util.h"
#include "cli_helpers.h"
#include "generator/candidates.h"
#include "generator/family.h"
#include "runtime/cudnn.h"
#include "src/tiers.h"
#include "src/tuner.h"
#include "src/vendor.h"
#include "status_matchers.h"
#include "temp_dir.h"
#include "test_util.h"

namespace convt3d {
namespace {

using test::IsOk;
using test::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

Problem Small() {
  return test::MakeProblem(2, 8, 8, {6, 6, 6}, {3, 3, 3}).Stride({2, 2, 2}).Padding({1, 1, 1});
}

vendor::CudnnChoice Choice(int algo = 1) {
  vendor::CudnnChoice c;
  c.algo = algo;
  c.math = "FMA_MATH";
  c.cudnn_version = 91900;
  return c;
}

// A cache winner that runs cuDNN, as the tuner records it.
cache::Winner CudnnWinner(const vendor::CudnnChoice& c) { return c.AsWinner(0.25, 2e-7); }

using test::ScopedEnv;

TEST(VendorNames, CandidateNameAndJsonRoundTrip) {
  for (int algo = 0; algo < cudnn::kAlgorithms; ++algo) {
    const vendor::CudnnChoice c = Choice(algo);
    EXPECT_EQ(c.Name(), std::string("cudnn:") + cudnn::AlgorithmName(algo));
    EXPECT_EQ(cudnn::AlgorithmFromName(cudnn::AlgorithmName(algo)), algo);
    ASSERT_OK_AND_ASSIGN(const vendor::CudnnChoice back, vendor::CudnnChoice::FromJson(c.ToJson()));
    EXPECT_EQ(back.algo, algo);
    EXPECT_EQ(back.math, "FMA_MATH");
    EXPECT_EQ(back.cudnn_version, 91900);
    EXPECT_EQ(back.ToJson(), c.ToJson());
    EXPECT_TRUE(vendor::IsVendorJson(c.ToJson()));
  }
  EXPECT_EQ(Choice(1).Name(), "cudnn:ALGO_1");
  EXPECT_EQ(Choice(1).ToJson(),
            R"({"family":"cudnn","algo":"ALGO_1","math":"FMA_MATH","cudnn_version":91900})");
  const std::vector<char> blob = Choice(1).Blob();
  EXPECT_EQ(std::string(blob.begin(), blob.end()), "cuDNN cudnn:ALGO_1 FMA_MATH 91900");
}

TEST(VendorNames, FromJsonRefusesWhatToJsonDoesNotWrite) {
  for (const char* bad :
       {"", "[]", R"({"family":"direct_phase","algo":"ALGO_1"})",
        R"({"family":"cudnn","algo":"ALGO_9","math":"FMA_MATH","cudnn_version":91900})",
        R"({"family":"cudnn","algo":"ALGO_1","math":"FMA_MATH"})",
        R"({"family":"cudnn","algo":"ALGO_1","math":"FMA_MATH","cudnn_version":-3})",
        R"({"family":"cudnn","algo":"ALGO_1","math":"FMA_MATH","cudnn_version":1,"x":1})"}) {
    EXPECT_THAT(vendor::CudnnChoice::FromJson(bad).status(), StatusIs(Code::kInvalidArgument))
        << bad;
  }
  EXPECT_FALSE(vendor::IsVendorJson("{not json"));
  EXPECT_FALSE(vendor::IsVendorJson(gen::Candidates(Small()).front().ToJson()));
  EXPECT_EQ(cudnn::AlgorithmFromName("ALGO_?"), -1);
}

TEST(VendorNames, KeyTagNamesTheCudnnVersion) {
  EXPECT_EQ(vendor::KeyTag(91900), "+cudnn91900");
  EXPECT_EQ(vendor::TagOf("0123456789abcdef+cudnn91900"), "+cudnn91900");
  EXPECT_EQ(vendor::TagOf("0123456789abcdef"), "");
}

TEST(VendorPrecision, EachModeMapsToItsCudnnConfiguration) {
  Problem p = Small();
  EXPECT_EQ(cudnn::PrecisionFor(p), cudnn::Precision::kFp32);
  p.precision = Precision::kFp32x3;  // strict FMA math: never TF32 for an fp32-grade contract
  EXPECT_EQ(cudnn::PrecisionFor(p), cudnn::Precision::kFp32);
  p.precision = Precision::kTf32;
  EXPECT_EQ(cudnn::PrecisionFor(p), cudnn::Precision::kTf32);
  p.precision = Precision::kFp32;
  p.dtype = DType::kBF16;
  EXPECT_EQ(cudnn::PrecisionFor(p), cudnn::Precision::kBf16);
  p.dtype = DType::kF16;
  EXPECT_EQ(cudnn::PrecisionFor(p), cudnn::Precision::kF16);
  p.dtype = DType::kF64;
  EXPECT_EQ(cudnn::PrecisionFor(p), std::nullopt);
}

TEST(VendorSwitch, OnByDefaultAndOffMeansNoCandidate) {
  EXPECT_TRUE(Options{}.vendor_candidates);
  // The engine hands the tuner no handle when arbitration is off (or cuDNN does not load): then
  // there is no vendor candidate at all.
  EXPECT_TRUE(tuner::VendorCandidates(nullptr, Small()).empty());
  tuner::Setup s;
  EXPECT_EQ(s.cudnn, nullptr);
}

TEST(VendorSwitch, MissingCudnnIsUnavailableNotAnError) {
  ScopedEnv env("CONVT3D_CUDNN", "/nonexistent/convt3d/libcudnn.so.9");
  EXPECT_THAT(cudnn::Library::Load().status(), StatusIs(Code::kUnavailable));
  // DescribeEnvironment says so without failing.
  const Environment e = DescribeEnvironment();
  EXPECT_EQ(e.cudnn_version, 0);
  EXPECT_THAT(e.cudnn_error, HasSubstr("CONVT3D_CUDNN"));
}

// Where Library::Load looks for PyTorch's cuDNN past the loader path: the wheels under an
// activated venv, conda's prefix and the prefix of each python3 on PATH (an environment used
// without activating it), in that order, each file once. A directory on PATH without an
// executable python3 adds nothing.
class VendorWheels : public test::TempDirTest {
 protected:
  // A wheel's libcudnn.so.9 (an empty file: only found, never opened) under `prefix`.
  std::string MakeWheel(const std::string& prefix) {
    const std::string lib = Path(prefix) + "/lib/python3.12/site-packages/nvidia/cudnn/lib";
    std::filesystem::create_directories(lib);
    std::ofstream(lib + "/libcudnn.so.9") << "";
    return lib + "/libcudnn.so.9";
  }
  // `prefix`/bin, with an executable python3 there when `python`.
  std::string MakeBin(const std::string& prefix, bool python) {
    const std::string bin = Path(prefix) + "/bin";
    std::filesystem::create_directories(bin);
    if (python) {
      std::ofstream(bin + "/python3") << "#!/bin/sh\n";
      std::filesystem::permissions(bin + "/python3", std::filesystem::perms::owner_all);
    }
    return bin;
  }
};

TEST_F(VendorWheels, ActivatedCondaAndPathPythonsInThatOrder) {
  const std::string venv = MakeWheel("venv"), conda = MakeWheel("conda"),
                    plain = MakeWheel("plain");
  const std::string other = MakeWheel("other");  // its bin has no python3
  const std::string plain_bin = MakeBin("plain", true), other_bin = MakeBin("other", false);
  ScopedEnv v("VIRTUAL_ENV", Path("venv").c_str()), c("CONDA_PREFIX", Path("conda").c_str());
  ScopedEnv p("PATH", (plain_bin + ":" + other_bin + ":" + plain_bin).c_str());
  const std::vector<std::string> found = cudnn::WheelLibraries();
  auto at = [&](const std::string& file) { return std::find(found.begin(), found.end(), file); };
  ASSERT_NE(at(venv), found.end());
  ASSERT_NE(at(conda), found.end());
  ASSERT_NE(at(plain), found.end());
  EXPECT_LT(at(venv), at(conda));
  EXPECT_LT(at(conda), at(plain));
  EXPECT_EQ(std::count(found.begin(), found.end(), plain), 1);
  EXPECT_EQ(at(other), found.end());
  // Unset (empty) prefixes add nothing: the PATH's python3 alone.
  ScopedEnv v0("VIRTUAL_ENV", ""), c0("CONDA_PREFIX", "");
  const std::vector<std::string> alone = cudnn::WheelLibraries();
  EXPECT_EQ(std::count(alone.begin(), alone.end(), venv), 0);
  EXPECT_EQ(std::count(alone.begin(), alone.end(), conda), 0);
  EXPECT_EQ(std::count(alone.begin(), alone.end(), plain), 1);
}

TEST(VendorGenerator, OffersNothingCudnnRelated) {
  EXPECT_EQ(gen::FindFamily(vendor::kCudnnFamily), nullptr);
  EXPECT_THAT(gen::Config::FromJson(Choice().ToJson()).status(), Not(IsOk()));
  std::vector<Problem> problems = {Small(), test::MakeProblem(1, 4, 6, {5, 5, 5}, {3, 3, 3})
                                                .Groups(2)
                                                .Bias()
                                                .Stride({2, 2, 2})
                                                .OutputPadding({1, 1, 1})};
  for (Problem p : problems) {
    for (int m = 0; m < 5; ++m) {
      Problem q = p;
      test::SetMode(q, m);
      for (const gen::Config& c : gen::Candidates(q)) {
        EXPECT_EQ(c.Name().find("cudnn"), std::string::npos) << c.Name();
        EXPECT_FALSE(vendor::IsVendorJson(c.ToJson())) << c.Name();
      }
      EXPECT_EQ(gen::HeuristicPick(q).Name().find("cudnn"), std::string::npos);
    }
  }
}

class VendorCache : public test::TempDirTest {};

TEST_F(VendorCache, CudnnWinnerRoundTripsThroughTheStore) {
  auto store = cache::Store::Open(Path());
  cache::Key key = cache::MakeKey(Small().Signature());
  key.code_hash += vendor::KeyTag(91900);
  const cache::Winner w = CudnnWinner(Choice());
  cache::Trial t;
  t.candidate = w.candidate;
  t.outcome = "ok";
  t.median_ms = 0.25;
  ASSERT_OK(store->Record(key, w, {t}));
  ASSERT_OK_AND_ASSIGN(auto back, store->Lookup(key));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->candidate, "cudnn:ALGO_1");
  EXPECT_EQ(back->params_json, w.params_json);
  ASSERT_OK_AND_ASSIGN(const vendor::CudnnChoice c,
                       vendor::CudnnChoice::FromJson(back->params_json));
  EXPECT_EQ(c.algo, 1);
  // Untagged (arbitration off) is another key.
  cache::Key plain = key;
  plain.code_hash = cache::MakeKey().code_hash;
  ASSERT_OK_AND_ASSIGN(auto miss, store->Lookup(plain));
  EXPECT_FALSE(miss.has_value());
}

TEST_F(VendorCache, PruneKeepsTheArbitratedEntriesOfThisMachine) {
  auto store = cache::Store::Open(Path());
  const cache::Key plain = cache::MakeKey(Small().Signature());
  cache::Key tagged = plain, other_cudnn = plain;
  tagged.code_hash += vendor::KeyTag(91900);
  other_cudnn.code_hash += vendor::KeyTag(90100);
  const Problem other = test::MakeProblem(1, 2, 2, {3, 3, 3}, {1, 1, 1});
  other_cudnn.problem = other.Signature();
  ASSERT_OK(store->Record(plain, cache::MakeWinner(1), {}));
  ASSERT_OK(store->Record(tagged, CudnnWinner(Choice()), {}));
  ASSERT_OK(store->Record(other_cudnn, CudnnWinner(Choice()), {}));
  ASSERT_OK_AND_ASSIGN(const int removed, store->Prune(plain, {tagged.code_hash}));
  EXPECT_EQ(removed, 1);
  ASSERT_OK_AND_ASSIGN(auto left, store->List());
  ASSERT_EQ(left.size(), 2u);
  for (const auto& e : left) EXPECT_NE(e.key.code_hash, other_cudnn.code_hash);
}

TEST_F(VendorCache, CacheShowAndListNameTheCudnnWinner) {
  const Problem p = Small();
  {
    auto store = cache::Store::Open(Path());
    cache::Key key = cache::MakeKey(p.Signature());
    key.code_hash += vendor::KeyTag(91900);
    cache::Trial ours, theirs;
    ours.candidate = gen::Candidates(p).front().Name();
    ours.outcome = "ok";
    ours.median_ms = 0.5;
    theirs.candidate = "cudnn:ALGO_1";
    theirs.outcome = "ok";
    theirs.median_ms = 0.25;
    ASSERT_OK(store->Record(key, CudnnWinner(Choice()), {ours, theirs}));
  }
  const test::CliResult show =
      test::RunCli("cache show --problem " + p.Signature() + " --cache '" + Path() + "' --full");
  EXPECT_EQ(show.code, 0) << show.err;
  EXPECT_THAT(show.out, HasSubstr("winner:     cudnn:ALGO_1"));
  EXPECT_THAT(show.out, HasSubstr("+cudnn91900"));
  EXPECT_THAT(show.out, HasSubstr(R"("algo":"ALGO_1")"));
  const test::CliResult list = test::RunCli("cache list --cache '" + Path() + "'");
  EXPECT_EQ(list.code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("cudnn:ALGO_1"));
  // explain for that machine: tier 1 runs cuDNN where it loads, else the next tier.
  const test::CliResult explain =
      test::RunCli("cache explain --problem " + p.Signature() + " --cache '" + Path() +
                   "' --gpu 'NVIDIA H200' --driver 13000 --nvrtc 13000 --code-hash "
                   "0123456789abcdef+cudnn91900");
  EXPECT_EQ(explain.code, 0) << explain.err;
  EXPECT_THAT(explain.out, HasSubstr("tier 1 exact: cudnn:ALGO_1"));
  EXPECT_THAT(explain.out, HasSubstr("runs cuDNN where it loads, else the next tier"));
}

// A cuDNN winner never stands in beyond its exact key, and arbitrated and plain entries never
// serve one another at tiers 2-3: the lookup falls through to tuning or the heuristic pick.
TEST(VendorTiers, CudnnWinnerServesItsExactKeyOnly) {
  char tmpl[] = "/tmp/convt3d_vendor_tiers_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/cache.sqlite";
  const Problem p = Small();
  auto store = cache::Store::Open(path);
  cache::Key want = cache::MakeKey(p.Signature());
  want.code_hash = "new" + vendor::KeyTag(91900);
  // The same problem on this GPU under an older driver, tuned with arbitration: cuDNN won.
  cache::Key older = want;
  older.driver_version = 12080;
  ASSERT_OK(store->Record(older, CudnnWinner(Choice()), {}));
  // ... and tuned without arbitration under the same older driver: a kernel of ours.
  cache::Key plain = older;
  plain.code_hash = "new";
  const gen::Config ours = gen::Candidates(p).front();
  cache::Winner w;
  w.candidate = w.kernel_symbol = ours.Name();
  w.params_json = ours.ToJson();
  w.cubin = cache::MakeCubin(3);
  w.median_ms = 0.5;
  w.rel_err = 1e-7;
  ASSERT_OK(store->Record(plain, w, {}));
  ASSERT_OK_AND_ASSIGN(tiers::Found found, tiers::Find({store.get()}, want, p, {}));
  for (const auto& o : found.options) EXPECT_EQ(static_cast<int>(o.tier), 4) << o.what;
  std::string missed;
  for (const auto& m : found.missed) missed += m + "\n";
  EXPECT_THAT(missed, HasSubstr("runs cuDNN, which serves its exact key only"));
  EXPECT_THAT(missed, HasSubstr("tuned without cuDNN arbitration, this lookup is with cudnn91900"));
  // The lookup without arbitration does not take the arbitrated entry either, but does take its
  // own (a kernel of ours, recompiled and re-checked as tier 2).
  cache::Key want_plain = want;
  want_plain.code_hash = "new";
  ASSERT_OK_AND_ASSIGN(found, tiers::Find({store.get()}, want_plain, p, {}));
  ASSERT_FALSE(found.options.empty());
  EXPECT_EQ(static_cast<int>(found.options.front().tier), 2);
  EXPECT_EQ(found.options.front().winner.candidate, ours.Name());
  // The exact arbitrated key lists its cuDNN winner as tier 1 (the engine loads it, or goes on).
  ASSERT_OK(store->Record(want, CudnnWinner(Choice(0)), {}));
  ASSERT_OK_AND_ASSIGN(found, tiers::Find({store.get()}, want, p, {}));
  ASSERT_FALSE(found.options.empty());
  EXPECT_EQ(static_cast<int>(found.options.front().tier), 1);
  EXPECT_EQ(found.options.front().winner.candidate, "cudnn:ALGO_0");
}

TEST(VendorCli, TheSwitchesAreDocumented) {
  const test::CliResult tune = test::RunCli("tune --help");
  EXPECT_THAT(tune.out, HasSubstr("--no-cudnn"));
  const test::CliResult bench = test::RunCli("bench --help");
  EXPECT_THAT(bench.out, HasSubstr("--arbitration"));
  const test::CliResult explain = test::RunCli("cache explain --help");
  EXPECT_THAT(explain.out, HasSubstr("--no-cudnn"));
}

// The finals of tuning: ours within 1.3x of the best probe (at most 8), and every vendor
// algorithm that passed whose single probe is within 8x of the best (cuDNN's first run carries
// costs its timed runs do not; one 50x slower cannot win); in rank order. Candidates that
// failed the gate never go.
TEST(TuningFinals, VendorAlgorithmsWithinTheirWiderCutAreTimed) {
  //                          0    1    2     3    4    5    6
  const std::vector<double> probe = {1.0, 1.25, 4.0, 1.4, 0.9, 7.9, 50.0};
  const std::vector<bool> passed = {true, true, true, true, false, true, true};
  const std::vector<bool> vendor = {false, false, true, false, false, true, true};
  EXPECT_EQ(tuner::Finalists(probe, passed, vendor), (std::vector<size_t>{0, 1, 2, 5}));
  // The cut is relative to the best passing probe, a vendor's too.
  const std::vector<double> vendor_best = {4.0, 1.0, 9.0};
  EXPECT_EQ(tuner::Finalists(vendor_best, {true, true, true}, {false, true, true}),
            (std::vector<size_t>{1}));
  // Nothing is a vendor's: the 1.3x cut alone; ten within it: the eight best probes.
  EXPECT_EQ(tuner::Finalists(probe, passed, std::vector<bool>(7, false)),
            (std::vector<size_t>{0, 1}));
  std::vector<double> close(10);
  for (size_t i = 0; i < close.size(); ++i) close[i] = 1.0 + 0.01 * (9 - i);
  EXPECT_EQ(tuner::Finalists(close, std::vector<bool>(10, true), std::vector<bool>(10, false)),
            (std::vector<size_t>{2, 3, 4, 5, 6, 7, 8, 9}));
}

}  // namespace
}  // namespace convt3d
