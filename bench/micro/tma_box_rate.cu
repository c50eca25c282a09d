// tma_box_rate.cu: tensor-map copy throughput from L2 of one box shape in two layouts: rows of
// 128 bytes (one input position's 64 bf16 channels, swizzled) against rows of 16-byte units
// (a W run of one unit plane, unswizzled). One copying thread per block, 4 boxes in flight.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

// The kernels' own mbarrier and tensor-map copy helpers (self-contained: no preamble constants).
#include "../../templates/wgmma.cuh"

struct Map {
  CUtensorMap m;
};
// kind 0: position-major box {64 channels, bw, bh, bd, 1}; kind 1: unit-major box {bw x 8
// elements, bh, bd, 8 units, 1}. Box origins spread over the tensor, every box inside it.
extern "C" __global__ void Load(const __grid_constant__ Map map, int kind, int boxes, int bw,
                                int bh, int bd, unsigned bytes, int slot_bytes) {
  extern __shared__ unsigned char sm_raw[];
  const unsigned raw = (unsigned)__cvta_generic_to_shared(sm_raw);
  const unsigned base = (raw + 1023) & ~1023u;
  const unsigned bars = base + 4 * slot_bytes;
  if (threadIdx.x != 0) return;
  for (int i = 0; i < 4; ++i) MbarInit(bars + 8 * i, 1);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  for (int b = 0; b < boxes; ++b) {
    const int s = b % 4;
    if (b >= 4) MbarWait(bars + 8 * s, ((b / 4) - 1) & 1);
    const int t = b * gridDim.x + blockIdx.x;
    // Origins inside the 4 x 16 x 64 x 64 tensor for every box shape here.
    const int w = (t * 7) % (64 - 10), h = (t * 13) % (64 - 34), d = (t * 3) % (16 - 3), n = t % 4,
              chunk = t / 4 % 2;
    MbarArriveExpect(bars + 8 * s, bytes);
    if (kind == 0)
      TmaLoad5(base + s * slot_bytes, &map, chunk * 64, w, h, d, n, bars + 8 * s);
    else
      TmaLoad5(base + s * slot_bytes, &map, w * 8, h, d, chunk * 8, n, bars + 8 * s);
  }
  for (int b = boxes; b < boxes + 4; ++b) MbarWait(bars + 8 * (b % 4), ((b / 4) - 1) & 1);
}
int main() {
  cuInit(0);
  const int N = 4, D = 16, H = 64, W = 64, C = 128;  // 33.5 MB bf16, boxes in bounds
  void* buf;
  cudaMalloc(&buf, (size_t)N * D * H * W * C * 2);
  cudaMemset(buf, 0, (size_t)N * D * H * W * C * 2);
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaFuncSetAttribute(Load, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024);
  struct Case {
    const char* name;
    int kind, bw, bh, bd;
  };
  Case cases[] = {{"position-major 8x32x1 (a stage's A box)", 0, 8, 32, 1},
                  {"position-major 9x9x3", 0, 9, 9, 3},
                  {"unit-major 9x9x3", 1, 9, 9, 3},
                  {"position-major 9x17x2", 0, 9, 17, 2},
                  {"unit-major 9x17x2", 1, 9, 17, 2}};
  for (const Case& cs : cases) {
    Map map;
    memset(&map, 0, sizeof map);
    cuuint64_t dims[5], strides[4];
    cuuint32_t box[5], es[5] = {1, 1, 1, 1, 1};
    CUresult r;
    if (cs.kind == 0) {
      cuuint64_t d5[5] = {(cuuint64_t)C, (cuuint64_t)W, (cuuint64_t)H, (cuuint64_t)D,
                          (cuuint64_t)N};
      memcpy(dims, d5, sizeof d5);
      cuuint32_t b5[5] = {64, (cuuint32_t)cs.bw, (cuuint32_t)cs.bh, (cuuint32_t)cs.bd, 1};
      memcpy(box, b5, sizeof b5);
    } else {
      cuuint64_t d5[5] = {(cuuint64_t)W * 8, (cuuint64_t)H, (cuuint64_t)D, (cuuint64_t)C / 8,
                          (cuuint64_t)N};
      memcpy(dims, d5, sizeof d5);
      cuuint32_t b5[5] = {(cuuint32_t)cs.bw * 8, (cuuint32_t)cs.bh, (cuuint32_t)cs.bd, 8, 1};
      memcpy(box, b5, sizeof b5);
    }
    cuuint64_t st = 2;
    for (int i = 0; i < 4; ++i) strides[i] = st *= dims[i];
    r = cuTensorMapEncodeTiled(
        &map.m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 5, buf, dims, strides, box, es,
        CU_TENSOR_MAP_INTERLEAVE_NONE,
        cs.kind == 0 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
      printf("%s: encode failed %d\n", cs.name, (int)r);
      continue;
    }
    const unsigned bytes = cs.bw * cs.bh * cs.bd * 128;
    const int slot = (bytes + 1023) / 1024 * 1024;
    const int boxes = 2000;
    Load<<<sms, 32, 4 * slot + 2048>>>(map, cs.kind, 50, cs.bw, cs.bh, cs.bd, bytes, slot);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0);
    Load<<<sms, 32, 4 * slot + 2048>>>(map, cs.kind, boxes, cs.bw, cs.bh, cs.bd, bytes, slot);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    printf("%-40s %6u B/box  %8.3f ms  %7.2f TB/s  %s\n", cs.name, bytes, ms,
           (double)sms * boxes * bytes / ms / 1e9, cudaGetErrorString(cudaGetLastError()));
  }
  return 0;
}
