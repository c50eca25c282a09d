// util.cu: helper kernels of the tuner: random fills and the on-GPU error reduction.
//
// Compiled once per process that tunes; never on the path of a cached forward.

// SplitMix64: a counter-based hash, so any element's value depends only on (seed, index).
__device__ __forceinline__ unsigned long long Mix(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1), rounded to float so the f32 and f64 copies hold identical values.
__device__ __forceinline__ float UniformAt(unsigned long long seed, long long i) {
  const unsigned long long h = Mix(seed ^ Mix((unsigned long long)i));
  return (float)((double)(h >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

extern "C" __global__ void convt3d_fill_uniform_f32(float* out, long long count,
                                                    unsigned long long seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x)
    out[i] = UniformAt(seed, i);
}

// 16-bit values: round to nearest even, as the kernels' stores and PyTorch's casts do.
__device__ __forceinline__ unsigned short ToBf16(float v) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
__device__ __forceinline__ unsigned short ToF16(float v) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
__device__ __forceinline__ float FromBf16(unsigned short h) {
  return __uint_as_float((unsigned)h << 16);
}
__device__ __forceinline__ float FromF16(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

extern "C" __global__ void convt3d_fill_uniform_bf16(unsigned short* out, long long count,
                                                     unsigned long long seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x)
    out[i] = ToBf16(UniformAt(seed, i));
}

extern "C" __global__ void convt3d_fill_uniform_f16(unsigned short* out, long long count,
                                                    unsigned long long seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x)
    out[i] = ToF16(UniformAt(seed, i));
}

// The fp64 copy of a fill: `as` = 0 the f32 values, 2 the bf16 values, 3 the f16 values (the
// CONVT3D_ELEM codes), so the reference sees exactly what the kernel under test sees.
extern "C" __global__ void convt3d_fill_uniform_f64(double* out, long long count,
                                                    unsigned long long seed, int as) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) {
    const float v = UniformAt(seed, i);
    out[i] = as == 2 ? FromBf16(ToBf16(v)) : as == 3 ? FromF16(ToF16(v)) : v;
  }
}

// sums[0] += (out-ref)^2, sums[1] += ref^2, sums[2] = max |out-ref| (as ordered bits),
// sums[3] += count of non-finite outputs. A NaN poison left in `out` is counted there.
__device__ __forceinline__ double Widen(float v) { return v; }
__device__ __forceinline__ double Widen(double v) { return v; }
struct Bf16 {
  unsigned short bits;
};
struct F16 {
  unsigned short bits;
};
__device__ __forceinline__ double Widen(Bf16 v) { return FromBf16(v.bits); }
__device__ __forceinline__ double Widen(F16 v) { return FromF16(v.bits); }

template <typename T>
__device__ void CompareBody(const T* out, const double* ref, long long count, double* sums) {
  double d2 = 0, r2 = 0, mx = 0, bad = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) {
    const double o = Widen(out[i]), r = ref[i];
    if (!isfinite(o)) {
      bad += 1;
      continue;
    }
    const double e = o - r;
    d2 += e * e;
    r2 += r * r;
    mx = fmax(mx, fabs(e));
  }
  for (int off = 16; off > 0; off >>= 1) {
    d2 += __shfl_down_sync(0xffffffffu, d2, off);
    r2 += __shfl_down_sync(0xffffffffu, r2, off);
    mx = fmax(mx, __shfl_down_sync(0xffffffffu, mx, off));
    bad += __shfl_down_sync(0xffffffffu, bad, off);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(&sums[0], d2);
    atomicAdd(&sums[1], r2);
    // Non-negative doubles order like their bit patterns.
    atomicMax((unsigned long long*)&sums[2], (unsigned long long)__double_as_longlong(mx));
    atomicAdd(&sums[3], bad);
  }
}

extern "C" __global__ void convt3d_compare_f32(const float* out, const double* ref, long long count,
                                               double* sums) {
  CompareBody(out, ref, count, sums);
}

extern "C" __global__ void convt3d_compare_f64(const double* out, const double* ref,
                                               long long count, double* sums) {
  CompareBody(out, ref, count, sums);
}

extern "C" __global__ void convt3d_compare_bf16(const Bf16* out, const double* ref, long long count,
                                                double* sums) {
  CompareBody(out, ref, count, sums);
}

extern "C" __global__ void convt3d_compare_f16(const F16* out, const double* ref, long long count,
                                               double* sums) {
  CompareBody(out, ref, count, sums);
}
