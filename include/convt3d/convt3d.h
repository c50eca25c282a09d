// convt3d.h: the whole public C++ API of convt3d (nothing outside this header is public).
//
// convt3d computes nn.ConvTranspose3d forward (NCDHW, weight [C_in, C_out/groups, kD, kH, kW])
// with CUDA kernels that it specialises, compiles with NVRTC, tunes and caches in SQLite.
//
//   convt3d::Problem p;                 // describe the layer and the input shape
//   p.n = 8; p.c_in = 32; p.c_out = 32; p.in = {16, 32, 32}; p.kernel = {3, 3, 3};
//   auto engine = convt3d::Engine::Create(convt3d::Options{});
//   auto plan = engine->Plan(p);        // cache hit, or tune, per Options::policy
//   plan->Run(x, w, bias, y, stream);   // device pointers; launch only
//
// Errors are returned as Status/StatusOr; no exception crosses this API.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

struct CUstream_st;  // the driver's stream type; cudaStream_t converts to it

// What libconvt3d.so exports: this header's classes and functions; the rest of the library is
// compiled with hidden visibility.
#if defined(_WIN32)
#define CONVT3D_API
#else
#define CONVT3D_API [[gnu::visibility("default")]]
#endif

namespace convt3d {

// ---- Status ---------------------------------------------------------------------------------
enum class Code {
  kOk = 0,
  kInvalidArgument,     // a bad Problem or option: the message names the field and value
  kFailedPrecondition,  // e.g. no CUDA driver or no GPU on this machine
  kNotFound,            // e.g. not in the cache and the policy forbids tuning
  kUnavailable,         // e.g. cache locked or unwritable (work goes on without it)
  kInternal,            // a driver, NVRTC or SQLite call failed: the message says which
};

class [[nodiscard]] CONVT3D_API Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;  // "INVALID_ARGUMENT: stride[1]=0 must be positive"

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}
  StatusOr(Status status) : v_(std::move(status)) {}  // REQUIRES: !status.ok()
  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &std::get<T>(v_); }
  T& operator*() & { return std::get<T>(v_); }

 private:
  std::variant<T, Status> v_;
};

// ---- Problem --------------------------------------------------------------------------------
// Element type of x, w, bias and y. kBF16 and kF16 are 16-bit tensors in and out, computed
// with fp32 accumulation (tensor cores where a candidate applies): rel err <= 1e-2.
enum class DType { kF32, kF64, kBF16, kF16 };

// How an f32 problem may be computed; each mode is an accuracy contract that the tuner's
// correctness gate enforces (relative L2 error against an fp64 reference on random data).
enum class Precision {
  kFp32,    // strict FP32: FFMA accumulation, rel err <= 1e-6 (the default; f64 is always strict)
  kFp32x3,  // FP32-grade on tensor cores (3xTF32 split, fp32 accumulation), rel err <= 1e-5
  kTf32,    // TF32 tensor cores (what PyTorch allows cuDNN by default), rel err <= 1e-3
};

using Dim3 = std::array<int64_t, 3>;  // (D, H, W) order everywhere

struct CONVT3D_API Problem {
  int64_t n = 1, c_in = 1, c_out = 1;
  Dim3 in{1, 1, 1};  // input spatial size
  Dim3 kernel{1, 1, 1}, stride{1, 1, 1}, padding{0, 0, 0}, output_padding{0, 0, 0},
      dilation{1, 1, 1};
  int64_t groups = 1;
  bool bias = false;
  DType dtype = DType::kF32;
  Precision precision = Precision::kFp32;  // anything but kFp32 needs dtype kF32

  // (in-1)*stride - 2*padding + dilation*(kernel-1) + output_padding + 1, per dimension.
  Dim3 OutSize() const;
  int64_t InputElements() const;
  int64_t WeightElements() const;  // c_in * c_out/groups * kD*kH*kW
  int64_t OutputElements() const;
  double Flops() const;  // 2 * every input-by-weight multiply-add that lands in the output
  // Stable readable key, e.g.
  // "f32_n16_ci32_co64_i16x32x32_k3x3x3_s2x2x2_p1x1x1_op0x0x0_d2x2x2_g1_b0"; a precision other
  // than kFp32 follows the dtype: "f32_tf32_n16_...", "f32_fp32x3_n16_..."; "bf16_n16_..."
  std::string Signature() const;
};

