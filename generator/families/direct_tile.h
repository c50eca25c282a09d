// direct_tile.h: the derived sizes of a direct_tile candidate (generator-internal, and tests).
#pragma once

#include <cstdint>

#include "generator/candidates.h"

namespace convt3d::gen {

// Derived sizes of a direct_tile candidate (templates/direct_tile.cu), shared by pruning,
// geometry and source generation. W: a thread's kV outputs start at a multiple of the stride, so
// output k and tap kw meet iff (k + pad - kw*dil) % stride == 0, reading the run's first input
// plus (k + pad - kw*dil) / stride; off_lo/off_hi bound that offset, win_n = off_hi - off_lo + 1.
struct TileShape {
  bool fits = false;  // false: some extent is too large for any shared memory
  int jmax[3] = {1, 1, 1}, dred[3] = {1, 1, 1};
  int halo_d = 0, halo_h = 0, hw = 0, hws = 0;  // halo extents, W row stride (multiple of 4)
  int off_lo = 0, off_hi = 0, win_n = 0;
  int smem_bytes = 0, threads = 0;
  int64_t k_chunk = 0;            // products one output sums within a chunk (ck * taps, at most)
  int64_t u0[2] = {0, 0};         // all-phases blocks: the halo's first D, H row from the tile's q
  int64_t needed[3] = {1, 1, 1};  // rows of the longest D and H phase, and the output width
  int64_t tiles[3] = {1, 1, 1}, co_blocks = 1, blocks = 1;
};
TileShape TileShapeOf(const Problem& p, const Config& c);

}  // namespace convt3d::gen
