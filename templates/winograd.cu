// winograd.cu: ConvTranspose3d as fused Winograd F(2,k) x F(2,k) x F(2,k) correlations, one per
// stride phase, with FFMA accumulation (family F6, strict-fp32 grade).
//
// With stride 1 and dilation 1 the transposed convolution is the correlation
//   y[o] = sum_j x[o + pad - (kK - 1) + j] * wf[j],  wf[j] = w[kK - 1 - j]  (per dimension),
// which Winograd's F(2, k) computes for two outputs from alpha = k + 1 inputs with alpha
// multiplications instead of 2k. A 2x2x2 output tile costs kP = kAD*kAH*kAW products per
// (input, output channel) pair instead of 8*kKD*kKH*kKW: 64 against 216 for a 3x3x3 kernel.
//
// With stride s (dilation 1, kernel = s * kJ) each output phase r (outputs s*q + r) is such a
// correlation over the input with the kJ taps t0 + s*j, t0 = (r + pad) mod s, that start at input
// q + c, c = floor((r + pad) / s):  y[s*q + r] = sum_j x[q + c - (kJ - 1) + j] * w[t0 +
// s*(kJ-1-j)]. Every phase then has kJ taps per dimension, so one kernel with the phase in the
// block index runs them all: a 4x4x4 kernel at stride 2 costs 27 products per 2x2x2 tile of a phase
// instead of 64. Stride 1 is the case of one phase (t0 = 0, c = pad, kJ = kK).
//
// Specialised by a preamble (generator/families/winograd.cpp) that defines, besides the common
// shape constants: kJD kJH kJW (taps per phase), kPhases, kAD kAH kAW (points per dimension, kJ +
// 1), kRD kRH kRW (the block's raw input region) and kRWS, kBQD kBQH kBQW (tiles per block), kBN
// (output channels per block), kTN kTM (channels and tiles per thread), kCK (input channels per
// stage), kSumStages (stages per run of the point sums; 0: one plain sum), kVS kUS kMS
// (per-point strides), kCPad, kThreads, kTilesD/H/W, kBlocksD/H/W,
// kCoBlocks, kTotalBlocks, and the transforms WinInD/H/W (BT d), WinOutD/H/W (AT m) and
// kWinGD/H/W (G, f64).
//
// PREP_KERNEL_NAME transforms the weights once per Run: U = G wf G^T per dimension and phase, in
// f64, rounded once to f32, laid out [phase][group][channel block][input channel (kCPad, zero
// beyond the group's)][point][kBN] so that a block's stage is one contiguous run of 16-byte
// copies.
//
// KERNEL_NAME: a block owns kBQD x kBQH x kBQW output tiles of one phase and kBN output channels
// of one (sample, group); the phase varies fastest across blocks, so the blocks that write one
// output region's interleaved phases run together. Per stage of kCK input channels it (1) copies
// the raw input region (zeros outside the tensor) and the stage's U with cp.async, (2)
// transforms each (channel, tile) in D, W and H in registers, writing V[channel][point][tile],
// and (3) accumulates, per point, the small GEMM M[point][co][tile] += U[point][co][ci] *
// V[point][ci][tile]: a thread owns one point, kTN channels and kTM tiles. Stage s's GEMM and
// stage s + 1's transform share one barrier interval (double-buffered input, U and V). After the
// last stage the sums go through shared memory to threads that each apply AT in D, H and W to
// one (channel, tile) and store its 2x2x2 outputs. All arithmetic is f32 (FFMA for the GEMM).

