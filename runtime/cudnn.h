// cudnn.h: cuDNN 9, dlopen'ed at run time, computing ConvTranspose3d as its backward-data.
//
// What PyTorch runs for nn.ConvTranspose3d is cuDNN's convolution backward-data: the tuner
// offers each of its algorithms as one more candidate under the same gate (vendor arbitration),
// and the benchmark compares our kernels with it. libcudnn is never linked (the GPU machine has no
// cuDNN headers and most machines have no cuDNN at all): Library::Load() finds libcudnn.so.9 and
// resolves the few entry points used here into a table, so a missing cuDNN is one error line, not a
// failed start. Every cuDNN call is checked; errors carry the call's name, cudnnGetErrorString and
// cuDNN's own last-error text. Handles and descriptors are RAII.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "convt3d/convt3d.h"

namespace convt3d::cudnn {

// ---- The mapping (pure; no cuDNN needed) -----------------------------------------------------

// ConvTranspose3d forward is the backward-data of the convolution it transposes:
//   cuDNN dy (the input of backward-data)  = our x  [N, C_in, D, H, W]
//   cuDNN dx (the output of backward-data) = our y  [N, C_out, Do, Ho, Wo]
//   cuDNN filter [K, C/groups, kD, kH, kW] = our w  [C_in, C_out/groups, kD, kH, kW]
// with our padding, stride and dilation, cross-correlation, and groups. output_padding has no
// cuDNN field: it is carried by dx's larger size, which cuDNN accepts only while the forward
// convolution of dx still lands on dy's size (output_padding < stride).
struct BackwardDataDims {
  std::array<int, 5> dy_dims{}, dy_strides{};      // packed NCDHW
  std::array<int, 5> dx_dims{}, dx_strides{};      // packed NCDHW
  std::array<int, 5> w_dims{};                     // KCRST order, packed
  std::array<int, 5> bias_dims{}, bias_strides{};  // [1, C_out, 1, 1, 1], for cudnnAddTensor
  std::array<int, 3> pad{}, stride{}, dilation{};
  int groups = 1;
};

// kInvalidArgument for an invalid problem; kUnavailable (naming the field) when cuDNN's int
// descriptors cannot hold it or backward-data cannot express its output_padding.
StatusOr<BackwardDataDims> MapConvTranspose3d(const Problem& p);

// The ways PyTorch runs cuDNN: fp32 models with and without TF32, and 16-bit models.
enum class Precision {
  kTf32,  // PyTorch's default: fp32 tensors, CUDNN_DEFAULT_MATH (TF32 tensor cores allowed)
  kFp32,  // torch.backends.cudnn.allow_tf32 = False: CUDNN_FMA_MATH, strict fp32 FFMA
  kBf16,  // module and input in bf16: bf16 tensors, fp32 compute type, CUDNN_TENSOR_OP_MATH
  kF16,   // module and input in fp16: CUDNN_DATA_HALF tensors, otherwise as kBf16
};
const char* PrecisionName(Precision p);  // "tf32", "fp32", "bf16", "f16"

// The cuDNN configuration with the accuracy contract of a problem of ours, or nullopt where
// there is none (f64). Strict fp32 and fp32x3 both get FMA math (no TF32: cuDNN's strict FFMA is
// what a user of fp32x3 would otherwise run, and it meets fp32x3's bound); tf32 gets PyTorch's
// default math; bf16 and f16 their own.
std::optional<Precision> PrecisionFor(const Problem& p);

// cuDNN's backward-data algorithms, cudnnConvolutionBwdDataAlgo_t 0 .. kAlgorithms-1, by name:
// "ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED" ("ALGO_?" outside).
inline constexpr int kAlgorithms = 6;
const char* AlgorithmName(int algo);
// The inverse of AlgorithmName; -1 for a name that is none of them.
int AlgorithmFromName(const std::string& name);

// ---- The library -----------------------------------------------------------------------------

struct Api;  // the table of resolved entry points (cudnn.cpp)

// The libcudnn.so.9 files of pip's nvidia-cudnn wheels (PyTorch's cuDNN) that exist, in the
// order Library::Load tries them, each once: under /usr/lib/python3*/*-packages,
// /usr/local/lib/python3*/*-packages, ~/.local/lib/python3*/site-packages, then
// lib/python3*/site-packages/nvidia/cudnn/lib of $VIRTUAL_ENV, $CONDA_PREFIX, the prefix of
// each python3 on $PATH (an environment used without activating it) and pyenv's versions.
// A CLI run that finds the cuDNN its user's PyTorch loads tunes keys that PyTorch then hits.
std::vector<std::string> WheelLibraries();

class Library {
 public:
  // Loads libcudnn.so.9 from, in order: $CONVT3D_CUDNN (a file, or a directory holding
  // libcudnn.so.9; when set it is the only place tried, so that an explicit choice never
  // silently falls back to another cuDNN), the default loader path, then WheelLibraries(). On
  // failure the status message is one line saying where it looked.
  // The library stays loaded for the life of the process (unloading GPU libraries at exit races
  // their own destructors), so Load() may be called again cheaply.
  static StatusOr<std::shared_ptr<const Library>> Load();

  const std::string& path() const { return path_; }
  size_t version() const { return version_; }  // cudnnGetVersion(), e.g. 91900
  std::string VersionString() const;           // "9.19.0"
  const Api& api() const { return *api_; }

