// elem.cuh: element types of a specialised kernel (storage T, accumulator Acc) and conversions;
// and the wait of a kernel launched as a programmatic dependent (every template includes this).
//
// The preamble defines CONVT3D_ELEM: 0 f32, 1 f64, 2 bf16, 3 f16. 16-bit tensors are held as
// raw bits (unsigned short) and converted with single PTX instructions, so no CUDA header has to
// be found by NVRTC; arithmetic is always f32 (or f64).
#if CONVT3D_ELEM == 1
typedef double T;
typedef double Acc;
#elif CONVT3D_ELEM >= 2
typedef unsigned short T;
typedef float Acc;
#else
typedef float T;
typedef float Acc;
#endif

__device__ __forceinline__ float Ld(float v) { return v; }
__device__ __forceinline__ double Ld(double v) { return v; }
__device__ __forceinline__ float Ld(unsigned short h) {
#if CONVT3D_ELEM == 3
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return __uint_as_float((unsigned)h << 16);  // bf16 is the high half of an f32
#endif
}

// Acc -> storage, round to nearest even (the rounding PyTorch's .to(bfloat16/half) uses).
__device__ __forceinline__ T St(Acc v) {
#if CONVT3D_ELEM == 3
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
#elif CONVT3D_ELEM == 2
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
#else
  return v;
#endif
}

// The kernels of a plan launched as programmatic dependents (LaunchStep::overlaps_previous) may
// start while the stream's previous kernel finishes: they wait for it before they touch global
// memory. A no-op when launched plainly (and compiled out before sm_90, where they never are).
__device__ __forceinline__ void WaitForPreviousKernel() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