static_assert(sizeof(T) == 4 && sizeof(Acc) == 4, "winograd is an f32 family");
constexpr int kP = kAD * kAH * kAW;
constexpr int kAHW = kAH * kAW;
constexpr int kBT = kBQD * kBQH * kBQW;  // tiles per block
constexpr int kNG = kBN / kTN, kTG = kBT / kTM;
// The GEMM's lanes, kP * kNG * kTG, rounded up to whole warps: the rest skip the GEMM.
constexpr int kGemmThreads = kP * kNG * kTG;
static_assert(kThreads >= kGemmThreads && kThreads - kGemmThreads < 32, "thread count");
__host__ __device__ constexpr int Round4(int n) { return (n + 3) / 4 * 4; }
constexpr int kXWords = Round4(kCK * kRD * kRH * kRWS);
constexpr int kVWords = Round4(kCK * kP * kVS);
constexpr int kUWords = Round4(kCK * kP * kUS);
// Registers: the accumulators, two stages' operands and addressing. Without a cap ptxas hoists
// every channel's operand loads of a stage, and large tiles then fit only one block per SM.
constexpr int kRegCap = ((kSumStages > 0 ? 2 : 1) * kTN * kTM + 2 * (kTN + kTM) + 32 + 7) / 8 * 8;
// All kThreads must fit one SM: each of its four schedulers holds 16K registers and a quarter
// of the warps, rounded up (576 threads are 18 warps, 5 on some scheduler: at 112 registers that
// is 5 x 32 x 112 > 16K, and the launch fails).
constexpr int kBlockCap = 16384 / (32 * ((kThreads / 32 + 3) / 4)) / 8 * 8;
constexpr int kMaxRegs = kRegCap > 255 ? (kBlockCap < 255 ? kBlockCap : 255)
                                       : (kBlockCap < kRegCap ? kBlockCap : kRegCap);
// D-point groups per (channel, tile) item of the input transform: the fewest (each item then
// shares its index arithmetic over more points) that still give every thread an item.
__host__ __device__ constexpr int PointGroups() {
  for (int g = 1; g < kAD; ++g)
    if (kAD % g == 0 && kCK * kBT * g >= kThreads) return g;
  return kAD;
}
constexpr int kADG = PointGroups();
constexpr idx_t kInPlane = (idx_t)kDin * kHin * kWin;
// One channel of y: the real output's plane (a lattice kernel writes every kL*-th element of it
// from kO*, generator/lattice.h; plain kernels have steps of 1 and offsets of 0).
constexpr idx_t kOutPlane = (idx_t)kYDout * kYHout * kYWout;

extern "C" __global__ void __launch_bounds__(256)
    PREP_KERNEL_NAME(const T* __restrict__ w, float* __restrict__ u) {
  constexpr long long kWords = (long long)kPhases * kG * kCoBlocks * kCPad * kP * kBN;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < kWords;
       i += (long long)gridDim.x * blockDim.x) {
    const int n = (int)(i % kBN), pt = (int)(i / kBN % kP);
    const long long r = i / ((long long)kBN * kP);
    const int ci = (int)(r % kCPad), cb = (int)(r / kCPad % kCoBlocks),
              g = (int)(r / kCPad / kCoBlocks % kG), ph = (int)(r / kCPad / kCoBlocks / kG);
    // The phase's first tap per dimension; its taps are t0 + s * j.
    const int td0 = (ph / (kSH * kSW) + kPD) % kSD, th0 = (ph / kSW % kSH + kPH) % kSH,
              tw0 = (ph % kSW + kPW) % kSW;
    double acc = 0;
    if (ci < kCinG) {
      const int ad = pt / kAHW, ah = pt / kAW % kAH, aw = pt % kAW;
      const T* wp = w + (((idx_t)g * kCinG + ci) * kCoutG + cb * kBN + n) * (kKD * kKH * kKW);
      for (int jd = 0; jd < kJD; ++jd)
        for (int jh = 0; jh < kJH; ++jh)
          for (int jw = 0; jw < kJW; ++jw) {
            // The correlation's tap j is the phase's kJ - 1 - j, the kernel's t0 + s (kJ - 1 - j).
            const int kd = td0 + kSD * (kJD - 1 - jd), kh = th0 + kSH * (kJH - 1 - jh),
                      kw = tw0 + kSW * (kJW - 1 - jw);
            const double wv = wp[(kd * kKH + kh) * kKW + kw];
            acc += kWinGD[ad * kJD + jd] * kWinGH[ah * kJH + jh] * kWinGW[aw * kJW + jw] * wv;
          }
    }
    u[i] = (float)acc;
  }
}

