// nvrtc.cpp: compiles CUDA sources to cubins with NVRTC, one at a time or on a worker pool.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "runtime/cuda_api.h"
#include "runtime/runtime.h"

#ifndef CONVT3D_CUDA_INCLUDE_DIR
#define CONVT3D_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

namespace convt3d::rt {
namespace {

// Logs can run to megabytes when a template explodes; the message keeps the head, which holds
// the first error.
constexpr size_t kMaxLogInMessage = 4096;

class Program {
 public:
  Program() = default;
  ~Program() {
    if (prog_ != nullptr) Nvrtc().nvrtcDestroyProgram(&prog_);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram* out() { return &prog_; }
  nvrtcProgram get() const { return prog_; }

 private:
  nvrtcProgram prog_ = nullptr;
};

// CONVT3D_CUDA_INCLUDE_DIR is CMake's CUDAToolkit_INCLUDE_DIRS, which may be a ';' list.
// NVRTC 13 bundles no headers, so kernels that include <cuda_fp16.h> and the like need these.
std::vector<std::string> IncludeOptions() {
  std::vector<std::string> out;
  std::string dirs = CONVT3D_CUDA_INCLUDE_DIR;
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(';', start);
    if (end == std::string::npos) end = dirs.size();
    if (end > start) out.push_back("-I" + dirs.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string TrimLog(std::string log) {
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n' || log.back() == ' ')) {
    log.pop_back();
  }
  return log;
}

std::string LogForMessage(const std::string& log) {
  if (log.size() <= kMaxLogInMessage) return log;
  return StrCat(log.substr(0, kMaxLogInMessage), "\n... [", log.size() - kMaxLogInMessage,
                " more bytes of log]");
}

Status Prefixed(const std::string& name, const Status& s) {
  return Status(s.code(), StrCat(name, ": ", s.message()));
}

void CompileInto(const CompileRequest& request, CompileResult& result) {
  Status loaded = LoadNvrtc();
  if (!loaded.ok()) {
    result.status = Prefixed(request.name, loaded);
    return;
  }
  Program prog;
  Status s = CONVT3D_NVRTC_STATUS(nvrtcCreateProgram(prog.out(), request.source.c_str(),
                                                     request.name.c_str(), 0, nullptr, nullptr));
  if (!s.ok()) {
    result.status = Prefixed(request.name, s);
    return;
  }
  // Name expressions make NVRTC check that each kernel exists (a typo fails here, at compile
  // time, rather than at cuModuleGetFunction) and report its symbol.
  for (const std::string& k : request.kernels) {
    std::string expr = "&" + k;
    s = CONVT3D_NVRTC_STATUS(nvrtcAddNameExpression(prog.get(), expr.c_str()));
    if (!s.ok()) {
      result.status = Prefixed(request.name, s);
      return;
    }
  }

  std::vector<std::string> options = {"-arch=" + request.arch, "-std=c++17", "--fmad=true",
                                      "-default-device"};
  for (std::string& inc : IncludeOptions()) options.push_back(std::move(inc));
  options.insert(options.end(), request.extra_options.begin(), request.extra_options.end());
  std::vector<const char*> argv;
  argv.reserve(options.size());
  for (const std::string& o : options) argv.push_back(o.c_str());

  nvrtcResult compiled =
      Nvrtc().nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());

  size_t log_size = 0;
  if (Nvrtc().nvrtcGetProgramLogSize(prog.get(), &log_size) == NVRTC_SUCCESS && log_size > 1) {
    std::string log(log_size, '\0');
    if (Nvrtc().nvrtcGetProgramLog(prog.get(), log.data()) == NVRTC_SUCCESS) {
      result.log = TrimLog(std::move(log));
    }
  }
  if (compiled != NVRTC_SUCCESS) {
    s = NvrtcStatus(compiled, "nvrtcCompileProgram");
    std::string msg = StrCat(request.name, ": ", s.message(), " (", request.arch, ")");
    if (!result.log.empty()) msg += "\n" + LogForMessage(result.log);
    result.status = Internal(std::move(msg));
    return;
  }

  for (const std::string& k : request.kernels) {
    std::string expr = "&" + k;
    const char* lowered = nullptr;
    s = CONVT3D_NVRTC_STATUS(nvrtcGetLoweredName(prog.get(), expr.c_str(), &lowered));
    if (!s.ok()) {
      result.status = Prefixed(request.name, s);
      return;
    }
    result.lowered_names.emplace_back(lowered ? lowered : "");
  }

  size_t cubin_size = 0;
  s = CONVT3D_NVRTC_STATUS(nvrtcGetCUBINSize(prog.get(), &cubin_size));
  if (s.ok() && cubin_size == 0) {
    // NVRTC emits only PTX for a virtual arch (compute_XX); loading needs SASS.
    s = Internal(StrCat("no cubin produced for -arch=", request.arch,
                        " (use a real architecture such as sm_90)"));
  }
  if (!s.ok()) {
    result.status = Prefixed(request.name, s);
    return;
  }
  result.cubin.resize(cubin_size);
  s = CONVT3D_NVRTC_STATUS(nvrtcGetCUBIN(prog.get(), result.cubin.data()));
  if (!s.ok()) {
    result.cubin.clear();
    result.status = Prefixed(request.name, s);
  }
}

}  // namespace

StatusOr<int> NvrtcVersion() {
  CONVT3D_RETURN_IF_ERROR(LoadNvrtc());
  int major = 0, minor = 0;
  CONVT3D_NVRTC_RETURN_IF_ERROR(nvrtcVersion(&major, &minor));
  return major * 1000 + minor * 10;
}

CompileResult Compile(const CompileRequest& request) {
  CompileResult result;
  auto start = std::chrono::steady_clock::now();
  try {
    result.name = request.name;
    CompileInto(request, result);
  } catch (const std::exception& e) {
    result.status = Internal(StrCat(request.name, ": exception while compiling: ", e.what()));
  } catch (...) {
    result.status = Internal(StrCat(request.name, ": unknown exception while compiling"));
  }
  result.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return result;
}

std::vector<CompileResult> CompileAll(const std::vector<CompileRequest>& requests, int threads,
                                      const std::function<void(size_t done)>& progress) {
  std::vector<CompileResult> results(requests.size());
  if (requests.empty()) return results;
  size_t workers = threads > 0 ? static_cast<size_t>(threads) : std::thread::hardware_concurrency();
  workers = std::clamp<size_t>(workers, 1, requests.size());

  std::atomic<size_t> next{0};
  std::mutex mu;
  std::condition_variable finished;
  size_t done = 0;
  // Compile() catches everything, so a worker never dies with work left in the queue.
  auto work = [&] {
    for (size_t i = next++; i < requests.size(); i = next++) {
      results[i] = Compile(requests[i]);
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      finished.notify_one();
    }
  };
  std::vector<std::thread> pool;
  try {
    for (size_t t = progress ? 0 : 1; t < workers; ++t) pool.emplace_back(work);
  } catch (...) {
    // Out of threads: the ones started plus this one drain the queue all the same.
  }
  if (!progress || pool.empty()) {
    work();
  } else {
    std::unique_lock<std::mutex> lock(mu);
    for (size_t reported = 0; reported < requests.size();) {
      finished.wait(lock, [&] { return done != reported; });
      reported = done;
      lock.unlock();
      progress(reported);
      lock.lock();
    }
  }
  for (std::thread& t : pool) t.join();
  if (progress && pool.empty()) progress(requests.size());
  return results;
}

}  // namespace convt3d::rt
