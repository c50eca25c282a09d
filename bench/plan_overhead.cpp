// plan_overhead.cpp: host time of Plan::Run on a small layer: weights packed every call (no
// version), once (version fixed), or every call again (version bumped each call).
//
// Not a pass/fail test: numbers for issue 21's "one launch + <= 5 us host time per call". Usage:
//   plan_overhead [PROBLEMS.json] [NAME] [CALLS] [MODE]    defaults: problems/models.json NNU-1
//   2000 tf32 (MODE: fp32, fp32x3, tf32, bf16 or f16); the engine tunes if the shape is not in
//   the cache ($CONVT3D_CACHE), so run `convt3d tune` first or give it a few seconds.
// Per mode: the median and 90th percentile of the time spent inside one Run call (the calls are
// asynchronous: this is the host overhead while the GPU queue has room), and the wall time per
// call of the whole loop after a final synchronize (the GPU-bound rate).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "src/problem_io.h"

namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Row {
  const char* mode;
  double median_us = 0, p90_us = 0, wall_us = 0;
  bool ok = true;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string file = argc > 1 ? argv[1] : CONVT3D_SOURCE_DIR "/problems/models.json";
  const std::string name = argc > 2 ? argv[2] : "NNU-1";
  const int calls = argc > 3 ? std::max(10, std::atoi(argv[3])) : 2000;
  const std::string mode = argc > 4 ? argv[4] : "tf32";
  auto problems = convt3d::io::LoadProblems(file);
  if (!problems.ok()) return std::fprintf(stderr, "%s\n", problems.status().message().c_str()), 2;
  convt3d::Problem p;
  bool found = false;
  for (const auto& np : *problems)
    if (np.name == name) p = np.problem, found = true;
  if (!found) return std::fprintf(stderr, "no problem %s in %s\n", name.c_str(), file.c_str()), 2;
  if (mode == "bf16" || mode == "f16") {
    p.dtype = mode == "bf16" ? convt3d::DType::kBF16 : convt3d::DType::kF16;
  } else if (auto pr = convt3d::io::ParsePrecision(mode); pr.ok()) {
    p.precision = *pr;
  } else {
    return std::fprintf(stderr, "mode %s: expected fp32, fp32x3, tf32, bf16 or f16\n",
                        mode.c_str()),
           2;
  }

  auto engine = convt3d::Engine::Create(convt3d::Options{});
  if (!engine.ok()) return std::fprintf(stderr, "%s\n", engine.status().ToString().c_str()), 1;
  auto plan = engine->Plan(p);
  if (!plan.ok()) return std::fprintf(stderr, "%s\n", plan.status().ToString().c_str()), 1;
  int launches = 0, weight_only = 0;
  for (const auto& c : convt3d::gen::Candidates(p))
    if (c.Name() == plan->kernel_name())
      for (const auto& s : convt3d::gen::Launches(p, c).steps)
        ++launches, weight_only += s.weight_only;

  const size_t eb = convt3d::DTypeBytes(p.dtype);
  void *x = nullptr, *w = nullptr, *b = nullptr, *y = nullptr;
  cudaMalloc(&x, p.InputElements() * eb);
  cudaMalloc(&w, p.WeightElements() * eb);
  cudaMalloc(&y, p.OutputElements() * eb);
  if (p.bias) cudaMalloc(&b, p.c_out * eb);
  cudaMemset(x, 0, p.InputElements() * eb);
  cudaMemset(w, 0, p.WeightElements() * eb);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  auto* st = reinterpret_cast<CUstream_st*>(stream);

  enum Kind { kNone, kFixed, kBumped };
  auto measure = [&](const char* label, Kind kind) {
    Row r{label};
    std::vector<double> each(calls);
    for (int i = 0; i < 20; ++i)  // warm-up, and the first pack of the fixed version
      r.ok &= (kind == kNone ? plan->Run(x, w, b, y, st) : plan->Run(x, w, b, y, st, 1)).ok();
    cudaStreamSynchronize(stream);
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) {
      const auto a = Clock::now();
      convt3d::Status s = kind == kNone    ? plan->Run(x, w, b, y, st)
                          : kind == kFixed ? plan->Run(x, w, b, y, st, 1)
                                           : plan->Run(x, w, b, y, st, 1000 + i);
      each[i] = Us(Clock::now() - a);
      r.ok &= s.ok();
    }
    cudaStreamSynchronize(stream);
    r.wall_us = Us(Clock::now() - t0) / calls;
    std::sort(each.begin(), each.end());
    r.median_us = each[calls / 2];
    r.p90_us = each[calls * 9 / 10];
    return r;
  };
  const Row rows[] = {measure("no version (pack every call)", kNone),
                      measure("version fixed (packed once)", kFixed),
                      measure("version bumped every call", kBumped)};
  cudaError_t err = cudaStreamSynchronize(stream);

  std::printf("%s %s: %s (%s), %d launch(es) per Run, %d of them weight-only\n", name.c_str(),
              mode.c_str(), plan->kernel_name().c_str(), plan->source().c_str(), launches,
              weight_only);
  std::printf("%-30s %7s %14s %11s %14s\n", "mode", "calls", "host us median", "host us p90",
              "wall us/call");
  bool ok = err == cudaSuccess;
  for (const Row& r : rows) {
    std::printf("%-30s %7d %14.2f %11.2f %14.2f%s\n", r.mode, calls, r.median_us, r.p90_us,
                r.wall_us, r.ok ? "" : "  (a Run failed)");
    ok &= r.ok;
  }
  if (err != cudaSuccess) std::printf("CUDA error: %s\n", cudaGetErrorString(err));
  cudaStreamDestroy(stream);
  cudaFree(x), cudaFree(w), cudaFree(y), cudaFree(b);
  return ok ? 0 : 1;
}
