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
  BenchArgs() {
    run.json_path = "bench/results/bench.json";
    run.csv_path = "bench/results/bench.csv";
    run.svg_path = "bench/results/bench.svg";
  }
  ShapeFlags shape;
  std::string problems_file = "problems/kernelbench_l1.json", only;
  bench::Options run;  // the flags below fill it
  CLI::Option* problems_opt = nullptr;
  CLI::Option* dtype_opt = nullptr;
  IntFlags ints;  // --repeats and the other integers
};

int RunBench(const BenchArgs& a) {
  // Every bad flag at once: the integers, --dtype, then the shape or the list.
  std::vector<std::string> errors = a.ints.Parse();
  if (a.dtype_opt != nullptr && a.dtype_opt->count() > 0)
    errors.push_back("bench: --dtype does not apply (each precision mode sets its own types)");
  auto listed = !a.shape.input.empty() ? OneShape(a.shape) : LoadList(a.problems_file, a.only);
  if (!listed.ok()) errors.push_back(listed.status().message());
  if (!errors.empty()) return ReportUsageErrors(errors);
  std::vector<io::NamedProblem> problems = std::move(listed).value();
  for (auto& np : problems) np.problem.dtype = DType::kF32;  // the modes decide the types
  bool any_invalid = false;
  std::vector<io::NamedProblem> valid = KeepValid(std::move(problems), &any_invalid);
  if (valid.empty()) return kExitUsage;
  const int rc = bench::Run(valid, a.run);
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
  bench->add_option("--cache", a->run.cache_path, "SQLite cache file (overrides $CONVT3D_CACHE)");
  IntFlags& ints = a->ints;
  ints.Add(bench, "--repeats", &a->run.repeats, "Timed runs per row (median taken)", 20, 1000000);
  ints.Add(bench, "--warmup", &a->run.warmup, "Untimed runs per row first", 0, 1000000);
  ints.Add(bench, "--device", &a->run.device, "CUDA device ordinal", 0, 1023);
  ints.Add(bench, "--threads", &a->run.threads, "Host threads for inputs and checks (0: all)", 0,
           4096);
  bench->add_option("--json", a->run.json_path, "Results as JSON ('' : not written)")
      ->capture_default_str();
  bench->add_option("--csv", a->run.csv_path, "Results as CSV ('' : not written)")
      ->capture_default_str();
  bench->add_option("--svg", a->run.svg_path, "Speed-up chart as SVG ('' : not written)")
      ->capture_default_str();
  return {bench, [a] { return RunBench(*a); }};
}

}  // namespace convt3d::cli
