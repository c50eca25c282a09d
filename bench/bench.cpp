// bench.cpp: `convt3d bench`: inputs, fp64 reference, timed rows for us and cuDNN, writers.
#include "bench/bench.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "base/status.h"
#include "base/table.h"
#include "base/time.h"
#include "runtime/cudnn.h"
#include "runtime/runtime.h"
#include "src/reference.h"
#include "src/tuner.h"

namespace convt3d::bench {
namespace {

// Same conventions as the CLI: one line on stderr, prefixed, for anything the user must see.
void Error(const std::string& message) { std::cerr << "convt3d: " << message << std::endl; }

int Threads(int requested) {
  if (requested > 0) return requested;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// Calls fn(chunk, begin, end) over [0, n) split into at most `threads` contiguous chunks; small
// ranges stay on the calling thread, where a thread would cost more than the work.
int ParallelFor(int64_t n, int threads, const std::function<void(int, int64_t, int64_t)>& fn) {
  constexpr int64_t kMinChunk = 1 << 16;
  const int t = static_cast<int>(std::clamp<int64_t>(n / kMinChunk, 1, Threads(threads)));
  if (t == 1) {
    fn(0, 0, n);
    return 1;
  }
  const int64_t chunk = (n + t - 1) / t;
  std::vector<std::thread> workers;
  workers.reserve(t);
  for (int k = 0; k < t; ++k) {
    const int64_t begin = std::min(n, k * chunk), end = std::min(n, begin + chunk);
    workers.emplace_back(fn, k, begin, end);
  }
  for (auto& w : workers) w.join();
  return t;
}

uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The comparison of src/reference.h, its sums taken in parallel chunks.
template <typename T, typename ToDouble>
ErrorStats CompareImpl(const T* y, const double* ref, int64_t n, int threads, ToDouble to_double) {
  std::vector<ref::ErrorSums> parts(std::max(1, Threads(threads)));
  const int used = ParallelFor(n, threads, [&](int k, int64_t begin, int64_t end) {
    ref::ErrorSums part;  // local: threads writing neighbouring parts would share cache lines
    for (int64_t i = begin; i < end; ++i) part.Add(to_double(y[i]), ref[i]);
    parts[k] = part;
  });
  ref::ErrorSums total;
  for (int k = 0; k < used; ++k) total.Merge(parts[k]);
  const ref::ErrorStats s = total.Stats();
  ErrorStats e;
  e.rel_l2 = s.rel_l2;
  e.max_abs = s.max_abs;
  e.nonfinite = s.nonfinite;
  return e;
}

}  // namespace

// ---- Modes -----------------------------------------------------------------------------------

const ModeInfo& Info(Mode mode) {
  static const ModeInfo kModes[] = {
      {Mode::kFp32, "fp32", "FFMA", DType::kF32, Mode::kFp32, 1e-5},
      {Mode::kTf32, "tf32", "TF32", DType::kF32, Mode::kTf32, 1e-3},
      {Mode::kFp32x3, "fp32x3", "3xTF32", DType::kF32, Mode::kFp32, 1e-5},
      {Mode::kBf16, "bf16", "BF16", DType::kBF16, Mode::kBf16, 3e-2},
      {Mode::kF16, "f16", "FP16", DType::kF16, Mode::kF16, 3e-2},
  };
  for (const ModeInfo& m : kModes)
    if (m.mode == mode) return m;
  return kModes[0];
}

const char* ModeName(Mode mode) { return Info(mode).name; }

int ElementBytes(Mode mode) { return Info(mode).dtype == DType::kF32 ? 4 : 2; }

std::vector<Mode> OurModes() {
  return {Mode::kFp32, Mode::kFp32x3, Mode::kTf32, Mode::kBf16, Mode::kF16};
}

std::vector<Mode> CudnnModes() { return {Mode::kTf32, Mode::kFp32, Mode::kBf16, Mode::kF16}; }

StatusOr<std::vector<Mode>> ParseModes(const std::string& text) {
  std::vector<bool> wanted(OurModes().size(), false);
  std::stringstream ss(text);
  bool any = false;
  for (std::string t; std::getline(ss, t, ',');) {
    if (t.empty()) continue;
    const std::string name = t == "fp16" ? "f16" : t;
    const std::vector<Mode> all = OurModes();
    const auto it =
        std::find_if(all.begin(), all.end(), [&](Mode m) { return name == ModeName(m); });
    if (it == all.end()) {
      return InvalidArgument(
          StrCat("--precision=", t, ": expected fp32, fp32x3, tf32, bf16 or f16 (also fp16)"));
    }
    wanted[it - all.begin()] = true;
    any = true;
  }
  if (!any) return InvalidArgument("--precision: no mode given");
  std::vector<Mode> out;
  for (size_t i = 0; i < wanted.size(); ++i)
    if (wanted[i]) out.push_back(OurModes()[i]);
  return out;
}

std::vector<Mode> OurModesFor(DType dtype, const std::vector<Mode>& requested) {
  std::vector<Mode> out;
  for (Mode m : requested) {
    const DType md = Info(m).dtype;
    // 16-bit problems keep their element type; f32 (and f64, which has no mode) take them all.
    const bool fits = dtype == DType::kBF16 || dtype == DType::kF16 ? md == dtype : true;
    if (fits) out.push_back(m);
  }
  return out;
}

std::vector<Mode> CudnnModesFor(const std::vector<Mode>& ours) {
  std::vector<Mode> out;
  for (Mode c : CudnnModes()) {
    bool want = false;
    for (Mode m : ours)
      want = want || Info(m).cudnn_match == c || (c == Mode::kTf32 && ElementBytes(m) == 4);
    if (want) out.push_back(c);
  }
  return out;
}

// ---- Roofline --------------------------------------------------------------------------------

Peaks PeaksFor(const std::string& gpu_name) {
  Peaks p;  // the H200's figures
  if (gpu_name.find("H200") != std::string::npos) return p;
  if (gpu_name.find("H100") != std::string::npos &&
      (gpu_name.find("HBM3") != std::string::npos || gpu_name.find("SXM") != std::string::npos)) {
    p.device = "H100 SXM";
    p.ffma = 51;
    p.tf32 = 378;
    p.half = 756;
    return p;
  }
  p.assumed = true;
  return p;
}

double PeakTflops(const Peaks& peaks, Mode mode) {
  switch (mode) {
    case Mode::kFp32:
      return peaks.ffma;
    case Mode::kTf32:
      return peaks.tf32;
    case Mode::kFp32x3:
      return peaks.tf32 / 3;
    case Mode::kBf16:
    case Mode::kF16:
      return peaks.half;
  }
  return peaks.ffma;
}

double MinBytes(const Problem& p, Mode mode) {
  const double elements = static_cast<double>(p.InputElements()) +
                          static_cast<double>(p.WeightElements()) +
                          static_cast<double>(p.OutputElements());
  return elements * ElementBytes(mode);
}

Floor RooflineFloor(const Problem& p, Mode mode, const Peaks& peaks, double copy_gbps) {
  Floor f;
  f.compute_ms = p.Flops() / (PeakTflops(peaks, mode) * 1e9);
  if (copy_gbps <= 0) return f;
  f.memory_ms = MinBytes(p, mode) / (copy_gbps * 1e6);
  f.ms = std::max(f.compute_ms, f.memory_ms);
  f.bound = f.compute_ms >= f.memory_ms ? "compute" : "memory";
  return f;
}

// ---- Host data -------------------------------------------------------------------------------

void FillUniform(float* out, int64_t n, uint64_t seed, int threads) {
  const uint64_t base = SplitMix64(seed);
  ParallelFor(n, threads, [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      // 24 random bits k give -1 + (2k+1)/2^24: odd multiples of 2^-24, so never zero, and
      // exact in fp32 (and so identical in the fp64 copy the reference reads).
      const uint64_t k = SplitMix64(base ^ static_cast<uint64_t>(i)) >> 40;
      out[i] = static_cast<float>(-1.0 + static_cast<double>(2 * k + 1) * 0x1p-24);
    }
  });
}

ErrorStats Compare(const float* y, const double* ref, int64_t n, int threads) {
  return CompareImpl(y, ref, n, threads, [](float v) { return static_cast<double>(v); });
}

ErrorStats Compare(const uint16_t* y, DType dtype, const double* ref, int64_t n, int threads) {
  if (dtype == DType::kF16) {
    return CompareImpl(y, ref, n, threads,
                       [](uint16_t v) { return static_cast<double>(ref::F16ToFloat(v)); });
  }
  return CompareImpl(y, ref, n, threads,
                     [](uint16_t v) { return static_cast<double>(ref::Bf16ToFloat(v)); });
}

// ---- Derived numbers -------------------------------------------------------------------------

namespace {

const Row* FindRow(const ProblemResult& r, const std::string& impl, Mode mode) {
  for (const Row& row : r.rows)
    if (row.impl == impl && row.mode == mode) return &row;
  return nullptr;
}

// cuDNN's time over ours (or the arbitrated row's, impl) for one pair, or -1 when either side
// has no valid time.
double SpeedUp(const ProblemResult& r, Mode ours, Mode cudnn_mode,
               const std::string& impl = "convt3d") {
  const Row* a = FindRow(r, impl, ours);
  const Row* b = FindRow(r, "cudnn", cudnn_mode);
  if (a == nullptr || b == nullptr || a->ms <= 0 || b->ms <= 0 || !b->ok) return -1;
  return b->ms / a->ms;
}

}  // namespace

void Derive(ProblemResult* result, double copy_gbps, const Peaks& peaks) {
  const Problem& p = result->problem.problem;
  const double flops = p.Flops();
  for (Row& row : result->rows) {
    row.tflops = row.ms > 0 ? flops / row.ms / 1e9 : -1;
    row.ceiling_frac = row.tflops > 0 ? row.tflops / PeakTflops(peaks, row.mode) : -1;
    row.gbps = row.ms > 0 ? MinBytes(p, row.mode) / row.ms / 1e6 : -1;
    row.copy_frac = row.gbps > 0 && copy_gbps > 0 ? row.gbps / copy_gbps : -1;
    row.floor = RooflineFloor(p, row.mode, peaks, copy_gbps);
    row.roofline_frac = row.floor.ms > 0 && row.ms > 0 ? row.floor.ms / row.ms : -1;
    row.cudnn_roofline_frac = -1;
    if (row.impl == "convt3d" || row.impl == "arbitrated") {
      row.speedup_vs_match = SpeedUp(*result, row.mode, Info(row.mode).cudnn_match, row.impl);
      row.speedup_vs_tf32 = SpeedUp(*result, row.mode, Mode::kTf32, row.impl);
      const Row* c = FindRow(*result, "cudnn", Info(row.mode).cudnn_match);
      if (c != nullptr && c->ok && c->ms > 0 && row.floor.ms > 0)
        row.cudnn_roofline_frac = row.floor.ms / c->ms;
    }
  }
}

std::vector<ModeSummary> Summarize(const Report& report, double min_floor_ms) {
  struct Logs {
    ModeSummary s;
    bool seen = false;
    double ours = 0, cudnn = 0, speedup = 0, tf32 = 0;
  };
  std::vector<Logs> acc;
  for (Mode m : OurModes()) {
    Logs l;
    l.s.mode = m;
    l.s.cudnn_mode = Info(m).cudnn_match;
    acc.push_back(l);
  }
  for (const ProblemResult& r : report.problems) {
    for (const Row& row : r.rows) {
      if (row.impl != "convt3d") continue;
      Logs* l = nullptr;
      for (Logs& a : acc)
        if (a.s.mode == row.mode) l = &a;
      if (l == nullptr) continue;
      l->seen = true;
      if (!row.ok || row.roofline_frac <= 0 || row.floor.ms < min_floor_ms) continue;
      ModeSummary& s = l->s;
      ++s.problems;
      l->ours += std::log(row.roofline_frac);
      s.roofline_min =
          s.roofline_min < 0 ? row.roofline_frac : std::min(s.roofline_min, row.roofline_frac);
      if (row.cudnn_roofline_frac > 0 && row.speedup_vs_match > 0) {
        ++s.cudnn_problems;
        l->cudnn += std::log(row.cudnn_roofline_frac);
        l->speedup += std::log(row.speedup_vs_match);
      }
      if (row.speedup_vs_tf32 > 0) {
        ++s.tf32_problems;
        l->tf32 += std::log(row.speedup_vs_tf32);
      }
    }
  }
  std::vector<ModeSummary> out;
  for (Logs& l : acc) {
    if (!l.seen) continue;
    ModeSummary& s = l.s;
    if (s.problems > 0) s.roofline_geomean = std::exp(l.ours / s.problems);
    if (s.cudnn_problems > 0) {
      s.cudnn_roofline_geomean = std::exp(l.cudnn / s.cudnn_problems);
      s.speedup_geomean = std::exp(l.speedup / s.cudnn_problems);
    }
    if (s.tf32_problems > 0) s.speedup_tf32_geomean = std::exp(l.tf32 / s.tf32_problems);
    out.push_back(s);
  }
  return out;
}

// ---- Writers ---------------------------------------------------------------------------------

namespace {

using OJson = nlohmann::ordered_json;

std::string Num(double v, const char* fmt) { return v >= 0 ? StrFormat(fmt, v) : "-"; }

std::string Times(double v) {
  if (v < 0) return "-";
  return StrFormat(v < 10 ? "%.2fx" : v < 100 ? "%.1fx" : "%.0fx", v);
}

std::string ErrNum(double v) {
  if (v < 0) return "-";
  if (std::isinf(v)) return "inf";
  return StrFormat("%.1e", v);
}

// Series of the chart: each of our modes against its matching cuDNN mode and against TF32.
struct Series {
  Mode ours, cudnn;
  std::string label;
};

std::vector<Series> ChartSeries(const Report& report) {
  std::vector<Series> out;
  auto add = [&](Mode ours, Mode cudnn_mode) {
    for (const Series& s : out)
      if (s.ours == ours && s.cudnn == cudnn_mode) return;
    out.push_back(
        {ours, cudnn_mode, StrCat("convt3d ", ModeName(ours), " vs cuDNN ", ModeName(cudnn_mode))});
  };
  for (const ProblemResult& r : report.problems) {
    for (const Row& row : r.rows) {
      if (row.impl != "convt3d") continue;
      add(row.mode, Info(row.mode).cudnn_match);
      add(row.mode, Mode::kTf32);
    }
  }
  return out;
}

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string CsvNum(double v) {
  if (v < 0) return "";
  if (std::isinf(v)) return "inf";
  return StrFormat("%.6g", v);
}

void JsonNum(OJson* j, const char* key, double v) {
  (*j)[key] = v >= 0 && std::isfinite(v) ? OJson(v) : OJson(nullptr);
}

}  // namespace

namespace {

std::string Pct(double v) {
  if (v < 0 || !std::isfinite(v)) return "-";
  return StrFormat(v < 0.1 ? "%.1f%%" : "%.0f%%", 100 * v);
}

std::string PeaksText(const Report& report) {
  const Peaks& p = report.peaks;
  std::string s = StrFormat("%s table: FFMA %g, TF32 %g, 3xTF32 %g, BF16/FP16 %g TFLOP/s",
                            p.device.c_str(), p.ffma, p.tf32, p.tf32 / 3, p.half);
  if (p.assumed) {
    s += StrCat(" (GPU \"", report.gpu.empty() ? "?" : report.gpu,
                "\" is not in the table: the H200's figures are assumed)");
  }
  return s;
}

}  // namespace

std::string ToText(const Report& report) {
  TextTable table(
      {"problem", "impl", "mode", "ms", "TFLOP/s", "ceiling", "GB/s", "floor ms", "bound",
       "roofline", "cuDNN roofline", "vs cuDNN", "vs cuDNN tf32", "rel_l2", "max_abs", "detail"},
      "lllrrrrrlrrrrrrl");
  for (const ProblemResult& r : report.problems) {
    if (!r.error.empty())
      table.Add({r.problem.name, "-", "-", "", "", "", "", "", "", "", "", "", "", "", "",
                 "error: " + r.error});
    for (const Row& row : r.rows) {
      const std::string ceiling =
          row.ceiling_frac >= 0
              ? StrFormat("%.1f%% %s", 100 * row.ceiling_frac, Info(row.mode).ceiling_name)
              : "-";
      std::string detail = row.detail;
      if (!row.error.empty())
        detail += (detail.empty() ? "" : "; ") + std::string("error: ") + row.error.substr(0, 160);
      std::string gbps = Num(row.gbps, "%.0f");
      if (row.copy_frac >= 0) gbps += StrFormat(" (%.0f%%)", 100 * row.copy_frac);
      table.Add({r.problem.name, row.impl, ModeName(row.mode), Num(row.ms, "%.3f"),
                 Num(row.tflops, "%.2f"), ceiling, gbps, Num(row.floor.ms, "%.4f"),
                 row.floor.ms >= 0 ? row.floor.bound : "-", Pct(row.roofline_frac),
                 Pct(row.cudnn_roofline_frac), Times(row.speedup_vs_match),
                 Times(row.speedup_vs_tf32), ErrNum(row.err.rel_l2), ErrNum(row.err.max_abs),
                 detail});
    }
  }
  std::ostringstream os;
  os << table.ToString();
  os << "\nms: median of " << report.repeats << " runs after " << report.warmup
     << " warm-ups, L2 flushed before each (rt::TimeIt, CUDA events).\n"
     << "ceiling: TFLOP/s over the mode's peak (" << PeaksText(report) << ").\n"
     << "GB/s: input + weight + output bytes (2 per element in bf16/f16 rows, else 4) per "
        "second; (%): of this device's copy bandwidth, "
     << (report.copy_gbps > 0 ? StrFormat("%.0f GB/s", report.copy_gbps)
                              : std::string("not measured"))
     << " (device-to-device copy of "
     << (report.copy_bytes > 0 ? StrFormat("%.0f MiB", report.copy_bytes / 1048576.0)
                               : std::string("-"))
     << ", read + write).\n"
     << "floor ms: max(FLOPs / the mode's peak, those bytes / the copy bandwidth), FLOPs = 2 x "
        "N x C_in x in_D x in_H x in_W x C_out/groups x kD x kH x kW; bound: the larger term.\n"
     << "roofline: floor / this row's ms; cuDNN roofline: the same floor / the ms of cuDNN's "
        "matching row.\n"
     << "vs cuDNN: cuDNN ms / convt3d ms in the matching mode (fp32 and fp32x3: strict, FMA "
        "math); vs cuDNN tf32: against PyTorch's default.\n"
     << "rel_l2, max_abs: against our fp64 kernel on the same inputs (bf16/f16 rows include the "
        "rounding of the inputs to 16 bits).\n"
     << "impl convt3d: our kernels alone; arbitrated (--arbitration): the plan tuned with cuDNN's "
        "algorithms among the candidates (detail: the winner).\n";
  if (report.fp32x3_fp16)
    os << "fp32x3: with the 3xFP16 opt-in (--fp32x3-fp16): its tiles among the candidates.\n";
  if (!report.cudnn_error.empty()) os << "cuDNN: not available (" << report.cudnn_error << ")\n";

  const std::vector<ModeSummary> summary = Summarize(report);
  if (!summary.empty()) {
    TextTable geo({"mode", "problems", "roofline", "min", "cuDNN mode", "with cuDNN",
                   "cuDNN roofline", "vs cuDNN", "vs cuDNN tf32"},
                  "lrrrlrrrr");
    for (const ModeSummary& m : summary) {
      geo.Add({ModeName(m.mode), StrCat(m.problems), Pct(m.roofline_geomean), Pct(m.roofline_min),
               ModeName(m.cudnn_mode), StrCat(m.cudnn_problems), Pct(m.cudnn_roofline_geomean),
               Times(m.speedup_geomean),
               m.tf32_problems > 0 ? Times(m.speedup_tf32_geomean) : std::string("-")});
    }
    os << "\nRoofline geomeans per mode over the problems whose floor is at least "
       << StrFormat("%g", kGeomeanMinFloorMs * 1000) << " us and whose row of ours is right:\n"
       << geo.ToString()
       << "roofline, min: geomean and minimum of ours; with cuDNN: those of the problems where "
          "cuDNN's matching row has a time, over which cuDNN roofline (geomean) and vs cuDNN "
          "(geomean of cuDNN ms / our ms) are taken; vs cuDNN tf32 likewise against cuDNN's "
          "TF32 row.\n";
  }
  return os.str();
}

std::string ToJson(const Report& report) {
  OJson j;
  j["tool"] = "convt3d bench";
  j["version"] = report.version;
  j["date"] = report.date;
  OJson env;
  env["gpu"] = report.gpu;
  env["arch"] = report.arch;
  env["cache"] = report.cache_path;
  env["fp32x3_fp16"] = report.fp32x3_fp16;
  OJson cudnn_json;
  if (report.cudnn_error.empty()) {
    cudnn_json["version"] = report.cudnn_version;
    cudnn_json["path"] = report.cudnn_path;
  } else {
    cudnn_json["error"] = report.cudnn_error;
  }
  env["cudnn"] = cudnn_json;
  j["environment"] = env;
  j["protocol"] = {{"timer", "rt::TimeIt: CUDA events on the null stream"},
                   {"warmup", report.warmup},
                   {"repeats", report.repeats},
                   {"statistic", "median"},
                   {"l2_flush_bytes", report.l2_flush_bytes},
                   {"copy_gbps", report.copy_gbps > 0 ? OJson(report.copy_gbps) : OJson(nullptr)},
                   {"copy_bytes", report.copy_bytes},
                   {"cudnn_algorithm",
                    "fastest successful of cudnnFindConvolutionBackwardData"
                    "AlgorithmEx"},
                   {"reference", "convt3d fp64 kernel on the same inputs"}};
  OJson ceilings = OJson::object();
  for (Mode m : OurModes()) ceilings[ModeName(m)] = PeakTflops(report.peaks, m);
  j["ceilings_tflops"] = ceilings;
  j["ceilings_source"] = PeaksText(report);
  OJson roofline;
  roofline["floor"] =
      "max(flop / the mode's ceiling, (input + weight + output bytes in the mode's element size) "
      "/ copy_gbps)";
  roofline["flop"] = "2 x N x C_in x in_D x in_H x in_W x C_out/groups x kD x kH x kW";
  roofline["peaks_device"] = report.peaks.device;
  roofline["peaks_assumed"] = report.peaks.assumed;
  roofline["geomean_min_floor_ms"] = kGeomeanMinFloorMs;
  OJson geomeans = OJson::array();
  for (const ModeSummary& m : Summarize(report)) {
    OJson g;
    g["mode"] = ModeName(m.mode);
    g["problems"] = m.problems;
    JsonNum(&g, "roofline_geomean", m.roofline_geomean);
    JsonNum(&g, "roofline_min", m.roofline_min);
    g["cudnn_mode"] = ModeName(m.cudnn_mode);
    g["cudnn_problems"] = m.cudnn_problems;
    JsonNum(&g, "cudnn_roofline_geomean", m.cudnn_roofline_geomean);
    JsonNum(&g, "speedup_vs_cudnn_match_geomean", m.speedup_geomean);
    g["tf32_problems"] = m.tf32_problems;
    JsonNum(&g, "speedup_vs_cudnn_tf32_geomean", m.speedup_tf32_geomean);
    geomeans.push_back(std::move(g));
  }
  roofline["geomeans"] = std::move(geomeans);
  j["roofline"] = std::move(roofline);
  OJson problems = OJson::array();
  for (const ProblemResult& r : report.problems) {
    OJson p;
    p["name"] = r.problem.name;
    p["signature"] = r.problem.problem.Signature();
    p["gflop"] = r.problem.problem.Flops() / 1e9;
    p["problem"] = OJson::parse(io::ToJson(r.problem), nullptr, /*allow_exceptions=*/false);
    if (!r.error.empty()) p["error"] = r.error;
    OJson rows = OJson::array();
    for (const Row& row : r.rows) {
      OJson o;
      o["impl"] = row.impl;
      o["mode"] = ModeName(row.mode);
      o["ok"] = row.ok;
      if (!row.error.empty()) o["error"] = row.error;
      o["detail"] = row.detail;
      JsonNum(&o, "ms", row.ms);
      JsonNum(&o, "min_ms", row.min_ms);
      JsonNum(&o, "p20_ms", row.p20_ms);
      JsonNum(&o, "p80_ms", row.p80_ms);
      o["repeats"] = row.repeats;
      JsonNum(&o, "tflops", row.tflops);
      o["ceiling"] = Info(row.mode).ceiling_name;
      JsonNum(&o, "ceiling_frac", row.ceiling_frac);
      JsonNum(&o, "gbps", row.gbps);
      JsonNum(&o, "copy_frac", row.copy_frac);
      JsonNum(&o, "floor_ms", row.floor.ms);
      o["bound"] = row.floor.ms >= 0 ? OJson(row.floor.bound) : OJson(nullptr);
      JsonNum(&o, "roofline_frac", row.roofline_frac);
      if (row.impl == "convt3d" || row.impl == "arbitrated") {
        JsonNum(&o, "cudnn_roofline_frac", row.cudnn_roofline_frac);
        o["match_mode"] = ModeName(Info(row.mode).cudnn_match);
        JsonNum(&o, "speedup_vs_cudnn_match", row.speedup_vs_match);
        JsonNum(&o, "speedup_vs_cudnn_tf32", row.speedup_vs_tf32);
      }
      JsonNum(&o, "rel_l2", row.err.rel_l2);
      JsonNum(&o, "max_abs", row.err.max_abs);
      o["nonfinite"] = row.err.nonfinite;
      if (row.impl == "cudnn") o["workspace_bytes"] = row.workspace_bytes;
      if (!row.log.empty()) o["log"] = row.log;
      rows.push_back(std::move(o));
    }
    p["rows"] = std::move(rows);
    problems.push_back(std::move(p));
  }
  j["problems"] = std::move(problems);
  return j.dump(2) + "\n";
}

std::string ToCsv(const Report& report) {
  std::ostringstream os;
  os << "problem,impl,mode,ok,ms,min_ms,p20_ms,p80_ms,repeats,tflops,ceiling,ceiling_frac,"
        "gbps,copy_frac,floor_ms,bound,roofline_frac,cudnn_roofline_frac,match_mode,"
        "speedup_vs_cudnn_match,speedup_vs_cudnn_tf32,rel_l2,max_abs,nonfinite,"
        "workspace_bytes,detail,error\n";
  for (const ProblemResult& r : report.problems) {
    for (const Row& row : r.rows) {
      const bool ours = row.impl == "convt3d" || row.impl == "arbitrated";
      os << CsvField(r.problem.name) << "," << row.impl << "," << ModeName(row.mode) << ","
         << (row.ok ? "1" : "0") << "," << CsvNum(row.ms) << "," << CsvNum(row.min_ms) << ","
         << CsvNum(row.p20_ms) << "," << CsvNum(row.p80_ms) << "," << row.repeats << ","
         << CsvNum(row.tflops) << "," << Info(row.mode).ceiling_name << ","
         << CsvNum(row.ceiling_frac) << "," << CsvNum(row.gbps) << "," << CsvNum(row.copy_frac)
         << "," << CsvNum(row.floor.ms) << "," << (row.floor.ms >= 0 ? row.floor.bound : "") << ","
         << CsvNum(row.roofline_frac) << "," << CsvNum(row.cudnn_roofline_frac) << ","
         << (ours ? ModeName(Info(row.mode).cudnn_match) : "") << ","
         << CsvNum(row.speedup_vs_match) << "," << CsvNum(row.speedup_vs_tf32) << ","
         << CsvNum(row.err.rel_l2) << "," << CsvNum(row.err.max_abs) << "," << row.err.nonfinite
         << "," << row.workspace_bytes << "," << CsvField(row.detail) << "," << CsvField(row.error)
         << "\n";
    }
  }
  return os.str();
}

std::string ToSvg(const Report& report) {
  const std::vector<Series> series = ChartSeries(report);
  const size_t groups = report.problems.size();
  const size_t ns = std::max<size_t>(series.size(), 1);
  // values[g][s]: the speed-up, or -1 when there is none to draw.
  std::vector<std::vector<double>> values(groups, std::vector<double>(ns, -1));
  double lo_v = 1, hi_v = 1;
  for (size_t g = 0; g < groups; ++g) {
    for (size_t s = 0; s < series.size(); ++s) {
      const double v = SpeedUp(report.problems[g], series[s].ours, series[s].cudnn);
      values[g][s] = v;
      if (v > 0) lo_v = std::min(lo_v, v), hi_v = std::max(hi_v, v);
    }
  }
  // Whole decades around every value and 1x, with room for the labels.
  const double lo = std::pow(10.0, std::floor(std::log10(lo_v * 0.8)));
  const double hi = std::pow(10.0, std::ceil(std::log10(hi_v * 1.25)));

  const double bar_w = 34, gap = 30, left = 78, right = 24, top = 84, plot_h = 320, bottom = 48;
  const double group_w = ns * bar_w + gap;
  const double plot_w = std::max(groups * group_w, 560.0);
  const double width = left + plot_w + right, height = top + plot_h + bottom;
  auto y_of = [&](double v) {
    return top + plot_h * (std::log(hi) - std::log(v)) / (std::log(hi) - std::log(lo));
  };
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};

