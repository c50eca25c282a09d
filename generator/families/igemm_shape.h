// igemm_shape.h: the derived sizes of the three implicit-GEMM families' tiles.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "generator/candidates.h"

namespace convt3d::gen {

// Derived sizes of an igemm_simt, igemm_mma or igemm_wgmma candidate, shared by pruning, launch
// geometry and source generation.
struct IgemmShape {
  int jmax[3] = {1, 1, 1}, dred[3] = {1, 1, 1};
  int64_t qmax[3] = {1, 1, 1};
  int lpad = 0;  // W halo padding: (jmax_w-1)*d'_w rounded up to 4 for 16-byte loads
  int smem_bytes = 0, threads = 0;
  // igemm_mma: padded smem strides of a halo channel (elements) and of a weight row (words), the
  // halo row length, weight rows per chunk, words of one step's weight tile, and the per-phase
  // first word of the re-laid weights (indexed (rd*sH + rh)*sW + rw) and their total.
  int plane = 0, wci = 0, hws = 0, kp = 0, wtile = 0;
  int vec = 1;  // input positions per halo copy (16 bytes where the input width allows)
  // igemm_wgmma: plane and wtile count 16-byte units, hws is the halo's W extent, kp the units
  // per chunk, and cg the units per position of a group's re-laid input.
  int cg = 0;
  // igemm_mma halo extents in D and H. With `share` (all-phases blocks whose whole channel group
  // is one chunk) the block loads one halo, the union of every phase's window, and each phase
  // reads it at an offset; u0[i] is that union's first position relative to the tile's first q
  // (D, H: the lowest input any phase reads; W: the lowest q_lo + c, the row then starts lpad
  // earlier as for one phase).
  int halo_d = 0, halo_h = 0;
  bool share = false;
  int64_t u0[3] = {0, 0, 0};
  int64_t chunks = 1;
  std::vector<int64_t> woff;
  int64_t weight_words = 0;  // re-laid weights, at word 0 of the workspace
  int64_t x_words = 0;       // 16-bit: re-laid input (channel pairs), after the weights
  int64_t workspace_words = 0;
  int bn = 0;  // channels per block
  int64_t tiles[3] = {1, 1, 1}, co_tiles = 1, blocks = 1;
};
IgemmShape IgemmShapeOf(const Problem& p, const Config& c);

// The constants every igemm template reads first: the box, the stage depth and the tile counts.
void IgemmPreambleHead(const Config& c, const IgemmShape& s, std::ostream& os);
// The head and the constants of the per-phase tiles (igemm_tile.cuh: igemm_simt, igemm_mma):
// all-phases blocks, staged output rows, the W halo padding. Returns c's shape on p.
IgemmShape PhaseTilePreamble(const Problem& p, const Config& c, std::ostream& os);
// CONVT3D_FOR_PHASE_CLASSES: every (taps D, taps H, taps W) triple some non-empty phase has, one
// instantiation of the tile body each, so all tap loops have compile-time bounds.
void PhaseClasses(const Problem& p, std::ostream& os);
// The launches of a tensor-core igemm candidate: the input re-layout (where it has one), the
// weight re-layout, then the main kernel reading both from the workspace.
LaunchPlan TensorCoreLaunches(const Problem& p, const Config& c, const Config& named);

}  // namespace convt3d::gen
