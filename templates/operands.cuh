// operands.cuh: cp.async copies into shared memory and tensor-core operand formats, shared by
// the tensor-core templates (igemm_mma.cu, igemm_wgmma.cu, direct_tile.cu's mma variant).

// A source size of 0 writes zeros: padding channels and the halo outside the input. kBytes 4, 8
// or 16, cached in L1 (.ca: neighbouring halo rows reread the same lines).
template <int kBytes>
__device__ __forceinline__ void CpAsyncZfill(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(
                   (unsigned)__cvta_generic_to_shared(dst)),
               "l"(src), "n"(kBytes), "r"(valid ? kBytes : 0));
}
// 16 bytes bypassing L1 (.cg), always valid.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src) {
  asm volatile(
      "cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((unsigned)__cvta_generic_to_shared(dst)),
      "l"(src));
}
// 16 bytes bypassing L1 (.cg), zeros where !valid.
__device__ __forceinline__ void CpAsync16Zfill(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   (unsigned)__cvta_generic_to_shared(dst)),
               "l"(src), "r"(valid ? 16 : 0));
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
// per fragment element it was the bulk of the issue slots. Finite inputs only: |v| within
// 2^-13 of FLT_MAX would round to Inf.
__device__ __forceinline__ unsigned Tf32(float f) { return __float_as_uint(f) + 0x1000u; }

// TF32 with round-to-nearest (ties away, like cvt.rna) and the low 13 bits cleared, in one add
// and one AND: the big part of the 3xTF32 split, exactly representable so that v - big is exact.
// Finite inputs only (see README: NaNs with the top payload bits set become zero).
__device__ __forceinline__ unsigned Tf32Big(float v) {
  return (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
}

// Two 16-bit operands in one register, the lower K index in the low half (the mma's order).
__device__ __forceinline__ unsigned Pack(unsigned short lo, unsigned short hi) {
  return (unsigned)lo | ((unsigned)hi << 16);
}
