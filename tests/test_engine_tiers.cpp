// test_engine_tiers.cpp: lookup tiers and background tuning through the Engine (GPU; skips
// without).
//
// Each measuring test prints one "TIERS_RESULT key=value ..." line that scripts/device_tiers.sh
// turns into its table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "cache/cache.h"
#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "runtime/runtime.h"
#include "tests/status_matchers.h"

namespace convt3d {
namespace {

using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;

const std::string& NoGpuReason() {
  static const std::string reason = [] {
    Environment env = DescribeEnvironment();
    return env.driver_error;
  }();
  return reason;
}

#define REQUIRE_GPU() \
  if (!NoGpuReason().empty()) GTEST_SKIP() << "no GPU: " << NoGpuReason()

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string TempCache(const char* tag) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("convt3d_tiers_" + std::string(tag) + "_" + std::to_string(getpid()) + ".sqlite"))
          .string();
  std::filesystem::remove(path);
  return path;
}

// Sets an environment variable for one scope (the code-change hook is read at Engine::Create
// and at every source build).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

// Strided, f32 strict, small enough to tune in a few seconds with a few candidates.
Problem TierProblem(int64_t n = 2) {
  Problem p;
  p.n = n, p.c_in = 16, p.c_out = 16, p.in = {8, 8, 8};
  p.kernel = {3, 3, 3}, p.stride = {2, 2, 2}, p.padding = {1, 1, 1};
  return p;
}

// A shape that takes a while to tune and whose kernels take some time to run.
Problem BackgroundProblem() {
  Problem p;
  p.n = 4, p.c_in = 32, p.c_out = 32, p.in = {16, 16, 16};
  p.kernel = {3, 3, 3}, p.stride = {2, 2, 2}, p.padding = {1, 1, 1};
  p.precision = Precision::kTf32;
  return p;
}

// Device tensors of p with fixed random contents.
struct Tensors {
  rt::DeviceBuffer x, w, y;
};
Tensors MakeTensors(const Problem& p) {
  Tensors t;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(p.InputElements()), w(p.WeightElements());
  for (float& v : x) v = u(rng);
  for (float& v : w) v = u(rng);
  t.x = rt::DeviceBuffer::Alloc(x.size() * 4).value();
  t.w = rt::DeviceBuffer::Alloc(w.size() * 4).value();
  t.y = rt::DeviceBuffer::Alloc(p.OutputElements() * 4).value();
  EXPECT_OK(t.x.Upload(x.data(), x.size() * 4));
  EXPECT_OK(t.w.Upload(w.data(), w.size() * 4));
  return t;
}
std::vector<float> Output(const Problem& p, const Tensors& t) {
  std::vector<float> y(p.OutputElements());
  EXPECT_OK(t.y.Download(y.data(), y.size() * 4));
  return y;
}
double RelL2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d += (a[i] - b[i]) * double(a[i] - b[i]), r += b[i] * double(b[i]);
  return std::sqrt(d / std::max(r, 1e-300));
}
Status RunSync(const Plan& plan, const Tensors& t) {
  CONVT3D_RETURN_IF_ERROR(plan.Run(t.x.get(), t.w.get(), nullptr, t.y.get()));
  return rt::Synchronize();
}

// Log lines with their time, collected from Options::log (the worker's lines too).
struct LogLines {
  std::mutex mu;
  std::vector<std::pair<Clock::time_point, std::string>> lines;
  std::function<void(LogLevel, const std::string&)> Sink() {
    return [this](LogLevel, const std::string& line) {
      std::lock_guard<std::mutex> lock(mu);
      lines.emplace_back(Clock::now(), line);
    };
  }
  int Count(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mu);
    return static_cast<int>(std::count_if(
        lines.begin(), lines.end(), [&](const auto& l) { return l.second.rfind(prefix, 0) == 0; }));
  }
  // The time of the first line starting with `prefix`, if any.
  std::optional<Clock::time_point> First(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& l : lines)
      if (l.second.rfind(prefix, 0) == 0) return l.first;
    return std::nullopt;
  }
};

