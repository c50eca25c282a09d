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
    if (!k.kernels.count(step.symbol)) {
      CONVT3D_ASSIGN_OR_RETURN(k.kernels[step.symbol], rt::Kernel::Load(cubin, step.symbol));
    }
    const int64_t resident =
        static_cast<int64_t>(step.blocks_per_sm) * k.kernels[step.symbol]->sm_count();
    if (resident > 0 && step.grid[0] > resident) step.grid[0] = static_cast<unsigned>(resident);
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
  // Each pointer argument's value, indexed by gen::Arg (whose order this follows; kChunk's is
  // the step's chunk, below).
  const void* const pointers[] = {
      x, w, bias, y, workspace, static_cast<char*>(workspace) + plan.x_offset_bytes, nullptr,
  };
  static_assert(static_cast<int>(gen::Arg::kChunk) + 1 == std::size(pointers));
  for (const gen::LaunchStep& step : plan.steps) {
    int chunk = step.chunk;
    std::vector<const void*> values;
    for (gen::Arg a : step.args) values.push_back(pointers[static_cast<int>(a)]);
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
