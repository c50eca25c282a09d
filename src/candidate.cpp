// candidate.cpp: loading a candidate's kernels and playing its launch plan.
#include "src/candidate.h"

#include <cstdint>
#include <iterator>

#include "base/status.h"

namespace convt3d {

StatusOr<CandidateKernels> CandidateKernels::Load(const Problem& p, const gen::Config& c,
                                                  const std::vector<char>& cubin,
                                                  const std::string& symbol) {
  CandidateKernels k;
  k.config = c;
  k.plan = gen::Launches(p, c);
  for (gen::LaunchStep& step : k.plan.steps) {
    if (step.args.size() > kMaxArgs)
      return Internal(StrCat(c.Name(), ": step ", step.symbol, " passes ", step.args.size(),
                             " arguments, more than the ", kMaxArgs, " a launch takes"));
    if (!k.kernels.count(step.symbol)) {
      CONVT3D_ASSIGN_OR_RETURN(k.kernels[step.symbol], rt::Kernel::Load(cubin, step.symbol));
    }
    k.step_kernels.push_back(k.kernels[step.symbol].get());
    const int64_t resident =
        static_cast<int64_t>(step.blocks_per_sm) * k.kernels[step.symbol]->sm_count();
    if (resident > 0 && step.grid[0] > resident) step.grid[0] = static_cast<unsigned>(resident);
  }
  if (!k.kernels.count(symbol))
    return Internal(StrCat(c.Name(), ": its plan does not launch ", symbol));
  return k;
}

CandidateKernels CandidateKernels::Vendor(std::shared_ptr<const cudnn::Algorithm> algorithm,
                                          std::string name) {
  CandidateKernels k;
  k.plan.workspace_bytes = algorithm->workspace_bytes();
  k.vendor = std::move(algorithm);
  k.vendor_name = std::move(name);
  return k;
}

bool CandidateKernels::has_weight_steps() const {
  for (const gen::LaunchStep& step : plan.steps)
    if (step.weight_only) return true;
  return false;
}

Status CandidateKernels::Launch(const void* x, const void* w, const void* bias, void* y,
                                void* workspace, CUstream_st* stream,
                                bool skip_weight_steps) const {
  if (plan.workspace_bytes > 0 && workspace == nullptr)
    return Internal(StrCat(Name(), " needs a ", plan.workspace_bytes, "-byte workspace"));
  if (vendor) return vendor->Run(x, w, bias, y, workspace, stream);
  if (reinterpret_cast<uintptr_t>(x) % plan.x_alignment != 0)
    return InvalidArgument(StrCat("x=", x, " is not ", plan.x_alignment,
                                  "-byte aligned, which kernel ", config.Name(),
                                  " needs (copy the input to a fresh buffer)"));
  // Each pointer argument's value, indexed by gen::Arg (whose order this follows; kChunk's is
  // the step's chunk, kXRelaidMap's, kXMap's and kWMap's a tensor map, below).
  const void* const pointers[] = {
      x, w, bias, y, workspace, static_cast<char*>(workspace) + plan.x_offset_bytes, nullptr,
  };
  static_assert(static_cast<int>(gen::Arg::kChunk) + 1 == std::size(pointers));
  const void* const x_relaid = pointers[static_cast<int>(gen::Arg::kXRelaid)];
  // Small layers are launch-bound: no allocation, no lookup by name per launch.
  bool launched = false;  // a step of this run is the stream's previous kernel
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const gen::LaunchStep& step = plan.steps[s];
    if (skip_weight_steps && step.weight_only) continue;
    int chunk = step.chunk;
    rt::TensorMap x_map, w_map{};  // encoded per call: their bases are this call's tensors
    const void* values[kMaxArgs];
    void* args[kMaxArgs];
    for (size_t i = 0; i < step.args.size(); ++i) {
      const gen::Arg arg = step.args[i];
      if (arg == gen::Arg::kChunk) {
        args[i] = &chunk;
      } else if (arg == gen::Arg::kXRelaidMap || arg == gen::Arg::kXMap) {
        CONVT3D_ASSIGN_OR_RETURN(
            x_map, rt::EncodeTiledMap(step.x_map, arg == gen::Arg::kXMap ? x : x_relaid));
        args[i] = &x_map;
      } else if (arg == gen::Arg::kWMap) {
        if (step.w_map.rank > 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0) {
          CONVT3D_ASSIGN_OR_RETURN(w_map, rt::EncodeTiledMap(step.w_map, w));
        }  // else all zeros, unread (Arg::kWMap)
        args[i] = &w_map;
      } else {
        values[i] = pointers[static_cast<int>(arg)];
        args[i] = &values[i];
      }
    }
    // A programmatic dependent launch where the step allows it, except into a CUDA graph being
    // captured: there the step keeps a plain edge (programmatic edges in captured graphs are not
    // tested here).
    const bool overlap = launched && step.overlaps_previous && !rt::StreamIsCapturing(stream);
    CONVT3D_RETURN_IF_ERROR(
        step_kernels[s]->Launch(step.grid, step.block, step.smem_bytes, stream, args, overlap));
    launched = true;
  }
  return Status();
}

}  // namespace convt3d
