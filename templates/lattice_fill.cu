// lattice_fill.cu: bias (or zero) for every output off a lattice kernel's lattice.
//
// Appended to a lattice candidate's module (generator/lattice.h): the kernel above it writes
// the outputs (kLD*od + kOD, kLH*oh + kOH, kLW*ow + kOW) of the real output y (kYDout x kYHout x
// kYWout per channel), od < kDout, oh < kHout, ow < kWout (the sub-problem's extents); nothing
// else gets a product. This kernel writes bias (or zero) on every other output and never on the
// lattice, so the two write disjoint elements and run side by side on two streams
// (src/candidate.cpp): 16-byte stores for the vectors in rows without lattice points (3/4 of
// the rows at stride 2), element stores in the others. A fill of every output before the
// lattice kernel (one flat stream of 16-byte stores) cost L1-77 0.18 of its 0.49 ms in tf32;
// writing only the outputs off the lattice with a warp per row and 64-bit divisions per row took
// 0.88 ms for the whole plan.
__device__ __forceinline__ bool OnLattice(long long p, int step, int offset, int extent) {
  return p >= offset && (p - offset) % step == 0 && (p - offset) / step < extent;
}

extern "C" __global__ void __launch_bounds__(256)
    FILL_KERNEL_NAME(const T* __restrict__ bias, T* __restrict__ y) {
  constexpr idx_t kPlaneY = (idx_t)kYDout * kYHout * kYWout;
  constexpr idx_t kTotal = kPlaneY * kCout * kN;
  constexpr int kVec = 16 / sizeof(T);
  auto value = [&](idx_t e) { return St(kBias ? Ld(bias[e / kPlaneY % kCout]) : 0.f); };
  // Row r (a D, H position of one channel plane) holds lattice points.
  auto lattice_row = [&](idx_t r) {
    return OnLattice(r % kYHout, kLH, kOH, kHout) &&
           OnLattice(r / kYHout % kYDout, kLD, kOD, kDout);
  };
  auto put = [&](idx_t e) {  // one element, unless it is a lattice point
    const idx_t r = e / kYWout;
    if (!lattice_row(r) || !OnLattice(e % kYWout, kLW, kOW, kWout)) y[e] = value(e);
  };
  const idx_t stride = (idx_t)gridDim.x * blockDim.x;
  const idx_t first = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (((unsigned long long)y & 15) != 0) {  // a view into a larger buffer: element stores
    for (idx_t e = first; e < kTotal; e += stride) put(e);
    return;
  }
  for (idx_t v = first; v < kTotal / kVec; v += stride) {
    const idx_t e = v * kVec;
    const idx_t r = e / kYWout;
    if (e % kYWout + kVec > kYWout || lattice_row(r)) {  // spans two rows, or has lattice points
#pragma unroll
      for (int k = 0; k < kVec; ++k) put(e + k);
      continue;
    }
    union {
      T t[kVec];
      unsigned u[4];
    } w;
    const T v0 = value(e);
#pragma unroll
    for (int k = 0; k < kVec; ++k) w.t[k] = v0;  // one row: one channel
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(y + e), "r"(w.u[0]), "r"(w.u[1]),
                 "r"(w.u[2]), "r"(w.u[3])
                 : "memory");
  }
  for (idx_t e = kTotal / kVec * kVec + first; e < kTotal; e += stride) put(e);
}
