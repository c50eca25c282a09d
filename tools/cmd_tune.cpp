// cmd_tune.cpp: `convt3d tune`: tune one shape or a problem list on the GPU, once per precision
// mode; without a GPU (or with --compile-only), NVRTC-compile every candidate instead; with
// --devices, on several GPUs at once (tools/fanout.h).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "generator/candidates.h"
#include "runtime/runtime.h"
#include "tools/cli_util.h"
#include "tools/commands.h"
#include "tools/fanout.h"

namespace convt3d::cli {
namespace {

struct TuneArgs {
  ShapeFlags shape;
  std::string problems_file, only, cache, policy = "exhaustive", arch, json_out;
  std::string precision = "fp32", emit_dir;
  std::string devices;     // --devices: one worker process per GPU (tools/fanout.h)
  int worker_device = -1;  // --worker-device (hidden): this process is one of those workers
  int repeats = 20, warmup = 3, max_candidates = 0, device = 0, compile_threads = 0;
  int wait_s = 0;  // --wait: if-missing waits this long for another process's tuning
  bool compile_only = false, require_gpu = false;
  bool no_cudnn = false;     // --no-cudnn: our kernels alone (Options::vendor_candidates = false)
  bool fp32x3_fp16 = false;  // --fp32x3-fp16: fp32x3 also as 3xFP16 (Options::fp32x3_fp16)
  CLI::Option* problems_opt = nullptr;
  IntFlags ints;  // --repeats and the other integers
};

// ---- Compile-only ---------------------------------------------------------------------------

struct CompileTotals {
  int candidates = 0, compiled = 0;
  double seconds = 0;
  bool all_ok = true;
};

// One subfolder of --emit per problem and mode: candidates of different problems share names.
// The folder is the name as a single path component (PathComponent: "L1-73/tf32" becomes
// "L1-73_tf32", ".." "_.."), made unique among this run's folders by a "-2", "-3", ... suffix.
StatusOr<std::string> EmitDir(const std::string& emit_dir, const std::string& name,
                              std::set<std::string>* taken) {
  if (emit_dir.empty()) return std::string();
  const std::string base = PathComponent(name);
  std::string sub = base;
  for (int i = 2; !taken->insert(sub).second; ++i) sub = StrCat(base, "-", i);
  const std::string dir = emit_dir + "/" + sub;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Internal(StrCat("--emit: cannot create ", dir, ": ", ec.message()));
  return dir;
}

// Compiles one problem's candidates: a progress line, a table row and a JSON result.
// `tag` ("[2/28] L1-58/tf32") starts each progress line: on a terminal one line that counts the
// compiles; otherwise a line at each tenth of a long list, then the summary.
OJson CompileOne(const io::NamedProblem& np, const TuneArgs& a, const std::string& arch,
                 const std::string& dir, const std::string& tag, std::vector<std::string>* row,
                 CompileTotals* totals) {
  const auto t0 = std::chrono::steady_clock::now();
  ShowProgress(tag + " ... compiling", /*plain=*/false);
  int tenths = 0;
  auto progress = [&](int done, int n) {
    const bool plain = n >= 20 && done < n && done * 10 / n > tenths;
    if (plain) tenths = done * 10 / n;
    ShowProgress(
        StrCat(tag, " ... compiled ", done, "/", n, ", ", StrFormat("%.1f", Seconds(t0)), " s"),
        plain);
  };
  StatusOr<CompileReport> rep = CompileCandidates(np.problem, arch, a.compile_threads, dir,
                                                  a.max_candidates, progress, a.fp32x3_fp16);
  EndProgress();
  std::cerr << tag << " ... ";
  OJson r;
  r["name"] = np.name;
  r["problem"] = ProblemJson(np);
  if (!rep.ok()) {
    std::cerr << "failed" << std::endl;
    Error(np.name + ": " + rep.status().ToString());
    *row = {np.name, "-", "-", "-", StrFormat("%.1f", Seconds(t0))};
    r["status"] = "error";
    r["error"] = rep.status().ToString();
    totals->all_ok = false;
    return r;
  }
  const CompileReport& c = *rep;
  const int failed = c.candidates - c.compiled;
  std::cerr << c.compiled << " candidates compiled in " << StrFormat("%.1f", c.seconds) << " s";
  if (failed > 0) std::cerr << ", " << failed << " failed";
  std::cerr << std::endl;
  for (size_t f = 0; f < c.failures.size() && f < 5; ++f)
    std::cerr << "    failed: " << OneLine(c.failures[f], 160) << "\n";
  if (c.failures.size() > 5) std::cerr << "    ... and " << c.failures.size() - 5 << " more\n";
  if (c.candidates == 0) Error(np.name + ": the generator offered no candidate");
  if (failed > 0 || c.candidates == 0) totals->all_ok = false;
  totals->candidates += c.candidates;
  totals->compiled += c.compiled;
  totals->seconds += c.seconds;
  *row = {np.name, std::to_string(c.candidates), std::to_string(c.compiled), std::to_string(failed),
          StrFormat("%.1f", c.seconds)};
  r["status"] = (failed == 0 && c.candidates > 0) ? "ok" : "failed";
  r["candidates"] = c.candidates;
  r["compiled"] = c.compiled;
  r["failed"] = failed;
  r["seconds"] = c.seconds;
  r["failures"] = c.failures;
  return r;
}

TextTable CompileTable(bool devices = false) {
  std::vector<std::string> headers = {"problem", "candidates", "compiled", "failed", "seconds"};
  if (devices) headers.push_back("worker");
  return TextTable(headers, "lrrrrr");
}

// The "total" row of a compile-only table of several problems.
void AddCompileTotal(size_t n, const CompileTotals& totals, TextTable* table) {
  if (n <= 1) return;
  table->Add({"total", std::to_string(totals.candidates), std::to_string(totals.compiled),
              std::to_string(totals.candidates - totals.compiled),
              StrFormat("%.1f", totals.seconds)});
}

// Compile-only path: no timing, so it needs no GPU; proves every candidate builds for `arch`.
int CompileOnly(const std::vector<io::NamedProblem>& problems, const TuneArgs& a,
                const std::string& arch, OJson* results) {
  TextTable table = CompileTable();
  CompileTotals totals;
  std::set<std::string> emitted;
  const size_t n = problems.size();
  for (size_t i = 0; i < n; ++i) {
    const io::NamedProblem& np = problems[i];
    StatusOr<std::string> dir = EmitDir(a.emit_dir, np.name, &emitted);
    if (!dir.ok()) {
      Error(dir.status().message());
      return kExitFailure;
    }
    const std::string tag = StrCat("[", i + 1, "/", n, "] ", np.name);
    std::vector<std::string> row;
    results->push_back(CompileOne(np, a, arch, *dir, tag, &row, &totals));
    table.Add(std::move(row));
  }
  AddCompileTotal(n, totals, &table);
  std::cout << "\n" << table.ToString();
  return totals.all_ok ? kExitOk : kExitFailure;
}

// ---- Tuning on the GPU ----------------------------------------------------------------------

std::string CudnnMs(const io::NamedProblem& np, const char* key) {
  auto it = np.cudnn_ms.find(key);
  return it == np.cudnn_ms.end() ? "-" : StrFormat("%.3f", it->second);
}

// Plans one problem: progress on stderr, a table row and a JSON result; false when it failed.
bool TuneOne(Engine& engine, const io::NamedProblem& np, const std::string& tag,
             std::vector<std::string>* row, OJson* r) {
  std::cerr << tag << " tuning ..." << std::endl;
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<convt3d::Plan> plan = engine.Plan(np.problem);
  (*r)["name"] = np.name;
  (*r)["problem"] = ProblemJson(np);
  if (!plan.ok()) {
    Error(np.name + ": " + plan.status().ToString());
    *row = {np.name,
            "(failed)",
            "-",
            "-",
            "-",
            "-",
            "-",
            CudnnMs(np, "fp32_strict"),
            CudnnMs(np, "tf32_default"),
            "-"};
    (*r)["status"] = "error";
    (*r)["error"] = plan.status().ToString();
    return false;
  }
  const double ms = plan->tuned_ms();
  std::cerr << tag << " done: " << plan->kernel_name() << " " << Ms(ms) << " ms (" << plan->source()
            << ", " << StrFormat("%.1f", Seconds(t0)) << " s)" << std::endl;
  const double tflops = ms > 0 ? np.problem.Flops() / ms / 1e9 : -1;
  std::string speedup = "-";
  auto ref = np.cudnn_ms.find("fp32_strict");
  if (ref != np.cudnn_ms.end() && ms > 0) speedup = StrFormat("%.2fx", ref->second / ms);
  *row = {np.name,
          plan->kernel_name(),
          plan->source(),
          Ms(ms),
          tflops >= 0 ? StrFormat("%.2f", tflops) : "-",
          plan->rel_err() >= 0 ? StrFormat("%.1e", plan->rel_err()) : "-",
          StrFormat("%.1f", Seconds(t0)),
          CudnnMs(np, "fp32_strict"),
          CudnnMs(np, "tf32_default"),
          speedup};
  (*r)["status"] = "ok";
  (*r)["kernel"] = plan->kernel_name();
  (*r)["source"] = plan->source();
  (*r)["ms"] = ms;
  (*r)["tflops"] = tflops;
  (*r)["rel_err_vs_fp64"] = plan->rel_err();
  (*r)["seconds"] = Seconds(t0);
  if (!np.cudnn_ms.empty()) (*r)["cudnn_h200_ms"] = np.cudnn_ms;
  if (ref != np.cudnn_ms.end() && ms > 0) (*r)["speedup_vs_cudnn_fp32_strict"] = ref->second / ms;
  return true;
}

Options EngineOptions(const TuneArgs& a) {
  Options opt;
  opt.policy = a.policy == "if-missing" ? TunePolicy::kTuneIfMissing : TunePolicy::kExhaustive;
  opt.cache_path = a.cache;
  opt.device = a.worker_device >= 0 ? a.worker_device : a.device;
  opt.repeats = a.repeats;
  opt.warmup = a.warmup;
  opt.max_candidates = a.max_candidates;
  opt.compile_threads = a.compile_threads;
  opt.tune_wait_ms = a.wait_s * 1000;
  opt.vendor_candidates = !a.no_cudnn;
  opt.fp32x3_fp16 = a.fp32x3_fp16;
  opt.log = LogToStderr;  // progress and warnings, the cache's included
  return opt;
}

TextTable TuneTable(bool devices = false) {
  std::vector<std::string> headers = {"problem",       "kernel",  "source", "ms",
                                      "TFLOP/s",       "rel_err", "tune s", "cuDNN fp32 ms",
                                      "cuDNN tf32 ms", "vs fp32"};
  if (devices) headers.push_back("gpu");
  return TextTable(headers, "lllrrrrrrrr");
}

// The lines under the tuning table, and the "engine" object of --json.
void TuneFooter(const std::string& cache_path, int compiles, OJson* engine_json) {
  std::cout << "\nrel_err: the winner's ||y-ref||/||ref|| against the fp64 reference kernel on "
               "random inputs.\ncuDNN columns: times recorded in the problem file (cudnn_h200_ms), "
               "not measured in this run.\n";
  std::cout << "cache: " << cache_path << " (" << compiles << " NVRTC compiles this run)\n";
  (*engine_json)["cache"] = cache_path;
  (*engine_json)["nvrtc_compiles"] = compiles;
}

int TuneOnGpu(const std::vector<io::NamedProblem>& problems, const TuneArgs& a, OJson* results,
              OJson* engine_json) {
  StatusOr<Engine> engine = Engine::Create(EngineOptions(a));
  if (!engine.ok()) {
    Error("cannot start the engine: " + engine.status().ToString());
    return kExitFailure;
  }
  TextTable table = TuneTable();
  bool all_ok = true;
  const size_t n = problems.size();
  for (size_t i = 0; i < n; ++i) {
    const std::string tag = StrCat("[", i + 1, "/", n, "] ", problems[i].name);
    OJson r;
    std::vector<std::string> row;
    all_ok &= TuneOne(*engine, problems[i], tag, &row, &r);
    table.Add(std::move(row));
    results->push_back(std::move(r));
  }
  std::cout << "\n" << table.ToString();
  TuneFooter(engine->cache_path(), engine->nvrtc_compiles(), engine_json);
  return all_ok ? kExitOk : kExitFailure;
}

// ---- Many GPUs: --devices (tools/fanout.h) --------------------------------------------------

// The target of compile-only work: --arch, else the GPU that is here, else sm_90.
std::string CompileTarget(const TuneArgs& a, const Environment& env) {
  if (!a.arch.empty()) return a.arch;
  return env.driver_error.empty() && !env.arch.empty() ? env.arch : "sm_90";
}

// One worker of --devices (--worker-device N): serves the pairs the parent hands it.
int RunWorker(const std::vector<io::NamedProblem>& pairs, const TuneArgs& a,
              const Environment& env) {
  std::optional<Engine> engine;
  std::set<std::string> emitted;
  CompileTotals totals;
  const int n = static_cast<int>(pairs.size());
  WorkerHooks hooks;
  hooks.start = [&]() -> Status {
    if (a.compile_only) return Status();
    if (!env.driver_error.empty()) return FailedPrecondition("no usable GPU: " + env.driver_error);
    StatusOr<Engine> e = Engine::Create(EngineOptions(a));
    if (!e.ok()) return e.status();
    engine.emplace(std::move(e).value());
    return Status();
  };
  hooks.run = [&](int i) {
    const io::NamedProblem& np = pairs[i];
    const std::string tag = StrCat("[", i + 1, "/", n, "] ", np.name);
    PairOutcome o;
    if (a.compile_only) {
      StatusOr<std::string> dir = EmitDir(a.emit_dir, np.name, &emitted);
      if (!dir.ok()) {
        Error(dir.status().message());
        o.row = {np.name, "-", "-", "-", "-"};
        o.result = OJson{{"name", np.name}, {"status", "error"}, {"error", dir.status().message()}};
        return o;
      }
      o.result = CompileOne(np, a, CompileTarget(a, env), *dir, tag, &o.row, &totals);
      o.ok = o.result.value("status", "") == "ok";
    } else {
      const int before = engine->nvrtc_compiles();
      o.ok = TuneOne(*engine, np, tag, &o.row, &o.result);
      o.compiles = engine->nvrtc_compiles() - before;
    }
    return o;
  };
  return ServeWorker(a.worker_device, n, hooks);
}

// --devices: one worker process per device, the pairs handed out one at a time, one merged table.
int RunOnDevices(const std::vector<io::NamedProblem>& pairs, const TuneArgs& a,
                 const Environment& env, OJson* out) {
  const bool gpu = env.driver_error.empty();
  if (!gpu && !a.compile_only) {
    Error("--devices needs GPUs, and there is no usable GPU here (" + env.driver_error +
          "); leave --devices out to compile only, or add --compile-only to compile in one "
          "process per listed device");
    return kExitUsage;
  }
  int count = -1;
  if (gpu) {
    StatusOr<int> c = rt::DeviceCount();
    if (c.ok()) count = c.value();
  }
  StatusOr<std::vector<int>> devices = ParseDevices(a.devices, count);
  if (!devices.ok()) {
    Error(devices.status().message());
    return kExitUsage;
  }
  const std::string cache_path = ResolveCachePath(a.cache);
  FanoutSpec spec;
  spec.devices = *devices;
  spec.label = a.compile_only ? "slot" : "gpu";
  // Longest first, by the candidates each pair compiles and times (the bulk of its time).
  std::vector<double> cost;
  for (const auto& np : pairs) {
    spec.names.push_back(np.name);
    const double n = static_cast<double>(gen::Candidates(np.problem).size());
    cost.push_back(a.max_candidates > 0 ? std::min<double>(n, a.max_candidates) : n);
  }
  spec.order = LongestFirst(cost);
  if (!a.compile_only) {
    // Created and migrated once here, so that the workers do not race to do it.
    std::unique_ptr<cache::Store> store = OpenStore(cache_path);
  }
  // Each worker compiles on every core (unless --compile-threads says): a worker's compiles
  // often overlap another's GPU timing, when a fixed share would leave cores idle; when they
  // overlap each other, the OS shares the cores as a fixed split would.
  const int threads = a.compile_threads > 0
                          ? a.compile_threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const std::vector<std::string>& argv = CommandLine();
  spec.worker_argv = WithoutOptions(
      std::vector<std::string>(argv.begin() + std::min<size_t>(1, argv.size()), argv.end()),
      {"--devices", "--json", "--cache", "--compile-threads", "--worker-device"});
  for (const std::string& s : {std::string("--cache"), cache_path, std::string("--compile-threads"),
                               std::to_string(threads)})
    spec.worker_argv.push_back(s);
  std::string listed;
  for (int d : spec.devices) listed += (listed.empty() ? "" : ",") + std::to_string(d);
  Error(StrCat(a.compile_only ? "compile-only: " : "tuning ", pairs.size(),
               " problem/mode pairs on ", a.compile_only ? "slots " : "GPUs ", listed,
               ", one process each (", threads, " compile threads each)",
               a.compile_only ? std::string() : ", cache " + cache_path));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> worker_errors;
  const std::vector<PairOutcome> outcomes = RunFanout(spec, &worker_errors);
  const double wall = Seconds(t0);

  TextTable table = a.compile_only ? CompileTable(true) : TuneTable(true);
  const size_t columns = a.compile_only ? 5 : 10;
  OJson results = OJson::array();
  CompileTotals totals;
  std::map<int, int> per_device;
  int compiles = 0;
  bool all_ok = true;
  for (const PairOutcome& o : outcomes) {
    std::vector<std::string> row = o.row;
    row.resize(columns, "-");
    row.push_back(o.device >= 0 ? std::to_string(o.device) : "-");
    table.Add(std::move(row));
    results.push_back(o.result);
    all_ok &= o.ok;
    compiles += o.compiles;
    if (o.device >= 0) ++per_device[o.device];
    totals.candidates += o.result.value("candidates", 0);
    totals.compiled += o.result.value("compiled", 0);
    totals.seconds += o.result.value("seconds", 0.0);
  }
  if (a.compile_only) AddCompileTotal(outcomes.size(), totals, &table);
  std::cout << "\n" << table.ToString();
  OJson engine_json;
  if (!a.compile_only) TuneFooter(cache_path, compiles, &engine_json);
  std::string split;
  for (int d : spec.devices)
    split += StrCat(split.empty() ? "" : ", ", spec.label, d, " ", per_device[d]);
  std::cout << "devices " << listed << ": " << outcomes.size() << " pairs in "
            << StrFormat("%.1f", wall) << " s (" << split << ")\n";
  (*out)["mode"] = a.compile_only ? "compile-only" : "tune";
  if (a.compile_only) (*out)["arch"] = CompileTarget(a, env);
  if (!a.compile_only) (*out)["policy"] = a.policy;
  (*out)["devices"] = spec.devices;
  (*out)["wall_seconds"] = wall;
  if (!a.compile_only) (*out)["engine"] = engine_json;
  if (!worker_errors.empty()) (*out)["worker_errors"] = worker_errors;
  (*out)["results"] = std::move(results);
  return all_ok && worker_errors.empty() ? kExitOk : kExitFailure;
}

// ---- The command ----------------------------------------------------------------------------

OJson EnvironmentJson(const Environment& env) {
  OJson e;
  e["gpu_name"] = env.gpu_name;
  e["arch"] = env.arch;
  e["driver_version"] = env.driver_version;
  e["nvrtc_version"] = env.nvrtc_version;
  e["code_hash"] = env.code_hash;
  if (!env.driver_error.empty()) e["driver_error"] = env.driver_error;
  if (!env.nvrtc_error.empty()) e["nvrtc_error"] = env.nvrtc_error;
  return e;
}

// The shape of --input and friends, or the --problems list.
StatusOr<std::vector<io::NamedProblem>> Listed(const TuneArgs& a) {
  if (!a.problems_file.empty()) return LoadList(a.problems_file, a.only);
  if (!a.shape.input.empty()) return OneShape(a.shape);
  return InvalidArgument(
      "tune needs a shape (--input, --out-channels, --kernel-size, ...) or --problems FILE;"
      " see 'convt3d tune --help'");
}

// Each problem once per mode of --precision; names get "/tf32", "/bf16" etc. beyond fp32. The
// 16-bit modes turn the problem's tensors into bf16 / f16 (fp32 accumulation).
StatusOr<std::vector<io::NamedProblem>> PerMode(const std::vector<io::NamedProblem>& listed,
                                                const std::string& precision) {
  struct Mode {
    std::string name;
    DType dtype;
    Precision precision;
  };
  std::vector<Mode> modes;
  std::stringstream ss(precision);
  for (std::string t; std::getline(ss, t, ',');) {
    if (t == "bf16" || t == "f16" || t == "fp16") {  // "fp16" names f16, as in the bench
      modes.push_back({t == "bf16" ? "bf16" : "f16", t == "bf16" ? DType::kBF16 : DType::kF16,
                       Precision::kFp32});
    } else if (auto pr = io::ParsePrecision(t); pr.ok()) {
      modes.push_back({t, DType::kF32, *pr});
    } else {
      return InvalidArgument("--precision=" + t +
                             ": expected fp32, fp32x3, tf32, bf16 or f16 (also fp16)");
    }
  }
  std::vector<io::NamedProblem> expanded;
  for (const auto& np : listed)
    for (const Mode& m : modes) {
      io::NamedProblem e = np;
      if (m.dtype != DType::kF32) {
        e.problem.dtype = m.dtype;
        e.name += "/" + m.name;
      } else if (m.precision != Precision::kFp32) {
        e.problem.precision = m.precision;
        e.name += std::string("/") + PrecisionName(m.precision);
      }
      expanded.push_back(std::move(e));
    }
  return expanded;
}

// Compiles (no GPU, or --compile-only) or tunes the valid problems; fills `out`.
int CompileOrTune(const std::vector<io::NamedProblem>& valid, const TuneArgs& a,
                  const Environment& env, OJson* out) {
  const bool gpu = env.driver_error.empty();
  OJson results = OJson::array();
  int rc;
  if (!gpu || a.compile_only) {
    // Without --arch, compile for the GPU that is here, else for the H200/H100 the project
    // targets.
    const std::string arch = CompileTarget(a, env);
    const std::string which = a.max_candidates > 0
                                  ? StrCat("the ", a.max_candidates, " best-ranked candidates")
                                  : std::string("every candidate");
    if (a.compile_only) {
      Error("compile-only: NVRTC-compiling " + which + " for " + arch + " (nothing is timed)");
    } else {
      Error("no usable GPU (" + env.driver_error +
            "); running the compile-only part: " + "NVRTC-compiling " + which + " for " + arch);
    }
    (*out)["mode"] = "compile-only";
    (*out)["arch"] = arch;
    rc = CompileOnly(valid, a, arch, &results);
  } else {
    (*out)["mode"] = "tune";
    (*out)["policy"] = a.policy;
    OJson engine_json;
    rc = TuneOnGpu(valid, a, &results, &engine_json);
    (*out)["engine"] = engine_json;
  }
  (*out)["results"] = std::move(results);
  return rc;
}

int RunTune(const TuneArgs& a) {
  // Every bad flag at once: the integers, --policy, then the shape or the list.
  std::vector<std::string> errors = a.ints.Parse();
  if (a.policy != "exhaustive" && a.policy != "if-missing")
    errors.push_back("--policy=" + a.policy + ": expected exhaustive or if-missing");
  if (!a.devices.empty()) {
    // The syntax now, with the other flags; the ordinals against the GPUs here later.
    if (a.devices != "all") {
      StatusOr<std::vector<int>> d = ParseDevices(a.devices, -1);
      if (!d.ok()) errors.push_back(d.status().message());
    }
    if (a.cache == ":memory:")
      errors.push_back(
          "--cache=:memory: with --devices: each worker process would keep its results to "
          "itself; give a cache file");
  }
  StatusOr<std::vector<io::NamedProblem>> listed = Listed(a);
  if (listed.ok()) listed = PerMode(*listed, a.precision);
  if (!listed.ok()) errors.push_back(listed.status().message());
  // A bad shape or a missing/malformed --problems file is the caller's to fix.
  if (!errors.empty()) return ReportUsageErrors(errors);
  bool any_invalid = false;
  std::vector<io::NamedProblem> valid = KeepValid(std::move(listed).value(), &any_invalid);
  if (valid.empty()) return kExitUsage;

  if (a.worker_device >= 0) return RunWorker(valid, a, DescribeEnvironment(a.worker_device));
  const Environment env = DescribeEnvironment(a.device);
  if (!env.driver_error.empty() && a.require_gpu) {
    Error("no usable GPU (" + env.driver_error + ") and --require-gpu was given");
    return kExitUsage;
  }
  OJson out;
  out["version"] = Version();
  out["environment"] = EnvironmentJson(env);
  // With --json -, stdout carries the JSON alone: the tables go to stderr.
  std::streambuf* const stdout_buffer = std::cout.rdbuf();
  if (a.json_out == "-") std::cout.rdbuf(std::cerr.rdbuf());
  int rc =
      a.devices.empty() ? CompileOrTune(valid, a, env, &out) : RunOnDevices(valid, a, env, &out);
  std::cout.rdbuf(stdout_buffer);
  if (!a.json_out.empty()) {
    if (!WriteOutput(a.json_out, out.dump(2) + "\n")) {
      Error("cannot write " + a.json_out + " (" + std::strerror(errno) + ")");
      rc = std::max(rc, kExitFailure);
    } else if (a.json_out != "-") {
      std::cout << "results written to " << a.json_out << "\n";
    }
  }
  if (any_invalid) return kExitUsage;
  return rc;
}

// The options besides the shape flags.
void AddTuneOptions(CLI::App* tune, TuneArgs* a) {
  tune->add_option("--cache", a->cache, "SQLite cache file (overrides $CONVT3D_CACHE)");
  tune->add_option("--policy", a->policy,
                   "exhaustive: always time every candidate; if-missing: use a cache hit")
      ->capture_default_str();
  tune->add_option("--precision", a->precision,
                   "Comma-separated: fp32 (strict, <=1e-6), fp32x3 (3xTF32 tensor cores, <=1e-5),"
                   " tf32 (<=1e-3), bf16 / f16 (or fp16) (16-bit tensors, fp32 accumulation,"
                   " <=1e-2); each problem is tuned once per mode")
      ->capture_default_str();
  IntFlags& ints = a->ints;
  ints.Add(tune, "--repeats", &a->repeats, "Timed runs per candidate (median taken)", 1, 1000000);
  ints.Add(tune, "--warmup", &a->warmup, "Untimed runs per candidate first", 0, 1000000);
  ints.Add(tune, "--max-candidates", &a->max_candidates,
           "Tune (with --compile-only: compile) at most this many, best-ranked first (0: all)", 0,
           1000000);
  ints.Add(tune, "--wait", &a->wait_s,
           "With --policy if-missing: when another process is tuning a shape, wait up to this "
           "many seconds for its winner (or for its lease to expire, then tune); 0: take the "
           "heuristic pick for this run",
           0, 86400);
  CLI::Option* device = ints.Add(tune, "--device", &a->device, "CUDA device ordinal", 0, 1023);
  tune->add_option("--devices", a->devices,
                   "Spread the problem list over these GPUs: all, or ordinals like 0,1; one "
                   "worker process per GPU, each taking the next problem/mode pair when it is "
                   "free, all writing one cache file. With --compile-only (no GPU needed): one "
                   "compiling worker per listed ordinal")
      ->excludes(device);
  ints.Add(tune, "--worker-device", &a->worker_device, "", 0, 1023)->group("");
  ints.Add(tune, "--compile-threads", &a->compile_threads, "NVRTC threads (0: one per core)", 0,
           1024);
  tune->add_option("--arch", a->arch,
                   "Target for compile-only work, e.g. sm_90 (default: this GPU, else sm_90)");
  tune->add_option("--emit", a->emit_dir,
                   "With compile-only: write every candidate's .cu and .cubin into this folder, "
                   "one subfolder per problem and mode (e.g. L1-73_tf32)")
      ->check(CLI::ExistingDirectory);
  tune->add_flag("--no-cudnn", a->no_cudnn,
                 "Tune our kernels alone: no cuDNN algorithm among the candidates (by default "
                 "each one cuDNN accepts competes where cuDNN loads; results are cached apart)");
  tune->add_flag("--fp32x3-fp16", a->fp32x3_fp16,
                 "fp32x3 also offers the scaled 3xFP16 tiles (faster; the 1e-5 contract holds "
                 "unless an operand's largest values exceed ~2^22 times its RMS, see README; "
                 "results are cached apart; also $CONVT3D_FP32X3_FP16=1)");
  tune->add_flag("--compile-only", a->compile_only,
                 "Only NVRTC-compile every candidate (no GPU needed, nothing timed or cached)");
  tune->add_flag("--require-gpu", a->require_gpu,
                 "Fail (exit 2) instead of compiling only when "
                 "there is no usable GPU");
  tune->add_option("--json", a->json_out, "Write the results to this JSON file ('-': stdout)");
}

}  // namespace

Command AddTune(CLI::App* cli) {
  auto a = std::make_shared<TuneArgs>();
  CLI::App* tune = cli->add_subcommand(
      "tune",
      "Tune one shape (flags named like nn.ConvTranspose3d's arguments) or a problem list;"
      " without a GPU, NVRTC-compile every candidate instead");
  AddShapeFlags(tune, &a->shape);
  a->problems_opt = tune->add_option(
      "--problems", a->problems_file,
      "Problem list: a name (kernelbench-l1, models, bench: the installed lists) or a JSON file");
  a->problems_opt->excludes(a->shape.input_opt);
  tune->add_option("--only", a->only, "With --problems: only these names, comma-separated")
      ->needs(a->problems_opt);
  AddTuneOptions(tune, a.get());
  return {tune, [a] { return RunTune(*a); }};
}

}  // namespace convt3d::cli