  std::ostringstream os;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << StrFormat(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" "
            "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"Helvetica, Arial, "
            "sans-serif\">\n",
            width, height, width, height)
     << StrFormat("<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", width,
                  height)
     << StrFormat("<text x=\"%.0f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", left)
     << "convt3d speed-up over cuDNN</text>\n"
     << StrFormat("<text x=\"%.0f\" y=\"40\" font-size=\"11\" fill=\"#555\">", left)
     << XmlEscape(StrCat(
            "cuDNN ms / convt3d ms (above 1x convt3d is faster); ",
            report.gpu.empty() ? "GPU ?" : report.gpu, ", ",
            report.cudnn_error.empty() ? "cuDNN " + report.cudnn_version : std::string("no cuDNN"),
            ", median of ", report.repeats, " runs, ", report.date))
     << "</text>\n";
  // Legend.
  double lx = left;
  for (size_t s = 0; s < series.size(); ++s) {
    os << StrFormat(
              "<rect x=\"%.0f\" y=\"52\" width=\"12\" height=\"12\" fill=\"%s\"/>"
              "<text x=\"%.0f\" y=\"62\" font-size=\"11\">",
              lx, kColors[s % 6], lx + 16)
       << XmlEscape(series[s].label) << "</text>\n";
    lx += 24 + 6.2 * series[s].label.size();
  }
  if (series.empty() || !report.cudnn_error.empty()) {
    os << StrFormat("<text x=\"%.0f\" y=\"62\" font-size=\"11\" fill=\"#a00\">", lx)
       << "no cuDNN rows: nothing to compare</text>\n";
  }
  // Grid and axis labels at 1, 2 and 5 times every decade.
  for (double d = lo; d <= hi * 1.0001; d *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = d * m;
      if (v > hi * 1.0001) break;
      const double y = y_of(v);
      os << StrFormat(
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"1\"/>\n",
                left, y, left + plot_w, y, m == 1.0 ? "#bbb" : "#e5e5e5")
         << StrFormat(
                "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%gx</text>\n",
                left - 6, y + 4, v);
    }
  }
  os << StrFormat(
      "<text x=\"16\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" "
      "transform=\"rotate(-90 16 %.1f)\">speed-up (log scale)</text>\n",
      top + plot_h / 2, top + plot_h / 2);
  os << StrFormat(
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\" "
      "stroke-width=\"1\"/>\n",
      left, top, left, top + plot_h);
  // Bars grow from the 1x line: up when convt3d is faster, down when it is slower.
  const double y1 = y_of(1);
  for (size_t g = 0; g < groups; ++g) {
    const std::string& name = report.problems[g].problem.name;
    const double gx = left + g * group_w + gap / 2;
    for (size_t s = 0; s < series.size(); ++s) {
      const double x = gx + s * bar_w;
      const double v = values[g][s];
      if (v <= 0) {
        os << StrFormat(
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#888\" "
            "text-anchor=\"middle\">n/a</text>\n",
            x + bar_w / 2, y1 - 4);
        continue;
      }
      const double yv = y_of(v);
      os << StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">",
                      x + 2, std::min(yv, y1), bar_w - 4, std::max(std::fabs(yv - y1), 1.0),
                      kColors[s % 6])
         << "<title>" << XmlEscape(StrCat(name, ": ", series[s].label, " = ", Times(v)))
         << "</title></rect>\n"
         << StrFormat("<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">",
                      x + bar_w / 2, v >= 1 ? yv - 4 : yv + 12)
         << Times(v) << "</text>\n";
    }
    os << StrFormat("<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">",
                    gx + ns * bar_w / 2, top + plot_h + 20)
       << XmlEscape(name) << "</text>\n";
  }
  os << StrFormat(
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" "
      "stroke-width=\"1.5\" stroke-dasharray=\"6 3\"/>\n",
      left, y1, left + plot_w, y1);
  os << "</svg>\n";
  return os.str();
}

