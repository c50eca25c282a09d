// candidate.cpp: loading and launching a candidate's kernels.
#include "candidate.h"

#include <cstdint>

#include "status_util.h"

namespace convt3d {
namespace {

// The side stream's events of a sample-chunked candidate: the fork, and per re-laid input
// buffer "ready" (its re-layout is done) and "free" (the main kernel reading it is done).
enum : int { kForked = 0, kBufferReady = 1, kBufferFree = 3, kChunkEvents = 5 };

}  // namespace

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
  if (k.geometry.chunks > 0 && k.post == nullptr) {
    CONVT3D_ASSIGN_OR_RETURN(k.side, rt::SideStream::Create(kChunkEvents));
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
  if (side) return LaunchChunked(x, w, bias, y, workspace, stream);
  if (fill) {
    const unsigned block[3] = {256, 1, 1};
    void* fargs[] = {&bias, &y};
    CONVT3D_RETURN_IF_ERROR(fill->Launch(g.fill_grid, block, 0, stream, fargs));
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

Status CandidateKernels::LaunchChunked(const void* x, const void* w, const void* bias, void* y,
                                       void* workspace, CUstream_st* stream) const {
  const auto& g = geometry;
  if (prepx == nullptr || prep == nullptr) return Internal(config.Name() + " lacks a kernel");
  const auto lock = side->lock();
  void* pargs[] = {&w, &workspace};
  CONVT3D_RETURN_IF_ERROR(prep->Launch(g.prep_grid, g.prep_block, 0, stream, pargs));
  // The side stream starts after everything on `stream` so far: x's producers, and the previous
  // call's main kernels, which read the buffers this call's re-layouts overwrite.
  CONVT3D_RETURN_IF_ERROR(side->Record(stream, kForked));
  CONVT3D_RETURN_IF_ERROR(side->Wait(side->get(), kForked));
  for (int c = 0; c < g.chunks; ++c) {
    const int b = c % 2;
    void* xw = static_cast<char*>(workspace) + (b ? g.x2_offset_bytes : g.x_offset_bytes);
    const void* xc = static_cast<const char*>(x) + c * g.x_chunk_bytes;
    void* yc = static_cast<char*>(y) + c * g.y_chunk_bytes;
    // Buffer b is free once chunk c - 2's main kernel is done.
    if (c >= 2) CONVT3D_RETURN_IF_ERROR(side->Wait(side->get(), kBufferFree + b));
    void* xargs[] = {&xc, &xw};
    CONVT3D_RETURN_IF_ERROR(prepx->Launch(g.prepx_grid, g.prep_block, 0, side->get(), xargs));
    CONVT3D_RETURN_IF_ERROR(side->Record(side->get(), kBufferReady + b));
    CONVT3D_RETURN_IF_ERROR(side->Wait(stream, kBufferReady + b));
    void* args[] = {&xw, &workspace, &bias, &yc};
    CONVT3D_RETURN_IF_ERROR(main->Launch(g.grid, g.block, g.smem_bytes, stream, args));
    CONVT3D_RETURN_IF_ERROR(side->Record(stream, kBufferFree + b));
  }
  return Status();
}

}  // namespace convt3d
