// warm_start.cpp: first-forward latency of a fresh process, and how many NVRTC compiles it ran.
//
// Run it after `convt3d tune` filled the cache: every problem should be a cache hit with zero
// NVRTC compiles. Usage: warm_start PROBLEMS.json [CACHE]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>

#include "convt3d/convt3d.h"
#include "src/problem_io.h"

int main(int argc, char** argv) {
  if (argc < 2) return std::fprintf(stderr, "usage: warm_start PROBLEMS.json [CACHE]\n"), 2;
  auto problems = convt3d::io::LoadProblems(argv[1]);
  if (!problems.ok()) return std::fprintf(stderr, "%s\n", problems.status().message().c_str()), 2;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  convt3d::Options o;
  o.policy = convt3d::TunePolicy::kCacheOrHeuristic;  // never tune here: a miss shows as such
  if (argc > 2) o.cache_path = argv[2];
  auto engine = convt3d::Engine::Create(o);
  if (!engine.ok()) return std::fprintf(stderr, "%s\n", engine.status().message().c_str()), 1;
  const double create_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("engine create %.1f ms, cache %s\n", create_ms, engine->cache_path().c_str());
  std::printf("%-8s %-34s %-9s %8s %8s %12s %6s\n", "problem", "kernel", "source", "plan ms",
              "run ms", "first fwd ms", "nvrtc");
  int failures = 0;
  for (const auto& np : problems.value()) {
    const auto& p = np.problem;
    void *x, *w, *b = nullptr, *y;
    cudaMalloc(&x, p.InputElements() * 4);
    cudaMalloc(&w, p.WeightElements() * 4);
    cudaMalloc(&y, p.OutputElements() * 4);
    if (p.bias) cudaMalloc(&b, p.c_out * 4);
    cudaDeviceSynchronize();
    const auto t1 = Clock::now();
    auto plan = engine->Plan(p);  // the first forward: plan (cache lookup + module load) + run
    const auto t2 = Clock::now();
    convt3d::Status s = plan.ok() ? plan->Run(x, w, b, y) : plan.status();
    cudaDeviceSynchronize();
    const auto t3 = Clock::now();
    auto ms_between = [](auto a, auto b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    if (!s.ok()) ++failures;
    std::printf("%-8s %-34s %-9s %8.2f %8.2f %12.2f %6d%s\n", np.name.c_str(),
                plan.ok() ? plan->kernel_name().c_str() : "-",
                plan.ok() ? plan->source().c_str() : "error", ms_between(t1, t2),
                ms_between(t2, t3), ms_between(t1, t3), engine->nvrtc_compiles(),
                s.ok() ? "" : ("  " + s.ToString()).c_str());
    cudaFree(x), cudaFree(w), cudaFree(y), cudaFree(b);
  }
  std::printf("total NVRTC compiles in this process: %d\n", engine->nvrtc_compiles());
  return failures ? 1 : 0;
}