// ---- Problem lists ---------------------------------------------------------------------------

StatusOr<std::vector<io::NamedProblem>> LoadProblemLists(const std::vector<std::string>& files,
                                                         const std::string& only) {
  std::vector<io::NamedProblem> all;
  std::map<std::string, std::string> where;  // name -> the file that listed it first
  for (const std::string& file : files) {
    CONVT3D_ASSIGN_OR_RETURN(std::vector<io::NamedProblem> listed, io::LoadProblems(file));
    for (io::NamedProblem& np : listed) {
      const auto same = std::find_if(all.begin(), all.end(),
                                     [&](const io::NamedProblem& a) { return a.name == np.name; });
      if (same == all.end()) {
        where[np.name] = file;
        all.push_back(std::move(np));
      } else if (same->problem.Signature() != np.problem.Signature()) {
        return InvalidArgument(StrCat("problem \"", np.name, "\" of ", file,
                                      " differs from the one of that name in ", where[np.name]));
      }
    }
  }
  if (only.empty()) return all;
  std::vector<std::string> names;
  std::stringstream ss(only);
  for (std::string n; std::getline(ss, n, ',');)
    if (!n.empty()) names.push_back(n);
  for (const std::string& n : names) {
    if (where.count(n) == 0) return InvalidArgument("--only: no problem named \"" + n + "\"");
  }
  std::vector<io::NamedProblem> kept;
  for (io::NamedProblem& np : all)
    if (std::find(names.begin(), names.end(), np.name) != names.end())
      kept.push_back(std::move(np));
  return kept;
}

