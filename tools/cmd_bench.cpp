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
    run.json_path = "bench.json";
    run.csv_path = "bench.csv";
    run.svg_path = "bench.svg";
  }
  ShapeFlags shape;
  std::vector<std::string> problem_files = {"kernelbench-l1", "models"};
  std::string only, precision = "fp32,fp32x3,tf32,bf16,f16";
  bench::Options run;  // the flags below fill it
  CLI::Option* problems_opt = nullptr;
  CLI::Option* dtype_opt = nullptr;
  IntFlags ints;  // --repeats and the other integers
};

int RunBench(BenchArgs& a) {
  // Every bad flag at once: the integers, --dtype, --precision, then the shape or the list.
  std::vector<std::string> errors = a.ints.Parse();
  const bool shape = !a.shape.input.empty();
  if (a.dtype_opt != nullptr && a.dtype_opt->count() > 0 && (!shape || a.shape.dtype == "f64"))
    errors.push_back(shape ? "bench: --dtype f64 has no bench mode (f32, bf16 or f16)"
                           : "bench: --dtype goes with a shape (--input ...); a list's problems "
                             "carry their own dtype");
  if ((a.run.json_path == "-") + (a.run.csv_path == "-") + (a.run.svg_path == "-") > 1)
    errors.push_back("bench: only one of --json, --csv and --svg can be '-' (stdout)");
  auto modes = bench::ParseModes(a.precision);
  if (modes.ok())
    a.run.modes = *modes;
  else
    errors.push_back(modes.status().message());
  std::vector<std::string> files;
  for (const std::string& entry : a.problem_files) {
    StatusOr<std::string> file = ProblemListPath(entry);
    if (file.ok()) {
      files.push_back(*file);
    } else if (!shape) {
      errors.push_back(file.status().message());
    }
  }
  if (!errors.empty()) return ReportUsageErrors(errors);
  auto listed = shape ? OneShape(a.shape) : bench::LoadProblemLists(files, a.only);
  if (!listed.ok()) errors.push_back(listed.status().message());
  if (!errors.empty()) return ReportUsageErrors(errors);
  bool any_invalid = false;
  std::vector<io::NamedProblem> valid = KeepValid(std::move(listed).value(), &any_invalid);
  // A bf16 or f16 problem runs in its own 16-bit mode only; without it among --precision there
  // is nothing to time.
  std::vector<io::NamedProblem> runnable;
  for (auto& np : valid) {
    if (!bench::OurModesFor(np.problem.dtype, a.run.modes).empty()) {
      if (np.problem.dtype == DType::kF64)
        Warn(np.name + ": dtype f64 has no bench mode; it runs as f32 in every --precision mode");
      runnable.push_back(std::move(np));
    } else {
      Warn(np.name + ": dtype " + DTypeName(np.problem.dtype) +
           " is not among --precision=" + a.precision + " (skipped)");
    }
  }
  if (runnable.empty()) {
    if (!valid.empty()) Error("bench: no problem runs in the modes of --precision=" + a.precision);
    return kExitUsage;
  }
  const int rc = bench::Run(runnable, a.run);
  return any_invalid ? std::max(rc, kExitUsage) : rc;
}

}  // namespace

Command AddBench(CLI::App* cli) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* bench = cli->add_subcommand(
      "bench",
      "Time our tuned kernels against cuDNN backward-data (strict fp32, fp32x3, tf32, bf16, f16) "
      "in one process, with errors against fp64 and the roofline floor of each mode; writes "
      "JSON, CSV and an SVG chart");
  AddShapeFlags(bench, &a->shape);
  a->dtype_opt = bench->get_option("--dtype");
  a->problems_opt =
      bench
          ->add_option("--problems", a->problem_files,
                       "Problem lists, comma-separated (without a shape): a name (kernelbench-l1, "
                       "models, bench: the installed lists) or a JSON file. A bf16 or f16 "
                       "problem runs in that mode only")
          ->delimiter(',')
          ->capture_default_str();
  a->problems_opt->excludes(a->shape.input_opt);
  bench->add_option("--only", a->only, "Only these problems of the lists, comma-separated")
      ->excludes(a->shape.input_opt);
  bench
      ->add_option("--precision", a->precision,
                   "Our modes, comma-separated: fp32 (strict), fp32x3 (3xTF32), tf32, bf16, f16 "
                   "(or fp16); f32 problems run every one, cuDNN beside each in the matching "
                   "mode and in TF32")
      ->capture_default_str();
  bench->add_option("--cache", a->run.cache_path, "SQLite cache file (overrides $CONVT3D_CACHE)");
  bench->add_flag("--arbitration", a->run.arbitration,
                  "Also time, per mode, the plan of an engine whose tuning lets cuDNN's "
                  "algorithms compete (rows 'arbitrated', the winner in detail); the 'convt3d' "
                  "rows always tune our kernels alone");
  bench->add_flag("--fp32x3-fp16", a->run.fp32x3_fp16,
                  "fp32x3 rows may run the scaled 3xFP16 tiles (Options::fp32x3_fp16; tuned and "
                  "cached under their own keys; also $CONVT3D_FP32X3_FP16=1)");
  IntFlags& ints = a->ints;
  ints.Add(bench, "--repeats", &a->run.repeats, "Timed runs per row (median taken)", 20, 1000000);
  ints.Add(bench, "--warmup", &a->run.warmup, "Untimed runs per row first", 0, 1000000);
  ints.Add(bench, "--device", &a->run.device, "CUDA device ordinal", 0, 1023);
  ints.Add(bench, "--threads", &a->run.threads, "Host threads for inputs and checks (0: all)", 0,
           4096);
  bench->add_option("--json", a->run.json_path, "Results as JSON ('-': stdout; '': not written)")
      ->capture_default_str();
  bench->add_option("--csv", a->run.csv_path, "Results as CSV ('-': stdout; '': not written)")
      ->capture_default_str();
  bench
      ->add_option("--svg", a->run.svg_path, "Speed-up chart as SVG ('-': stdout; '': not written)")
      ->capture_default_str();
  return {bench, [a] { return RunBench(*a); }};
}

}  // namespace convt3d::cli
