// operands.cuh: cp.async copies into shared memory, shared-memory vector loads, and tensor-core
// operand formats and mma.sync calls, shared by igemm_simt.cu (cp.async), igemm_mma.cu,
// igemm_wgmma.cu, direct_tile.cu, winograd.cu and fft_tiling.cu.

// A source size of 0 writes zeros: padding channels and the halo outside the input. kBytes 4, 8
// or 16, cached in L1 (.ca: neighbouring halo rows reread the same lines). dst: a shared-memory
// address (32-bit), or a generic pointer into shared memory.
template <int kBytes>
__device__ __forceinline__ void CpAsyncZfill(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src), "n"(kBytes),
               "r"(valid ? kBytes : 0));
}
template <int kBytes>
__device__ __forceinline__ void CpAsyncZfill(void* dst, const void* src, bool valid) {
  CpAsyncZfill<kBytes>((unsigned)__cvta_generic_to_shared(dst), src, valid);
}
// 16 bytes bypassing L1 (.cg), always valid.
__device__ __forceinline__ void CpAsync16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void CpAsync16(void* dst, const void* src) {
  CpAsync16((unsigned)__cvta_generic_to_shared(dst), src);
}
// 16 bytes bypassing L1 (.cg), zeros where !valid.
__device__ __forceinline__ void CpAsync16Zfill(unsigned dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CpAsync16Zfill(void* dst, const void* src, bool valid) {
  CpAsync16Zfill((unsigned)__cvta_generic_to_shared(dst), src, valid);
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void CpAsyncWaitAll() { asm volatile("cp.async.wait_all;\n" ::); }

// Round to TF32, nearest with ties away from zero (cvt.rna's rounding) in one integer add: the
// tensor core ignores the low 13 mantissa bits, so adding half of their range first rounds.
// cvt.rna.tf32.f32 costs several instructions (it also screens NaN/Inf); at one conversion
// per fragment element it would take most of the issue slots. Finite inputs only: |v| within
// 2^-13 of FLT_MAX would round to Inf.
__device__ __forceinline__ unsigned Tf32(float f) { return __float_as_uint(f) + 0x1000u; }

// TF32 with round-to-nearest (ties away, like cvt.rna) and the low 13 bits cleared, in one add
// and one AND: the big part of the 3xTF32 split, exactly representable so that v - big is exact.
// Finite inputs only (see README: NaNs with the top payload bits set become zero).
__device__ __forceinline__ unsigned Tf32Big(float v) {
  return (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
}

// Operand in TF32: big = rna(v); for 3xTF32 (kSplit == 3) also small = rna(v - big), where big
// must be exactly representable (low bits cleared) for the subtraction to be exact.
template <int kSplit>
__device__ __forceinline__ void Split(float v, unsigned& big, unsigned& small) {
  if (kSplit == 3) {
    big = Tf32Big(v);
    small = Tf32(v - __uint_as_float(big));
  } else {
    big = Tf32(v);
  }
}

// d += a * b on the tensor cores: m16n8k16 for bf16 and f16 storage, m16n8k8 TF32 otherwise.
__device__ __forceinline__ void Mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#if CONVT3D_ELEM == 2
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
#elif CONVT3D_ELEM == 3
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
#else
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
#endif
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += a * b from split operands: for 3xTF32 the two small-by-big terms first, then big x big
// (small x small is below fp32's resolution); otherwise big x big alone (as, bs unread).
template <int kSplit>
__device__ __forceinline__ void MmaSplit(float (&d)[4], const unsigned (&ab)[4],
                                         const unsigned (&as)[4], const unsigned (&bb)[2],
                                         const unsigned (&bs)[2]) {
  if (kSplit == 3) {
    Mma(d, as, bb);
    Mma(d, ab, bs);
  }
  Mma(d, ab, bb);
}

// Two 16-bit operands in one register, the lower K index in the low half (the mma's order).
__device__ __forceinline__ unsigned Pack(unsigned short lo, unsigned short hi) {
  return (unsigned)lo | ((unsigned)hi << 16);
}

// kN consecutive floats from shared memory, 16 or 8 bytes at a time where kN allows (p aligned to
// match): a thread's weights (direct_tile) or GEMM operands (winograd).
template <int kN>
__device__ __forceinline__ void LoadRun(const float* p, float (&v)[kN]) {
#pragma unroll
  for (int i = 0; i < kN;) {
    if (kN % 4 == 0) {
      const float4 q = *reinterpret_cast<const float4*>(p + i);
      v[i] = q.x, v[i + 1] = q.y, v[i + 2] = q.z, v[i + 3] = q.w;
      i += 4;
    } else if (kN % 2 == 0) {
      const float2 q = *reinterpret_cast<const float2*>(p + i);
      v[i] = q.x, v[i + 1] = q.y;
      i += 2;
    } else {
      v[i] = p[i];
      i += 1;
    }
  }
}
