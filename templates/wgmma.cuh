// wgmma.cuh: the accumulator fence and the group wait of the Hopper wgmma templates
// (igemm_wgmma.cu, gemm_wgmma.cu).

// Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmmas.
template <int kN>
__device__ __forceinline__ void FenceRegs(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Waits until at most kPending committed wgmma groups of this warpgroup are still in flight.
template <int kPending>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
