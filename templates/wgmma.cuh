// wgmma.cuh: what the Hopper wgmma templates (igemm_wgmma.cu, gemm_wgmma.cu, shuffle_wgmma.cu)
// share: the accumulator fence, the group wait, the descriptor's low word, mbarriers, bulk
// copies and tensor-map copies (narrow_gemm.cu's tensor-map form uses the last three).

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

// Shared-memory matrix descriptor, low word: start address and LBO (unused by K-major swizzled
// layouts: 1); the high word (SBO, swizzle mode) is each template's kDescHi.
__device__ __forceinline__ unsigned DescLo(unsigned smem_addr) {
  return ((smem_addr & 0x3FFFF) >> 4) | (1u << 16);
}

// mbarriers. A wait on parity P returns once the barrier's phase of that parity has completed (a
// fresh barrier's parity-1 phase counts as completed, so a producer's first pass over its slots
// does not wait).
__device__ __forceinline__ void MbarInit(unsigned addr, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count));
}
__device__ __forceinline__ void MbarWait(unsigned addr, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(addr),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void MbarArrive(unsigned addr) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(addr) : "memory");
}
// Arrives once this thread's earlier cp.async copies have landed (counted in the init count).
__device__ __forceinline__ void MbarArriveOnCopies(unsigned addr) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(addr) : "memory");
}
// Arrives and expects `bytes` more of bulk copies before the phase completes.
__device__ __forceinline__ void MbarArriveExpect(unsigned addr, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(addr), "r"(bytes)
               : "memory");
}
// Expects `bytes` more of bulk copies before the phase completes, without arriving.
__device__ __forceinline__ void MbarExpect(unsigned addr, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(bytes)
               : "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory,
// counted on mbarrier `bar` when they land (cp.async.bulk: no swizzle, no zero fill).
__device__ __forceinline__ void BulkCopy(unsigned dst, const void* src, unsigned bytes,
                                         unsigned bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
// A tiled tensor map passed by value (a CUtensorMap: 128 bytes, 64-byte aligned).
struct alignas(64) TensorMap {
  unsigned long long words[16];
};
// One box of a 5-D tiled tensor map (`map`: the generic address of a __grid_constant__ kernel
// parameter) at element coordinates c0..c4 (innermost first; outside the tensor reads zeros)
// into shared memory at `dst` in the map's swizzle, counted on mbarrier `bar` when it lands.
__device__ __forceinline__ void TmaLoad5(unsigned dst, const void* map, int c0, int c1, int c2,
                                         int c3, int c4, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
      : "memory");
}
