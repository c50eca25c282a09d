// test_fanout.cpp: `convt3d tune --devices` without a GPU: parsing, the hand-out bookkeeping, and
// the worker processes end to end in compile-only mode (one compiling worker per listed ordinal).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/cli_helpers.h"
#include "tests/status_matchers.h"
#include "tests/temp_dir.h"
#include "tools/fanout.h"

namespace convt3d::cli {
namespace {

using test::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---- --devices --------------------------------------------------------------------------------

TEST(ParseDevices, ListsAndAll) {
  ASSERT_OK_AND_ASSIGN(std::vector<int> d, ParseDevices("0,1", 2));
  EXPECT_THAT(d, ElementsAre(0, 1));
  ASSERT_OK_AND_ASSIGN(d, ParseDevices("1,0", 4));
  EXPECT_THAT(d, ElementsAre(1, 0));  // the order given
  ASSERT_OK_AND_ASSIGN(d, ParseDevices("all", 3));
  EXPECT_THAT(d, ElementsAre(0, 1, 2));
  ASSERT_OK_AND_ASSIGN(d, ParseDevices("5", -1));  // no driver: not checked (compile-only)
  EXPECT_THAT(d, ElementsAre(5));
}

TEST(ParseDevices, RefusesWithTheReason) {
  EXPECT_THAT(ParseDevices("0,0", 2), StatusIs(Code::kInvalidArgument, HasSubstr("twice")));
  EXPECT_THAT(ParseDevices("2", 2), StatusIs(Code::kInvalidArgument, HasSubstr("no GPU 2")));
  EXPECT_THAT(ParseDevices("-1", 2), StatusIs(Code::kInvalidArgument, HasSubstr("--devices")));
  EXPECT_THAT(ParseDevices("x", 2), StatusIs(Code::kInvalidArgument, HasSubstr("--devices")));
  EXPECT_THAT(ParseDevices("0x1", 2), StatusIs(Code::kInvalidArgument, HasSubstr("--devices")));
  EXPECT_THAT(ParseDevices("", 2), StatusIs(Code::kInvalidArgument, HasSubstr("--devices")));
  EXPECT_THAT(ParseDevices("0,", 2), StatusIs(Code::kInvalidArgument, HasSubstr("--devices")));
  EXPECT_THAT(ParseDevices("all", -1), StatusIs(Code::kInvalidArgument, HasSubstr("no GPU")));
  EXPECT_THAT(ParseDevices("all", 0), StatusIs(Code::kInvalidArgument, HasSubstr("no GPU")));
}

TEST(WithoutOptions, DropsBothSpellingsWithTheirValues) {
  const std::vector<std::string> args = {
      "tune",           "--devices", "0,1", "--json=out.json", "--cache", "c.sqlite",
      "--compile-only", "--jsonx",   "1"};
  EXPECT_THAT(WithoutOptions(args, {"--devices", "--json", "--cache"}),
              ElementsAre("tune", "--compile-only", "--jsonx", "1"));
}

// ---- Dispatcher -------------------------------------------------------------------------------

TEST(Dispatcher, ASlowPairHoldsUpOnlyItsWorker) {
  Dispatcher d(5, 2, 0);
  EXPECT_EQ(d.Next(0), 0);  // worker 0 gets pair 0 and keeps working on it
  EXPECT_EQ(d.Next(1), 1);
  d.Reported(1);
  EXPECT_EQ(d.Next(1), 2);  // worker 1 goes on while 0 is busy
  d.Reported(1);
  EXPECT_EQ(d.Next(1), 3);
  d.Reported(1);
  EXPECT_EQ(d.Next(1), 4);
  d.Reported(1);
  EXPECT_EQ(d.Next(1), std::nullopt);
  EXPECT_EQ(d.InFlight(0), 0);
  d.Reported(0);
  EXPECT_EQ(d.Next(0), std::nullopt);
  EXPECT_TRUE(d.Unstarted().empty());
}

TEST(Dispatcher, HandsOutInTheGivenOrderLongestFirst) {
  const std::vector<int> order = LongestFirst({1, 5, 3, 5, 0});
  EXPECT_THAT(order, ElementsAre(1, 3, 2, 0, 4));  // ties keep list order
  Dispatcher d(5, 2, 0, order);
  EXPECT_EQ(d.Next(0), 1);
  EXPECT_EQ(d.Next(1), 3);
  EXPECT_EQ(d.InFlight(1), 3);
  bool restart = false;
  EXPECT_EQ(d.Exited(1, true, &restart), 3);
  EXPECT_THAT(d.Unstarted(), ElementsAre(2, 0, 4));
}

TEST(Dispatcher, ADeadWorkerLosesOnlyItsPairAndIsReplacedWhileRestartsLast) {
  Dispatcher d(6, 2, 1);
  EXPECT_EQ(d.Next(0), 0);
  EXPECT_EQ(d.Next(1), 1);
  bool restart = false;
  EXPECT_EQ(d.Exited(1, /*served=*/true, &restart), 1);  // pair 1 lost, not handed out again
  EXPECT_TRUE(restart);
  EXPECT_EQ(d.Next(1), 2);  // the replacement
  EXPECT_EQ(d.Exited(1, true, &restart), 2);
  EXPECT_FALSE(restart) << "one restart allowed";
  d.Reported(0);
  EXPECT_EQ(d.Next(0), 3);  // the survivor takes the rest
  d.Reported(0);
  EXPECT_EQ(d.Next(0), 4);
  d.Reported(0);
  EXPECT_EQ(d.Next(0), 5);
  d.Reported(0);
  EXPECT_EQ(d.Next(0), std::nullopt);
}

TEST(Dispatcher, AWorkerThatNeverStartedIsNotReplacedAndTheRestIsUnstarted) {
  Dispatcher d(3, 1, 2);
  bool restart = true;
  EXPECT_EQ(d.Exited(0, /*served=*/false, &restart), std::nullopt);
  EXPECT_FALSE(restart);
  EXPECT_THAT(d.Unstarted(), ElementsAre(0, 1, 2));
}

TEST(Dispatcher, NoRestartWhenNothingIsLeft) {
  Dispatcher d(1, 1, 2);
  EXPECT_EQ(d.Next(0), 0);
  d.Reported(0);
  bool restart = true;
  EXPECT_EQ(d.Exited(0, true, &restart), std::nullopt);
  EXPECT_FALSE(restart);
}

// ---- The CLI, compile-only workers ------------------------------------------------------------

class FanoutCli : public test::TempDirTest {
 protected:
  void SetUp() override {
    test::TempDirTest::SetUp();
    // Three small problems, two modes: six pairs, each a single NVRTC compile.
    std::ofstream(Path("list.json")) << R"({"problems": [
      {"name": "a", "input": [1, 4, 4, 4, 4], "out_channels": 4, "kernel": 3},
      {"name": "b", "input": [1, 4, 4, 4, 4], "out_channels": 8, "kernel": 3, "stride": 2},
      {"name": "c", "input": [1, 8, 3, 3, 3], "out_channels": 4, "kernel": 2, "stride": 2}]})";
  }
  test::CliResult Tune(const std::string& args, const std::string& env = "") const {
    return test::RunCli("tune --problems '" + Path("list.json") +
                            "' --precision fp32,tf32 --max-candidates 1 --json '" +
                            Path("out.json") + "' " + args,
                        "CONVT3D_CACHE='" + Path() + "' " + env);
  }
  nlohmann::json Json() const {
    std::ifstream in(Path("out.json"));
    return nlohmann::json::parse(in, nullptr, false);
  }
};

