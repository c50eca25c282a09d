// igemm_simt.cu: FFMA implicit GEMM per stride phase with a shared-memory halo (family F2).
//
// Specialised by a preamble (generator/source.cpp) with the shape constants of direct_phase.cu
// plus: kBQD kBQH kBQW (q-tile per block), kTM (consecutive W outputs per thread), kTN (output
// channels per thread), kNT (channel groups per block), kCK (input channels per smem stage),
// kLPAD (W halo padding, a multiple of 4 >= (kJmaxW-1)*kDRw), tile counts kQDTiles kQHTiles
// kQWTiles kCoTiles kTotalBlocks, phase tables kPhD/kPhH/kPhW and CONVT3D_FOR_PHASE_CLASSES(X),
// which lists the distinct (taps D, taps H, taps W) triples among the phases.
//
// A block owns one phase (rd, rh, rw), a q-box kBQD x kBQH x kBQW of that phase's outputs and
// kNT*kTN output channels of one group. Per stage of kCK input channels it stages the input
// halo of the q-box and the phase's weights in shared memory (cp.async, double-buffered, so
// the next stage loads while this one computes); each thread then keeps a window
// of kLPAD+kTM inputs of one row in registers and reuses it for every W tap (outer products of
// kTM inputs by kTN weights). Tap counts are template arguments, so every loop unrolls and no
// structural zero is multiplied; empty phases only write the bias.

constexpr int kThreadsW = kBQW / kTM;
constexpr int kThreads = kThreadsW * kBQH * kBQD * kNT;
constexpr int kBN = kTN * kNT;
// Weight rows are padded: the fill writes taps fastest (the global order), so an unpadded
// power-of-two row would put a warp's 32 stores in one bank. +4 keeps 16-byte alignment for
// the float4 reads (kBN % 4 == 0 whenever kTN % 4 == 0) and leaves at most 4-way conflicts.
constexpr int kBNP = kTN % 4 == 0 ? kBN + 4 : kBN + 1;
constexpr int kHD = kBQD + (kJmaxD > 0 ? kJmaxD - 1 : 0) * kDRd;
constexpr int kHH = kBQH + (kJmaxH > 0 ? kJmaxH - 1 : 0) * kDRh;
constexpr int kHW = kBQW + kLPAD;
constexpr int kJD1 = kJmaxD > 0 ? kJmaxD : 1, kJH1 = kJmaxH > 0 ? kJmaxH : 1;
constexpr int kJW1 = kJmaxW > 0 ? kJmaxW : 1;

struct __align__(16) Smem {              // 16-byte aligned so sm[1] keeps float4 reads aligned
  float x[kCK][kHD][kHH][kHW];           // input halo, zero outside the input
  float w[kCK][kJD1][kJH1][kJW1][kBNP];  // this phase's weights, channels fastest
};