// "fp32", "fp32x3", "tf32"; and the relative L2 error bound each promises.
CONVT3D_API const char* PrecisionName(Precision p);
CONVT3D_API double PrecisionTolerance(Precision p);
// "f32", "f64", "bf16", "f16"; bytes per element.
CONVT3D_API const char* DTypeName(DType t);
CONVT3D_API int DTypeBytes(DType t);
// The relative L2 error bound against fp64 that a result for `p` must meet: the precision's
// for f32, 1e-12 for f64, 1e-2 for bf16 and f16.
CONVT3D_API double ToleranceOf(const Problem& p);

// The largest values Validate accepts beyond PyTorch's own rules (README.md, "Limits"): they keep
// every index of the generated kernels within int range, and candidate generation bounded.
struct ProblemLimits {
  // in, kernel, padding, dilation and the output's size, per dimension.
  static constexpr int64_t kExtent = int64_t{1} << 24;
  // Per dimension: the kernels hold a table entry per stride phase (32 bytes; 3 x 512 of them
  // fill 48 of the 64 KiB of __constant__ memory), and candidate generation walks the phases.
  static constexpr int64_t kStride = 512;
  static constexpr int64_t kChannels = int64_t{1} << 24;  // c_in, c_out
  static constexpr int64_t kBatch = int64_t{1} << 30;     // n
  static constexpr int64_t kWeightElements = (int64_t{1} << 31) - 1;
  static constexpr int64_t kTensorElements = INT64_MAX / 16;  // input, output (2^59 - 1)
};

// PyTorch's rules and ProblemLimits; the message names the field, the value and the limit.
// REQUIRES nothing.
CONVT3D_API Status Validate(const Problem& p);

// ---- Options --------------------------------------------------------------------------------
enum class TunePolicy {
  kNever,             // heuristic pick, never time candidates, never read the cache
  kCacheOrHeuristic,  // cache hit if there is one, else the heuristic pick; never tunes
  kTuneIfMissing,     // cache hit, else tune now and store the winner (default)
  kExhaustive,        // always tune every candidate and store the result
  // The lookup tiers (Plan::origin) at once, else the heuristic pick; a shape served from tier
  // 3 or below is then tuned on the engine's worker thread (on a low-priority stream of its
  // own, one candidate on the GPU at a time, pausing as long as each took; half the cores for
  // NVRTC), the winner stored, and later
  // Engine::Plan calls and the next Run of every Plan already made for it switch to the winner.
  // The engine's destructor stops the worker (after its current compile batch) and joins it.
  kBackground,
};

enum class LogLevel {
  kInfo,     // tuning progress
  kWarning,  // work goes on without something, e.g. the cache fell back to memory
};

