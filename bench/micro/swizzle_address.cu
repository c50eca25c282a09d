// swizzle_address.cu: whether wgmma reads a 128-byte-swizzled K-major operand (rows swizzled by
// their shared-memory address, as a tensor-map copy writes them) whose first row is not a
// multiple of 8 and whose 8-row groups lie SBO = 8, 9 or 10 rows apart, as its A or its B, at
// each of the four K steps of a 128-byte row, with the descriptor's base offset 0 or the start
// row's phase; prints the wrong products of each case.
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
// X (the halo): 200 rows of 128 bytes (64 bf16), X[row][k] = (row % 4) * 64 + k, each row
// swizzled by its address; W: 64 rows, W[r][k] = (k == r % 16). role 0: X rows as the A operand
// (M = 64 positions in 8-row groups SBO apart, from row `shift`), W as B (N = 16): D[m][n] =
// X[row(m)][16 kk + n]. role 1: W as A, X rows as the B operand (N = 16 positions): D[m][n] =
// X[row(n)][16 kk + m % 16]. kk: the K step, a descriptor start 32 kk bytes into the rows.
extern "C" __global__ void Check(int halo_w, int shift, int bo_mode, int kk, int role, int* bad) {
  __shared__ __align__(1024) unsigned char sm[48 * 1024];
  const unsigned base = (unsigned)__cvta_generic_to_shared(sm);
  for (int i = threadIdx.x; i < 200 * 64; i += 128) {
    const int row = i / 64, k = i % 64;
    const int byte = row * 128 + ((((k * 2) / 16) ^ (row & 7)) * 16) + (k * 2) % 16;
    *(unsigned short*)(sm + byte) = Bf((float)((row % 4) * 64 + k));
  }
  for (int i = threadIdx.x; i < 64 * 64; i += 128) {
    const int r = i / 64, k = i % 64;
    const int byte = 32768 + r * 128 + ((((k * 2) / 16) ^ (r & 7)) * 16) + (k * 2) % 16;
    *(unsigned short*)(sm + byte) = Bf(k == r % 16 ? 1.f : 0.f);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const unsigned x_addr = base + shift * 128 + 32 * kk;
  const unsigned bo = bo_mode ? (shift & 7) : 0;
  const unsigned long long x = Desc(x_addr, halo_w * 128, bo), w = Desc(base + 32768, 1024, 0);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  if (role == 0)
    Wgmma16(d, x, w);
  else
    Wgmma16(d, w, x);
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  for (int j = 0; j < 2; ++j)
    for (int v = 0; v < 4; ++v) {
      const int m = 16 * warp + lane / 4 + 8 * (v >> 1), n = 8 * j + 2 * (lane % 4) + (v & 1);
      const int pos = role == 0 ? m : n, k = 16 * kk + (role == 0 ? n : m % 16);
      const int row = shift + (pos / 8) * halo_w + pos % 8;
      if (d[4 * j + v] != (float)((row % 4) * 64 + k)) atomicAdd(bad, 1);
    }
}
int main() {
  int* bad;
  cudaMallocManaged(&bad, 4);
  for (int role = 0; role < 2; ++role)
    for (int halo_w : {8, 9, 10})
      for (int shift : {0, 1, 3, 9, 10, 19})
        for (int kk = 0; kk < 4; ++kk)
          for (int bo = 0; bo < 2; ++bo) {
            *bad = 0;
            Check<<<1, 128>>>(halo_w, shift, bo, kk, role, bad);
            cudaError_t e = cudaDeviceSynchronize();
            printf("%s halo_w %2d shift %2d k step %d base offset %s: %4d wrong of 1024 %s\n",
                   role ? "B" : "A", halo_w, shift, kk, bo ? "row&7" : "0    ", *bad,
                   cudaGetErrorString(e));
          }
  return 0;
}
