// cmd_bench.cpp: `convt3d bench`: our tuned kernels against cuDNN (bench/bench.h does the work).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

namespace convt3d::cli {
namespace {

struct BenchArgs {
  ShapeFlags shape;
  std::string problems_file = "problems/kernelbench_l1.json", only, cache;
  std::string json_out = "bench/results/bench.json", csv_out = "bench/results/bench.csv",
              svg_out = "bench/results/bench.svg";
  int repeats = 20, warmup = 5, device = 0, threads = 0;
  CLI::Option* problems_opt = nullptr;
  CLI::Option* dtype_opt = nullptr;
};

int RunBench(const BenchArgs& a) {
  if (a.dtype_opt != nullptr && a.dtype_opt->count() > 0) {
    Error("bench: --dtype does not apply (each precision mode sets its own element types)");
    return kExitUsage;
  }
  auto listed = !a.shape.input.empty() ? OneShape(a.shape) : LoadList(a.problems_file, a.only);
  if (!listed.ok()) {
    Error(listed.status().message());
    return kExitUsage;
  }
  std::vector<io::NamedProblem> problems = std::move(listed).value();
  for (auto& np : problems) np.problem.dtype = DType::kF32;  // the modes decide the types
  bool any_invalid = false;
  std::vector<io::NamedProblem> valid = KeepValid(std::move(problems), &any_invalid);
  if (valid.empty()) return kExitUsage;
  bench::Options o;
  o.cache_path = a.cache;
  o.device = a.device;
  o.warmup = a.warmup;
  o.repeats = a.repeats;
  o.threads = a.threads;
  o.json_path = a.json_out;
  o.csv_path = a.csv_out;
  o.svg_path = a.svg_out;
  const int rc = bench::Run(valid, o);
  return any_invalid ? std::max(rc, kExitUsage) : rc;
}

}  // namespace

Command AddBench(CLI::App* cli) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* bench = cli->add_subcommand(
      "bench",
      "Time our tuned kernel against cuDNN backward-data (tf32, strict fp32, bf16) in one "
      "process, with errors against fp64; writes JSON, CSV and an SVG chart");
  AddShapeFlags(bench, &a->shape);
  a->dtype_opt = bench->get_option("--dtype");
  a->problems_opt =
      bench->add_option("--problems", a->problems_file, "Problem list JSON (without a shape)")
          ->capture_default_str();
  a->problems_opt->excludes(a->shape.input_opt);
  bench->add_option("--only", a->only, "Only these problems of the list, comma-separated")
      ->excludes(a->shape.input_opt);
  bench->add_option("--cache", a->cache, "SQLite cache file (overrides $CONVT3D_CACHE)");
  bench->add_option("--repeats", a->repeats, "Timed runs per row (median taken)")
      ->check(CLI::Range(20, 1000000))
      ->capture_default_str();
  bench->add_option("--warmup", a->warmup, "Untimed runs per row first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bench->add_option("--device", a->device, "CUDA device ordinal")->capture_default_str();
  bench->add_option("--threads", a->threads, "Host threads for inputs and checks (0: all)")
      ->check(CLI::NonNegativeNumber);
  bench->add_option("--json", a->json_out, "Results as JSON ('' : not written)")
      ->capture_default_str();
  bench->add_option("--csv", a->csv_out, "Results as CSV ('' : not written)")
      ->capture_default_str();
  bench->add_option("--svg", a->svg_out, "Speed-up chart as SVG ('' : not written)")
      ->capture_default_str();
  return {bench, [a] { return RunBench(*a); }};
}

}  // namespace convt3d::cli