struct Options {
  TunePolicy policy = TunePolicy::kTuneIfMissing;
  // SQLite cache file. Empty: $CONVT3D_CACHE, else $XDG_CACHE_HOME/convt3d/cache.sqlite,
  // else ~/.cache/convt3d/cache.sqlite. ":memory:" keeps results for this process only.
  std::string cache_path;
  // Read-only caches under cache_path, looked up in order after it and never written (a team's
  // pre-tuned file). Empty: $CONVT3D_CACHE_SHARED, a colon-separated list.
  std::vector<std::string> shared_cache_paths;
  // kTuneIfMissing when another thread or process is tuning the same shape (it holds the
  // shape's lease in the cache file): 0 runs the heuristic pick for this call, not remembered,
  // so a later call finds the winner once stored; > 0 waits up to this long for the winner (or
  // for the holder's lease to expire, then tunes).
  int tune_wait_ms = 0;
  int device = 0;          // CUDA device ordinal
  int max_candidates = 0;  // 0: all candidates the generator offers
  // Timing protocol: every candidate that passes the check gets one probe run; those within
  // 1.3x of the best probe (at most 8) are then timed as the median of up to `repeats` runs
  // (about 300 ms' worth, at least 5) after `warmup` runs; the others keep their probe time.
  int warmup = 3, repeats = 20;
  int compile_threads = 0;  // 0: one per CPU core
  // Vendor arbitration: where cuDNN 9 can be loaded at run time (dlopen'ed, never linked:
  // $CONVT3D_CUDNN, the loader path, then PyTorch's nvidia-cudnn wheel), each cuDNN
  // backward-data algorithm that cuDNN accepts for a problem is one more tuning candidate under
  // the same correctness gate and timing; if one wins, the plan runs cuDNN (kernel_name()
  // "cudnn:ALGO_1") and the cache records it. Strict fp32 and fp32x3 offer cuDNN's FMA math
  // only (no TF32), tf32 its default math. Results with arbitration are cached apart from those
  // without (the key's code hash gets "+cudnn<version>"). false, or $CONVT3D_VENDOR_CANDIDATES=0,
  // tunes our kernels alone. Without cuDNN nothing changes: no candidate, no error.
  bool vendor_candidates = true;
  // fp32x3 may also run scaled 3xFP16 tiles (gemm_wgmma_3xf16_*): about 1.5-1.7x faster on dense
  // strided layers, but one power-of-two scale per operand, so the 1e-5 contract holds unless an
  // operand's largest values exceed about 2^22 times its RMS without dominating the output (see
  // README). Such results are cached apart (the fp32x3 key's code hash gets "+f16split").
  // $CONVT3D_FP32X3_FP16=1 turns it on too.
  bool fp32x3_fp16 = false;
  // The library writes nothing to stderr by default. Its progress lines and warnings go to
  // `log` when set (called on the thread in Engine::Create or Engine::Plan), else to stderr when
  // `verbose`. The cache's warning stays readable as Engine::cache_warning() either way.
  // kBackground's worker logs its lines from its own thread.
  bool verbose = false;
  std::function<void(LogLevel level, const std::string& line)> log;
};

// ---- Engine and Plan ------------------------------------------------------------------------
// Where a plan came from: the lookup tier that served it, and why the better tiers missed.
struct PlanOrigin {
  // 0 tuned by this engine (now or in the background); 1 the cache entry of this exact key;
  // 2 this problem's winner on this GPU model under another driver, NVRTC or code version,
  // recompiled and re-checked here; 3 the same from another GPU model of this architecture;
  // 4 the winner of the nearest tuned shape of the same kernel, stride, dilation, groups, dtype
  // and precision, compiled for this problem (a candidate of it, like the heuristic pick);
  // 5 the heuristic pick.
  int tier = 5;
  std::string name = "heuristic";  // "tuned", "exact", "same_gpu", "same_arch", "nearest", ...
  std::string reason;              // one line: what served it, and each better tier's miss
};

class PlanImpl;
class EngineImpl;

// A resolved kernel for one Problem: Run() only launches (no lookup, no allocation). Plans of the
// tensor-core families, of the (strict fp32) Winograd and FFT families and of the pipelined
// direct_tile kernels (`_cp`: packed weights) own a device workspace,
// allocated when the Plan is made, into which Run re-lays or transforms the weights (and 16-bit
// inputs; FFT: also the input and output spectra); strict fp32 plans whose taps overlap may own
// a column buffer of at most 256 MB (every product before the overlap-add). Run without a weight
// version does so on every call, so new weight values are always used; Run with one packs the
// weights only when the pointer or the version differs from the last run's. One Plan object runs on
// one stream at a time; take another Plan for concurrent streams.
class CONVT3D_API Plan {
 public:
  ~Plan();
  Plan(Plan&&) noexcept;
  Plan& operator=(Plan&&) noexcept;

  // x: [N, C_in, D, H, W]; w: [C_in, C_out/groups, kD, kH, kW]; bias: [C_out] or null when
  // !problem.bias; y: [N, C_out, Do, Ho, Wo]. All device pointers of problem.dtype.
  Status Run(const void* x, const void* w, const void* bias, void* y,
             CUstream_st* stream = nullptr) const;
  // Run, but the weights are packed only when (w, weight_version) differs from the last run's;
  // otherwise the packed copy from that run is used (one launch fewer where the plan packs
  // weights; the same launches otherwise; a kBackground plan that switches kernel packs anew).
  // The caller's promise: the same pointer with the same version holds the same values, so bump
  // the version whenever the weights change in place (e.g. a counter per optimizer step; a
  // tensor's version counter). Breaking it is undefined: the old weights may be used. Packing
  // always happens while `stream` is being captured into a CUDA graph, and a plan that was
  // captured once packs on every run from then on (its graph may rewrite the packed copy).
  Status Run(const void* x, const void* w, const void* bias, void* y, CUstream_st* stream,
             uint64_t weight_version) const;

