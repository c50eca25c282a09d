// candidate.h: a compiled candidate's kernels and the one way to launch them (its LaunchPlan),
// shared by the engine, the tuner and the GPU tests.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "generator/candidates.h"
#include "runtime/runtime.h"

namespace convt3d {

struct CandidateKernels {
  gen::Config config;
  gen::LaunchPlan plan;
  std::map<std::string, std::shared_ptr<rt::Kernel>> kernels;  // by symbol

  // Loads every kernel the candidate's plan launches from its cubin (`symbol`: the main
  // kernel's, which the plan names too).
  static StatusOr<CandidateKernels> Load(const Problem& p, const gen::Config& c,
                                         const std::vector<char>& cubin, const std::string& symbol);
  // Device memory the plan needs as `workspace` in Launch (0: none).
  size_t workspace_bytes() const { return plan.workspace_bytes; }
  // Plays the plan's launches on `stream`. Refuses, before anything runs, a missing workspace
  // or an input pointer the kernels cannot read with their vector width.
  Status Launch(const void* x, const void* w, const void* bias, void* y, void* workspace,
                CUstream_st* stream) const;
};

}  // namespace convt3d