TEST_F(FanoutCli, CompileOnlyWorkersShareTheListAndMergeOneTable) {
  const test::CliResult r = Tune("--compile-only --devices 0,1");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const nlohmann::json j = Json();
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["devices"], nlohmann::json::array({0, 1}));
  ASSERT_EQ(j["results"].size(), 6u) << j.dump(1);
  std::set<std::string> names;
  for (const auto& res : j["results"]) {
    EXPECT_EQ(res["status"], "ok") << res.dump();
    EXPECT_EQ(res["compiled"], 1) << res.dump();
    EXPECT_TRUE(res["device"] == 0 || res["device"] == 1) << res.dump();
    names.insert(res["name"].get<std::string>());
  }
  EXPECT_EQ(names, (std::set<std::string>{"a", "a/tf32", "b", "b/tf32", "c", "c/tf32"}));
  // One table in pair order with the worker column, the total, and the summary line.
  const size_t a = r.out.find("\na/tf32 "), b = r.out.find("\nb "), total = r.out.find("\ntotal");
  EXPECT_TRUE(a != std::string::npos && b != std::string::npos && a < b && b < total) << r.out;
  EXPECT_THAT(r.out, HasSubstr("worker"));
  EXPECT_THAT(r.out, HasSubstr("devices 0,1: 6 pairs in"));
  // Progress lines come through with the worker's label.
  EXPECT_THAT(r.err, HasSubstr("slot0: "));
  EXPECT_THAT(r.err, HasSubstr("slot1: "));
}