// Our kernels alone: these tests are about the tiers' reuse of our winners (a cuDNN winner
// serves its exact key only, src/vendor.h).
Options Opts(const std::string& path, TunePolicy policy, LogLines* log = nullptr) {
  Options o;
  o.cache_path = path;
  o.vendor_candidates = false;
  o.policy = policy;
  o.max_candidates = 6;
  o.repeats = 5;
  if (log) o.log = log->Sink();
  return o;
}

// The target: after a change to one family's template only (the test hook), shapes
// whose winners are of other families are served from tier 2: no tuning run, and per shape one
// kernel compile plus the fp64 reference's for the re-check (the engine's first re-check also
// compiles the utility module once); a shape whose winner's family changed is re-tuned
// (kTuneIfMissing).
TEST(EngineTiers, OneFamilyChangedServesOthersFromTierTwo) {
  REQUIRE_GPU();
  const std::string path = TempCache("tier2");
  const std::vector<Problem> shapes = {TierProblem(2), TierProblem(3)};
  std::vector<std::string> winners, families;
  std::vector<std::vector<float>> tuned_out;
  {
    ASSERT_OK_AND_ASSIGN(Engine e, Engine::Create(Opts(path, TunePolicy::kTuneIfMissing)));
    for (const Problem& p : shapes) {
      ASSERT_OK_AND_ASSIGN(const Plan plan, e.Plan(p));
      EXPECT_EQ(plan.origin().tier, 0) << plan.origin().reason;
      winners.push_back(plan.kernel_name());
      const Tensors t = MakeTensors(p);
      ASSERT_OK(RunSync(plan, t));
      tuned_out.push_back(Output(p, t));
      for (const auto& c : gen::Candidates(p))
        if (c.Name() == plan.kernel_name()) families.push_back(std::string(c.family));
    }
  }
  ASSERT_EQ(families.size(), shapes.size());
  std::string other;  // a family with candidates here that no winner is of
  for (const auto& c : gen::Candidates(shapes[0]))
    if (std::find(families.begin(), families.end(), c.family) == families.end()) other = c.family;
  ASSERT_FALSE(other.empty());

  int compiles_first = -1, compiles_all = -1, tunings = -1;
  {
    ScopedEnv alter("CONVT3D_TEST_ALTER_FAMILY", other);
    LogLines log;
    ASSERT_OK_AND_ASSIGN(Engine e, Engine::Create(Opts(path, TunePolicy::kTuneIfMissing, &log)));
    for (size_t i = 0; i < shapes.size(); ++i) {
      ASSERT_OK_AND_ASSIGN(const Plan plan, e.Plan(shapes[i]));
      EXPECT_EQ(plan.origin().tier, 2) << plan.origin().reason;
      EXPECT_EQ(plan.origin().name, "same_gpu");
      EXPECT_THAT(plan.origin().reason, HasSubstr("code_hash"));
      EXPECT_EQ(plan.kernel_name(), winners[i]);
      if (i == 0) compiles_first = e.nvrtc_compiles();
      const Tensors t = MakeTensors(shapes[i]);
      ASSERT_OK(RunSync(plan, t));
      EXPECT_LE(RelL2(Output(shapes[i], t), tuned_out[i]), 1e-6);
    }
    compiles_all = e.nvrtc_compiles();
    tunings = log.Count("tuning ");
    EXPECT_EQ(tunings, 0);
    EXPECT_EQ(log.Count("re-checking "), 2);
    EXPECT_EQ(compiles_first, 3);  // the winner, the fp64 reference, the utility module
    EXPECT_EQ(compiles_all - compiles_first, 2);  // the next shape: winner and reference
    // Recorded as the new key's entry: a fresh engine under the same code is a tier-1 hit.
    ASSERT_OK_AND_ASSIGN(Engine again, Engine::Create(Opts(path, TunePolicy::kTuneIfMissing)));
    ASSERT_OK_AND_ASSIGN(const Plan hit, again.Plan(shapes[0]));
    EXPECT_EQ(hit.origin().tier, 1) << hit.origin().reason;
    EXPECT_THAT(hit.origin().reason, HasSubstr("recorded by tier 2"));
    EXPECT_EQ(again.nvrtc_compiles(), 0);
  }
  {
    ScopedEnv alter("CONVT3D_TEST_ALTER_FAMILY", families[0]);
    LogLines log;
    ASSERT_OK_AND_ASSIGN(Engine e, Engine::Create(Opts(path, TunePolicy::kTuneIfMissing, &log)));
    ASSERT_OK_AND_ASSIGN(const Plan plan, e.Plan(shapes[0]));
    EXPECT_EQ(plan.origin().tier, 0) << plan.origin().reason;
    EXPECT_THAT(plan.origin().reason, HasSubstr("kernel source changed since tuning"));
    EXPECT_EQ(log.Count("tuning "), 1);
  }
  std::printf(
      "TIERS_RESULT test=tier2 winners=%s,%s altered=%s tier2_tunings=%d "
      "compiles_first_shape=%d compiles_next_shape=%d\n",
      winners[0].c_str(), winners[1].c_str(), other.c_str(), tunings, compiles_first,
      compiles_all - compiles_first);
}