// ---- The run ---------------------------------------------------------------------------------

namespace {

// Everything one problem shares across its rows: host inputs, the reference, device buffers.
struct Workspace {
  Problem p;  // dtype f32: the shape every mode computes
  int64_t nx = 0, nw = 0, nb = 0, ny = 0;
  std::vector<float> hx, hw, hb;
  std::vector<double> ref;      // empty when the reference failed
  rt::DeviceBuffer x, w, b, y;  // fp32, made on first use
  // The 16-bit copies of one element type, made on first use.
  struct Half {
    rt::DeviceBuffer x, w, b, y;
  };
  Half bf16, f16;
  std::vector<float> host_y;
  std::vector<uint16_t> host_y16;
};

struct Shared {
  const Options* o = nullptr;
  Engine* engine = nullptr;      // our kernels alone
  Engine* arb_engine = nullptr;  // with cuDNN arbitration (--arbitration)
  Engine* ref_engine = nullptr;
  std::shared_ptr<cudnn::Handle> handle;
  size_t flush = 0;
};

template <typename T>
StatusOr<rt::DeviceBuffer> UploadNew(const std::vector<T>& host) {
  CONVT3D_ASSIGN_OR_RETURN(rt::DeviceBuffer d, rt::DeviceBuffer::Alloc(host.size() * sizeof(T)));
  if (!host.empty()) CONVT3D_RETURN_IF_ERROR(d.Upload(host.data(), host.size() * sizeof(T)));
  return d;
}

// y of our fp64 kernel (Engine policy kNever: the direct fp64 configuration) on the fp32 inputs
// widened to double, which is exact.
Status Reference(const Shared& s, Workspace* ws) {
  Problem p64 = ws->p;
  p64.dtype = DType::kF64;
  CONVT3D_ASSIGN_OR_RETURN(convt3d::Plan plan, s.ref_engine->Plan(p64));
  auto widen = [&](const std::vector<float>& h) -> StatusOr<rt::DeviceBuffer> {
    std::vector<double> d(h.size());
    ParallelFor(static_cast<int64_t>(h.size()), s.o->threads, [&](int, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) d[i] = h[i];
    });
    return UploadNew(d);
  };
  CONVT3D_ASSIGN_OR_RETURN(rt::DeviceBuffer x64, widen(ws->hx));
  CONVT3D_ASSIGN_OR_RETURN(rt::DeviceBuffer w64, widen(ws->hw));
  CONVT3D_ASSIGN_OR_RETURN(rt::DeviceBuffer b64, widen(ws->hb));
  CONVT3D_ASSIGN_OR_RETURN(rt::DeviceBuffer y64, rt::DeviceBuffer::Alloc(ws->ny * 8));
  CONVT3D_RETURN_IF_ERROR(
      plan.Run(x64.get(), w64.get(), ws->p.bias ? b64.get() : nullptr, y64.get(), nullptr));
  CONVT3D_RETURN_IF_ERROR(rt::Synchronize());
  ws->ref.resize(ws->ny);
  return y64.Download(ws->ref.data(), ws->ny * 8);
}