 private:
  Library() = default;
  // dlopens `file` and resolves the table; *not_found when dlopen itself failed.
  static StatusOr<std::shared_ptr<const Library>> Open(const std::string& file, bool* not_found);
  std::string path_;
  size_t version_ = 0;
  std::shared_ptr<const Api> api_;
};

// A cuDNN handle on the CUDA context current on the calling thread (make one per context and
// share it). A cuDNN handle is not safe to use from two threads at once and carries its stream
// as state, so every call through it holds mutex() from binding the stream to the last call.
class Handle {
 public:
  static StatusOr<std::shared_ptr<Handle>> Create(std::shared_ptr<const Library> library);
  ~Handle();
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  const Library& library() const { return *library_; }
  std::shared_ptr<const Library> library_ptr() const { return library_; }
  void* get() const { return handle_; }  // cudnnHandle_t
  std::mutex& mutex() const { return mu_; }

 private:
  Handle() = default;
  std::shared_ptr<const Library> library_;
  void* handle_ = nullptr;
  mutable std::mutex mu_;
};

// Builds the descriptors of `problem` in `precision` (no handle, no GPU) and checks that
// cuDNN's own forward-output arithmetic takes dx back onto dy through the filter: the mapping
// above, confirmed by cuDNN itself. BackwardData::Create runs the same check.
Status VerifyDescriptors(const Library& library, const Problem& problem, Precision precision);

// One problem in one precision: the descriptors, the algorithm cuDNN's search picked, and the
// workspace it runs with. Device pointers hold fp32 data for kTf32/kFp32, bf16 for kBf16,
// IEEE half for kF16.
class BackwardData {
 public:
  static StatusOr<std::unique_ptr<BackwardData>> Create(std::shared_ptr<Handle> handle,
                                                        const Problem& problem,
                                                        Precision precision);
  ~BackwardData();
  BackwardData(const BackwardData&) = delete;
  BackwardData& operator=(const BackwardData&) = delete;

  // cudnnFindConvolutionBackwardDataAlgorithmEx on these buffers (dx is overwritten), with a
  // workspace as large as the largest any algorithm asks for (halved until it can be
  // allocated); keeps the fastest algorithm that succeeded and shrinks the workspace to its
  // need. REQUIRES: the context the handle was made on is current.
  Status Search(const void* w, const void* dy, void* dx);
  // y = backward-data(w, dy) (+ bias over channels, as PyTorch adds it: cudnnAddTensor) on
  // the legacy null stream, the one rt::TimeIt records its events on.
  // bias: [C_out] in the precision's element type, or null. REQUIRES: Search() succeeded.
  Status Run(const void* w, const void* dy, const void* bias, void* dx) const;

  Precision precision() const { return precision_; }
  const std::string& algo_name() const { return algo_name_; }  // "ALGO_1"
  const std::string& math_name() const { return math_name_; }  // the math type it ran with
  size_t workspace_bytes() const;
  float search_ms() const { return search_ms_; }  // cuDNN's own time for the pick
  // One entry per algorithm the search returned: "ALGO_0 ok 3.21 ms 0 B FMA_MATH".
  const std::vector<std::string>& search_log() const { return search_log_; }

 private:
  struct Impl;
  BackwardData() = default;
  std::unique_ptr<Impl> impl_;
  Precision precision_ = Precision::kFp32;
  std::string algo_name_, math_name_;
  float search_ms_ = -1;
  std::vector<std::string> search_log_;
};

// One backward-data algorithm for one problem in one precision: a tuning candidate, and what a
// plan runs when it won. It holds the descriptors only; the caller owns the workspace (at least
// workspace_bytes()), so that each plan has its own and plans of one shape run on different
// streams at once.
class Algorithm {
 public:
  // kUnavailable when cuDNN does not offer `algo` for these descriptors and math type (its
  // workspace query refuses them), or when the problem does not map (MapConvTranspose3d).
  // REQUIRES: the context the handle was made on is current.
  static StatusOr<std::shared_ptr<const Algorithm>> Create(std::shared_ptr<Handle> handle,
                                                           const Problem& problem,
                                                           Precision precision, int algo);
  ~Algorithm();
  Algorithm(const Algorithm&) = delete;
  Algorithm& operator=(const Algorithm&) = delete;

  // y = backward-data(w, x) (+ bias, cudnnAddTensor as PyTorch adds it) on `stream` (nullptr:
  // the legacy default stream); bias: [C_out] or null when the problem has none. Allocates
  // nothing. REQUIRES: the handle's context is current; workspace holds workspace_bytes().
  Status Run(const void* x, const void* w, const void* bias, void* y, void* workspace,
             CUstream_st* stream) const;

  int algo() const { return algo_; }
  const char* name() const { return AlgorithmName(algo_); }  // "ALGO_1"
  const std::string& math_name() const { return math_name_; }
  Precision precision() const { return precision_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  const Library& library() const { return handle_->library(); }

 private:
  struct Desc;
  Algorithm() = default;
  std::shared_ptr<Handle> handle_;
  std::unique_ptr<Desc> desc_;
  int algo_ = 0;
  Precision precision_ = Precision::kFp32;
  bool has_bias_ = false;
  size_t workspace_bytes_ = 0;
  std::string math_name_;
};

}  // namespace convt3d::cudnn
