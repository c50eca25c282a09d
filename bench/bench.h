// bench.h: `convt3d bench`: our tuned kernels against cuDNN, same process, same protocol.
//
// For every problem: random inputs made once on the host, an fp64 reference from our own fp64
// kernel, then one row per (implementation, precision mode): median time by rt::TimeIt (the
// tuner's protocol: warm-ups, L2 flushed before every timed run, CUDA events), TFLOP/s, the
// fraction of that mode's ceiling, the error against the reference and, for our rows, the
// speed-up over cuDNN. Results go to a text table, JSON, CSV and an SVG chart.
//
// The pieces that need no GPU (modes, inputs, error statistics, the writers) are
// exposed here so that tests can check them anywhere.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "convt3d/convt3d.h"
#include "src/problem_io.h"

namespace convt3d::bench {

// ---- Precision modes -------------------------------------------------------------------------

// Matmul ceilings measured on the H200 the problem file's cuDNN times come from (its "about"
// text, 2026-11-22). They put a row's TFLOP/s in scale; on another GPU they are only indicative.
inline constexpr double kFfmaCeilingTflops = 51;   // FP32 FFMA
inline constexpr double kTf32CeilingTflops = 402;  // TF32 tensor cores
inline constexpr double kBf16CeilingTflops = 793;  // BF16 tensor cores

enum class Mode {
  kFp32,    // strict fp32 (FFMA); ours today, cuDNN with FMA math
  kTf32,    // fp32 tensors, TF32 tensor-core products; PyTorch's default for cuDNN
  kFp32x3,  // fp32 accuracy from three TF32 products (split operands); not in convt3d yet
  kBf16,    // bf16 tensors, fp32 accumulation
};

struct ModeInfo {
  Mode mode;
  const char* name;          // "fp32", "tf32", "fp32x3", "bf16"
  const char* ceiling_name;  // "FFMA", "TF32", ...
  double ceiling_tflops;
  // The cuDNN configuration with the same numerical contract, for the "vs cuDNN" speed-up.
  Mode cudnn_match;
  // Relative L2 error against fp64 above which one of our rows counts as wrong.
  double tolerance;
};
const ModeInfo& Info(Mode mode);
const char* ModeName(Mode mode);

// The modes our library runs today; a new precision becomes rows by being listed here and
// handled in the one switch in bench.cpp that prepares its problem and buffers.
std::vector<Mode> OurModes();
// The cuDNN configurations timed for every problem, in this order.
std::vector<Mode> CudnnModes();

// ---- Host data -------------------------------------------------------------------------------

// Uniform values in (-1, 1) from a counter-based hash of (seed, index): never exactly zero,
// exactly representable in fp32, independent of `threads` (0: one per core).
void FillUniform(float* out, int64_t n, uint64_t seed, int threads = 0);

struct ErrorStats {
  double rel_l2 = -1;     // ||y-ref|| / ||ref|| (||y-ref|| when ref is all zero); inf on NaN/Inf
  double max_abs = -1;    // largest |y-ref| (inf when any y is not finite)
  int64_t nonfinite = 0;  // NaN/Inf elements of y
};
// Compares n elements of y (fp32, or bf16 bits) with the fp64 reference on `threads` threads.
ErrorStats Compare(const float* y, const double* ref, int64_t n, int threads = 0);
ErrorStats Compare(const uint16_t* y_bf16, const double* ref, int64_t n, int threads = 0);

// ---- Results ---------------------------------------------------------------------------------

struct Row {
  std::string impl;  // "convt3d" or "cudnn"
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
  double tflops = -1, ceiling_frac = -1;
  // Input + weight + output bytes (in the row's element size) per second, and that over the
  // device's measured copy bandwidth (Report::copy_gbps).
  double gbps = -1, copy_frac = -1;
  double speedup_vs_match = -1;  // cuDNN ms in Info(mode).cudnn_match / our ms (ours only)
  double speedup_vs_tf32 = -1;   // cuDNN tf32 ms / our ms (ours only): vs PyTorch's default
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
  int warmup = 0, repeats = 0;
  size_t l2_flush_bytes = 0;
  // Device-to-device copy of a buffer 4x the L2, counted read + write, median under the same
  // protocol: the bandwidth the write-bound shapes are measured against. -1: not measured.
  double copy_gbps = -1;
  std::vector<ProblemResult> problems;
};

// Fills every row's TFLOP/s, ceiling fraction, bandwidth and speed-ups from the times
// (copy_gbps <= 0: no copy fraction).
void Derive(ProblemResult* result, double copy_gbps = -1);

std::string ToText(const Report& report);  // aligned table for the terminal
std::string ToJson(const Report& report);
std::string ToCsv(const Report& report);
// Grouped bars of our speed-up over cuDNN per problem, one bar per (our mode, cuDNN mode) pair,
// on a log axis with the 1x line drawn. Plain SVG 1.1, no scripts or external references.
std::string ToSvg(const Report& report);

// ---- The run ---------------------------------------------------------------------------------

struct Options {
  std::string cache_path;  // our tuning cache ("" : $CONVT3D_CACHE, else the default)
  int device = 0;
  int warmup = 5, repeats = 20;
  int threads = 0;  // host threads for inputs and comparisons (0: one per core)
  std::string json_path, csv_path, svg_path;  // "" : not written
};

// Runs everything in this process on one GPU. Prints progress on stderr and the table on
// stdout. Returns 0 when every row of ours is right and timed, 1 when something failed (cuDNN
// failures are reported but are not ours), 2 when there is no usable GPU.
int Run(const std::vector<io::NamedProblem>& problems, const Options& options);

}  // namespace convt3d::bench