// Poisons y with NaN (all-ones bytes), runs once, downloads and compares: a kernel that leaves
// any element unwritten shows as non-finite.
// y holds elements of `dtype` (kF32, kBF16 or kF16).
Status CheckOnce(const std::function<Status()>& launch, DType dtype, rt::DeviceBuffer* y,
                 Workspace* ws, int threads, ErrorStats* err) {
  CONVT3D_RETURN_IF_ERROR(y->FillBytes(0xff));
  CONVT3D_RETURN_IF_ERROR(launch());
  CONVT3D_RETURN_IF_ERROR(rt::Synchronize());
  if (dtype == DType::kF32) {
    ws->host_y.resize(ws->ny);
    CONVT3D_RETURN_IF_ERROR(y->Download(ws->host_y.data(), ws->ny * 4));
    if (!ws->ref.empty()) *err = Compare(ws->host_y.data(), ws->ref.data(), ws->ny, threads);
  } else {
    ws->host_y16.resize(ws->ny);
    CONVT3D_RETURN_IF_ERROR(y->Download(ws->host_y16.data(), ws->ny * 2));
    if (!ws->ref.empty())
      *err = Compare(ws->host_y16.data(), dtype, ws->ref.data(), ws->ny, threads);
  }
  return Status();
}

void SetTiming(const rt::Timing& t, Row* row) {
  row->ms = t.median_ms;
  row->min_ms = t.min_ms;
  row->p20_ms = t.p20_ms;
  row->p80_ms = t.p80_ms;
  row->repeats = t.repeats;
}

