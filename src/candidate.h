// candidate.h: a compiled candidate's kernels (main, and weight re-layout for some families)
// and the one way to launch them, shared by the engine, the tuner and the GPU tests.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "generator/candidates.h"
#include "runtime/runtime.h"

namespace convt3d {

struct CandidateKernels {
  gen::Config config;
  gen::LaunchGeometry geometry;
  // prep (weights) and prepx (input) are null for candidates without those re-layouts, fill
  // for all but lattice candidates.
  std::shared_ptr<rt::Kernel> main, prep, prepx, fill, post;
  size_t halo_align = 1;  // bytes the input pointer must be aligned to

  // Loads the candidate's kernels from its cubin (`symbol` is the main kernel's).
  static StatusOr<CandidateKernels> Load(const Problem& p, const gen::Config& c,
                                         const std::vector<char>& cubin, const std::string& symbol);
  // prep(w, workspace) then main(x, workspace, bias, y) when the family re-lays the weights
  // (workspace: geometry.workspace_bytes of device memory), else main(x, w, bias, y); with an
  // input re-layout, prepx(x, workspace + x_offset) first and main reads the input there. A
  // lattice candidate runs fill(bias, y) before all of them. An fft candidate runs prep(w,
  // workspace), then per chunk prepx(x, workspace, chunk), main(workspace, chunk) and
  // post(workspace, bias, y, chunk).
  Status Launch(const void* x, const void* w, const void* bias, void* y, void* workspace,
                CUstream_st* stream) const;
};

}  // namespace convt3d