  const Problem& problem() const;
  const std::string& kernel_name() const;  // e.g. "direct_phase_f32_x64y2_o2_c4"
  const std::string& source() const;       // "cache" (origin tiers 1-4), "tuned" or "heuristic"
  // The winner's median time when tuned or cached (tiers 2-4: its one probe run here), else -1.
  double tuned_ms() const;
  double rel_err() const;  // its ||y-ref||/||ref|| against the fp64 reference, else -1
  // Which lookup tier served it. A kBackground plan switches to the tuned winner at the first
  // Run after it is stored (not while `stream` is being captured into a CUDA graph, when that
  // would allocate a larger workspace); kernel_name(), source() and origin() follow it.
  const PlanOrigin& origin() const;

 private:
  friend class EngineImpl;
  explicit Plan(std::unique_ptr<PlanImpl> impl);
  std::unique_ptr<PlanImpl> impl_;
};

// Owns the driver context, the compiler and the cache. One per process is typical.
class CONVT3D_API Engine {
 public:
  static StatusOr<Engine> Create(const Options& options);
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  // Validates, then resolves a kernel according to options.policy.
  StatusOr<convt3d::Plan> Plan(const Problem& problem);
  // Plan(problem) then Run(); for one-off calls (a plan with a workspace, see Plan, allocates it
  // on every call, and freeing it synchronizes the device: keep a Plan for repeated calls).
  Status Forward(const Problem& problem, const void* x, const void* w, const void* bias, void* y,
                 CUstream_st* stream = nullptr);

  std::string cache_path() const;
  std::string cache_warning() const;  // non-empty when the cache fell back to memory
  int nvrtc_compiles() const;         // NVRTC compiles this engine has run (0 on a warm cache)

 private:
  explicit Engine(std::unique_ptr<EngineImpl> impl);
  std::unique_ptr<EngineImpl> impl_;
};

// What this machine offers; `convt3d info` prints it. Never fails: fields left empty/0 and
// driver_error set when there is no driver or GPU.
struct Environment {
  std::string gpu_name, arch;  // "NVIDIA H200", "sm_90"
  int driver_version = 0, nvrtc_version = 0;
  std::string code_hash;     // hash of templates + generator: part of every cache key
  std::string driver_error;  // why there is no usable GPU, or ""
  std::string nvrtc_error;
  // The cuDNN that vendor arbitration would load (Options::vendor_candidates): its version
  // (cudnnGetVersion(), e.g. 91900) and file, or 0 and why not.
  int cudnn_version = 0;
  std::string cudnn_path, cudnn_error;
};
CONVT3D_API Environment DescribeEnvironment(int device = 0);

// Compile-only path (no GPU needed): generates and NVRTC-compiles every candidate of `problem`
// for `arch` ("sm_90"). Used by `convt3d tune` on machines without a GPU and by the tests.
struct CompileReport {
  int candidates = 0, compiled = 0;
  double seconds = 0;
  std::vector<std::string> failures;  // "candidate: reason"
};
// With `emit_dir`, also writes each candidate's <name>.cu and <name>.cubin there (for
// cuobjdump -sass / -res-usage). max_candidates > 0 keeps the first ones, as tuning does.
// `progress`, when set, is called on the calling thread with (compiled, candidates) after each
// compile finishes. `fp32x3_fp16`: the candidates of an engine with Options::fp32x3_fp16.
CONVT3D_API StatusOr<CompileReport> CompileCandidates(
    const Problem& problem, const std::string& arch, int threads = 0,
    const std::string& emit_dir = "", int max_candidates = 0,
    const std::function<void(int compiled, int candidates)>& progress = {},
    bool fp32x3_fp16 = false);

CONVT3D_API const char* Version();

}  // namespace convt3d
