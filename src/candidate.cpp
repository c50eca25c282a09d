// candidate.cpp: loading and launching a candidate's kernels.
#include "src/candidate.h"

#include <cstdint>

#include "base/status.h"

namespace convt3d {

StatusOr<CandidateKernels> CandidateKernels::Load(const Problem& p, const gen::Config& c,
                                                  const std::vector<char>& cubin,
                                                  const std::string& symbol) {
  CandidateKernels k;
  k.config = c;
  k.geometry = gen::Geometry(p, c);
  // The input halo is copied in vectors of up to 16 bytes straight from x, unless re-laid.
  if (c.family == gen::Family::kIgemmMma && k.geometry.x_bytes == 0)
    k.halo_align = static_cast<size_t>(gen::IgemmShapeOf(p, c).vec) * DTypeBytes(p.dtype);
  CONVT3D_ASSIGN_OR_RETURN(k.main, rt::Kernel::Load(cubin, symbol));
  if (k.geometry.workspace_bytes > 0) {
    CONVT3D_ASSIGN_OR_RETURN(k.prep, rt::Kernel::Load(cubin, c.PrepSymbol()));
  }
  if (k.geometry.x_bytes > 0 || c.family == gen::Family::kFft) {
    CONVT3D_ASSIGN_OR_RETURN(k.prepx, rt::Kernel::Load(cubin, c.PrepXSymbol()));
  }
  if (!c.PostSymbol().empty()) {
    CONVT3D_ASSIGN_OR_RETURN(k.post, rt::Kernel::Load(cubin, c.PostSymbol()));
  }
  if (!c.FillSymbol().empty()) {
    CONVT3D_ASSIGN_OR_RETURN(k.fill, rt::Kernel::Load(cubin, c.FillSymbol()));
  }
  return k;
}

Status CandidateKernels::Launch(const void* x, const void* w, const void* bias, void* y,
                                void* workspace, CUstream_st* stream) const {
  const auto& g = geometry;
  // Refuse before anything runs, so that a refused call leaves y untouched.
  if (prep && workspace == nullptr)
    return Internal(StrCat(config.Name(), " needs a ", g.workspace_bytes, "-byte workspace"));
  if (prep && reinterpret_cast<uintptr_t>(x) % halo_align != 0)
    return InvalidArgument(StrCat("x=", x, " is not ", halo_align, "-byte aligned, which kernel ",
                                  config.Name(), " needs (copy the input to a fresh buffer)"));
  if (fill) {  // lattice candidates: bias (or zero) everywhere off the lattice first
    const unsigned block[3] = {256, 1, 1};
    void* fargs[] = {&bias, &y};
    CONVT3D_RETURN_IF_ERROR(fill->Launch(g.fill_grid, block, 0, stream, fargs));
  }
  if (post) {  // fft: the chunks reuse the input and output spectra in the workspace
    if (prepx == nullptr || prep == nullptr) return Internal(config.Name() + " lacks a kernel");
    void* pargs[] = {&w, &workspace};
    CONVT3D_RETURN_IF_ERROR(prep->Launch(g.prep_grid, g.prep_block, 0, stream, pargs));
    const unsigned block[3] = {256, 1, 1};
    for (int chunk = 0; chunk < g.chunks; ++chunk) {
      void* xargs[] = {&x, &workspace, &chunk};
      CONVT3D_RETURN_IF_ERROR(prepx->Launch(g.prepx_grid, block, g.prepx_smem, stream, xargs));
      void* margs[] = {&workspace, &chunk};
      CONVT3D_RETURN_IF_ERROR(main->Launch(g.grid, block, g.smem_bytes, stream, margs));
      void* oargs[] = {&workspace, &bias, &y, &chunk};
      CONVT3D_RETURN_IF_ERROR(post->Launch(g.post_grid, block, g.post_smem, stream, oargs));
    }
    return Status();
  }
  if (prep) {
    if (prepx) {
      void* xw = static_cast<char*>(workspace) + g.x_offset_bytes;
      void* xargs[] = {&x, &xw};
      CONVT3D_RETURN_IF_ERROR(prepx->Launch(g.prepx_grid, g.prep_block, 0, stream, xargs));
      x = xw;
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
