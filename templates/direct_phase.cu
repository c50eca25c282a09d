// direct_phase.cu: direct gather ConvTranspose3d with stride-phase decomposition (family F1).
//
// Specialised by a preamble (generator/source.cpp) that defines, as compile-time constants:
//   idx_t, KERNEL_NAME, kN kCin kCout kG kCinG kCoutG, kDin kHin kWin, kDout kHout kWout,
//   kKD kKH kKW, kSD kSH kSW, kPD kPH kPW, kDRd kDRh kDRw (d' = d/gcd(s,d)), kSRd kSRh kSRw (s'),
//   kJmaxD kJmaxH kJmaxW, kWTiles kHTiles kCoBlocks kTotalBlocks, kBX kBY kOPT kCOB, kBias,
//   and phase tables kPhD[kSD] kPhH[kSH] kPhW[kSW] of Phase {kk0, taps, c, q_lo, q_count}.
//
// One thread owns kOPT outputs along W of one W phase (kBX apart, so each load instruction of a
// warp is coalesced) times kCOB output channels of one group, at one (n, od, oh). For each input
// channel it visits only the taps of its phase: no divisibility test in the inner loop and no
// multiply by a structural zero. The only run-time predicates are input bounds. Storage type T
// and accumulator Acc come from elem.cuh (16-bit tensors accumulate in f32).

__device__ __forceinline__ float Fma(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double Fma(double a, double b, double c) { return fma(a, b, c); }

extern "C" __global__ void __launch_bounds__(kBX* kBY)
    KERNEL_NAME(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                T* __restrict__ y) {
  constexpr int kKvol = kKD * kKH * kKW;
  constexpr idx_t kInPlane = (idx_t)kDin * kHin * kWin;
  // A grid-stride loop over virtual blocks lets any problem size run with a 1-D grid.
  for (long long vb = blockIdx.x; vb < kTotalBlocks; vb += gridDim.x) {
    long long t = vb;
    const int wtile = (int)(t % kWTiles);
    t /= kWTiles;
    const int rw = (int)(t % kSW);
    t /= kSW;
    const int htile = (int)(t % kHTiles);
    t /= kHTiles;
    const int od = (int)(t % kDout);
    t /= kDout;
    const int cob = (int)(t % kCoBlocks);
    t /= kCoBlocks;
    const int g = (int)(t % kG);
    const int n = (int)(t / kG);

    const int oh = htile * kBY + (int)threadIdx.y;
    if (oh >= kHout) continue;  // no barrier in this kernel, so threads may leave early
    const int rd = (od + kPD) % kSD, qd = (od + kPD) / kSD;
    const int rh = (oh + kPH) % kSH, qh = (oh + kPH) / kSH;
    const Phase phd = kPhD[rd], phh = kPhH[rh], phw = kPhW[rw];
    const long long qw0 = phw.q_lo + (long long)wtile * (kBX * kOPT) + threadIdx.x;

    Acc acc[kCOB][kOPT];
#pragma unroll
    for (int c = 0; c < kCOB; ++c)
#pragma unroll
      for (int k = 0; k < kOPT; ++k) acc[c][k] = Acc(0);

    for (int ci = 0; ci < kCinG; ++ci) {
      // Two-level summation (taps of one channel, then channels) keeps the rounding error of
      // long reductions (K = C_in/groups * taps, up to thousands) near that of a blocked GEMM.
      Acc part[kCOB][kOPT];
#pragma unroll
      for (int c = 0; c < kCOB; ++c)
#pragma unroll
        for (int k = 0; k < kOPT; ++k) part[c][k] = Acc(0);
      const T* xc = x + ((idx_t)n * kCin + (idx_t)g * kCinG + ci) * kInPlane;
      const T* wc = w + ((idx_t)(g * kCinG + ci) * kCoutG + (idx_t)cob * kCOB) * kKvol;
#pragma unroll
      for (int jd = 0; jd < kJmaxD; ++jd) {
        if (jd >= phd.taps) break;
        const int id = qd + phd.c - jd * kDRd;
        if (id < 0 || id >= kDin) continue;
        const int kd = phd.kk0 + jd * kSRd;
#pragma unroll
        for (int jh = 0; jh < kJmaxH; ++jh) {
          if (jh >= phh.taps) break;
          const int ih = qh + phh.c - jh * kDRh;
          if (ih < 0 || ih >= kHin) continue;
          const int kh = phh.kk0 + jh * kSRh;
          const T* xrow = xc + ((idx_t)id * kHin + ih) * kWin;
          const T* wrow = wc + (kd * kKH + kh) * kKW;
#pragma unroll
          for (int jw = 0; jw < kJmaxW; ++jw) {
            if (jw >= phw.taps) break;
            const int kw = phw.kk0 + jw * kSRw;
            Acc wv[kCOB];
#pragma unroll
            for (int c = 0; c < kCOB; ++c) wv[c] = Ld(__ldg(wrow + c * kKvol + kw));
            const long long iw0 = qw0 + phw.c - jw * kDRw;
#pragma unroll
            for (int k = 0; k < kOPT; ++k) {
              const long long iw = iw0 + k * kBX;
              const Acc xv = (iw >= 0 && iw < kWin) ? Ld(__ldg(xrow + iw)) : Acc(0);
#pragma unroll
              for (int c = 0; c < kCOB; ++c) part[c][k] = Fma(xv, wv[c], part[c][k]);
            }
          }
        }
      }
#pragma unroll
      for (int c = 0; c < kCOB; ++c)
#pragma unroll
        for (int k = 0; k < kOPT; ++k) acc[c][k] += part[c][k];
    }

#pragma unroll
    for (int c = 0; c < kCOB; ++c) {
      const int co = g * kCoutG + cob * kCOB + c;
      const Acc b = kBias ? Ld(bias[co]) : Acc(0);
      T* yrow =
          y + (((idx_t)n * kCout + co) * kDout + od) * ((idx_t)kHout * kWout) + (idx_t)oh * kWout;
#pragma unroll
      for (int k = 0; k < kOPT; ++k) {
        const long long q = qw0 + k * kBX;
        if (q < phw.q_lo + phw.q_count) yrow[rw - kPW + kSW * q] = St(acc[c][k] + b);
      }
    }
  }
}
