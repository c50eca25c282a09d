// swizzle_address.cu: whether wgmma reads a 128-byte-swizzled K-major A operand (rows swizzled by
// their shared-memory address, as a tensor-map copy writes them) whose first row is not a
// multiple of 8 and whose 8-row groups lie SBO = 8, 9 or 10 rows apart, with the descriptor's
// base offset 0 or the start row's phase; prints the wrong products of each case.
#include <cuda_runtime.h>

#include <cstdio>
__device__ __forceinline__ void Wgmma16(float* d, unsigned long long a, unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, "
      "1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "l"(a), "l"(b));
}
__device__ __forceinline__ unsigned long long Desc(unsigned addr, unsigned sbo, unsigned bo) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) |
         ((unsigned long long)(sbo >> 4) << 32) | ((unsigned long long)bo << 49) | (1ull << 62);
}
__device__ __forceinline__ unsigned short Bf(float f) {
  return (unsigned short)(__float_as_uint(f) >> 16);
}
// A: rows of 128 B (64 bf16), value(row, k) = (row % 16) * 16 + k for k < 16, swizzled by absolute
// row.
extern "C" __global__ void Check(int halo_w, int shift, int bo_mode, int* bad) {
  __shared__ __align__(1024) unsigned char sm[48 * 1024];
  const unsigned base = (unsigned)__cvta_generic_to_shared(sm);
  const int rows = 200;
  for (int i = threadIdx.x; i < rows * 64; i += 128) {
    const int row = i / 64, k = i % 64;
    const int byte = row * 128 + ((((k * 2) / 16) ^ (row & 7)) * 16) + (k * 2) % 16;
    *(unsigned short*)(sm + byte) = Bf(k < 16 ? (float)((row % 16) * 16 + k) : 0.f);
  }
  // B: 16 rows (N) of 128 B at base + 32K, B[n][k] = (k == n), swizzled the same way.
  for (int i = threadIdx.x; i < 16 * 64; i += 128) {
    const int n = i / 64, k = i % 64;
    const int byte = 32768 + n * 128 + ((((k * 2) / 16) ^ (n & 7)) * 16) + (k * 2) % 16;
    *(unsigned short*)(sm + byte) = Bf(k == n ? 1.f : 0.f);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const unsigned a_addr = base + shift * 128;
  const unsigned bo = bo_mode ? (shift & 7) : 0;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  Wgmma16(d, Desc(a_addr, halo_w * 128, bo), Desc(base + 32768, 1024, 0));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  const int t = threadIdx.x, w = t / 32, lane = t % 32;
  for (int j = 0; j < 2; ++j)
    for (int v = 0; v < 4; ++v) {
      const int m = 16 * w + lane / 4 + 8 * (v >> 1), n = 8 * j + 2 * (lane % 4) + (v & 1);
      const int row = shift + (m / 8) * halo_w + m % 8;
      const float want = (float)((row % 16) * 16 + n);
      if (d[4 * j + v] != want) atomicAdd(bad, 1);
    }
}
int main() {
  int* bad;
  cudaMallocManaged(&bad, 4);
  for (int halo_w : {8, 9, 10})
    for (int shift : {0, 1, 3, 9, 10, 19})
      for (int bo = 0; bo < 2; ++bo) {
        *bad = 0;
        Check<<<1, 128>>>(halo_w, shift, bo, bad);
        cudaError_t e = cudaDeviceSynchronize();
        printf("halo_w %2d shift %2d base_offset %s: %4d wrong of 1024 %s\n", halo_w, shift,
               bo ? "row&7" : "0    ", *bad, cudaGetErrorString(e));
      }
  return 0;
}
