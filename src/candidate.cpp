// candidate.cpp: loading and launching a candidate's kernels.
#include "candidate.h"

#include <cstdint>

#include "status_util.h"

namespace convt3d {

StatusOr<CandidateKernels> CandidateKernels::Load(const Problem& p, const gen::Config& c,
                                                  const std::vector<char>& cubin,
                                                  const std::string& symbol) {
  CandidateKernels k;
  k.config = c;
  k.geometry = gen::Geometry(p, c);
  CONVT3D_ASSIGN_OR_RETURN(k.main, rt::Kernel::Load(cubin, symbol));
  if (k.geometry.workspace_bytes > 0) {
    CONVT3D_ASSIGN_OR_RETURN(k.prep, rt::Kernel::Load(cubin, c.PrepSymbol()));
  }
  return k;
}

Status CandidateKernels::Launch(const void* x, const void* w, const void* bias, void* y,
                                void* workspace, CUstream_st* stream) const {
  const auto& g = geometry;
  if (prep) {
    if (workspace == nullptr)
      return Internal(StrCat(config.Name(), " needs a ", g.workspace_bytes, "-byte workspace"));
    // 16-bit halos are copied 4 bytes at a time (pairs of W positions).
    if (config.dtype == DType::kBF16 || config.dtype == DType::kF16) {
      if (reinterpret_cast<uintptr_t>(x) % 4 != 0)
        return InvalidArgument(StrCat("x=", x, " is not 4-byte aligned, which kernel ",
                                      config.Name(), " needs (copy the input to a fresh buffer)"));
    }
    void* pargs[] = {&w, &workspace};
    CONVT3D_RETURN_IF_ERROR(prep->Launch(g.prep_grid, g.prep_block, 0, stream, pargs));
    void* args[] = {&x, &workspace, &bias, &y};
    return main->Launch(g.grid, g.block, g.smem_bytes, stream, args);
  }
  void* args[] = {&x, &w, &bias, &y};
  return main->Launch(g.grid, g.block, g.smem_bytes, stream, args);
}

}  // namespace convt3d
