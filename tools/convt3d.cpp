// convt3d.cpp: the convt3d CLI: tune, bench against cuDNN, inspect the cache, describe the machine.
//
// Exit codes: 0 ok, 1 a failure in the work, 2 a usage error / invalid argument / GPU required
// but absent. Every error is one line on stderr beginning "convt3d: ".
#include "convt3d/convt3d.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/bench.h"
#include "cache/cache.h"
#include "src/problem_io.h"

namespace convt3d {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

using OJson = nlohmann::ordered_json;

void Error(const std::string& message) { std::cerr << "convt3d: " << message << std::endl; }

// The library's warnings may already carry the "convt3d: " prefix; never print it twice.
void Warn(const std::string& message) {
  const std::string prefix = "convt3d: ";
  Error("warning: " + (message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message));
}

// The engine's progress lines and warnings, in the CLI's format.
void LogToStderr(LogLevel level, const std::string& line) {
  if (level == LogLevel::kWarning) {
    Warn(line);
  } else {
    std::cerr << "convt3d: " << line << std::endl;
  }
}

// A bad argument is the user's to fix (2); anything else went wrong in the work itself (1).
// An invalid problem is reported and skipped so that the rest of a list still runs.
std::vector<io::NamedProblem> KeepValid(std::vector<io::NamedProblem> problems, bool* any_invalid) {
  std::vector<io::NamedProblem> valid;
  for (auto& np : problems) {
    Status st = Validate(np.problem);
    if (st.ok()) {
      valid.push_back(std::move(np));
    } else {
      Error("invalid problem " + np.name + ": " + st.message() + " (skipped)");
      *any_invalid = true;
    }
  }
  return valid;
}

int ExitCodeFor(const Status& s) {
  return s.code() == Code::kInvalidArgument ? kExitUsage : kExitFailure;
}

// Versions are reported as major*1000 + minor*10 by both the driver and NVRTC.
std::string VersionString(int v) {
  if (v <= 0) return "-";
  return StrFormat("%d.%d", v / 1000, (v % 1000) / 10);
}

std::string Ms(double ms) { return ms >= 0 ? StrFormat("%.3f", ms) : "-"; }

std::string RelErr(double e) { return e >= 0 ? StrFormat("%.1e", e) : "-"; }

// First line of a possibly multi-line message (NVRTC logs), cut to `width` characters.
std::string OneLine(const std::string& s, size_t width) {
  std::string line = s.substr(0, s.find('\n'));
  if (line.size() > width) line = line.substr(0, width - 3) + "...";
  return line;
}

// Plain aligned columns: text left-aligned, numbers right-aligned.
class Table {
 public:
  Table(std::vector<std::string> headers, std::string right_aligned)
      : headers_(std::move(headers)), right_(std::move(right_aligned)) {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }

  void Print(std::ostream& os) const {
    std::vector<size_t> width(headers_.size(), 0);
    for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
    for (const auto& r : rows_)
      for (size_t c = 0; c < r.size() && c < width.size(); ++c)
        width[c] = std::max(width[c], r[c].size());
    auto line = [&](const std::vector<std::string>& r) {
      std::string out;
      for (size_t c = 0; c < headers_.size(); ++c) {
        const std::string cell = c < r.size() ? r[c] : "";
        const std::string pad(width[c] - std::min(width[c], cell.size()), ' ');
        const bool right = c < right_.size() && right_[c] == 'r';
        out += right ? pad + cell : cell + (c + 1 < headers_.size() ? pad : "");
        if (c + 1 < headers_.size()) out += "  ";
      }
      os << out << "\n";
    };
    line(headers_);
    std::vector<std::string> rule;
    for (size_t w : width) rule.emplace_back(w, '-');
    line(rule);
    for (const auto& r : rows_) line(r);
  }

