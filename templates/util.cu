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

extern "C" __global__ void convt3d_fill_uniform_f64(double* out, long long count,
                                                    unsigned long long seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x)
    out[i] = (double)UniformAt(seed, i);
}

// sums[0] += (out-ref)^2, sums[1] += ref^2, sums[2] = max |out-ref| (as ordered bits),
// sums[3] += count of non-finite outputs. A NaN poison left in `out` is counted there.
template <typename T>
__device__ void CompareBody(const T* out, const double* ref, long long count, double* sums) {
  double d2 = 0, r2 = 0, mx = 0, bad = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < count;
       i += (long long)gridDim.x * blockDim.x) {
    const double o = (double)out[i], r = ref[i];
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