TEST_F(FanoutCli, ADeadWorkerFailsItsPairOnlyAndTheRunSaysSo) {
  const test::CliResult r =
      Tune("--compile-only --devices 0,1", "CONVT3D_TEST_WORKER_EXIT='1:" + Path("hook") + "'");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.err,
              HasSubstr("the worker process for slot1 exited with status 3 while on this pair"));
  const nlohmann::json j = Json();
  ASSERT_EQ(j["results"].size(), 6u) << r.out << r.err;
  int ok = 0, failed = 0;
  for (const auto& res : j["results"]) {
    if (res["status"] == "ok") ++ok;
    if (res["status"] == "error") {
      ++failed;
      EXPECT_THAT(res["error"].get<std::string>(), HasSubstr("exited with status 3"));
    }
  }
  EXPECT_EQ(failed, 1) << j.dump(1);
  EXPECT_EQ(ok, 5) << j.dump(1);
}

TEST_F(FanoutCli, AWorkerThatCannotStartIsNamedAndTheOthersDoTheWork) {
  const test::CliResult r =
      Tune("--compile-only --devices 0,1", "CONVT3D_TEST_WORKER_EXIT='1:start'");
  EXPECT_EQ(r.code, 1) << r.out << r.err;  // every pair done, but a device failed
  EXPECT_THAT(r.err, HasSubstr("slot1: convt3d: test hook: this worker does not start"));
  EXPECT_THAT(r.err, HasSubstr("slot1: the worker could not start (exited with status 4)"));
  const nlohmann::json j = Json();
  ASSERT_EQ(j["results"].size(), 6u) << r.out << r.err;
  for (const auto& res : j["results"]) {
    EXPECT_EQ(res["status"], "ok") << res.dump();
    EXPECT_EQ(res["device"], 0) << res.dump();
  }
  EXPECT_EQ(j["worker_errors"].size(), 1u) << j.dump(1);
  EXPECT_THAT(r.out, HasSubstr("(slot0 6, slot1 0)"));
}

TEST_F(FanoutCli, NoGpuWithoutCompileOnlyIsRefusedClearly) {
  test::CliResult r = Tune("--devices 0,1");
  if (r.err.find("no usable GPU") == std::string::npos && r.code == 0)
    GTEST_SKIP() << "this machine has GPUs";
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("--devices needs GPUs"));
  EXPECT_THAT(r.err, HasSubstr("--compile-only"));
  r = Tune("--compile-only --devices all");  // nothing to count
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("name the devices"));
}

TEST_F(FanoutCli, BadDevicesAndMemoryCacheAreUsageErrors) {
  test::CliResult r = Tune("--compile-only --devices 0,0");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("listed twice"));
  r = Tune("--compile-only --devices 0,x --repeats 0");  // every bad flag at once
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--devices"));
  EXPECT_THAT(r.err, HasSubstr("--repeats"));
  r = Tune("--devices 0 --cache :memory:");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr(":memory:"));
  r = Tune("--devices 0 --device 1");
  EXPECT_EQ(r.code, 2) << r.err;
}

}  // namespace
}  // namespace convt3d::cli
