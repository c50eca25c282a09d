// runtime.h: the CUDA driver and NVRTC, loaded at run time, behind checked RAII wrappers.
//
// Nothing else in the tree includes cuda.h or nvrtc.h or calls cu*/nvrtc* directly. The driver
// (libcuda.so.1) and NVRTC (libnvrtc.so.13) are dlopen'ed on first use, so every binary starts
// on a machine without a GPU: NVRTC compiles still work there, and anything needing the driver
// returns kFailedPrecondition with the dlopen/cuInit reason.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/tiled_map.h"
#include "convt3d/convt3d.h"

namespace convt3d::rt {

// ---- NVRTC -----------------------------------------------------------------------------------
struct CompileRequest {
  std::string name;                  // candidate name, used in errors and as the program name
  std::string source;                // full CUDA source
  std::string arch;                  // "sm_90"
  std::vector<std::string> kernels;  // __global__ names (extern "C") to resolve; for the report
  std::vector<std::string> extra_options;
};

struct CompileResult {
  std::string name;
  Status status;  // on failure: names the candidate and carries the NVRTC log
  std::vector<char> cubin;
  std::string log;  // NVRTC's log (warnings too)
  double compile_ms = 0;
  // Symbol of each request.kernels entry, in that order (the name itself for extern "C"); NVRTC
  // checks each exists, so a misspelt kernel fails the compile rather than the load.
  std::vector<std::string> lowered_names;
};

// NVRTC's version as major*1000 + minor*10, or an error if libnvrtc cannot be loaded.
StatusOr<int> NvrtcVersion();
// Compiles one program to a cubin for request.arch ("-arch=sm_90", "-std=c++17", no fast math).
CompileResult Compile(const CompileRequest& request);
// Compiles many in parallel on `threads` worker threads (0: hardware concurrency); results are
// in request order. One failure never stops the others. `progress`, when set, is called on the
// calling thread with the number of compiles finished, after each one finishes (the calling
// thread then waits instead of compiling).
std::vector<CompileResult> CompileAll(const std::vector<CompileRequest>& requests, int threads,
                                      const std::function<void(size_t done)>& progress = {});

// ---- Driver ----------------------------------------------------------------------------------
struct DeviceInfo {
  int ordinal = 0;
  std::string name;  // "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int driver_version = 0;  // cuDriverGetVersion
  int max_threads_per_block = 1024;
  int max_regs_per_block = 65536;
  int max_smem_per_block_optin = 0;  // bytes, with opt-in
  int l2_bytes = 0;
  std::string arch() const { return "sm_" + std::to_string(cc_major * 10 + cc_minor); }
};

// The number of CUDA devices; kFailedPrecondition when there is no driver.
StatusOr<int> DeviceCount();
// Loads libcuda.so.1, calls cuInit and queries `ordinal`. kFailedPrecondition when there is no
// driver or no such device; the message says which and why in one line.
StatusOr<DeviceInfo> QueryDevice(int ordinal);

// The primary context of one device, made current on the calling thread by Activate().
class Context {
 public:
  // Retains the primary context and makes it current on the calling thread.
  static StatusOr<std::shared_ptr<Context>> Create(int ordinal);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  Status Activate() const;  // cuCtxSetCurrent
  const DeviceInfo& info() const { return info_; }

 private:
  Context() = default;
  DeviceInfo info_;
  int device_ = 0;
  void* ctx_ = nullptr;  // CUcontext
};

// Device memory, freed on destruction.
class DeviceBuffer {
 public:
  static StatusOr<DeviceBuffer> Alloc(size_t bytes);
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&&) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&&) noexcept;
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  size_t size() const { return bytes_; }
  Status Upload(const void* host, size_t bytes);    // synchronous
  Status Download(void* host, size_t bytes) const;  // synchronous
  Status FillBytes(uint8_t value);                  // synchronous memset (poisoning)
  // The same on `stream` (then waits for that stream only; nullptr: FillBytes(value)).
  Status FillBytes(uint8_t value, CUstream_st* stream);
  // Enqueues a copy of the first `bytes` of src into this buffer on the null stream (the bench's
  // copy-bandwidth reference).
  Status CopyFromAsync(const DeviceBuffer& src, size_t bytes);

 private:
  unsigned long long ptr_ = 0;  // CUdeviceptr
  size_t bytes_ = 0;
};