 private:
  std::vector<std::string> headers_;
  std::string right_;  // one 'l' or 'r' per column
  std::vector<std::vector<std::string>> rows_;
};

// ---- Problems from flags --------------------------------------------------------------------

// The shape flags mirror nn.ConvTranspose3d's constructor arguments plus the input shape.
struct ShapeFlags {
  std::string input, kernel_size, stride = "1", padding = "0", output_padding = "0", dilation = "1";
  std::string dtype = "f32", name = "cli";
  int64_t in_channels = 0, out_channels = 0, groups = 1;
  bool bias = false;
  CLI::Option* input_opt = nullptr;
};

void AddShapeFlags(CLI::App* app, ShapeFlags* f) {
  f->input_opt = app->add_option("--input", f->input, "Input shape N,C,D,H,W (e.g. 8,32,16,32,32)");
  app->add_option("--in-channels", f->in_channels, "C_in; optional, must equal the C of --input");
  app->add_option("--out-channels", f->out_channels, "C_out");
  app->add_option("--kernel-size", f->kernel_size, "k or kD,kH,kW (e.g. 3 or 3,5,7)");
  app->add_option("--stride", f->stride, "s or sD,sH,sW")->capture_default_str();
  app->add_option("--padding", f->padding, "p or pD,pH,pW")->capture_default_str();
  app->add_option("--output-padding", f->output_padding, "op or opD,opH,opW")
      ->capture_default_str();
  app->add_option("--dilation", f->dilation, "d or dD,dH,dW")->capture_default_str();
  app->add_option("--groups", f->groups, "Groups (divides C_in and C_out)")->capture_default_str();
  app->add_flag("--bias", f->bias, "The layer has a bias");
  app->add_option("--dtype", f->dtype, "Element type")
      ->check(CLI::IsMember({"f32", "f64", "bf16", "f16"}))
      ->capture_default_str();
  app->add_option("--name", f->name, "Label for this shape in tables and JSON")
      ->capture_default_str();
}

StatusOr<io::NamedProblem> ProblemFromFlags(const ShapeFlags& f) {
  if (f.input.empty()) return Status(Code::kInvalidArgument, "--input N,C,D,H,W is required");
  if (f.out_channels == 0) return Status(Code::kInvalidArgument, "--out-channels is required");
  if (f.kernel_size.empty()) return Status(Code::kInvalidArgument, "--kernel-size is required");
  Status st;
  io::NamedProblem np;
  np.name = f.name;
  Problem& p = np.problem;
  const std::vector<int64_t> in = io::ParseIntList(f.input, "--input", &st);
  if (!st.ok()) return st;
  if (in.size() != 5) {
    return Status(Code::kInvalidArgument,
                  "--input=\"" + f.input + "\": expected 5 integers N,C,D,H,W");
  }
  p.n = in[0];
  p.c_in = in[1];
  p.in = {in[2], in[3], in[4]};
  if (f.in_channels != 0 && f.in_channels != p.c_in) {
    return Status(Code::kInvalidArgument, "--in-channels=" + std::to_string(f.in_channels) +
                                              " differs from C=" + std::to_string(p.c_in) +
                                              " of --input");
  }
  p.c_out = f.out_channels;
  p.kernel = io::ParseTriple(f.kernel_size, "--kernel-size", &st);
  p.stride = io::ParseTriple(f.stride, "--stride", &st);
  p.padding = io::ParseTriple(f.padding, "--padding", &st);
  p.output_padding = io::ParseTriple(f.output_padding, "--output-padding", &st);
  p.dilation = io::ParseTriple(f.dilation, "--dilation", &st);
  if (!st.ok()) return st;
  p.groups = f.groups;
  p.bias = f.bias;
  auto dt = io::ParseDType(f.dtype);
  if (!dt.ok()) return dt.status();
  p.dtype = *dt;
  return np;
}

// Keeps only the problems named in a comma-separated list, in the file's order.
Status FilterByName(const std::string& only, std::vector<io::NamedProblem>* problems) {
  if (only.empty()) return Status();
  std::vector<std::string> names;
  std::stringstream ss(only);
  for (std::string n; std::getline(ss, n, ',');)
    if (!n.empty()) names.push_back(n);
  for (const auto& n : names) {
    const bool found = std::any_of(problems->begin(), problems->end(),
                                   [&](const io::NamedProblem& p) { return p.name == n; });
    if (!found) return Status(Code::kInvalidArgument, "--only: no problem named \"" + n + "\"");
  }
  std::vector<io::NamedProblem> kept;
  for (auto& p : *problems)
    if (std::find(names.begin(), names.end(), p.name) != names.end()) kept.push_back(std::move(p));
  *problems = std::move(kept);
  return Status();
}

// The problems of a list file, narrowed to --only's names.
StatusOr<std::vector<io::NamedProblem>> LoadList(const std::string& file, const std::string& only) {
  CONVT3D_ASSIGN_OR_RETURN(std::vector<io::NamedProblem> problems, io::LoadProblems(file));
  CONVT3D_RETURN_IF_ERROR(FilterByName(only, &problems));
  return problems;
}

// The one shape given by --input and friends, as a one-problem list.
StatusOr<std::vector<io::NamedProblem>> OneShape(const ShapeFlags& f) {
  CONVT3D_ASSIGN_OR_RETURN(io::NamedProblem np, ProblemFromFlags(f));
  return std::vector<io::NamedProblem>{std::move(np)};
}

OJson ProblemJson(const io::NamedProblem& np) {
  return OJson::parse(io::ToJson(np), nullptr, /*allow_exceptions=*/false);
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  return static_cast<bool>(f);
}

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- tune -----------------------------------------------------------------------------------

struct TuneArgs {
  ShapeFlags shape;
  std::string problems_file, only, cache, policy = "exhaustive", arch, json_out;
  std::string precision = "fp32", emit_dir;
  int repeats = 20, warmup = 3, max_candidates = 0, device = 0, compile_threads = 0;
  bool compile_only = false, require_gpu = false;
  CLI::Option* problems_opt = nullptr;
};

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Compile-only path: no timing, so it needs no GPU; proves every candidate builds for `arch`.
int CompileOnly(const std::vector<io::NamedProblem>& problems, const std::string& arch, int threads,
                const std::string& emit_dir, int max_candidates, OJson* results) {
  Table table({"problem", "candidates", "compiled", "failed", "seconds"}, "lrrrr");
  bool all_ok = true;
  int total_cand = 0, total_ok = 0;
  double total_s = 0;
  const size_t n = problems.size();
  for (size_t i = 0; i < n; ++i) {
    const io::NamedProblem& np = problems[i];
    std::cerr << "[" << i + 1 << "/" << n << "] " << np.name << " ... " << std::flush;
    const auto t0 = std::chrono::steady_clock::now();
    // One subfolder per problem and mode: candidates of different problems share names.
    std::string dir;
    if (!emit_dir.empty()) {
      std::string sub = np.name;
      for (char& ch : sub)
        if (ch == '/' || ch == '\\') ch = '_';
      dir = emit_dir + "/" + sub;
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) {
        Error(StrCat("--emit: cannot create ", dir, ": ", ec.message()));
        return 1;
      }
    }
    StatusOr<CompileReport> rep = CompileCandidates(np.problem, arch, threads, dir, max_candidates);
    OJson r;
    r["name"] = np.name;
    r["problem"] = ProblemJson(np);
    if (!rep.ok()) {
      std::cerr << "failed" << std::endl;
      Error(np.name + ": " + rep.status().ToString());
      table.Add({np.name, "-", "-", "-", StrFormat("%.1f", Seconds(t0))});
      r["status"] = "error";
      r["error"] = rep.status().ToString();
      results->push_back(std::move(r));
      all_ok = false;
      continue;
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
    if (failed > 0 || c.candidates == 0) all_ok = false;
    total_cand += c.candidates;
    total_ok += c.compiled;
    total_s += c.seconds;
    table.Add({np.name, std::to_string(c.candidates), std::to_string(c.compiled),
               std::to_string(failed), StrFormat("%.1f", c.seconds)});
    r["status"] = (failed == 0 && c.candidates > 0) ? "ok" : "failed";
    r["candidates"] = c.candidates;
    r["compiled"] = c.compiled;
    r["failed"] = failed;
    r["seconds"] = c.seconds;
    r["failures"] = c.failures;
    results->push_back(std::move(r));
  }
  if (n > 1) {
    table.Add({"total", std::to_string(total_cand), std::to_string(total_ok),
               std::to_string(total_cand - total_ok), StrFormat("%.1f", total_s)});
  }
  std::cout << "\n";
  table.Print(std::cout);
  return all_ok ? kExitOk : kExitFailure;
}

std::string CudnnMs(const io::NamedProblem& np, const char* key) {
  auto it = np.cudnn_ms.find(key);
  return it == np.cudnn_ms.end() ? "-" : StrFormat("%.3f", it->second);
}

int TuneOnGpu(const std::vector<io::NamedProblem>& problems, const TuneArgs& a, OJson* results,
              OJson* engine_json) {
  Options opt;
  opt.policy = a.policy == "if-missing" ? TunePolicy::kTuneIfMissing : TunePolicy::kExhaustive;
  opt.cache_path = a.cache;
  opt.device = a.device;
  opt.repeats = a.repeats;
  opt.warmup = a.warmup;
  opt.max_candidates = a.max_candidates;
  opt.compile_threads = a.compile_threads;
  opt.log = LogToStderr;  // progress and warnings, the cache's included
  StatusOr<Engine> engine = Engine::Create(opt);
  if (!engine.ok()) {
    Error("cannot start the engine: " + engine.status().ToString());
    return kExitFailure;
  }

  Table table({"problem", "kernel", "source", "ms", "TFLOP/s", "rel_err", "tune s", "cuDNN fp32 ms",
               "cuDNN tf32 ms", "vs fp32"},
              "lllrrrrrrr");
  bool all_ok = true;
  const size_t n = problems.size();
  for (size_t i = 0; i < n; ++i) {
    const io::NamedProblem& np = problems[i];
    const std::string tag = "[" + std::to_string(i + 1) + "/" + std::to_string(n) + "] " + np.name;
    std::cerr << tag << " tuning ..." << std::endl;
    const auto t0 = std::chrono::steady_clock::now();
    StatusOr<convt3d::Plan> plan = engine->Plan(np.problem);
    OJson r;
    r["name"] = np.name;
    r["problem"] = ProblemJson(np);
    if (!plan.ok()) {
      Error(np.name + ": " + plan.status().ToString());
      table.Add({np.name, "(failed)", "-", "-", "-", "-", "-", CudnnMs(np, "fp32_strict"),
                 CudnnMs(np, "tf32_default"), "-"});
      r["status"] = "error";
      r["error"] = plan.status().ToString();
      results->push_back(std::move(r));
      all_ok = false;
      continue;
    }
    const double ms = plan->tuned_ms();
    std::cerr << tag << " done: " << plan->kernel_name() << " " << Ms(ms) << " ms ("
              << plan->source() << ", " << StrFormat("%.1f", Seconds(t0)) << " s)" << std::endl;
    const double tflops = ms > 0 ? np.problem.Flops() / ms / 1e9 : -1;
    std::string speedup = "-";
    auto ref = np.cudnn_ms.find("fp32_strict");
    if (ref != np.cudnn_ms.end() && ms > 0) speedup = StrFormat("%.2fx", ref->second / ms);
    table.Add({np.name, plan->kernel_name(), plan->source(), Ms(ms),
               tflops >= 0 ? StrFormat("%.2f", tflops) : "-",
               plan->rel_err() >= 0 ? StrFormat("%.1e", plan->rel_err()) : "-",
               StrFormat("%.1f", Seconds(t0)), CudnnMs(np, "fp32_strict"),
               CudnnMs(np, "tf32_default"), speedup});
    r["status"] = "ok";
    r["kernel"] = plan->kernel_name();
    r["source"] = plan->source();
    r["ms"] = ms;
    r["tflops"] = tflops;
    r["rel_err_vs_fp64"] = plan->rel_err();
    r["seconds"] = Seconds(t0);
    if (!np.cudnn_ms.empty()) r["cudnn_h200_ms"] = np.cudnn_ms;
    if (ref != np.cudnn_ms.end() && ms > 0) r["speedup_vs_cudnn_fp32_strict"] = ref->second / ms;
    results->push_back(std::move(r));
  }
  std::cout << "\n";
  table.Print(std::cout);
  std::cout << "\nrel_err: the winner's ||y-ref||/||ref|| against the fp64 reference kernel on "
               "random inputs.\ncuDNN columns: times recorded in the problem file (cudnn_h200_ms), "
               "not measured in this run.\n";
  std::cout << "cache: " << engine->cache_path() << " (" << engine->nvrtc_compiles()
            << " NVRTC compiles this run)\n";
  (*engine_json)["cache"] = engine->cache_path();
  (*engine_json)["nvrtc_compiles"] = engine->nvrtc_compiles();
  return all_ok ? kExitOk : kExitFailure;
}

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

int RunTune(TuneArgs& a) {
  StatusOr<std::vector<io::NamedProblem>> listed = std::vector<io::NamedProblem>{};
  if (!a.problems_file.empty()) {
    listed = LoadList(a.problems_file, a.only);
  } else if (!a.shape.input.empty()) {
    listed = OneShape(a.shape);
  } else {
    Error(
        "tune needs a shape (--input, --out-channels, --kernel-size, ...) or --problems FILE;"
        " see 'convt3d tune --help'");
    return kExitUsage;
  }
  if (!listed.ok()) {
    Error(listed.status().message());
    return kExitUsage;  // a bad shape or a missing/malformed --problems file is the caller's
  }

  // Each problem once per requested mode; names get "/tf32", "/bf16" etc. beyond fp32. The
  // 16-bit modes turn the problem's tensors into bf16 / f16 (fp32 accumulation).
  {
    struct Mode {
      std::string name;
      DType dtype;
      Precision precision;
    };
    std::vector<Mode> modes;
    std::stringstream ss(a.precision);
    for (std::string t; std::getline(ss, t, ',');) {
      if (t == "bf16" || t == "f16") {
        modes.push_back({t, t == "bf16" ? DType::kBF16 : DType::kF16, Precision::kFp32});
      } else if (auto pr = io::ParsePrecision(t); pr.ok()) {
        modes.push_back({t, DType::kF32, *pr});
      } else {
        Error("--precision=" + t + ": expected fp32, fp32x3, tf32, bf16 or f16");
        return kExitUsage;
      }
    }
    std::vector<io::NamedProblem> expanded;
    for (const auto& np : listed.value())
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
    listed = std::move(expanded);
  }

  bool any_invalid = false;
  std::vector<io::NamedProblem> valid = KeepValid(std::move(listed).value(), &any_invalid);
  if (valid.empty()) return kExitUsage;

  const Environment env = DescribeEnvironment(a.device);
  const bool gpu = env.driver_error.empty();
  if (!gpu && a.require_gpu) {
    Error("no usable GPU (" + env.driver_error + ") and --require-gpu was given");
    return kExitUsage;
  }

  OJson out;
  out["version"] = Version();
  out["environment"] = EnvironmentJson(env);
  OJson results = OJson::array();
  int rc;
  if (!gpu || a.compile_only) {
    // Without --arch, compile for the GPU that is here, else for the H200/H100 the project
    // targets.
    const std::string arch =
        !a.arch.empty() ? a.arch : (gpu && !env.arch.empty() ? env.arch : "sm_90");
    if (a.compile_only) {
      Error("compile-only: NVRTC-compiling every candidate for " + arch + " (nothing is timed)");
    } else {
      Error("no usable GPU (" + env.driver_error +
            "); running the compile-only part: NVRTC-compiling every candidate for " + arch);
    }
    out["mode"] = "compile-only";
    out["arch"] = arch;
    rc = CompileOnly(valid, arch, a.compile_threads, a.emit_dir, a.max_candidates, &results);
  } else {
    out["mode"] = "tune";
    out["policy"] = a.policy;
    OJson engine_json;
    rc = TuneOnGpu(valid, a, &results, &engine_json);
    out["engine"] = engine_json;
  }
  out["results"] = std::move(results);
  if (!a.json_out.empty()) {
    if (!WriteFile(a.json_out, out.dump(2) + "\n")) {
      Error("cannot write " + a.json_out);
      rc = std::max(rc, kExitFailure);
    } else {
      std::cout << "results written to " << a.json_out << "\n";
    }
  }
  if (any_invalid) return kExitUsage;
  return rc;
}

// ---- bench ----------------------------------------------------------------------------------

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

// ---- cache ----------------------------------------------------------------------------------

std::string ResolveCachePath(const std::string& flag) {
  return flag.empty() ? cache::Store::DefaultPath() : flag;
}

std::unique_ptr<cache::Store> OpenStore(const std::string& path) {
  std::unique_ptr<cache::Store> store = cache::Store::Open(path);
  if (!store->warning().empty()) Warn(store->warning());
  return store;
}

cache::Key CurrentKey(const Environment& env) {
  cache::Key k;
  k.arch = env.arch;
  k.gpu_name = env.gpu_name;
  k.driver_version = env.driver_version;
  k.nvrtc_version = env.nvrtc_version;
  k.code_hash = env.code_hash;
  return k;
}

// Why an entry would not be used on this machine, "" when it would. Without a GPU the
// machine-specific fields cannot be compared, so only NVRTC and the code hash are.
std::string Mismatch(const cache::Key& e, const Environment& env) {
  cache::Key cur = CurrentKey(env);
  cur.problem = e.problem;
  const bool gpu = env.driver_error.empty();
  if (!gpu) {
    cur.arch = e.arch;
    cur.gpu_name = e.gpu_name;
    cur.driver_version = e.driver_version;
  }
  std::string why = cache::Store::ExplainMismatch(e, cur);
  if (!gpu) why += std::string(why.empty() ? "" : "; ") + "no GPU here to compare arch/gpu/driver";
  return why;
}

const char* MatchWord(const cache::Key& e, const Environment& env) {
  const std::string m = Mismatch(e, env);
  if (m.empty()) return "yes";
  // Only the missing GPU stands in the way: the entry might be valid, we cannot tell.
  if (!env.driver_error.empty() && m.find(';') == std::string::npos) return "?";
  return "no";
}

int CacheList(const std::string& flag) {
  const std::string path = ResolveCachePath(flag);
  auto store = OpenStore(path);
  if (!store->persistent()) return kExitFailure;  // the warning said why; nothing to list
  auto entries = store->List();
  if (!entries.ok()) {
    Error("cannot list " + store->path() + ": " + entries.status().ToString());
    return kExitFailure;
  }
  const Environment env = DescribeEnvironment();
  std::cout << "cache: " << store->path() << " (" << entries->size() << " entries)\n";
  if (entries->empty()) return kExitOk;
  Table t({"problem", "arch", "gpu", "driver", "nvrtc", "winner", "ms", "rel_err", "cubin",
           "tuned_at", "here", "why not"},
          "llllllrrrlll");
  for (const cache::Entry& e : *entries) {
    t.Add({e.key.problem, e.key.arch, e.key.gpu_name, VersionString(e.key.driver_version),
           VersionString(e.key.nvrtc_version), e.winner.candidate, Ms(e.winner.median_ms),
           RelErr(e.winner.rel_err), std::to_string(e.cubin_bytes), e.winner.tuned_at,
           MatchWord(e.key, env), Mismatch(e.key, env)});
  }
  std::cout << "\n";
  t.Print(std::cout);
  return kExitOk;
}

int CacheShow(const std::string& flag, const std::string& signature_flag, const ShapeFlags& shape,
              bool full) {
  std::string sig = signature_flag;
  if (sig.empty()) {
    if (shape.input.empty()) {
      Error("cache show needs --problem SIGNATURE or a shape (--input, --out-channels, ...)");
      return kExitUsage;
    }
    auto np = ProblemFromFlags(shape);
    if (!np.ok()) {
      Error(np.status().message());
      return kExitUsage;
    }
    Status st = Validate(np->problem);
    if (!st.ok()) {
      Error("invalid problem: " + st.message());
      return kExitUsage;
    }
    sig = np->problem.Signature();
  }
  const std::string path = ResolveCachePath(flag);
  auto store = OpenStore(path);
  if (!store->persistent()) return kExitFailure;
  auto entries = store->List();
  if (!entries.ok()) {
    Error("cannot list " + store->path() + ": " + entries.status().ToString());
    return kExitFailure;
  }
  const Environment env = DescribeEnvironment();
  int shown = 0;
  for (const cache::Entry& e : *entries) {
    if (e.key.problem != sig) continue;
    if (shown++ > 0) std::cout << "\n";
    const std::string why = Mismatch(e.key, env);
    std::cout << "problem:    " << e.key.problem << "\n"
              << "arch:       " << e.key.arch << "\n"
              << "gpu:        " << e.key.gpu_name << "\n"
              << "driver:     " << VersionString(e.key.driver_version) << " ("
              << e.key.driver_version << ")\n"
              << "nvrtc:      " << VersionString(e.key.nvrtc_version) << " (" << e.key.nvrtc_version
              << ")\n"
              << "code hash:  " << e.key.code_hash << "\n"
              << "winner:     " << e.winner.candidate << "  " << Ms(e.winner.median_ms)
              << " ms  rel_err " << RelErr(e.winner.rel_err) << "\n"
              << "symbol:     " << e.winner.kernel_symbol << "\n"
              << "cubin:      " << e.cubin_bytes << " bytes\n"
              << "tuned at:   " << e.winner.tuned_at << "\n"
              << "this host:  " << MatchWord(e.key, env) << (why.empty() ? "" : " (" + why + ")")
              << "\n";
    if (full) std::cout << "params:     " << e.winner.params_json << "\n";
    auto trials = store->Trials(e.key);
    if (!trials.ok()) {
      Error("cannot read the trial log: " + trials.status().ToString());
      return kExitFailure;
    }
    std::cout << "trials:     " << trials->size() << "\n\n";
    Table t({"candidate", "outcome", "median ms", "min ms", "rel err", "compile ms", "message"},
            "llrrrrl");
    for (const cache::Trial& tr : *trials) {
      t.Add({tr.candidate, tr.outcome, Ms(tr.median_ms), Ms(tr.min_ms), RelErr(tr.rel_err),
             tr.compile_ms >= 0 ? StrFormat("%.0f", tr.compile_ms) : "-",
             full ? tr.message : OneLine(tr.message, 80)});
    }
    t.Print(std::cout);
  }
  if (shown == 0) {
    Error("no cache entry for " + sig + " in " + store->path());
    return kExitFailure;
  }
  return kExitOk;
}

int CacheExport(const std::string& flag, const std::string& file) {
  auto store = OpenStore(ResolveCachePath(flag));
  if (!store->persistent()) return kExitFailure;  // exporting the empty fallback would mislead
  auto json = store->ExportJson();
  if (!json.ok()) {
    Error("export failed: " + json.status().ToString());
    return kExitFailure;
  }
  if (file == "-") {
    std::cout << *json << "\n";
    return kExitOk;
  }
  if (!WriteFile(file, *json)) {
    Error("cannot write " + file);
    return kExitFailure;
  }
  std::cout << "exported " << store->path() << " to " << file << "\n";
  return kExitOk;
}

int CacheImport(const std::string& flag, const std::string& file) {
  std::optional<std::string> text =
      file == "-" ? std::optional<std::string>(std::string(std::istreambuf_iterator<char>(std::cin),
                                                           std::istreambuf_iterator<char>()))
                  : ReadFile(file);
  if (!text) {
    Error("cannot read " + file);
    return kExitUsage;
  }
  auto store = OpenStore(ResolveCachePath(flag));
  if (!store->persistent()) return kExitFailure;  // the import would vanish with the process
  auto n = store->ImportJson(*text);
  if (!n.ok()) {
    Error("import of " + file + " failed: " + n.status().ToString());
    return ExitCodeFor(n.status());
  }
  std::cout << "imported " << *n << " entries into " << store->path() << "\n";
  return kExitOk;
}

int CachePrune(const std::string& flag, bool force) {
  const Environment env = DescribeEnvironment();
  if (!env.driver_error.empty() && !force) {
    // Every entry would look stale on a machine with no GPU; refuse rather than wipe the cache.
    Error("no usable GPU (" + env.driver_error +
          "), so no entry can match this machine; pass --force to prune anyway");
    return kExitUsage;
  }
  auto store = OpenStore(ResolveCachePath(flag));
  if (!store->persistent()) return kExitFailure;
  auto n = store->Prune(CurrentKey(env));
  if (!n.ok()) {
    Error("prune failed: " + n.status().ToString());
    return kExitFailure;
  }
  std::cout << "pruned " << *n << " entries from " << store->path() << "\n";
  return kExitOk;
}

int CacheCheck(const std::string& flag) {
  auto store = OpenStore(ResolveCachePath(flag));
  if (!store->persistent()) return kExitFailure;
  Status st = store->CheckIntegrity();
  if (!st.ok()) {
    Error(store->path() + ": " + st.ToString());
    return kExitFailure;
  }
  std::cout << store->path() << ": ok\n";
  return kExitOk;
}

// ---- info -----------------------------------------------------------------------------------

int RunInfo(const std::string& flag, int device) {
  const Environment env = DescribeEnvironment(device);
  std::cout << "convt3d    " << Version() << "\n";
  if (env.driver_error.empty()) {
    std::cout << "driver     " << VersionString(env.driver_version) << " (" << env.driver_version
              << ")\n"
              << "GPU        " << env.gpu_name << " (" << env.arch << "), device " << device
              << "\n";
  } else {
    std::cout << "driver     " << (env.driver_version > 0 ? VersionString(env.driver_version) : "")
              << (env.driver_version > 0 ? " " : "") << "no usable GPU: " << env.driver_error
              << "\n"
              << "GPU        none (compile-only work is still possible)\n";
  }
  if (env.nvrtc_error.empty()) {
    std::cout << "NVRTC      " << VersionString(env.nvrtc_version) << " (" << env.nvrtc_version
              << ")\n";
  } else {
    std::cout << "NVRTC      unavailable: " << env.nvrtc_error << "\n";
  }
  std::cout << "code hash  " << env.code_hash << "\n";
  const std::string path = ResolveCachePath(flag);
  auto store = OpenStore(path);
  if (store->persistent()) {
    std::cout << "cache      " << store->path() << " (opens)\n";
  } else {
    // The reason is in the warning OpenStore() has just printed.
    std::cout << "cache      " << path
              << " (does not open; results would be kept in memory only)\n";
  }
  return kExitOk;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "convt3d: PyTorch nn.ConvTranspose3d forward with NVRTC-compiled, autotuned CUDA "
      "kernels cached in SQLite",
      "convt3d"};
  app.set_version_flag("--version", std::string(Version()));
  app.require_subcommand(1);