template <int JD, int JH, int JW>
__device__ __forceinline__ void Tile(Smem (&sm)[2], const float* __restrict__ x,
                                     const float* __restrict__ w, int n, int g, int co_tile,
                                     const Phase& phd, const Phase& phh, const Phase& phw,
                                     long long q0d, long long q0h, long long q0w,
                                     float (&acc)[kTM][kTN]) {
  const int tid = threadIdx.x;
  const int tw = tid % kThreadsW;
  const int th = (tid / kThreadsW) % kBQH;
  const int td = (tid / (kThreadsW * kBQH)) % kBQD;
  const int tn = tid / (kThreadsW * kBQH * kBQD);
  constexpr int kHDj = kBQD + (JD > 0 ? JD - 1 : 0) * kDRd;
  constexpr int kHHj = kBQH + (JH > 0 ? JH - 1 : 0) * kDRh;
  // First input index of the halo in each dimension (see the file comment for the W padding).
  const long long id0 = q0d + phd.c - (long long)(JD - 1) * kDRd;
  const long long ih0 = q0h + phh.c - (long long)(JH - 1) * kDRh;
  const long long iw0 = q0w + phw.c - kLPAD;

  // Stage s (input channels [s*kCK, (s+1)*kCK)) is copied with cp.async into buffer s&1 while
  // the threads compute stage s-1 from the other buffer.
  auto issue = [&](int ci0, Smem& buf) {
    constexpr int kXElems = kCK * kHDj * kHHj * kHW;
    for (int e = tid; e < kXElems; e += kThreads) {
      const int hw = e % kHW, hh = (e / kHW) % kHHj, hd = (e / (kHW * kHHj)) % kHDj;
      const int ci = e / (kHW * kHHj * kHDj);
      const long long id = id0 + hd, ih = ih0 + hh, iw = iw0 + hw;
      const bool ok =
          ci0 + ci < kCinG && id >= 0 && id < kDin && ih >= 0 && ih < kHin && iw >= 0 && iw < kWin;
      const float* src =
          ok ? x +
                   ((((idx_t)n * kCin + (idx_t)g * kCinG + ci0 + ci) * kDin + id) * kHin + ih) *
                       kWin +
                   iw
             : x;
      CpAsyncZfill<4>(&buf.x[ci][hd][hh][hw], src, ok);
    }
    // Walk the weights in memory order (taps fastest) so the global reads coalesce.
    constexpr int kWElems = kCK * kBN * JD * JH * JW;
    for (int e = tid; e < kWElems; e += kThreads) {
      const int jw = e % JW, jh = (e / JW) % JH, jd = (e / (JW * JH)) % JD;
      const int co = (e / (JW * JH * JD)) % kBN, ci = e / (JW * JH * JD * kBN);
      const bool ok = ci0 + ci < kCinG;
      const int kd = phd.kk0 + jd * kSRd, kh = phh.kk0 + jh * kSRh, kw = phw.kk0 + jw * kSRw;
      const float* src = ok ? w +
                                  ((idx_t)(g * kCinG + ci0 + ci) * kCoutG + co_tile * kBN + co) *
                                      (kKD * kKH * kKW) +
                                  (kd * kKH + kh) * kKW + kw
                            : w;
      CpAsyncZfill<4>(&buf.w[ci][jd][jh][jw][co], src, ok);
    }
    CpAsyncCommit();
  };

  constexpr int kStages = (kCinG + kCK - 1) / kCK;
  issue(0, sm[0]);
  for (int stage = 0; stage < kStages; ++stage) {
    const int ci0 = stage * kCK;
    if (stage + 1 < kStages) {
      issue(ci0 + kCK, sm[(stage + 1) & 1]);
      CpAsyncWait<1>();  // every group but the one just issued has landed
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const Smem& cur = sm[stage & 1];

#pragma unroll 1
    for (int ci = 0; ci < kCK; ++ci) {
      if (ci0 + ci >= kCinG) break;
      // Sum one channel's taps apart, then add: keeps long reductions near blocked-GEMM error.
      float part[kTM][kTN];
#pragma unroll
      for (int m = 0; m < kTM; ++m)
#pragma unroll
        for (int c = 0; c < kTN; ++c) part[m][c] = 0.f;
#pragma unroll
      for (int jd = 0; jd < JD; ++jd) {
#pragma unroll
        for (int jh = 0; jh < JH; ++jh) {
          // Output q (tile-relative t) with tap j reads halo index t + (J-1-j)*d' (D and H),
          // and t + kLPAD - j*d' (W).
          const float* row = &cur.x[ci][td + (JD - 1 - jd) * kDRd][th + (JH - 1 - jh) * kDRh][0];
          float xr[kLPAD + kTM];
#pragma unroll
          for (int k = 0; k < kLPAD + kTM; k += 4) {
            const float4 v = *reinterpret_cast<const float4*>(row + tw * kTM + k);
            xr[k] = v.x, xr[k + 1] = v.y, xr[k + 2] = v.z, xr[k + 3] = v.w;
          }
#pragma unroll
          for (int jw = 0; jw < JW; ++jw) {
            float wv[kTN];
            const float* wp = &cur.w[ci][jd][jh][jw][tn * kTN];
            if constexpr (kTN % 4 == 0) {  // 16-byte shared loads; the generator aligns kBN
#pragma unroll
              for (int c = 0; c < kTN; c += 4) {
                const float4 v = *reinterpret_cast<const float4*>(wp + c);
                wv[c] = v.x, wv[c + 1] = v.y, wv[c + 2] = v.z, wv[c + 3] = v.w;
              }
            } else {
#pragma unroll
              for (int c = 0; c < kTN; ++c) wv[c] = wp[c];
            }
#pragma unroll
            for (int m = 0; m < kTM; ++m)
#pragma unroll
              for (int c = 0; c < kTN; ++c)
                part[m][c] = fmaf(xr[m + kLPAD - jw * kDRw], wv[c], part[m][c]);
          }
        }
      }
#pragma unroll
      for (int m = 0; m < kTM; ++m)
#pragma unroll
        for (int c = 0; c < kTN; ++c) acc[m][c] += part[m][c];
    }
    __syncthreads();  // this buffer is refilled two stages from now
  }
}

extern "C" __global__ void __launch_bounds__(kThreads)
    KERNEL_NAME(const float* __restrict__ x, const float* __restrict__ w,
                const float* __restrict__ bias, float* __restrict__ y) {
  __shared__ __align__(16) Smem sm[2];
  const int tid = threadIdx.x;
  const int tw = tid % kThreadsW;
  const int th = (tid / kThreadsW) % kBQH;
  const int td = (tid / (kThreadsW * kBQH)) % kBQD;
  const int tn = tid / (kThreadsW * kBQH * kBQD);
  for (long long vb = blockIdx.x; vb < kTotalBlocks; vb += gridDim.x) {
    const BlockTile bt = DecodeBlock(vb, 0);
    if (bt.Empty()) continue;
    const int n = bt.n, g = bt.g, co_tile = bt.co_tile, rd = bt.rd, rh = bt.rh, rw = bt.rw;
    const Phase phd = bt.phd, phh = bt.phh, phw = bt.phw;
    const long long q0d = bt.q0d, q0h = bt.q0h, q0w = bt.q0w;

    float acc[kTM][kTN];
#pragma unroll
    for (int m = 0; m < kTM; ++m)
#pragma unroll
      for (int c = 0; c < kTN; ++c) acc[m][c] = 0.f;
    const int jd = phd.taps, jh = phh.taps, jw = phw.taps;
#define CONVT3D_CASE(A, B, C)        \
  if (jd == A && jh == B && jw == C) \
    Tile<A, B, C>(sm, x, w, n, g, co_tile, phd, phh, phw, q0d, q0h, q0w, acc);
    if (jd > 0 && jh > 0 && jw > 0) {
      CONVT3D_FOR_PHASE_CLASSES(CONVT3D_CASE)
    }
#undef CONVT3D_CASE

    const long long qd = q0d + td, qh = q0h + th;
    if (qd >= phd.q_lo + phd.q_count || qh >= phh.q_lo + phh.q_count) continue;
    const long long od = rd - kPD + kSD * qd, oh = rh - kPH + kSH * qh;
#pragma unroll
    for (int c = 0; c < kTN; ++c) {
      const int co = g * kCoutG + co_tile * kBN + tn * kTN + c;
      const float b = kBias ? bias[co] : 0.f;
      float* yrow = y + ((((idx_t)n * kCout + co) * kDout + od) * kHout + oh) * (idx_t)kWout;
#pragma unroll
      for (int m = 0; m < kTM; ++m) {
        const long long qw = q0w + tw * kTM + m;
        if (qw < phw.q_lo + phw.q_count) yrow[rw - kPW + kSW * qw] = acc[m][c] + b;
      }
    }
  }
}
