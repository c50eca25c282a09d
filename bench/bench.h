// bench.h: `convt3d bench`: our tuned kernels against cuDNN, same process, same protocol.
//
// For every problem: random inputs made once on the host, an fp64 reference from our own fp64
// kernel, then one row per (implementation, precision mode): median time by rt::TimeIt (the
// tuner's protocol: warm-ups, L2 flushed before every timed run, CUDA events), TFLOP/s, the
// fraction of that mode's ceiling, the roofline floor and the fraction of it reached, the error
// against the reference and, for our rows, the speed-up over cuDNN. A problem's dtype is
// honoured: bf16 and f16 problems run in their 16-bit mode only, f32 problems in every requested
// mode. Results go to a text table (with per-mode roofline geomeans), JSON, CSV and an SVG chart.
//
// The pieces that need no GPU (modes, roofline, inputs, error statistics, problem lists, the
// writers) are exposed here so that tests can check them anywhere.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "convt3d/convt3d.h"
#include "src/problem_io.h"

namespace convt3d::bench {

// ---- Precision modes -------------------------------------------------------------------------

enum class Mode {
  kFp32,    // strict fp32 (FFMA); cuDNN with FMA math
  kTf32,    // fp32 tensors, TF32 tensor-core products; PyTorch's default for cuDNN
  kFp32x3,  // fp32 accuracy from three TF32 products (split operands); ours only
  kBf16,    // bf16 tensors, fp32 accumulation
  kF16,     // IEEE half tensors, fp32 accumulation
};

struct ModeInfo {
  Mode mode;
  const char* name;          // "fp32", "tf32", "fp32x3", "bf16", "f16"
  const char* ceiling_name;  // "FFMA", "TF32", "3xTF32", "BF16", "FP16"
  DType dtype;               // element type of x, w, bias and y in this mode
  // The cuDNN configuration with the same numerical contract, for the "vs cuDNN" speed-up.
  Mode cudnn_match;
  // Relative L2 error against fp64 above which one of our rows counts as wrong.
  double tolerance;
};
const ModeInfo& Info(Mode mode);
const char* ModeName(Mode mode);
int ElementBytes(Mode mode);  // 4 for the fp32-tensor modes, 2 for bf16 and f16

// Every mode our library runs, in table order (the default of --precision). A new precision
// becomes rows by being listed here and handled in the one switch in bench.cpp that prepares its
// problem and buffers.
std::vector<Mode> OurModes();
// Every cuDNN configuration the bench can time, in table order.
std::vector<Mode> CudnnModes();

// Parses a comma-separated mode list ("fp32,tf32,f16"); "fp16" is accepted for "f16". Returns
// the modes in table order, each once; kInvalidArgument naming the entry for anything else or
// an empty list.
StatusOr<std::vector<Mode>> ParseModes(const std::string& text);

// The modes a problem runs in, given its dtype and the requested modes (in table order): a bf16
// or f16 problem runs in its own 16-bit mode only (empty when that mode is not requested); any
// other dtype (f32, or f64 which has no bench mode) runs every requested mode.
std::vector<Mode> OurModesFor(DType dtype, const std::vector<Mode>& requested);
// The cuDNN configurations timed beside `ours` (the result of OurModesFor): each mode's match,
// plus TF32 (PyTorch's default) when the problem's tensors are fp32 (some mode of `ours` has
// 4-byte elements); in table order.
std::vector<Mode> CudnnModesFor(const std::vector<Mode>& ours);

// ---- Roofline --------------------------------------------------------------------------------

// Dense matmul peaks of one GPU (TFLOP/s) for the roofline floor and the ceiling column. The
// bench does not query clocks, so the peaks come from a table keyed by the device name; a device
// not in the table gets the H200's figures and `assumed` says so.
struct Peaks {
  std::string device = "H200";  // the table entry used
  bool assumed = false;         // true: the GPU is not in the table, these are the H200's
  double ffma = 51;             // strict fp32 FFMA
  double tf32 = 402;            // TF32 tensor cores; 3xTF32 is a third of it
  double half = 793;            // BF16 and FP16 tensor cores
};
// "NVIDIA H200..." (and GH200): 51 / 402 / 793; "NVIDIA H100 80GB HBM3" or any H100 SXM: 51 /
// 378 / 756; anything else: the H200 figures with assumed = true.
Peaks PeaksFor(const std::string& gpu_name);
// The mode's peak in useful FLOP/s (TFLOP/s): fp32x3 spends three TF32 products per
// multiply-add, so it gets tf32 / 3.
double PeakTflops(const Peaks& peaks, Mode mode);

// Bytes every implementation must move at least once: input + weight + output in the mode's
// element size (the bias is too small to count).
double MinBytes(const Problem& p, Mode mode);

struct Floor {
  double compute_ms = -1;  // Flops() / the mode's peak
  double memory_ms = -1;   // MinBytes() / the copy bandwidth (read + write)
  double ms = -1;          // the larger of the two; -1 when copy_gbps <= 0
  const char* bound = "";  // "compute" or "memory" (the larger term), "" when ms < 0
};
// The roofline floor of `p` in `mode`: max(FLOPs / peak, bytes / copy bandwidth), FLOPs being
// Problem::Flops() (2 per input-by-weight multiply-add). copy_gbps <= 0 (not measured): no floor.
Floor RooflineFloor(const Problem& p, Mode mode, const Peaks& peaks, double copy_gbps);

// ---- Host data -------------------------------------------------------------------------------

// Uniform values in (-1, 1) from a counter-based hash of (seed, index): never exactly zero,
// exactly representable in fp32, independent of `threads` (0: one per core).
void FillUniform(float* out, int64_t n, uint64_t seed, int threads = 0);

struct ErrorStats {
  double rel_l2 = -1;     // ||y-ref|| / ||ref|| (||y-ref|| when ref is all zero); inf on NaN/Inf
  double max_abs = -1;    // largest |y-ref| (inf when any y is not finite)
  int64_t nonfinite = 0;  // NaN/Inf elements of y
};
// Compares n elements of y (fp32, or the bits of a 16-bit `dtype`: kBF16 or kF16) with the fp64
// reference on `threads` threads.
ErrorStats Compare(const float* y, const double* ref, int64_t n, int threads = 0);
ErrorStats Compare(const uint16_t* y, DType dtype, const double* ref, int64_t n, int threads = 0);

// ---- Results ---------------------------------------------------------------------------------

struct Row {
  // "convt3d" (our kernels alone: the figure the roofline targets use), "cudnn", or "arbitrated"
  // (--arbitration: the plan of an engine whose tuning let cuDNN's algorithms compete; detail
  // names the winner, e.g. "cudnn:ALGO_1 (tuned)").
  std::string impl;
  Mode mode = Mode::kFp32;
  bool ok = false;
  std::string error;   // why the row has no time, or why it is wrong
  std::string detail;  // our kernel and where it came from / cuDNN's algorithm and math type
  double ms = -1, min_ms = -1, p20_ms = -1, p80_ms = -1;
  int repeats = 0;
  size_t workspace_bytes = 0;
  ErrorStats err;
  // Context for the JSON: cuDNN's search results (every algorithm, its status, time, workspace,
  // math type), or what our tuner recorded for the plan.
  std::vector<std::string> log;
  // Filled by Derive():
  double tflops = -1, ceiling_frac = -1;  // ceiling: the mode's peak (Report::peaks)
  // MinBytes() per second, and that over the device's measured copy bandwidth
  // (Report::copy_gbps).
  double gbps = -1, copy_frac = -1;
  // The roofline of the row's mode (RooflineFloor) and floor / ms: the fraction of the roofline
  // this row reaches. For our rows also floor / the matching cuDNN row's ms: cuDNN's fraction of
  // the same floor (equal to roofline_frac / speedup_vs_match).
  Floor floor;
  double roofline_frac = -1;
  double cudnn_roofline_frac = -1;  // ours only
  // cuDNN ms in Info(mode).cudnn_match / this row's ms (ours and arbitrated rows only).
  double speedup_vs_match = -1;
  double speedup_vs_tf32 = -1;  // cuDNN tf32 ms / this row's ms (ditto): vs PyTorch's default
};

struct ProblemResult {
  io::NamedProblem problem;
  std::string error;  // a failure that hit the whole problem (e.g. the reference)
  std::vector<Row> rows;
};

struct Report {
  std::string version, date;                           // convt3d version, UTC time
  std::string gpu, arch, cache_path;                   // from the run
  std::string cudnn_version, cudnn_path, cudnn_error;  // cudnn_error when absent
  bool fp32x3_fp16 = false;  // Options::fp32x3_fp16: fp32x3 rows may run the 3xFP16 tiles
  int warmup = 0, repeats = 0;
  size_t l2_flush_bytes = 0;
  // Device-to-device copy of copy_bytes (at least 1 GiB and 4x the L2), counted read + write,
  // median under the same protocol: the bandwidth of the roofline's memory term. -1: not
  // measured.
  double copy_gbps = -1;
  size_t copy_bytes = 0;
  Peaks peaks;  // PeaksFor(gpu)
  std::vector<ProblemResult> problems;
};

// Fills every row's TFLOP/s, ceiling fraction, bandwidth, roofline and speed-ups from the times
// (copy_gbps <= 0: no copy fraction and no roofline floor).
void Derive(ProblemResult* result, double copy_gbps = -1, const Peaks& peaks = Peaks());

// Problems whose floor is below this are left out of the roofline geomeans: launch and host
// overheads dominate them.
inline constexpr double kGeomeanMinFloorMs = 0.020;

// One of our modes over the problems whose floor in that mode is at least min_floor_ms and where
// our row is right and timed.
struct ModeSummary {
  Mode mode = Mode::kFp32;
  Mode cudnn_mode = Mode::kFp32;                    // Info(mode).cudnn_match
  int problems = 0;                                 // rows of ours counted
  double roofline_geomean = -1, roofline_min = -1;  // ours: geomean and minimum of floor / ms
  // Of those problems, the ones where cuDNN's matching row has a time: geomean of floor / cuDNN
  // ms (the same floor) and of cuDNN ms / our ms.
  int cudnn_problems = 0;
  double cudnn_roofline_geomean = -1, speedup_geomean = -1;
  int tf32_problems = 0;             // ... and where cuDNN's TF32 row has a time:
  double speedup_tf32_geomean = -1;  // geomean of cuDNN TF32 ms / our ms
};
// One entry per mode of ours that has a row anywhere in the report, in table order (modes whose
// every problem is under the floor limit have problems == 0 and no geomeans).
std::vector<ModeSummary> Summarize(const Report& report, double min_floor_ms = kGeomeanMinFloorMs);

std::string ToText(const Report& report);  // aligned table for the terminal
std::string ToJson(const Report& report);
std::string ToCsv(const Report& report);
// Grouped bars of our speed-up over cuDNN per problem, one bar per (our mode, cuDNN mode) pair,
// on a log axis with the 1x line drawn. Plain SVG 1.1, no scripts or external references.
std::string ToSvg(const Report& report);

// ---- Problem lists ---------------------------------------------------------------------------

// The problems of every file (paths, in order), narrowed to `only`'s
// comma-separated names across all of them. A problem listed twice with the same shape is kept
// once; the same name with two shapes is kInvalidArgument, as is a name of `only` that no file
// has. File errors are io::LoadProblems's.
StatusOr<std::vector<io::NamedProblem>> LoadProblemLists(const std::vector<std::string>& files,
                                                         const std::string& only);

// ---- The run ---------------------------------------------------------------------------------

struct Options {
  std::string cache_path;  // our tuning cache ("" : $CONVT3D_CACHE, else the default)
  // Our modes (table order); a problem runs the subset OurModesFor(its dtype, modes).
  std::vector<Mode> modes = OurModes();
  int device = 0;
  int warmup = 5, repeats = 20;
  int threads = 0;  // host threads for inputs and comparisons (0: one per core)
  // Adds an "arbitrated" row per mode of ours: the plan of a second engine with
  // convt3d::Options::vendor_candidates on (same cache file, its own keys). The "convt3d" rows
  // always tune our kernels alone.
  bool arbitration = false;
  // convt3d::Options::fp32x3_fp16 for every engine of ours (--fp32x3-fp16): fp32x3 rows may run
  // the 3xFP16 tiles (tuned and cached under their own keys).
  bool fp32x3_fp16 = false;
  std::string json_path, csv_path, svg_path;  // "" : not written
};

// Runs everything in this process on one GPU. Prints progress on stderr and the table on
// stdout. Returns 0 when every row of ours is right and timed, 1 when something failed (cuDNN
// failures are reported but are not ours), 2 when there is no usable GPU.
int Run(const std::vector<io::NamedProblem>& problems, const Options& options);

}  // namespace convt3d::bench