// The fp32 inputs and an fp32 output on the device, made on first use and shared by every fp32
// row (a bf16 or f16 problem never needs them).
Status EnsureF32(Workspace* ws) {
  if (ws->y.size() != 0) return Status();
  CONVT3D_ASSIGN_OR_RETURN(ws->x, UploadNew(ws->hx));
  CONVT3D_ASSIGN_OR_RETURN(ws->w, UploadNew(ws->hw));
  CONVT3D_ASSIGN_OR_RETURN(ws->b, UploadNew(ws->hb));
  CONVT3D_ASSIGN_OR_RETURN(ws->y, rt::DeviceBuffer::Alloc(ws->ny * 4));
  return Status();
}

// The 16-bit copies of the inputs in `dtype` (kBF16 or kF16; rounded to nearest even as torch's
// .to() does) and a 16-bit output, made on first use and shared by our row and cuDNN's.
StatusOr<Workspace::Half*> EnsureHalf(const Shared& s, Workspace* ws, DType dtype) {
  Workspace::Half* h = dtype == DType::kF16 ? &ws->f16 : &ws->bf16;
  if (h->y.size() != 0) return h;
  auto convert = [&](const std::vector<float>& in) {
    std::vector<uint16_t> out(in.size());
    ParallelFor(static_cast<int64_t>(in.size()), s.o->threads, [&](int, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        out[i] = dtype == DType::kF16 ? ref::FloatToF16(in[i]) : ref::FloatToBf16(in[i]);
    });
    return out;
  };
  CONVT3D_ASSIGN_OR_RETURN(h->x, UploadNew(convert(ws->hx)));
  CONVT3D_ASSIGN_OR_RETURN(h->w, UploadNew(convert(ws->hw)));
  CONVT3D_ASSIGN_OR_RETURN(h->b, UploadNew(convert(ws->hb)));
  CONVT3D_ASSIGN_OR_RETURN(h->y, rt::DeviceBuffer::Alloc(ws->ny * 2));
  return h;
}

// The device tensors of mode m: x, w, bias (null without one) and y.
struct Tensors {
  const void *x = nullptr, *w = nullptr, *b = nullptr;
  rt::DeviceBuffer* y = nullptr;
};
StatusOr<Tensors> TensorsFor(const Shared& s, Workspace* ws, Mode m) {
  Tensors t;
  const DType dtype = Info(m).dtype;
  if (dtype == DType::kF32) {
    CONVT3D_RETURN_IF_ERROR(EnsureF32(ws));
    t = {ws->x.get(), ws->w.get(), ws->b.get(), &ws->y};
  } else {
    CONVT3D_ASSIGN_OR_RETURN(Workspace::Half * h, EnsureHalf(s, ws, dtype));
    t = {h->x.get(), h->w.get(), h->b.get(), &h->y};
  }
  if (!ws->p.bias) t.b = nullptr;
  return t;
}

