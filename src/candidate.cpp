// candidate.cpp: loading a candidate's kernels and playing its launch plan.
#include "src/candidate.h"

#include <cstdint>

#include "base/status.h"

namespace convt3d {

StatusOr<CandidateKernels> CandidateKernels::Load(const Problem& p, const gen::Config& c,
                                                  const std::vector<char>& cubin,
                                                  const std::string& symbol) {
  CandidateKernels k;
  k.config = c;
  k.plan = gen::Launches(p, c);
  for (const gen::LaunchStep& step : k.plan.steps) {
    if (k.kernels.count(step.symbol)) continue;
    CONVT3D_ASSIGN_OR_RETURN(k.kernels[step.symbol], rt::Kernel::Load(cubin, step.symbol));
  }
  if (!k.kernels.count(symbol))
    return Internal(StrCat(c.Name(), ": its plan does not launch ", symbol));
  return k;
}

Status CandidateKernels::Launch(const void* x, const void* w, const void* bias, void* y,
                                void* workspace, CUstream_st* stream) const {
  if (plan.workspace_bytes > 0 && workspace == nullptr)
    return Internal(StrCat(config.Name(), " needs a ", plan.workspace_bytes, "-byte workspace"));
  if (reinterpret_cast<uintptr_t>(x) % plan.x_alignment != 0)
    return InvalidArgument(StrCat("x=", x, " is not ", plan.x_alignment,
                                  "-byte aligned, which kernel ", config.Name(),
                                  " needs (copy the input to a fresh buffer)"));
  void* x_relaid = static_cast<char*>(workspace) + plan.x_offset_bytes;
  for (const gen::LaunchStep& step : plan.steps) {
    int chunk = step.chunk;
    std::vector<const void*> values;
    for (gen::Arg a : step.args) {
      switch (a) {
        case gen::Arg::kX:
          values.push_back(x);
          break;
        case gen::Arg::kW:
          values.push_back(w);
          break;
        case gen::Arg::kBias:
          values.push_back(bias);
          break;
        case gen::Arg::kY:
          values.push_back(y);
          break;
        case gen::Arg::kWorkspace:
          values.push_back(workspace);
          break;
        case gen::Arg::kXRelaid:
          values.push_back(x_relaid);
          break;
        case gen::Arg::kChunk:
          values.push_back(nullptr);  // replaced by &chunk below
          break;
      }
    }
    std::vector<void*> args;
    for (size_t i = 0; i < values.size(); ++i)
      args.push_back(step.args[i] == gen::Arg::kChunk ? static_cast<void*>(&chunk)
                                                      : static_cast<void*>(&values[i]));
    CONVT3D_RETURN_IF_ERROR(
        kernels.at(step.symbol)
            ->Launch(step.grid, step.block, step.smem_bytes, stream, args.data()));
  }
  return Status();
}

}  // namespace convt3d