  // tune
  TuneArgs ta;
  CLI::App* tune = app.add_subcommand(
      "tune",
      "Tune one shape (flags named like nn.ConvTranspose3d's arguments) or a problem list;"
      " without a GPU, NVRTC-compile every candidate instead");
  AddShapeFlags(tune, &ta.shape);
  ta.problems_opt = tune->add_option("--problems", ta.problems_file,
                                     "Problem list JSON (e.g. problems/kernelbench_l1.json)");
  ta.problems_opt->excludes(ta.shape.input_opt);
  tune->add_option("--only", ta.only, "With --problems: only these names, comma-separated")
      ->needs(ta.problems_opt);
  tune->add_option("--cache", ta.cache, "SQLite cache file (overrides $CONVT3D_CACHE)");
  tune->add_option("--policy", ta.policy,
                   "exhaustive: always time every candidate; if-missing: use a cache hit")
      ->check(CLI::IsMember({"exhaustive", "if-missing"}))
      ->capture_default_str();
  tune->add_option("--precision", ta.precision,
                   "Comma-separated: fp32 (strict, <=1e-6), fp32x3 (3xTF32 tensor cores, <=1e-5),"
                   " tf32 (<=1e-3), bf16 / f16 (16-bit tensors, fp32 accumulation, <=1e-2); each"
                   " problem is tuned once per mode")
      ->capture_default_str();
  tune->add_option("--repeats", ta.repeats, "Timed runs per candidate (median taken)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  tune->add_option("--warmup", ta.warmup, "Untimed runs per candidate first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  tune->add_option(
          "--max-candidates", ta.max_candidates,
          "Tune (with --compile-only: compile) at most this many, best-ranked first (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  tune->add_option("--device", ta.device, "CUDA device ordinal")->capture_default_str();
  tune->add_option("--compile-threads", ta.compile_threads, "NVRTC threads (0: one per core)")
      ->check(CLI::NonNegativeNumber);
  tune->add_option("--arch", ta.arch,
                   "Target for compile-only work, e.g. sm_90 (default: this GPU, else sm_90)");
  tune->add_option("--emit", ta.emit_dir,
                   "With compile-only: write every candidate's .cu and .cubin into this folder, "
                   "one subfolder per problem and mode (e.g. L1-73_tf32)")
      ->check(CLI::ExistingDirectory);
  tune->add_flag("--compile-only", ta.compile_only,
                 "Only NVRTC-compile every candidate (no GPU needed, nothing timed or cached)");
  tune->add_flag("--require-gpu", ta.require_gpu,
                 "Fail (exit 2) instead of compiling only when "
                 "there is no usable GPU");
  tune->add_option("--json", ta.json_out, "Write the results to this JSON file");

  // bench
  BenchArgs ba;
  CLI::App* bench_cmd = app.add_subcommand(
      "bench",
      "Time our tuned kernel against cuDNN backward-data (tf32, strict fp32, bf16) in one "
      "process, with errors against fp64; writes JSON, CSV and an SVG chart");
  AddShapeFlags(bench_cmd, &ba.shape);
  ba.dtype_opt = bench_cmd->get_option("--dtype");
  ba.problems_opt =
      bench_cmd->add_option("--problems", ba.problems_file, "Problem list JSON (without a shape)")
          ->capture_default_str();
  ba.problems_opt->excludes(ba.shape.input_opt);
  bench_cmd->add_option("--only", ba.only, "Only these problems of the list, comma-separated")
      ->excludes(ba.shape.input_opt);
  bench_cmd->add_option("--cache", ba.cache, "SQLite cache file (overrides $CONVT3D_CACHE)");
  bench_cmd->add_option("--repeats", ba.repeats, "Timed runs per row (median taken)")
      ->check(CLI::Range(20, 1000000))
      ->capture_default_str();
  bench_cmd->add_option("--warmup", ba.warmup, "Untimed runs per row first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bench_cmd->add_option("--device", ba.device, "CUDA device ordinal")->capture_default_str();
  bench_cmd->add_option("--threads", ba.threads, "Host threads for inputs and checks (0: all)")
      ->check(CLI::NonNegativeNumber);
  bench_cmd->add_option("--json", ba.json_out, "Results as JSON ('' : not written)")
      ->capture_default_str();
  bench_cmd->add_option("--csv", ba.csv_out, "Results as CSV ('' : not written)")
      ->capture_default_str();
  bench_cmd->add_option("--svg", ba.svg_out, "Speed-up chart as SVG ('' : not written)")
      ->capture_default_str();

  // cache
  std::string cache_flag, cache_sig, file;
  bool full = false, force = false;
  ShapeFlags show_shape;
  CLI::App* cache_cmd = app.add_subcommand("cache", "Inspect and maintain the tuning cache");
  cache_cmd->require_subcommand(1);
  auto add_cache_flag = [&](CLI::App* c) {
    c->add_option("--cache", cache_flag,
                  "SQLite cache file (default: $CONVT3D_CACHE, else "
                  "$XDG_CACHE_HOME/convt3d/cache.sqlite, else "
                  "~/.cache/convt3d/cache.sqlite)");
  };
  CLI::App* c_path = cache_cmd->add_subcommand("path", "Print the cache file in use");
  CLI::App* c_list = cache_cmd->add_subcommand(
      "list", "One row per entry, and whether it matches this machine (and why not)");
  CLI::App* c_show = cache_cmd->add_subcommand(
      "show", "One problem's entries and trial logs (--problem SIGNATURE, or shape flags)");
  c_show->add_option("--problem", cache_sig,
                     "Problem signature as printed by 'convt3d cache list'");
  AddShapeFlags(c_show, &show_shape);
  c_show->add_flag("--full", full, "Do not shorten messages; print the winner's parameters");
  CLI::App* c_export = cache_cmd->add_subcommand("export", "Write the whole cache as JSON");
  c_export->add_option("FILE", file, "Output file ('-': stdout)")->required();
  CLI::App* c_import =
      cache_cmd->add_subcommand("import", "Merge a JSON export in (equal keys are replaced)");
  c_import->add_option("FILE", file, "JSON written by 'convt3d cache export' ('-': stdin)")
      ->required();
  CLI::App* c_prune =
      cache_cmd->add_subcommand("prune", "Remove entries that do not match this machine");
  c_prune->add_flag("--force", force, "Prune even without a GPU (removes every entry)");
  CLI::App* c_check =
      cache_cmd->add_subcommand("check", "SQLite integrity check and cubin hash check");
  for (CLI::App* c : {c_path, c_list, c_show, c_export, c_import, c_prune, c_check}) {
    add_cache_flag(c);
  }

  // info
  std::string info_cache;
  int info_device = 0;
  CLI::App* info = app.add_subcommand(
      "info", "Version, driver, NVRTC, GPU, code hash and cache file of this machine");
  info->add_option("--cache", info_cache, "SQLite cache file to check");
  info->add_option("--device", info_device, "CUDA device ordinal")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::string where = "convt3d";
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      where += " " + sub->get_name();
    }
    Error(std::string(e.what()) + " (see '" + where + " --help')");
    return kExitUsage;
  }

  if (*tune) return RunTune(ta);
  if (*bench_cmd) return RunBench(ba);
  if (*info) return RunInfo(info_cache, info_device);
  if (*c_path) {
    std::cout << ResolveCachePath(cache_flag) << "\n";
    return kExitOk;
  }
  if (*c_list) return CacheList(cache_flag);
  if (*c_show) return CacheShow(cache_flag, cache_sig, show_shape, full);
  if (*c_export) return CacheExport(cache_flag, file);
  if (*c_import) return CacheImport(cache_flag, file);
  if (*c_prune) return CachePrune(cache_flag, force);
  if (*c_check) return CacheCheck(cache_flag);
  Error("no command given (see 'convt3d --help')");
  return kExitUsage;
}

}  // namespace
}  // namespace convt3d

int main(int argc, char** argv) {
  // The library never throws, but CLI11, iostreams and nlohmann can; none may escape main.
  try {
    return convt3d::Main(argc, argv);
  } catch (const std::exception& e) {
    convt3d::Error(std::string("internal error: ") + e.what());
  } catch (...) {
    convt3d::Error("internal error: unknown exception");
  }
  return convt3d::kExitFailure;
}
