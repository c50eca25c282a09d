// forward.cpp: the README's embedding example: one ConvTranspose3d forward through convt3d.
#include <convt3d/convt3d.h>
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  convt3d::Problem p;  // nn.ConvTranspose3d(32, 16, kernel_size=3, stride=2, padding=1)
  p.n = 4, p.c_in = 32, p.c_out = 16, p.in = {8, 16, 16};
  p.kernel = {3, 3, 3}, p.stride = {2, 2, 2}, p.padding = {1, 1, 1};
  auto engine = convt3d::Engine::Create(convt3d::Options{});  // cache: ~/.cache/convt3d
  if (!engine.ok()) return std::printf("%s\n", engine.status().ToString().c_str()), 1;
  auto plan = engine->Plan(p);  // cache hit, or tune once and store the winner
  if (!plan.ok()) return std::printf("%s\n", plan.status().ToString().c_str()), 1;
  float *x, *w, *y;
  cudaMalloc(&x, p.InputElements() * sizeof(float));
  cudaMalloc(&w, p.WeightElements() * sizeof(float));
  cudaMalloc(&y, p.OutputElements() * sizeof(float));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  convt3d::Status s = plan->Run(x, w, /*bias=*/nullptr, y, stream);  // launch only
  cudaStreamSynchronize(stream);
  std::printf("%s: %s (%s)\n", s.ToString().c_str(), plan->kernel_name().c_str(),
              plan->source().c_str());
  return s.ok() ? 0 : 1;
}
