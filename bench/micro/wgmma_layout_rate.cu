// wgmma_layout_rate.cu: throughput of m64n128k16 bf16 wgmma with both operands in shared memory,
// K-major, 128-byte swizzled against unswizzled (core matrices 144 or 128 bytes apart along M/N,
// 3888 or 1024 along K), one or two warpgroups per SM.
#include <cuda_runtime.h>

#include <cstdio>
__device__ __forceinline__ void Wgmma(float* d, unsigned long long a, unsigned long long b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%"
      "25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%"
      "48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, "
      "0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(a), "l"(b));
}
__device__ __forceinline__ unsigned long long Desc(unsigned addr, unsigned lbo, unsigned sbo,
                                                   unsigned swz) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32) | ((unsigned long long)swz << 62);
}
// mode: 0 A,B swizzle-128; 1 A no-swizzle (SBO 144, LBO 3888); 2 A no-swizzle dense (SBO 128, LBO
// 1024); 3 B no-swizzle (SBO 144, LBO 3888), A swizzle-128; 4 both no-swizzle (144/3888)
extern "C" __global__ void __launch_bounds__(256, 1) Bench(int iters, int mode, float* sink) {
  extern __shared__ unsigned char sm_raw[];
  const unsigned raw = (unsigned)__cvta_generic_to_shared(sm_raw);
  const unsigned base = (raw + 1023) & ~1023u;
  const int wg = threadIdx.x / 128;
  // each warpgroup: A at base + wg*64K, B at base + wg*64K + 32K
  const unsigned a0 = base + wg * 65536, b0 = a0 + 32768;
  for (int i = threadIdx.x; i < 2 * 65536 / 4; i += blockDim.x)
    ((unsigned*)(sm_raw + (base - raw)))[i] = 0x3c003c00u;
  __syncthreads();
  float d[64];
  for (int i = 0; i < 64; ++i) d[i] = 0.f;
  const bool ans = mode == 1 || mode == 2 || mode == 4, bns = mode == 3 || mode == 4;
  const unsigned alb = mode == 2 ? 1024 : 3888, asb = mode == 2 ? 128 : 144;
  for (int it = 0; it < iters; ++it) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) {
      const int k = kk % 4;
      // K step of 16 bf16 = 32 bytes: swizzle-128 rows advance 32 B; no-swizzle: 2 core matrices (2
      // LBO)
      unsigned long long a =
          ans ? Desc(a0 + k * 2 * alb, alb, asb, 0) : Desc(a0 + k * 32, 16, 1024, 1);
      unsigned long long b =
          bns ? Desc(b0 + k * 2 * 3888, 3888, 144, 0) : Desc(b0 + k * 32, 16, 1024, 1);
      Wgmma(d, a, b);
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  float s = 0;
  for (int i = 0; i < 64; ++i) s += d[i];
  if (s == 1234.5f) sink[threadIdx.x] = s;
}
int main() {
  cudaFuncSetAttribute(Bench, cudaFuncAttributeMaxDynamicSharedMemorySize, 140 * 1024);
  float* sink;
  cudaMalloc(&sink, 4096);
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int iters = 20000;
  for (int threads : {128, 256})
    for (int mode = 0; mode < 5; ++mode) {
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      Bench<<<sms, threads, 140 * 1024>>>(100, mode, sink);
      cudaEventRecord(e0);
      Bench<<<sms, threads, 140 * 1024>>>(iters, mode, sink);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      double flops = 2.0 * sms * (threads / 128) * (double)iters * 16 * 64 * 128 * 16;
      printf("wgs %d mode %d: %.3f ms, %.1f TFLOP/s %s\n", threads / 128, mode, ms,
             flops / ms / 1e9, cudaGetErrorString(cudaGetLastError()));
    }
  return 0;
}