TEST(EngineTiers, CacheOrHeuristicTakesTheNearestTunedShape) {
  REQUIRE_GPU();
  const std::string path = TempCache("nearest");
  std::string winner;
  {
    ASSERT_OK_AND_ASSIGN(Engine e, Engine::Create(Opts(path, TunePolicy::kTuneIfMissing)));
    ASSERT_OK_AND_ASSIGN(const Plan plan, e.Plan(TierProblem(2)));
    winner = plan.kernel_name();
  }
  bool valid = false;
  for (const auto& c : gen::Candidates(TierProblem(4))) valid |= c.Name() == winner;
  ASSERT_OK_AND_ASSIGN(Engine e, Engine::Create(Opts(path, TunePolicy::kCacheOrHeuristic)));
  ASSERT_OK_AND_ASSIGN(const Plan plan, e.Plan(TierProblem(4)));
  if (valid) {
    EXPECT_EQ(plan.origin().tier, 4) << plan.origin().reason;
    EXPECT_EQ(plan.kernel_name(), winner);
    EXPECT_THAT(plan.origin().reason, HasSubstr("distance 0.69"));
    EXPECT_EQ(e.nvrtc_compiles(), 1);  // the winner only: a stand-in, not re-checked
  } else {
    EXPECT_EQ(plan.origin().tier, 5) << plan.origin().reason;
  }
  const Tensors t = MakeTensors(TierProblem(4));
  EXPECT_OK(RunSync(plan, t));
  // Tier 4 is a stand-in: not recorded as the shape's entry.
  auto entries = cache::Store::OpenReadOnly(path)->List();
  ASSERT_OK(entries);
  EXPECT_EQ(entries->size(), 1u);
}

