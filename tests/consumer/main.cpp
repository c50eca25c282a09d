// main.cpp: uses convt3d's C++ API as a consumer would; exit 0 with a plan, 3 without a GPU.
#include <convt3d/convt3d.h>

#include <cstdio>

int main() {
  convt3d::Problem p;  // nn.ConvTranspose3d(8, 4, kernel_size=3, stride=2)
  p.n = 1, p.c_in = 8, p.c_out = 4, p.in = {4, 4, 4};
  p.kernel = {3, 3, 3}, p.stride = {2, 2, 2};
  const convt3d::Status valid = convt3d::Validate(p);
  if (!valid.ok()) return std::printf("%s\n", valid.ToString().c_str()), 1;
  std::printf("convt3d %s: %s\n", convt3d::Version(), p.Signature().c_str());
  convt3d::Options options;
  options.cache_path = ":memory:";
  options.policy = convt3d::TunePolicy::kNever;
  auto engine = convt3d::Engine::Create(options);
  auto plan = engine.ok() ? engine->Plan(p) : convt3d::StatusOr<convt3d::Plan>(engine.status());
  if (!plan.ok()) {
    const bool no_gpu = plan.status().code() == convt3d::Code::kFailedPrecondition;
    std::printf("%s%s\n", no_gpu ? "no GPU: " : "", plan.status().ToString().c_str());
    return no_gpu ? 3 : 1;
  }
  std::printf("plan: %s (%s)\n", plan->kernel_name().c_str(), plan->source().c_str());
  return 0;
}
