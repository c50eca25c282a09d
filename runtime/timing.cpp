// timing.cpp: the benchmark protocol: warm up, flush L2, time each run with CUDA events.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "runtime/cuda_api.h"
#include "runtime/runtime.h"

namespace convt3d::rt {
namespace {

// Owns the events of one TimeIt call; destroyed on every return path.
class Events {
 public:
  explicit Events(size_t n) { events_.reserve(n); }
  ~Events() {
    for (CUevent e : events_) (void)Cu().cuEventDestroy(e);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;

  StatusOr<CUevent> Create() {
    CUevent e = nullptr;
    CONVT3D_CU_RETURN_IF_ERROR(cuEventCreate(&e, CU_EVENT_DEFAULT));
    events_.push_back(e);
    return e;
  }

 private:
  std::vector<CUevent> events_;
};

// Linear interpolation between closest ranks; `sorted` is non-empty and ascending.
double Percentile(const std::vector<double>& sorted, double q) {
  double pos = q * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

}  // namespace

StatusOr<Timing> TimeIt(const std::function<Status()>& launch, int warmup, int repeats,
                        size_t l2_flush_bytes) {
  return TimeIt(launch, warmup, repeats, l2_flush_bytes, nullptr);
}

StatusOr<Timing> TimeIt(const std::function<Status()>& launch, int warmup, int repeats,
                        size_t l2_flush_bytes, CUstream_st* stream) {
  if (!launch) return InvalidArgument("TimeIt: empty launch function");
  if (repeats < 1 || warmup < 0) {
    return InvalidArgument(StrCat("TimeIt: repeats=", repeats, " warmup=", warmup,
                                  " (need repeats >= 1, warmup >= 0)"));
  }
  CONVT3D_RETURN_IF_ERROR(LoadDriver());

  CONVT3D_ASSIGN_OR_RETURN(DeviceBuffer flush, DeviceBuffer::Alloc(l2_flush_bytes));
  for (int i = 0; i < warmup; ++i) CONVT3D_RETURN_IF_ERROR(launch());

  Events events(2 * static_cast<size_t>(repeats));
  std::vector<CUevent> start(repeats), stop(repeats);
  for (int i = 0; i < repeats; ++i) {
    CONVT3D_ASSIGN_OR_RETURN(start[i], events.Create());
    CONVT3D_ASSIGN_OR_RETURN(stop[i], events.Create());
  }
  // Everything is queued on one stream, so the flush is ordered before `start` and lies
  // outside the timed interval; alternating bytes keep the driver from eliding the writes.
  const auto flush_ptr = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(flush.get()));
  for (int i = 0; i < repeats; ++i) {
    if (flush.size() > 0) {
      const auto byte = static_cast<unsigned char>(i & 1);
      if (stream == nullptr) {
        CONVT3D_CU_RETURN_IF_ERROR(cuMemsetD8(flush_ptr, byte, flush.size()));
      } else {
        CONVT3D_CU_RETURN_IF_ERROR(cuMemsetD8Async(flush_ptr, byte, flush.size(), stream));
      }
    }
    CONVT3D_CU_RETURN_IF_ERROR(cuEventRecord(start[i], stream));
    CONVT3D_RETURN_IF_ERROR(launch());
    CONVT3D_CU_RETURN_IF_ERROR(cuEventRecord(stop[i], stream));
  }
  // Asynchronous kernel faults surface here, as this call's error.
  CONVT3D_CU_RETURN_IF_ERROR(cuEventSynchronize(stop.back()));

  std::vector<double> ms(repeats);
  for (int i = 0; i < repeats; ++i) {
    float t = 0;
    CONVT3D_CU_RETURN_IF_ERROR(cuEventElapsedTime(&t, start[i], stop[i]));
    ms[i] = t;
  }
  std::sort(ms.begin(), ms.end());
  Timing timing;
  timing.repeats = repeats;
  timing.min_ms = ms.front();
  timing.median_ms = Percentile(ms, 0.5);
  timing.p20_ms = Percentile(ms, 0.2);
  timing.p80_ms = Percentile(ms, 0.8);
  return timing;
}

}  // namespace convt3d::rt