// A loaded cubin and one kernel in it.
class Kernel {
 public:
  // Loads `cubin` and resolves `symbol`; errors name the symbol and the driver error.
  static StatusOr<std::shared_ptr<Kernel>> Load(const std::vector<char>& cubin,
                                                const std::string& symbol);
  ~Kernel();
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;
  // Launches with kernel parameters `args` (pointers to each argument's value). The first
  // launch that asks for more than 48 KiB of dynamic shared memory raises the kernel's limit.
  // overlap_previous: a programmatic dependent launch (sm_90): the kernel may start while the
  // stream's previous kernel finishes, so it must execute griddepcontrol.wait before it touches
  // memory that kernel reads or writes.
  Status Launch(const unsigned grid[3], const unsigned block[3], unsigned smem_bytes,
                CUstream_st* stream, void** args, bool overlap_previous = false) const;
  int num_regs() const { return regs_; }
  int local_bytes() const { return local_bytes_; }  // spills show here
  int max_threads_per_block() const { return max_threads_; }
  const std::string& symbol() const { return symbol_; }
  int sm_count() const { return sm_count_; }  // of the device it was loaded on
  // Allows launches with more than 48 KiB of dynamic shared memory (up to the device's
  // max_smem_per_block_optin minus the kernel's static shared memory).
  Status SetMaxDynamicSharedBytes(int bytes) const;

 private:
  Kernel() = default;
  void* module_ = nullptr;  // CUmodule
  void* func_ = nullptr;    // CUfunction
  int regs_ = 0, local_bytes_ = 0, max_threads_ = 0, sm_count_ = 0;
  mutable std::atomic<unsigned> dynamic_smem_allowed_{48 * 1024};
  std::string symbol_;
};

// A TMA tensor map (CUtensorMap's 128 bytes), passed by value to a kernel parameter declared
// `const __grid_constant__`.
struct alignas(64) TensorMap {
  unsigned char bytes[128];
};
// Encodes a tiled map of `shape` over the global memory at `base` (16-byte aligned); errors
// name the shape and the driver's reason.
StatusOr<TensorMap> EncodeTiledMap(const TiledMapShape& shape, const void* base);

Status Synchronize();  // cuCtxSynchronize, reports asynchronous launch errors
// Whether work enqueued on `stream` now would be captured into a CUDA graph rather than run
// (cuStreamIsCapturing). An error, e.g. the legacy default stream while another stream captures,
// counts as capturing: callers use the answer to stay safe.
bool StreamIsCapturing(CUstream_st* stream);
// cuStreamSynchronize(stream); Synchronize() for nullptr.
Status Synchronize(CUstream_st* stream);

// A stream of its own, destroyed with the object: non-blocking (no implicit ordering with the
// legacy default stream) at the least priority the device offers (background tuning's).
class Stream {
 public:
  // REQUIRES: a context is current.
  static StatusOr<std::unique_ptr<Stream>> CreateLowPriority();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream_st* get() const { return stream_; }

 private:
  Stream() = default;
  CUstream_st* stream_ = nullptr;
};

// ---- Benchmark protocol (the one protocol used by the tuner and bench/) ----------------------
struct Timing {
  double median_ms = 0, min_ms = 0, p20_ms = 0, p80_ms = 0;
  int repeats = 0;
};

// Runs `launch` `warmup` times, then `repeats` times, each timed with its own pair of CUDA
// events on the null stream; before each timed run the L2 is flushed by writing a buffer
// larger than it. Returns the statistics of the per-run times.
// REQUIRES: a context is current (Context::Activate) and `launch` enqueues on the null stream.
// repeats >= 1, warmup >= 0; l2_flush_bytes == 0 skips the flush.
StatusOr<Timing> TimeIt(const std::function<Status()>& launch, int warmup, int repeats,
                        size_t l2_flush_bytes);
// The same with the flush and the events on `stream` (where `launch` must enqueue); nullptr is
// the null stream.
StatusOr<Timing> TimeIt(const std::function<Status()>& launch, int warmup, int repeats,
                        size_t l2_flush_bytes, CUstream_st* stream);

}  // namespace convt3d::rt
