// candidate.h: a compiled candidate's kernels and the one way to launch them (its LaunchPlan),
// shared by the engine, the tuner and the GPU tests.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "generator/candidates.h"
#include "runtime/cudnn.h"
#include "runtime/runtime.h"

namespace convt3d {

struct CandidateKernels {
  // Kernel arguments a step may pass (Load refuses a plan with more).
  static constexpr size_t kMaxArgs = 8;

  gen::Config config;
  gen::LaunchPlan plan;
  // A vendor candidate (src/vendor.h) runs cuDNN's algorithm instead of kernels of ours: then
  // `config` and `plan`'s steps are unused, and plan.workspace_bytes is cuDNN's workspace.
  std::shared_ptr<const cudnn::Algorithm> vendor;
  std::string vendor_name;                                     // "cudnn:ALGO_1"
  std::map<std::string, std::shared_ptr<rt::Kernel>> kernels;  // by symbol
  std::vector<const rt::Kernel*> step_kernels;  // plan.steps[i]'s, so a launch looks up nothing

  // Loads every kernel the candidate's plan launches from its cubin (`symbol`: the main
  // kernel's, which the plan names too).
  static StatusOr<CandidateKernels> Load(const Problem& p, const gen::Config& c,
                                         const std::vector<char>& cubin, const std::string& symbol);
  // A vendor candidate of `algorithm`, called `name`.
  static CandidateKernels Vendor(std::shared_ptr<const cudnn::Algorithm> algorithm,
                                 std::string name);
  // The candidate's name: config.Name(), or the vendor candidate's.
  std::string Name() const { return vendor ? vendor_name : config.Name(); }
  // Device memory the plan needs as `workspace` in Launch (0: none).
  size_t workspace_bytes() const { return plan.workspace_bytes; }
  // Whether the plan has weight-only steps (gen::LaunchStep::weight_only).
  bool has_weight_steps() const;
  // Plays the plan's launches on `stream`, without its weight-only steps when
  // `skip_weight_steps` (the workspace then holds what they wrote from these same weights).
  // Refuses, before anything runs, a missing workspace or an input pointer the kernels cannot
  // read with their vector width. Allocates nothing.
  Status Launch(const void* x, const void* w, const void* bias, void* y, void* workspace,
                CUstream_st* stream, bool skip_weight_steps = false) const;
};

}  // namespace convt3d
