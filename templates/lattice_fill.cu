// lattice_fill.cu: bias (or zero) for every output of a lattice kernel's real output.
//
// Appended to a lattice candidate's module (generator/lattice.h): the kernel above it writes
// the outputs (kLD*od + kOD, kLH*oh + kOH, kLW*ow + kOW) of the real output y (kYDout x kYHout x
// kYWout per channel); nothing else gets a product. This kernel runs first and writes bias (or
// zero) everywhere, the lattice included, as one flat stream of 16-byte stores; the lattice
// kernel then overwrites its points. Writing the whole output once more is cheaper than writing
// only the outputs off the lattice, which takes a warp per output row, 64-bit index divisions per
// row and scattered stores, and so runs far below store bandwidth.
extern "C" __global__ void __launch_bounds__(256)
    FILL_KERNEL_NAME(const T* __restrict__ bias, T* __restrict__ y) {
  constexpr idx_t kPlaneY = (idx_t)kYDout * kYHout * kYWout;
  constexpr idx_t kTotal = kPlaneY * kCout * kN;
  constexpr int kVec = 16 / sizeof(T);
  auto value = [&](idx_t e) { return St(kBias ? Ld(bias[e / kPlaneY % kCout]) : 0.f); };
  const idx_t stride = (idx_t)gridDim.x * blockDim.x;
  idx_t first = (idx_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (((unsigned long long)y & 15) != 0) {  // a view into a larger buffer: element stores
    for (idx_t e = first; e < kTotal; e += stride) y[e] = value(e);
    return;
  }
  for (idx_t v = first; v < kTotal / kVec; v += stride) {
    const idx_t e = v * kVec;
    union {
      T t[kVec];
      unsigned u[4];
    } w;
    const T v0 = value(e);
#pragma unroll
    for (int k = 0; k < kVec; ++k) w.t[k] = v0;
    if (kBias && (e + kVec - 1) / kPlaneY != e / kPlaneY) {  // the vector spans two channels
#pragma unroll
      for (int k = 1; k < kVec; ++k) w.t[k] = value(e + k);
    }
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(y + e), "r"(w.u[0]), "r"(w.u[1]),
                 "r"(w.u[2]), "r"(w.u[3])
                 : "memory");
  }
  for (idx_t e = kTotal / kVec * kVec + first; e < kTotal; e += stride) y[e] = value(e);
}
