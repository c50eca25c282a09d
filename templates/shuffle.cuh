// shuffle.cuh: what the pixel-shuffle templates (shuffle_wgmma.cu, shuffle_simt.cu) share: how
// a persistent block walks the column slices (group, slice) and their row tiles.

// This block's slices s0, s0 + sstep, ... of `slices`, and in each its row tiles m0, m0 + mstep,
// ...: with at least one block per slice, each block keeps one slice and takes every
// (grid / slices)-th row tile; otherwise a block walks slices, each with all its row tiles.
// Returns false where the block has nothing to do (the blocks past a multiple of `slices`).
__device__ __forceinline__ bool ShuffleWalk(int slices, int& s0, int& sstep, long long& m0,
                                            long long& mstep) {
  s0 = blockIdx.x, sstep = gridDim.x;
  m0 = 0, mstep = 1;
  if ((int)gridDim.x >= slices) {
    const int per = gridDim.x / slices;
    if ((int)blockIdx.x >= per * slices) return false;
    s0 = blockIdx.x % slices, sstep = slices;
    m0 = blockIdx.x / slices, mstep = per;
  }
  return true;
}