// The background targets: the first call on a missing shape costs at most twice the heuristic
// pick's first call (its one compile, load and run) plus 50 ms; the plan the caller holds runs
// the winner within the tuning time + 1 s.
TEST(EngineTiers, BackgroundFirstCallIsQuickAndTheHeldPlanSwitches) {
  REQUIRE_GPU();
  const Problem p = BackgroundProblem();
  // Warm the process up (driver, NVRTC, utility kernels); this engine keeps the device context
  // current for the tensors, which outlive the engines below.
  ASSERT_OK_AND_ASSIGN(Engine warm, Engine::Create(Opts(":memory:", TunePolicy::kNever)));
  { ASSERT_OK_AND_ASSIGN(const Plan plan, warm.Plan(TierProblem())); }
  const Tensors t = MakeTensors(p);
  double heuristic_first = 0, heuristic_kernel_ms = 0;
  {
    ASSERT_OK_AND_ASSIGN(Engine e, Engine::Create(Opts(TempCache("heur"), TunePolicy::kNever)));
    const auto t0 = Clock::now();
    ASSERT_OK_AND_ASSIGN(const Plan plan, e.Plan(p));
    ASSERT_OK(RunSync(plan, t));
    heuristic_first = Seconds(t0, Clock::now());
    std::vector<double> runs;
    for (int i = 0; i < 11; ++i) {
      const auto r0 = Clock::now();
      ASSERT_OK(RunSync(plan, t));
      runs.push_back(Seconds(r0, Clock::now()) * 1e3);
    }
    std::sort(runs.begin(), runs.end());
    heuristic_kernel_ms = runs[5];
  }
  LogLines log;
  Options o = Opts(TempCache("bg"), TunePolicy::kBackground, &log);
  o.max_candidates = 0;  // every candidate: a realistic tuning time
  ASSERT_OK_AND_ASSIGN(Engine e, Engine::Create(o));
  const auto t0 = Clock::now();
  ASSERT_OK_AND_ASSIGN(const Plan plan, e.Plan(p));
  ASSERT_OK(RunSync(plan, t));
  const auto t_first = Clock::now();
  const double first = Seconds(t0, t_first);
  EXPECT_EQ(plan.origin().tier, 5) << plan.origin().reason;
  EXPECT_THAT(plan.origin().reason, HasSubstr("tuning in the background"));
  EXPECT_LE(first, 2 * heuristic_first + 0.050);
  // Keep running the held plan, as a training loop would, until it switches.
  std::optional<Clock::time_point> t_adopt;
  while (Seconds(t0, Clock::now()) < 400) {
    ASSERT_OK(RunSync(plan, t));
    if (plan.origin().tier == 0) {
      t_adopt = Clock::now();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(t_adopt.has_value()) << "no switch within 400 s";
  const auto t_tune0 = log.First("tuning ");
  const auto t_won = log.First("background: ");
  ASSERT_TRUE(t_tune0 && t_won);
  const double tuning = Seconds(*t_tune0, *t_won);
  const double adopt_after_first = Seconds(t_first, *t_adopt);
  const double adopt_after_winner = Seconds(*t_won, *t_adopt);
  EXPECT_LE(adopt_after_first, tuning + 1.0);
  EXPECT_THAT(plan.origin().reason, HasSubstr("tuned in the background"));
  // Later Plan calls get the winner too, without compiling.
  const int compiles = e.nvrtc_compiles();
  ASSERT_OK_AND_ASSIGN(const Plan later, e.Plan(p));
  EXPECT_EQ(later.origin().tier, 0);
  EXPECT_EQ(later.kernel_name(), plan.kernel_name());
  EXPECT_EQ(e.nvrtc_compiles(), compiles);
  std::printf(
      "TIERS_RESULT test=background heuristic_first_ms=%.1f heuristic_kernel_ms=%.3f "
      "background_first_ms=%.1f limit_ms=%.1f tuning_s=%.2f "
      "adopt_after_first_s=%.2f adopt_after_winner_ms=%.1f winner=%s\n",
      heuristic_first * 1e3, heuristic_kernel_ms, first * 1e3, (2 * heuristic_first + 0.050) * 1e3,
      tuning, adopt_after_first, adopt_after_winner * 1e3, plan.kernel_name().c_str());
}

// Destroying the engine mid-tune stops the worker (after its current compile batch) and stores
// nothing half-done; a later engine finds either nothing or a whole entry.
TEST(EngineTiers, BackgroundEngineDestroyedMidTuneStopsCleanly) {
  REQUIRE_GPU();
  const std::string path = TempCache("stop");
  const Problem p = BackgroundProblem();
  double stop_s = 0;
  {
    Options o = Opts(path, TunePolicy::kBackground);
    o.max_candidates = 0;
    ASSERT_OK_AND_ASSIGN(Engine e, Engine::Create(o));
    ASSERT_OK_AND_ASSIGN(const Plan plan, e.Plan(p));
    EXPECT_EQ(plan.origin().tier, 5);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto t0 = Clock::now();
    e = Engine::Create(Opts(":memory:", TunePolicy::kNever)).value();  // destroys the first
    stop_s = Seconds(t0, Clock::now());
  }
  EXPECT_LE(stop_s, 10.0);  // one compile batch (a core's worth of candidates) at most
  auto store = cache::Store::Open(path);
  EXPECT_OK(store->CheckIntegrity());
  auto entries = store->List();
  ASSERT_OK(entries);
  EXPECT_LE(entries->size(), 1u);
  std::printf("TIERS_RESULT test=stop stop_s=%.2f entries=%zu\n", stop_s, entries->size());
}

}  // namespace
}  // namespace convt3d