extern "C" __global__ void __maxnreg__(kMaxRegs)
    KERNEL_NAME(const T* __restrict__ x, const float* __restrict__ u, const T* __restrict__ bias,
                T* __restrict__ y) {
  extern __shared__ __align__(16) float smem[];
  float* xs = smem;              // 2 x [ci][kRD][kRH][kRWS] raw input
  float* us = xs + 2 * kXWords;  // 2 x [ci][point][kUS] transformed weights
  float* vs = us + 2 * kUWords;  // 2 x [ci][point][kVS] transformed input
  float* ms = smem;              // epilogue: [point][kMS] = [point][co][tile]

  long long b = blockIdx.x;
  const int ph = (int)(b % kPhases);
  b /= kPhases;
  const int bw = (int)(b % kBlocksW);
  b /= kBlocksW;
  const int bh = (int)(b % kBlocksH);
  b /= kBlocksH;
  const int bd = (int)(b % kBlocksD);
  b /= kBlocksD;
  const int cb = (int)(b % kCoBlocks);
  b /= kCoBlocks;
  const int g = (int)(b % kG), n = (int)(b / kG);
  // The phase r per dimension: its outputs s * q + r (q < the phase's extent kQ), its first
  // input c - (kJ - 1) for q = 0, c = floor((r + pad) / s).
  const int phd = ph / (kSH * kSW), phh = ph / kSW % kSH, phw = ph % kSW;
  const int qd_end = (kDout - phd + kSD - 1) / kSD, qh_end = (kHout - phh + kSH - 1) / kSH,
            qw_end = (kWout - phw + kSW - 1) / kSW;
  // First input of the block's region: the phase's output 2 * first tile, shifted by c - (kJ - 1).
  const int id0 = 2 * bd * kBQD + (phd + kPD) / kSD - (kJD - 1);
  const int ih0 = 2 * bh * kBQH + (phh + kPH) / kSH - (kJH - 1);
  const int iw0 = 2 * bw * kBQW + (phw + kPW) / kSW - (kJW - 1);

  const int tid = threadIdx.x;
  const int tg = tid % kTG, ng = tid / kTG % kNG, pt = tid / (kTG * kNG);
  // The point sums. Where kSumStages > 0 (deep K) they are summed in runs of kSumStages stages,
  // each run apart in `run` and then added to `acc`: a plain running sum of K products errs like
  // sqrt(K), and the output transform's cancellations magnify it (measured at K = 512: 1.3e-6,
  // past the strict contract; in runs of ~sqrt(K) channels 4.2e-7, a direct sum's level).
  float acc[kTN][kTM], run[kTN][kTM];
#pragma unroll
  for (int j = 0; j < kTN; ++j)
#pragma unroll
    for (int i = 0; i < kTM; ++i) acc[j][i] = run[j][i] = 0.f;

  const T* xg = x + ((idx_t)n * kCin + (idx_t)g * kCinG) * kInPlane;
  const float* ug = u + (((idx_t)ph * kG + g) * kCoBlocks + cb) * kCPad * kP * kBN;
  // Stage s's raw input region (zeros outside the tensor and past the group's channels) into
  // buffer s % 2, with cp.async.
  auto issue_x = [&](int s) {
    const int c0 = s * kCK;
    float* xb = xs + (s & 1) * kXWords;
    // One thread per raw row: bounds and address once per row, not per element.
    for (int r = tid; r < kCK * kRD * kRH; r += kThreads) {
      const int rh = r % kRH, rd = r / kRH % kRD, ci = r / (kRH * kRD);
      const int id = id0 + rd, ih = ih0 + rh;
      const bool row_in = c0 + ci < kCinG && id >= 0 && id < kDin && ih >= 0 && ih < kHin;
      const T* src = xg + (row_in ? (c0 + ci) * kInPlane + ((idx_t)id * kHin + ih) * kWin : 0);
      float* dst = xb + ((ci * kRD + rd) * kRH + rh) * kRWS;
#pragma unroll
      for (int rw = 0; rw < kRW; ++rw) {
        const bool in = row_in && iw0 + rw >= 0 && iw0 + rw < kWin;
        CpAsyncZfill<4>(dst + rw, in ? src + iw0 + rw : xg, in);
      }
    }
  };
  // Stage s's U (kCK * kP rows of kBN words, contiguous in the workspace) into buffer s % 2.
  auto issue_u = [&](int s) {
    float* ub = us + (s & 1) * kUWords;
    const float* us_g = ug + (idx_t)s * kCK * kP * kBN;
    if (kBN % 4 == 0 && kUS == kBN) {  // one flat run
      for (int e = tid; e < kCK * kP * kBN / 4; e += kThreads) CpAsync16(ub + 4 * e, us_g + 4 * e);
    } else if (kBN % 4 == 0 && kUS % 4 == 0) {
      for (int e = tid; e < kCK * kP * (kBN / 4); e += kThreads) {
        const int row = e / (kBN / 4), q = e % (kBN / 4);
        CpAsync16(ub + row * kUS + 4 * q, us_g + row * kBN + 4 * q);
      }
    } else {
      for (int e = tid; e < kCK * kP * kBN; e += kThreads)
        CpAsyncZfill<4>(ub + e / kBN * kUS + e % kBN, us_g + e, true);
    }
  };
  // (2) Stage s's input transform into V buffer s % 2, [ci][point][t], in registers: an item is
  // one (channel, tile, group of D points); per D point ad it forms the ad-th D combination of
  // the raw rows (BT_D's row ad, compile-time, so only its nonzero rows are read), transforms
  // that 2-D slice in W and H, and stores its kAH x kAW points. No intermediate buffer, and the
  // group index is the slowest-varying, so the ad test is uniform across most warps.
  auto transform = [&](int s) {
    const float* xb = xs + (s & 1) * kXWords;
    float* vb = vs + (s & 1) * kVWords;
    for (int e = tid; e < kCK * kBT * kADG; e += kThreads) {
      const int t = e % kBT, ci = e / kBT % kCK, grp = e / (kBT * kCK);
      const int tw = t % kBQW, th = t / kBQW % kBQH, td = t / (kBQW * kBQH);
      const float* src = xb + ((ci * kRD + 2 * td) * kRH + 2 * th) * kRWS + 2 * tw;
      float* dst = vb + ci * kP * kVS + t;
#pragma unroll
      for (int ad = 0; ad < kAD; ++ad) {
        if (ad / (kAD / kADG) != grp) continue;
        float hw[kAH][kAW];
#pragma unroll
        for (int rh = 0; rh < kAH; ++rh) {
          float row[kAW];
#pragma unroll
          for (int rw = 0; rw < kAW; ++rw) {
            float d[kAD], v[kAD];
#pragma unroll
            for (int rd = 0; rd < kAD; ++rd) d[rd] = src[(rd * kRH + rh) * kRWS + rw];
            WinInD(d, v);
            row[rw] = v[ad];
          }
          WinInW(row, hw[rh]);
        }
#pragma unroll
        for (int aw = 0; aw < kAW; ++aw) {
          float d[kAH], v[kAH];
#pragma unroll
          for (int rh = 0; rh < kAH; ++rh) d[rh] = hw[rh][aw];
          WinInH(d, v);
#pragma unroll
          for (int ah = 0; ah < kAH; ++ah) dst[(ad * kAHW + ah * kAW + aw) * kVS] = v[ah];
        }
      }
    }
  };
  // (3) Per point: M[co][t] += U[co][ci] V[ci][t] over stage s's channels.
  auto gemm = [&](int s, float(&sum)[kTN][kTM]) {
    if (kThreads > kGemmThreads && pt >= kP) return;
    const float* ub = us + (s & 1) * kUWords;
    const float* up = ub + pt * kUS + ng * kTN;
    const float* vp = vs + (s & 1) * kVWords + pt * kVS + tg * kTM;
#pragma unroll 2
    for (int ci = 0; ci < kCK; ++ci) {
      float uv[kTN], vv[kTM];
      LoadRun<kTN>(up + ci * kP * kUS, uv);
      LoadRun<kTM>(vp + ci * kP * kVS, vv);
#pragma unroll
      for (int j = 0; j < kTN; ++j)
#pragma unroll
        for (int i = 0; i < kTM; ++i) sum[j][i] = fmaf(uv[j], vv[i], sum[j][i]);
    }
  };
  constexpr int kStages = (kCinG + kCK - 1) / kCK;
  // Software pipeline: iteration s runs stage s's GEMM and stage s + 1's input transform between
  // the same two barriers (the transform's latency hides under the FFMAs); the copies run two
  // stages (input) and one stage (U) ahead.
  issue_x(0);
  issue_u(0);
  if (kStages > 1) issue_x(1);
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();
  transform(0);
  for (int s = 0; s < kStages; ++s) {
    // Copies issued last iteration (U of stage s, input of stage s + 1) have landed, V of stage
    // s is written, and stage s - 1's GEMM and transform are done with the buffers refilled now.
    CpAsyncWait<0>();
    __syncthreads();
    if (s + 2 < kStages) issue_x(s + 2);
    if (s + 1 < kStages) issue_u(s + 1);
    CpAsyncCommit();
    if (kSumStages == 0) {
      gemm(s, acc);
    } else {
      gemm(s, run);
      if ((s + 1) % kSumStages == 0 || s + 1 == kStages) {
#pragma unroll
        for (int j = 0; j < kTN; ++j)
#pragma unroll
          for (int i = 0; i < kTM; ++i) acc[j][i] += run[j][i], run[j][i] = 0.f;
      }
    }
    if (s + 1 < kStages) transform(s + 1);
  }
  __syncthreads();
  // Epilogue: the point sums through shared memory, then AT per (channel, tile).
  if (pt < kP) {
#pragma unroll
    for (int j = 0; j < kTN; ++j)
#pragma unroll
      for (int i = 0; i < kTM; ++i) ms[pt * kMS + (ng * kTN + j) * kBT + tg * kTM + i] = acc[j][i];
  }
  __syncthreads();
  const bool pairs =
      kLW * kSW == 1 && kOW % 2 == 0 && kYWout % 2 == 0 && ((unsigned long long)y & 7) == 0;
  for (int e = tid; e < kBN * kBT; e += kThreads) {
    const int t = e % kBT, co = e / kBT;
    const int tw = t % kBQW, th = t / kBQW % kBQH, td = t / (kBQW * kBQH);
    float m2[kAD][kAH][2];
#pragma unroll
    for (int ad = 0; ad < kAD; ++ad)
#pragma unroll
      for (int ah = 0; ah < kAH; ++ah) {
        float d[kAW];
#pragma unroll
        for (int aw = 0; aw < kAW; ++aw) d[aw] = ms[((ad * kAH + ah) * kAW + aw) * kMS + e];
        WinOutW(d, m2[ad][ah]);
      }
    float m1[kAD][2][2];
#pragma unroll
    for (int ad = 0; ad < kAD; ++ad)
#pragma unroll
      for (int ow = 0; ow < 2; ++ow) {
        float d[kAH], v[2];
#pragma unroll
        for (int ah = 0; ah < kAH; ++ah) d[ah] = m2[ad][ah][ow];
        WinOutH(d, v);
        m1[ad][0][ow] = v[0], m1[ad][1][ow] = v[1];
      }
    const int gco = g * kCoutG + cb * kBN + co;
    const float bv = kBias ? Ld(bias[gco]) : 0.f;
    T* yc = y + ((idx_t)n * kCout + gco) * kOutPlane;
    const int od0 = 2 * (bd * kBQD + td), oh0 = 2 * (bh * kBQH + th), ow0 = 2 * (bw * kBQW + tw);
#pragma unroll
    for (int oh = 0; oh < 2; ++oh) {
      float out[2][2];  // [od][ow]
#pragma unroll
      for (int ow = 0; ow < 2; ++ow) {
        float d[kAD], v[2];
#pragma unroll
        for (int ad = 0; ad < kAD; ++ad) d[ad] = m1[ad][oh][ow];
        WinOutD(d, v);
        out[0][ow] = v[0] + bv, out[1][ow] = v[1] + bv;
      }
      if (oh0 + oh >= qh_end) continue;
#pragma unroll
      for (int od = 0; od < 2; ++od) {
        if (od0 + od >= qd_end || ow0 >= qw_end) continue;
        T* row = yc +
                 ((idx_t)(kLD * (kSD * (od0 + od) + phd) + kOD) * kYHout +
                  kLH * (kSH * (oh0 + oh) + phh) + kOH) *
                     kYWout +
                 kLW * (kSW * ow0 + phw) + kOW;
        if (pairs) {
          *reinterpret_cast<float2*>(row) = make_float2(out[od][0], out[od][1]);
        } else {
          row[0] = out[od][0];
          if (ow0 + 1 < qw_end) row[kLW * kSW] = out[od][1];
        }
      }
    }
  }
}
