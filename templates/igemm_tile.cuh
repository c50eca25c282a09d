// igemm_tile.cuh: which stride phase, q-box, channel tile, group and batch an implicit-GEMM block
// owns (igemm_simt.cu, igemm_mma.cu).
//
// Virtual blocks are numbered with the W tile fastest, then the H and D tiles, the phase (rw,
// rh, rd), the channel tile, the group and the batch. All-phases blocks (kALLPH) have no phase
// digits: they visit every phase in a loop and pass its index as `pi`.
struct BlockTile {
  int n, g, co_tile, rd, rh, rw;
  Phase phd, phh, phw;
  long long q0d, q0h, q0w;  // the q-box's first position in each dimension

  // Tiles past the end of this phase's (shorter) q-range have nothing to do. The test is
  // block-uniform, so skipping keeps every barrier matched.
  __device__ __forceinline__ bool Empty() const {
    return q0d >= phd.q_lo + phd.q_count || q0h >= phh.q_lo + phh.q_count ||
           q0w >= phw.q_lo + phw.q_count;
  }
};

__device__ __forceinline__ BlockTile DecodeBlock(long long vb, int pi) {
  BlockTile b;
  long long t = vb;
  const int wt = (int)(t % kQWTiles);
  t /= kQWTiles;
  const int ht = (int)(t % kQHTiles);
  t /= kQHTiles;
  const int dt = (int)(t % kQDTiles);
  t /= kQDTiles;
  b.rw = pi % kSW, b.rh = (pi / kSW) % kSH, b.rd = pi / (kSW * kSH);
  if (!kALLPH) {
    b.rw = (int)(t % kSW);
    t /= kSW;
    b.rh = (int)(t % kSH);
    t /= kSH;
    b.rd = (int)(t % kSD);
    t /= kSD;
  }
  b.co_tile = (int)(t % kCoTiles);
  t /= kCoTiles;
  b.g = (int)(t % kG);
  b.n = (int)(t / kG);
  b.phd = kPhD[b.rd], b.phh = kPhH[b.rh], b.phw = kPhW[b.rw];
  b.q0d = b.phd.q_lo + (long long)dt * kBQD;
  b.q0h = b.phh.q_lo + (long long)ht * kBQH;
  b.q0w = b.phw.q_lo + (long long)wt * kBQW;
  return b;
}

// b0's q-box, batch, group and channel tile in phase pi of an all-phases block: the phase's
// tables and first q only, without DecodeBlock's 64-bit divisions, which would otherwise run
// again for every phase of every tile.
__device__ __forceinline__ BlockTile WithPhase(const BlockTile& b0, int pi) {
  BlockTile b = b0;
  b.rw = pi % kSW, b.rh = (pi / kSW) % kSH, b.rd = pi / (kSW * kSH);
  b.phd = kPhD[b.rd], b.phh = kPhH[b.rh], b.phw = kPhW[b.rw];
  b.q0d = b.phd.q_lo + (b0.q0d - b0.phd.q_lo);
  b.q0h = b.phh.q_lo + (b0.q0h - b0.phh.q_lo);
  b.q0w = b.phw.q_lo + (b0.q0w - b0.phw.q_lo);
  return b;
}