Status RunOursInto(const Shared& s, Workspace* ws, Row* row) {
  // The one place a new precision of ours is wired in: its Problem (the tensors follow
  // Info(mode).dtype).
  Problem p = ws->p;
  p.dtype = Info(row->mode).dtype;
  switch (row->mode) {
    case Mode::kFp32:
      p.precision = Precision::kFp32;
      break;
    case Mode::kFp32x3:
      p.precision = Precision::kFp32x3;
      break;
    case Mode::kTf32:
      p.precision = Precision::kTf32;
      break;
    case Mode::kBf16:
    case Mode::kF16:
      p.precision = Precision::kFp32;  // 16-bit compute is chosen by the dtype
      break;
  }
  CONVT3D_ASSIGN_OR_RETURN(const Tensors t, TensorsFor(s, ws, row->mode));
  Engine* engine = row->impl == "arbitrated" ? s.arb_engine : s.engine;
  if (engine == nullptr) return FailedPrecondition("no engine with cuDNN arbitration");
  CONVT3D_ASSIGN_OR_RETURN(convt3d::Plan plan, engine->Plan(p));
  row->detail = StrCat(plan.kernel_name(), " (", plan.source(), ")");
  row->log = {StrCat("tuner: ", plan.tuned_ms() >= 0 ? StrFormat("%.4f ms", plan.tuned_ms()) : "-",
                     ", rel_err ", ErrNum(plan.rel_err()))};
  auto launch = [&]() { return plan.Run(t.x, t.w, t.b, t.y->get(), nullptr); };
  CONVT3D_RETURN_IF_ERROR(CheckOnce(launch, p.dtype, t.y, ws, s.o->threads, &row->err));
  CONVT3D_ASSIGN_OR_RETURN(const rt::Timing t_run,
                           rt::TimeIt(launch, s.o->warmup, s.o->repeats, s.flush));
  SetTiming(t_run, row);
  return Status();
}

Status RunCudnnInto(const Shared& s, Workspace* ws, Row* row) {
  cudnn::Precision prec = cudnn::Precision::kFp32;
  switch (row->mode) {
    case Mode::kTf32:
      prec = cudnn::Precision::kTf32;
      break;
    case Mode::kFp32:
      prec = cudnn::Precision::kFp32;
      break;
    case Mode::kBf16:
      prec = cudnn::Precision::kBf16;
      break;
    case Mode::kF16:
      prec = cudnn::Precision::kF16;
      break;
    case Mode::kFp32x3:
      return Status(Code::kNotFound, "cuDNN has no fp32x3 mode");
  }
  CONVT3D_ASSIGN_OR_RETURN(const Tensors t, TensorsFor(s, ws, row->mode));
  CONVT3D_ASSIGN_OR_RETURN(auto conv, cudnn::BackwardData::Create(s.handle, ws->p, prec));
  CONVT3D_RETURN_IF_ERROR(conv->Search(t.w, t.x, t.y->get()));
  row->workspace_bytes = conv->workspace_bytes();
  row->log = conv->search_log();
  row->detail = StrCat(conv->algo_name(), ", ", conv->math_name(), ", workspace ",
                       StrFormat("%.1f", conv->workspace_bytes() / 1048576.0), " MiB");
  auto launch = [&]() { return conv->Run(t.w, t.x, t.b, t.y->get()); };
  CONVT3D_RETURN_IF_ERROR(
      CheckOnce(launch, Info(row->mode).dtype, t.y, ws, s.o->threads, &row->err));
  CONVT3D_ASSIGN_OR_RETURN(const rt::Timing t_run,
                           rt::TimeIt(launch, s.o->warmup, s.o->repeats, s.flush));
  SetTiming(t_run, row);
  return Status();
}

std::string RowLine(const Row& row) {
  if (!row.error.empty() && row.ms < 0) return "failed: " + row.error;
  return StrCat(StrFormat("%.3f ms", row.ms), ", rel_l2 ", ErrNum(row.err.rel_l2), " (", row.detail,
                ")", row.error.empty() ? "" : "; " + row.error);
}

// One row of `impl` ("convt3d" or "cudnn") in mode m, between two progress lines. A row of ours
// is wrong above its mode's tolerance (when there is a reference to compare with).
Row RunRow(const Shared& s, Workspace* ws, const std::string& tag, const char* impl, Mode m) {
  Row row;
  row.impl = impl;
  row.mode = m;
  const bool ours = row.impl != "cudnn";
  const std::string what =
      StrCat(tag, row.impl == "cudnn" ? " cuDNN " : StrCat(" ", row.impl, " "), ModeName(m));
  std::cerr << what << (ours ? " (plan: cache or tune) ..." : " (search) ...") << std::endl;
  const Status st = ours ? RunOursInto(s, ws, &row) : RunCudnnInto(s, ws, &row);
  row.ok = st.ok();
  if (!st.ok()) row.error = st.ToString();
  const double tol = Info(m).tolerance;
  if (ours && row.ok && !ws->ref.empty() && !(row.err.rel_l2 <= tol)) {
    row.ok = false;
    row.error = StrCat("wrong: rel_l2 ", ErrNum(row.err.rel_l2), " above the ", ModeName(m),
                       " tolerance ", tol);
  }
  std::cerr << what << ": " << RowLine(row) << std::endl;
  return row;
}

// One problem in OurModesFor(its dtype, the requested modes) and the matching cuDNN modes.
ProblemResult RunProblem(const Shared& s, const io::NamedProblem& np, const std::string& tag) {
  ProblemResult res;
  res.problem = np;  // with its own dtype, as listed
  const std::vector<Mode> ours = OurModesFor(np.problem.dtype, s.o->modes);
  Workspace ws;
  ws.p = np.problem;  // the shape every mode computes; each mode sets its own types
  ws.p.dtype = DType::kF32;
  ws.p.precision = Precision::kFp32;
  ws.nx = ws.p.InputElements();
  ws.nw = ws.p.WeightElements();
  ws.nb = ws.p.bias ? ws.p.c_out : 0;
  ws.ny = ws.p.OutputElements();
  // Fixed seeds: every run (and every implementation) sees the same inputs for a shape.
  ws.hx.resize(ws.nx);
  ws.hw.resize(ws.nw);
  ws.hb.resize(ws.nb);
  FillUniform(ws.hx.data(), ws.nx, 0xc0417d01, s.o->threads);
  FillUniform(ws.hw.data(), ws.nw, 0xc0417d02, s.o->threads);
  FillUniform(ws.hb.data(), ws.nb, 0xc0417d03, s.o->threads);

  std::cerr << tag << " fp64 reference ..." << std::endl;
  Status st = Reference(s, &ws);
  if (!st.ok()) {
    ws.ref.clear();
    res.error = "fp64 reference: " + st.ToString();
    Error(np.name + ": " + res.error + " (rows have no error figures)");
  }
  for (Mode m : ours) res.rows.push_back(RunRow(s, &ws, tag, "convt3d", m));
  if (s.arb_engine != nullptr)
    for (Mode m : ours) res.rows.push_back(RunRow(s, &ws, tag, "arbitrated", m));
  if (s.handle) {
    for (Mode m : CudnnModesFor(ours)) res.rows.push_back(RunRow(s, &ws, tag, "cudnn", m));
  }
  return res;
}

bool WriteText(const std::string& path, const std::string& text) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  return static_cast<bool>(f);
}

}  // namespace

int Run(const std::vector<io::NamedProblem>& problems, const Options& o) {
  Report report;
  report.version = Version();
  report.date = NowUtc();
  report.warmup = o.warmup;
  report.repeats = o.repeats;
  report.fp32x3_fp16 = tuner::Fp16SplitOptIn(o.fp32x3_fp16);  // as the engines resolve it

  // cuDNN is looked for first: finding it needs no GPU, so its line shows on every machine.
  std::shared_ptr<const cudnn::Library> library;
  if (auto lib = cudnn::Library::Load(); lib.ok()) {
    library = *lib;
    report.cudnn_version = library->VersionString();
    report.cudnn_path = library->path();
    std::cerr << "cuDNN " << report.cudnn_version << ": " << report.cudnn_path << std::endl;
  } else {
    report.cudnn_error = lib.status().message();
    Error("cuDNN not available (" + report.cudnn_error + "); timing convt3d alone");
  }

  const Environment env = DescribeEnvironment(o.device);
  if (!env.driver_error.empty()) {
    Error("no usable GPU (" + env.driver_error + "); bench needs one");
    return 2;
  }
  report.gpu = env.gpu_name;
  report.arch = env.arch;
  report.peaks = PeaksFor(report.gpu);
  std::cerr << "convt3d bench: roofline peaks: " << PeaksText(report) << std::endl;

  auto context = rt::Context::Create(o.device);
  if (!context.ok()) {
    Error("cannot use device " + std::to_string(o.device) + ": " + context.status().ToString());
    return 1;
  }
  Options copy = o;
  Shared s;
  s.o = &copy;
  copy.threads = Threads(o.threads);
  convt3d::Options eo;
  eo.policy = TunePolicy::kTuneIfMissing;
  eo.cache_path = o.cache_path;
  eo.device = o.device;
  eo.verbose = true;
  eo.vendor_candidates = false;  // the convt3d rows: our kernels alone
  eo.fp32x3_fp16 = o.fp32x3_fp16;
  auto engine = Engine::Create(eo);
  std::optional<StatusOr<Engine>> arb_engine;
  if (o.arbitration) {
    convt3d::Options ao = eo;
    ao.vendor_candidates = true;
    arb_engine.emplace(Engine::Create(ao));
    if (!arb_engine->ok()) {
      Error("cannot start the arbitrating engine: " + arb_engine->status().ToString());
      return 1;
    }
    if (!library) Error("--arbitration without cuDNN: the arbitrated rows are ours alone");
  }
  convt3d::Options ro;
  ro.policy = TunePolicy::kNever;  // the heuristic pick of an fp64 problem: the direct kernel
  ro.cache_path = ":memory:";
  ro.device = o.device;
  auto ref_engine = Engine::Create(ro);
  if (!engine.ok() || !ref_engine.ok()) {
    Error("cannot start the engine: " +
          (engine.ok() ? ref_engine.status() : engine.status()).ToString());
    return 1;
  }
  s.engine = &*engine;
  s.ref_engine = &*ref_engine;
  if (arb_engine) s.arb_engine = &**arb_engine;
  report.cache_path = engine->cache_path();
  const Status active = (*context)->Activate();
  if (!active.ok()) {
    Error("cannot activate device " + std::to_string(o.device) + ": " + active.ToString());
    return 1;
  }
  if (library) {
    auto handle = cudnn::Handle::Create(library);
    if (handle.ok()) {
      s.handle = *handle;
    } else {
      report.cudnn_error = handle.status().message();
      Error("cuDNN unusable (" + report.cudnn_error + "); timing convt3d alone");
    }
  }
  // Twice the L2, like the tuner: every timed run starts from a cold cache.
  s.flush = std::max<size_t>(2 * static_cast<size_t>((*context)->info().l2_bytes), 1 << 20);
  report.l2_flush_bytes = s.flush;
  {
    // The copy bandwidth of the roofline's memory term, on this device, under the same protocol:
    // at least 1 GiB and 4x the L2, so the copy streams from and to DRAM at its steady rate.
    const size_t bytes = std::max<size_t>(2 * s.flush, size_t{1} << 30);
    auto time_copy = [&]() -> StatusOr<rt::Timing> {
      CONVT3D_ASSIGN_OR_RETURN(auto src, rt::DeviceBuffer::Alloc(bytes));
      CONVT3D_ASSIGN_OR_RETURN(auto dst, rt::DeviceBuffer::Alloc(bytes));
      return rt::TimeIt([&] { return dst.CopyFromAsync(src, bytes); }, o.warmup, o.repeats,
                        s.flush);
    };
    StatusOr<rt::Timing> t = time_copy();
    if (t.ok()) {
      report.copy_gbps = 2.0 * bytes / t->median_ms / 1e6;
      report.copy_bytes = bytes;
      std::cerr << "convt3d bench: device copy " << StrFormat("%.0f", report.copy_gbps)
                << " GB/s (read + write, " << bytes / 1048576 << " MiB)\n";
    } else {
      Error("cannot measure the copy bandwidth: " + t.status().ToString());
    }
  }

  bool all_ok = true;
  for (size_t i = 0; i < problems.size(); ++i) {
    const std::string tag = StrCat("[", i + 1, "/", problems.size(), "] ", problems[i].name);
    ProblemResult r = RunProblem(s, problems[i], tag);
    Derive(&r, report.copy_gbps, report.peaks);
    if (!r.error.empty()) all_ok = false;
    for (const Row& row : r.rows)
      if (row.impl != "cudnn" && !row.ok) all_ok = false;
    report.problems.push_back(std::move(r));
  }

  // An output written to stdout ("-") has it alone: the table and "written:" lines go to stderr.
  const bool to_stdout = o.json_path == "-" || o.csv_path == "-" || o.svg_path == "-";
  std::ostream& text = to_stdout ? std::cerr : std::cout;
  text << "\n" << ToText(report);
  const std::pair<const std::string*, std::string (*)(const Report&)> outputs[] = {
      {&o.json_path, &ToJson}, {&o.csv_path, &ToCsv}, {&o.svg_path, &ToSvg}};
  for (const auto& [path, writer] : outputs) {
    if (path->empty()) continue;
    if (*path == "-") {
      std::cout << writer(report) << std::flush;
    } else if (WriteText(*path, writer(report))) {
      text << "written: " << *path << "\n";
    } else {
      Error("cannot write " + *path);
      all_ok = false;
    }
  }
  return all_ok ? 0 : 1;
}

}  // namespace convt3d::bench
