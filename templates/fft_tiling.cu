// fft_tiling.cu: stride-1 ConvTranspose3d by FFT tiling over H x W (overlap-save), D taps
// direct, one complex GEMM per frequency: FFMA (strict fp32) or mma.sync TF32 / 3xTF32 (fft).
//
// Per dimension the stride-1 transposed convolution is y[o] = sum_k x[o + pad - k*dil] w[k]. An
// output tile of kL outputs starting at o0 needs the kT inputs from o0 + pad - (kE - 1), kE =
// (k - 1)*dil + 1; their kT-point circular convolution with the dilated kernel equals those
// outputs at points kE - 1 ... kT - 1 (the first kE - 1 points wrap and are dropped). In the
// frequency domain that is one complex product per point, so per output frequency f
//   Y[f][co][(n, od, tile)] = sum_{kd, ci} X[f][ci][(n, od + padD - kd*dilD, tile)]
//   G[f][kd][ci][co]
// is a complex GEMM with K = kKD * kCinG, and Y's inverse transform holds the outputs.
//
// Specialised by a preamble (generator/fft.cpp) that defines, besides the common constants: kTH
// kTW (transform sizes), kEH kEW, kQH kQW (outputs per tile), kFW = kTW/2 + 1, kF = kTH*kFW,
// kTilesH/W, kTP (tiles per plane), kTBH kTBW (tiles per transform block), kTBlocks(W), kRH kRWS
// (forward region), kTSSF kTSSI kOWS (shared strides), kNC kDC kXD kDChunks (a chunk's samples,
// output planes and input planes per sample; chunks per kNC samples), kM kMX (GEMM rows of Y and
// X per chunk), kK, kMTiles kNTiles, kGElems kXElems (workspace offsets, float2),
// kPrepElems (weight spectra), kBM kBN kTM kTN (GEMM tiles), kBK (complex K per GEMM stage),
// FFT_3M and FFT_GEMM_DYNAMIC (FFMA GEMM: Gauss's form; dynamic shared memory), kDil*, the FFTs
// FftFwdH/FftInvH/FftFwdW/FftInvW and the f64 twiddles kTwH kTwW (cos, sin of 2 pi j / kT).
//
// Workspace: G [f][g][kd][ci][co], X [f][c_in][mx], Y [f][c_out][m] (float2), X and Y for one
// chunk (ChunkOf), mx = (n, input plane - i0, tile), m = (n, output plane - d0, tile). Every kernel
// but the prep takes the chunk index. woff_t (int where every part has fewer than 2^31 elements)
// indexes within X.

static_assert(sizeof(T) == 4 && sizeof(Acc) == 4, "fft is an f32 family");
constexpr int kTB = kTBH * kTBW;
constexpr int kOutRows = kTBH * kQH, kOutCols = kTBW * kQW;
constexpr int kGemmThreads = (kBM / kTM) * (kBN / kTN);
static_assert(256 % kBM == 0 && kBK * kBM >= 256 && kBN % 2 == 0 &&
                  (FFT_SPLIT != 0 || (kGemmThreads == 256 && kBN % kTN == 0 && kBM % kTM == 0)),
              "GEMM tile");
constexpr int kAL = kBK * kBM / 256;                  // A elements per thread per stage
constexpr idx_t kXPlane = (idx_t)kDin * kHin * kWin;  // one channel of x

// A chunk: kNC samples from n0, output planes d0 ... d0 + kDC - 1 of each (every plane when kDC
// is kDout, else one sample and a D range whose spectra fit L2), reading input planes from i0
// (kXD of them per sample).
struct Chunk {
  long long n0;
  int d0, i0;
};
__device__ __forceinline__ Chunk ChunkOf(int chunk) {
  Chunk c;
  c.n0 = (long long)(chunk / kDChunks) * kNC;
  c.d0 = chunk % kDChunks * kDC;
  c.i0 = kDC == kDout ? 0 : c.d0 + kPD - (kKD - 1) * kDilD;
  return c;
}

// The weight spectrum G[f][g][kd][ci][co]: the DFT of the dilated kernel taps in H and W, in f64
// with the inverse transform's 1/(kTH*kTW) folded in.
__device__ double2 WeightSpectrum(const T* __restrict__ w, int f, int g, int kd, int ci, int co) {
  const int fy = f / kFW, fx = f % kFW;
  const T* wp = w + (((idx_t)g * kCinG + ci) * kCoutG + co) * (kKD * kKH * kKW) + kd * kKH * kKW;
  double re = 0, im = 0;
  for (int kh = 0; kh < kKH; ++kh) {
    double rr = 0, ri = 0;  // the row's DFT along W: sum w e^{-i theta}
    for (int kw = 0; kw < kKW; ++kw) {
      const int j = fx * kw * kDilW % kTW;
      const double v = Ld(wp[kh * kKW + kw]);
      rr += v * kTwW[2 * j];
      ri -= v * kTwW[2 * j + 1];
    }
    const int j = fy * kh * kDilH % kTH;
    const double c = kTwH[2 * j], s = -kTwH[2 * j + 1];
    re += rr * c - ri * s;
    im += rr * s + ri * c;
  }
  const double scale = 1.0 / (kTH * kTW);
  return make_double2(re * scale, im * scale);
}

#if FFT_SPLIT == 0
// PREP_KERNEL_NAME: G rounded once to f32, as complex [f][g][kd][ci][co]; for Gauss's three
// products (FFT_3M) as three real planes per (f, g, kd, ci) row instead: c, d - c and c + d of G
// = c + i d, each sum formed in f64 and rounded once.
extern "C" __global__ void __launch_bounds__(256)
    PREP_KERNEL_NAME(const T* __restrict__ w, float2* __restrict__ ws) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < kPrepElems;
       i += (long long)gridDim.x * blockDim.x) {
    const int co = (int)(i % kCoutG);
    long long r = i / kCoutG;
    const long long row = r;
    const int ci = (int)(r % kCinG);
    r /= kCinG;
    const int kd = (int)(r % kKD);
    r /= kKD;
    const double2 v = WeightSpectrum(w, (int)(r / kG), (int)(r % kG), kd, ci, co);
    if (FFT_3M) {
      float* g3 = reinterpret_cast<float*>(ws) + row * 3 * kCoutG + co;
      g3[0] = (float)v.x;
      g3[kCoutG] = (float)(v.y - v.x);
      g3[2 * kCoutG] = (float)(v.x + v.y);
    } else {
      ws[i] = make_float2((float)v.x, (float)v.y);
    }
  }
}
#else
// The tensor-core GEMM is the real GEMM [Xr Xi] x [[Gr Gi] [-Gi Gr]] with K and N interleaved
// (k' = 2k + part, n' = 2co + part): B'[f][g][k'][n'] holds rows (Gr, Gi) and (-Gi, Gr) per
// complex k, kNP floats per row (channel pairs, zero past kCoutG), in TF32 (FFT_SPLIT 1) or as
// the 3xTF32 big parts followed by the small parts (FFT_SPLIT 3).
constexpr int kNP = (kCoutG + 1) / 2 * 4;
constexpr long long kBRows = (long long)kF * kG * 2 * kK;  // B' rows of one part

// PREP_KERNEL_NAME: one complex weight spectrum element per thread, its four B' entries.
extern "C" __global__ void __launch_bounds__(256)
    PREP_KERNEL_NAME(const T* __restrict__ w, float2* __restrict__ ws) {
  float* bp = reinterpret_cast<float*>(ws);
  constexpr int kCoP = kNP / 2;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < kPrepElems;
       i += (long long)gridDim.x * blockDim.x) {
    const int co = (int)(i % kCoP);
    const long long r = i / kCoP;  // (f, g, k) with k = kd * kCinG + ci
    const int k = (int)(r % kK);
    const long long fg = r / kK;
    double2 v = make_double2(0, 0);
    if (co < kCoutG)
      v = WeightSpectrum(w, (int)(fg / kG), (int)(fg % kG), k / kCinG, k % kCinG, co);
    const float e[4] = {(float)v.x, (float)v.y, (float)-v.y, (float)v.x};
    float* row0 = bp + (fg * 2 * kK + 2 * k) * kNP + 2 * co;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      unsigned big, small = 0;
      Split<FFT_SPLIT>(e[q], big, small);
      float* at = row0 + (q / 2) * kNP + q % 2;
      at[0] = __uint_as_float(FFT_SPLIT == 3 ? big : big & 0xffffe000u);
      if (FFT_SPLIT == 3) at[kBRows * kNP] = __uint_as_float(small & 0xffffe000u);
    }
  }
}
#endif

// PREPX_KERNEL_NAME: a block transforms kTBH x kTBW tiles of one input plane (n, ci, d): (1)
// copy the tiles' input region to shared memory, zeros outside x; (2) real FFT of every tile
// row along W, two rows per complex FFT; (3) complex FFT of every tile column along H, written to
// X with consecutive threads on consecutive tiles.
extern "C" __global__ void __launch_bounds__(256)
    PREPX_KERNEL_NAME(const T* __restrict__ x, float2* __restrict__ ws, int chunk) {
  extern __shared__ __align__(16) float smem[];
  float* rs = smem;                                                        // [kRH][kRWS]
  float2* ss = reinterpret_cast<float2*>(smem + ((kRH * kRWS + 1) & ~1));  // [tile][kTH][kFW]
  float2* X = ws + kGElems;
  long long b = blockIdx.x;
  const long long tblock = b % kTBlocks;
  b /= kTBlocks;
  const int ci = (int)(b % kCin);
  b /= kCin;
  const int idl = (int)(b % kXD);
  const int nl = (int)(b / kXD);
  const Chunk ck = ChunkOf(chunk);
  const long long n = ck.n0 + nl;
  const int id = ck.i0 + idl;
  if (n >= kN || id < 0 || id >= kDin) return;
  const long long th0 = tblock / kTBlocksW * kTBH, tw0 = tblock % kTBlocksW * kTBW;
  const long long ih0 = th0 * kQH + kPH - (kEH - 1), iw0 = tw0 * kQW + kPW - (kEW - 1);
  const T* xp = x + ((idx_t)n * kCin + ci) * kXPlane + (idx_t)id * kHin * kWin;
  constexpr int kRW = (kTBW - 1) * kQW + kTW;
  // cp.async: all of a thread's copies in flight before one wait, where loads stored to shared
  // memory make warps stall on each load. (With few blocks per SM the remaining wait is latency
  // either way, so the gain depends on the shape.)
  for (int e = threadIdx.x; e < kRH * kRW; e += 256) {
    const int r = e / kRW, c = e % kRW;
    const long long ih = ih0 + r, iw = iw0 + c;
    const bool ok = ih >= 0 && ih < kHin && iw >= 0 && iw < kWin;
    CpAsyncZfill<4>(rs + r * kRWS + c, ok ? xp + ((idx_t)ih * kWin + iw) : x, ok);
  }
  CpAsyncWaitAll();
  __syncthreads();
  // Rows: z = row a + i row b; A[k] = (Z[k] + conj Z[-k]) / 2, B[k] = (Z[k] - conj Z[-k]) / 2i.
  for (int item = threadIdx.x; item < kTB * (kTH / 2); item += 256) {
    const int pr = item % (kTH / 2), j = item / (kTH / 2);
    const int jh = j / kTBW, jw = j % kTBW;
    if (th0 + jh >= kTilesH || tw0 + jw >= kTilesW) continue;
    const float* ra = rs + (jh * kQH + 2 * pr) * kRWS + jw * kQW;
    float2 z[kTW];
#pragma unroll
    for (int c = 0; c < kTW; ++c) z[c] = make_float2(ra[c], ra[kRWS + c]);
    FftFwdW(z);
    float2* sa = ss + j * kTSSF + 2 * pr * kFW;
#pragma unroll
    for (int k = 0; k < kFW; ++k) {
      const float2 p = z[k], q = z[(kTW - k) % kTW];
      sa[k] = make_float2(0.5f * (p.x + q.x), 0.5f * (p.y - q.y));
      sa[kFW + k] = make_float2(0.5f * (p.y + q.y), -0.5f * (p.x - q.x));
    }
  }
  __syncthreads();
  for (int item = threadIdx.x; item < kTB * kFW; item += 256) {
    const int j = item % kTB, fx = item / kTB;
    const int jh = j / kTBW, jw = j % kTBW;
    if (th0 + jh >= kTilesH || tw0 + jw >= kTilesW) continue;
    float2 v[kTH];
#pragma unroll
    for (int r = 0; r < kTH; ++r) v[r] = ss[j * kTSSF + r * kFW + fx];
    FftFwdH(v);
    const long long mx = ((long long)nl * kXD + idl) * kTP + (th0 + jh) * kTilesW + tw0 + jw;
#pragma unroll
    for (int fy = 0; fy < kTH; ++fy) X[((long long)(fy * kFW + fx) * kCin + ci) * kMX + mx] = v[fy];
  }
}

// GEMM row am of this chunk (both GEMMs): its X row at input plane id is abase + id * kTP, for
// output plane aod; rows past the chunk (samples past kN, planes past kDout) get an aod that no
// tap reaches.
__device__ __forceinline__ void ARowOf(long long am, int chunk, woff_t& abase, int& aod) {
  abase = 0;
  aod = -1 << 30;
  if (am < kM) {
    const Chunk ck = ChunkOf(chunk);
    const long long nl = am / (kDC * kTP), rem = am % (kDC * kTP);
    const int od = ck.d0 + (int)(rem / kTP);
    if (ck.n0 + nl < kN && od < kDout) {
      aod = od;
      abase = (woff_t)((nl * kXD - ck.i0) * kTP + rem % kTP);
    }
  }
}

// Copies this thread's kAL elements of GEMM row `arow`'s A for K stage k0..k0+kBK-1 (both GEMMs;
// dst(kl) is the shared-memory slot of stage row kl). With kHoist, where a stage never straddles
// two taps (kCinG a multiple of kBK) its tap, input plane and bound are decoded once per stage and
// the copies step by a constant: decoded per element they cost many instructions per 8-byte copy,
// a large share of the tensor-core GEMM's instructions.
template <bool kHoist, typename Dst>
__device__ __forceinline__ void IssueA(const float2* __restrict__ xg, woff_t abase, int aod, int k0,
                                       Dst dst) {
  const int tid = threadIdx.x;
  if constexpr (kHoist && kCinG % kBK == 0) {
    const int kd = k0 / kCinG, id = aod + kPD - kd * kDilD;
    const bool ok = id >= 0 && id < kDin;  // every k < kK: kK is a multiple of kBK
    // Out of range the copies read nothing, from addresses still inside this group's X.
    const float2* src = ok ? xg + ((woff_t)(k0 % kCinG + tid / kBM) * (woff_t)kMX + abase +
                                   (woff_t)id * (woff_t)kTP)
                           : xg;
#pragma unroll
    for (int i = 0; i < kAL; ++i)
      CpAsyncZfill<8>(dst(tid / kBM + i * (256 / kBM)),
                      src + (woff_t)(i * (256 / kBM)) * (woff_t)kMX, ok);
  } else {
#pragma unroll
    for (int i = 0; i < kAL; ++i) {
      const int kl = tid / kBM + i * (256 / kBM), k = k0 + kl;
      const int kd = k / kCinG, ci = k % kCinG;
      const int id = aod + kPD - kd * kDilD;
      const bool ok = k < kK && id >= 0 && id < kDin;
      CpAsyncZfill<8>(dst(kl),
                      ok ? xg + ((woff_t)ci * (woff_t)kMX + abase + (woff_t)id * (woff_t)kTP) : xg,
                      ok);
    }
  }
}

#if FFT_SPLIT == 0
// KERNEL_NAME: for one frequency and group, a kBM x kBN tile of Y = X_shifted G over K =
// (kd, ci) in steps of kBK, double-buffered through shared memory by cp.async; a
// thread owns kTM consecutive rows by kTN consecutive channels (complex FFMA: 4 per product).
// FFT_3M: Gauss's form, three FFMAs per product into three real sums per output, for X = a + i b
// and G = c + i d: P1 += (a + b) c, P2 += a (d - c), P3 += b (c + d); Re = P1 - P3, Im = P1 + P2.
// A B stage row is then three planes of kBN floats (c, d - c, c + d: the prep's layout).
// Two blocks per SM (128 registers). At three (80 registers) the 4 x 4 tiles spill.
constexpr int kSums = FFT_3M ? 3 : 2;
constexpr int kBRowF = FFT_3M ? 3 * kBN : 2 * kBN;  // floats per B stage row
static_assert(kTM * kTN * kSums <= 64, "sums beyond two blocks' registers");
extern "C" __global__ void __launch_bounds__(256, 2)
    KERNEL_NAME(float2* __restrict__ ws, int chunk) {
#if FFT_GEMM_DYNAMIC  // over the 48 KB of static shared memory (stages of 16, 256 rows)
  extern __shared__ __align__(16) float smem[];
  auto& as = *reinterpret_cast<float2(*)[2][kBK][kBM]>(smem);  // A stages, then B stages
  auto& bsf = *reinterpret_cast<float(*)[2][kBK][kBRowF]>(smem + 2 * kBK * 2 * kBM);
#else  // static where it fits: in dynamic shared memory some tiles spill at the same bound
  __shared__ __align__(16) float2 as[2][kBK][kBM];
  __shared__ __align__(16) float bsf[2][kBK][kBRowF];
#endif
  const float* G = reinterpret_cast<const float*>(ws);
  const float2* X = ws + kGElems;
  float2* Y = ws + kGElems + kXElems;
  long long b = blockIdx.x;
  const long long m0 = b % kMTiles * kBM;
  b /= kMTiles;
  const int n0 = (int)(b % kNTiles) * kBN;
  b /= kNTiles;
  const int g = (int)(b % kG), f = (int)(b / kG);
  const int tid = threadIdx.x;
  // This thread's A row, the same in every stage. (The two GEMMs share ARowOf and the A copies,
  // IssueA, but not the block decode: shared, it is slightly shorter code but makes some tiles
  // spill at the 128-register bound of two blocks per SM.)
  const int arow = tid % kBM;
  const long long am = m0 + arow;
  woff_t abase;
  int aod;
  ARowOf(am, chunk, abase, aod);
  const float2* xg = X + (long long)f * kCin * kMX + (long long)g * kCinG * kMX;
  const float* gg = G + ((long long)f * kG + g) * kK * kSums * kCoutG;
  // Stage loads go straight to shared memory (cp.async, zero-filled where the row, tap or
  // channel is out of range): no prefetch registers, which the 8x4 thread tile cannot spare.
  // B rows: 4M, a channel's (re, im) per 8-byte copy; 3M, each plane in 16-byte copies of four
  // channels where the channels come in fours, else 4-byte ones.
  constexpr int kBV = FFT_3M ? (kCoutG % 4 == 0 && kBN % 4 == 0 ? 4 : 1) : 2;  // floats per copy
  constexpr int kBCopies = kBK * kBRowF / kBV, kBPlane = (FFT_3M ? kBN : 2 * kBN) / kBV;
  auto issue = [&](int k0, int buf) {
    IssueA<true>(xg, abase, aod, k0, [&](int kl) { return &as[buf][kl][arow]; });
#pragma unroll
    for (int i = 0; i < (kBCopies + 255) / 256; ++i) {
      const int e = tid + i * 256, kk = e / (kBRowF / kBV), r = e % (kBRowF / kBV);
      // (4M: a row is one plane of kBN channels, so plane is 0.)
      const int plane = r / kBPlane, co = n0 + (FFT_3M ? r % kBPlane * kBV : r % kBPlane);
      const bool ok = k0 + kk < kK && co < kCoutG;
      const float* src =
          ok ? gg + ((long long)(k0 + kk) * kSums + plane) * kCoutG + (FFT_3M ? co : 2 * co) : gg;
      float* dst = &bsf[buf][kk][r * kBV];
      if (e < kBCopies) CpAsyncZfill<4 * kBV>(dst, src, ok);
    }
    CpAsyncCommit();
  };
  const int tx = tid % (kBN / kTN), ty = tid / (kBN / kTN);
  float acc[kTM][kTN][kSums];
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int j = 0; j < kTN; ++j)
#pragma unroll
      for (int q = 0; q < kSums; ++q) acc[i][j][q] = 0.f;
  constexpr int kSteps = (kK + kBK - 1) / kBK;
  issue(0, 0);
  for (int s = 0; s < kSteps; ++s) {
    const int buf = s & 1;
    if (s + 1 < kSteps) {
      issue((s + 1) * kBK, buf ^ 1);
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      // Two rows' A at a time against the kTN channels: 64 accumulators of the 8x4 tile plus
      // these stay within the 128 registers of two blocks per SM.
      float w[kSums][kTN];  // 4M: (re, im) per channel; 3M: c, d - c, c + d
      if constexpr (FFT_3M) {
#pragma unroll
        for (int q = 0; q < 3; ++q) {
          const float* row = &bsf[buf][kk][q * kBN + tx * kTN];
#pragma unroll
          for (int j = 0; j < kTN; j += (kTN % 4 == 0 ? 4 : 2)) {
            if constexpr (kTN % 4 == 0) {
              const float4 v = *reinterpret_cast<const float4*>(row + j);
              w[q][j] = v.x, w[q][j + 1] = v.y, w[q][j + 2] = v.z, w[q][j + 3] = v.w;
            } else {
              const float2 v = *reinterpret_cast<const float2*>(row + j);
              w[q][j] = v.x, w[q][j + 1] = v.y;
            }
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < kTN; j += 2) {
          const float4 v = *reinterpret_cast<const float4*>(&bsf[buf][kk][2 * (tx * kTN + j)]);
          w[0][j] = v.x, w[1][j] = v.y, w[0][j + 1] = v.z, w[1][j + 1] = v.w;
        }
      }
#pragma unroll
      for (int i = 0; i < kTM; i += 2) {
        const float4 v = *reinterpret_cast<const float4*>(&as[buf][kk][ty * kTM + i]);
        const float2 a[2] = {make_float2(v.x, v.y), make_float2(v.z, v.w)};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float s = a[h].x + a[h].y;  // 3M only (dead code otherwise)
#pragma unroll
          for (int j = 0; j < kTN; ++j) {
            float* c = acc[i + h][j];
            if constexpr (FFT_3M) {
              c[0] = fmaf(s, w[0][j], c[0]);
              c[1] = fmaf(a[h].x, w[1][j], c[1]);
              c[2] = fmaf(a[h].y, w[2][j], c[2]);
            } else {
              c[0] = fmaf(a[h].x, w[0][j], c[0]);
              c[0] = fmaf(-a[h].y, w[1][j], c[0]);
              c[1] = fmaf(a[h].x, w[1][j], c[1]);
              c[1] = fmaf(a[h].y, w[0][j], c[1]);
            }
          }
        }
      }
    }
    __syncthreads();  // before the next step's copies overwrite this buffer
  }
  const long long mrow = m0 + ty * kTM;
  auto out = [&](int i, int j) {
    const float* c = acc[i][j];
    return FFT_3M ? make_float2(c[0] - c[2], c[0] + c[1]) : make_float2(c[0], c[1]);
  };
#pragma unroll
  for (int j = 0; j < kTN; ++j) {
    const int co = n0 + tx * kTN + j;
    if (co >= kCoutG) continue;
    float2* yp = Y + ((long long)f * kCout + (long long)g * kCoutG + co) * kM + mrow;
    if (kM % 2 == 0 && mrow + kTM <= kM) {
#pragma unroll
      for (int i = 0; i < kTM; i += 2) {
        const float2 u = out(i, j), v = out(i + 1, j);
        *reinterpret_cast<float4*>(yp + i) = make_float4(u.x, u.y, v.x, v.y);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kTM; ++i)
        if (mrow + i < kM) yp[i] = out(i, j);
    }
  }
}

#else
// KERNEL_NAME (tensor cores): for one frequency and group, a kBM x kBN (complex) tile of Y as the
// real GEMM [Xr Xi] x B' (see the prep above), K' = 2 * kK in stages of 2 * kBK, double-buffered
// by cp.async. kWM x kWN warps each own kMT m16 by kNT n8 mma tiles; an n8 tile's accumulator
// pairs (c0, c1) and (c2, c3) are the (re, im) of one output channel. A (the input spectra) is
// rounded to TF32 (or split big + small for 3xTF32) per fragment; B' was rounded by the prep.
constexpr int kWTM = kBM / kWM, kWTN = 2 * kBN / kWN;  // warp tile: rows x real columns
constexpr int kMT = kWTM / 16, kNT = kWTN / 8;
static_assert(kWM * kWN == 8 && kWTM % 16 == 0 && kWTN % 8 == 0, "warp tile");
constexpr int kASF = 2 * kBM + 16;  // floats per complex-k row of A (the +16: no bank conflicts)
constexpr int kBSF = 2 * kBN + 8;   // floats per k' row of B'
constexpr int kParts = FFT_SPLIT == 3 ? 2 : 1;
// Two blocks per SM (128 registers) but for 3xTF32 warp tiles of 16 mmas: their split A
// fragments spill there.
constexpr int kMinBlocks = FFT_SPLIT == 3 && kMT * kNT >= 16 ? 1 : 2;

extern "C" __global__ void __launch_bounds__(256, kMinBlocks)
    KERNEL_NAME(float2* __restrict__ ws, int chunk) {
  extern __shared__ __align__(16) float smem[];
  float* as = smem;                   // [buf][kBK][kASF]
  float* bs = smem + 2 * kBK * kASF;  // [buf][part][2 kBK][kBSF]
  const float* Bp = reinterpret_cast<const float*>(ws);
  const float2* X = ws + kGElems;
  float2* Y = ws + kGElems + kXElems;
  long long b = blockIdx.x;
  const long long m0 = b % kMTiles * kBM;
  b /= kMTiles;
  const int n0 = (int)(b % kNTiles) * kBN;
  b /= kNTiles;
  const int g = (int)(b % kG), f = (int)(b / kG);
  const int tid = threadIdx.x;
  const int arow = tid % kBM;
  const long long am = m0 + arow;
  woff_t abase;
  int aod;
  ARowOf(am, chunk, abase, aod);
  const float2* xg = X + (long long)f * kCin * kMX + (long long)g * kCinG * kMX;
  const float* bg = Bp + ((long long)f * kG + g) * 2 * kK * kNP;
  auto issue = [&](int k0, int buf) {
    // Not hoisted where a thread has 16 copies per stage and a 16-mma warp tile (256-row TF32
    // tiles): at 128 registers the hoisted copies leave them about one register short, and they
    // spill.
    IssueA<(kAL * kMT * kNT < 256)>(
        xg, abase, aod, k0, [&](int kl) { return as + (buf * kBK + kl) * kASF + 2 * arow; });
    // B': 2 kBK rows of 2 kBN floats, 16 bytes (two channels) per copy.
    constexpr int kChunks = 2 * kBK * (kBN / 2);
#pragma unroll
    for (int part = 0; part < kParts; ++part)
#pragma unroll
      for (int e = tid; e < kChunks; e += 256) {
        const int r = e / (kBN / 2), c = e % (kBN / 2);
        const int kr = 2 * k0 + r, co = n0 + 2 * c;
        const bool ok = kr < 2 * kK && co < kCoutG;
        CpAsync16Zfill(bs + ((buf * kParts + part) * 2 * kBK + r) * kBSF + 4 * c,
                       ok ? bg + part * kBRows * kNP + (long long)kr * kNP + 2 * co : bg, ok);
      }
    CpAsyncCommit();
  };
  const int warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4;
  const int wm0 = warp % kWM * kWTM, wn0 = warp / kWM * kWTN;
  float acc[kMT][kNT][4];
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;
  constexpr int kSteps = (kK + kBK - 1) / kBK;
  issue(0, 0);
  for (int s = 0; s < kSteps; ++s) {
    const int buf = s & 1;
    if (s + 1 < kSteps) {
      issue((s + 1) * kBK, buf ^ 1);
      CpAsyncWait<1>();
    } else {
      CpAsyncWait<0>();
    }
    __syncthreads();
    const float* a_s = as + buf * kBK * kASF;
    const float* b_s = bs + buf * kParts * 2 * kBK * kBSF;
#pragma unroll
    for (int ks = 0; ks < kBK / 4; ++ks) {  // k' steps of 8 = 4 complex k
      unsigned ab[kMT][4], asm_[kMT][4];
#pragma unroll
      for (int i = 0; i < kMT; ++i) {
        const int r = wm0 + 16 * i + gq;
        const float* a0 = a_s + (4 * ks + tq / 2) * kASF + 2 * r + tq % 2;
        const float v[4] = {a0[0], a0[16], a0[2 * kASF], a0[2 * kASF + 16]};
#pragma unroll
        for (int q = 0; q < 4; ++q) Split<FFT_SPLIT>(v[q], ab[i][q], asm_[i][q]);
      }
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        const float* b0 = b_s + (8 * ks + tq) * kBSF + wn0 + 8 * j + gq;
        const unsigned bb[2] = {__float_as_uint(b0[0]), __float_as_uint(b0[4 * kBSF])};
        unsigned bsm[2] = {0u, 0u};
        if (FFT_SPLIT == 3) {
          bsm[0] = __float_as_uint(b0[2 * kBK * kBSF]);
          bsm[1] = __float_as_uint(b0[2 * kBK * kBSF + 4 * kBSF]);
        }
#pragma unroll
        for (int i = 0; i < kMT; ++i) MmaSplit<FFT_SPLIT>(acc[i][j], ab[i], asm_[i], bb, bsm);
      }
    }
    __syncthreads();  // before the next step's copies overwrite this buffer
  }
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    const int co = n0 + (wn0 + 8 * j) / 2 + tq;
    if (co >= kCoutG) continue;
    float2* yp = Y + ((long long)f * kCout + (long long)g * kCoutG + co) * kM;
#pragma unroll
    for (int i = 0; i < kMT; ++i) {
      const long long m = m0 + wm0 + 16 * i + gq;
      if (m < kM) yp[m] = make_float2(acc[i][j][0], acc[i][j][1]);
      if (m + 8 < kM) yp[m + 8] = make_float2(acc[i][j][2], acc[i][j][3]);
    }
  }
}
#endif

// POST_KERNEL_NAME: a block turns kTBH x kTBW tiles of one output plane (n, co, od) back into
// outputs: (1) inverse FFT of every tile column along H, keeping rows kEH - 1 ... kTH - 1; (2)
// inverse real FFT of every kept row along W, two rows per complex FFT (Z = A + iB), keeping
// columns kEW - 1 ... kTW - 1, into a shared output block; (3) bias and whole-row stores.
extern "C" __global__ void __launch_bounds__(256)
    POST_KERNEL_NAME(const float2* __restrict__ ws, const T* __restrict__ bias, T* __restrict__ y,
                     int chunk) {
  extern __shared__ __align__(16) float smem[];
  float2* ss = reinterpret_cast<float2*>(smem);  // [tile][kQH][kFW]
  float* os = smem + 2 * kTB * kTSSI;            // [kOutRows][kOWS]
  const float2* Y = ws + kGElems + kXElems;
  long long b = blockIdx.x;
  const long long tblock = b % kTBlocks;
  b /= kTBlocks;
  const int co = (int)(b % kCout);
  b /= kCout;
  const int odl = (int)(b % kDC);
  const int nl = (int)(b / kDC);
  const Chunk ck = ChunkOf(chunk);
  const long long n = ck.n0 + nl;
  const int od = ck.d0 + odl;
  if (n >= kN || od >= kDout) return;
  const long long th0 = tblock / kTBlocksW * kTBH, tw0 = tblock % kTBlocksW * kTBW;
  for (int item = threadIdx.x; item < kTB * kFW; item += 256) {
    const int j = item % kTB, fx = item / kTB;
    const int jh = j / kTBW, jw = j % kTBW;
    if (th0 + jh >= kTilesH || tw0 + jw >= kTilesW) continue;
    const long long m = ((long long)nl * kDC + odl) * kTP + (th0 + jh) * kTilesW + tw0 + jw;
    float2 v[kTH];
#pragma unroll
    for (int fy = 0; fy < kTH; ++fy) v[fy] = Y[((long long)(fy * kFW + fx) * kCout + co) * kM + m];
    FftInvH(v);
#pragma unroll
    for (int r = 0; r < kQH; ++r) ss[j * kTSSI + r * kFW + fx] = v[kEH - 1 + r];
  }
  __syncthreads();
  // Rows a, b (Hermitian half spectra A, B): Z[k] = A[k] + i B[k], and for k > kTW/2,
  // Z[k] = conj A[kTW-k] + i conj B[kTW-k]; its inverse is a + i b. The imaginary parts of A and
  // B at 0 and kTW/2 are rounding noise of real rows and dropped.
  constexpr int kPairs = (kQH + 1) / 2;
  for (int item = threadIdx.x; item < kTB * kPairs; item += 256) {
    const int pr = item % kPairs, j = item / kPairs;
    const int jh = j / kTBW, jw = j % kTBW;
    if (th0 + jh >= kTilesH || tw0 + jw >= kTilesW) continue;
    const bool two = 2 * pr + 1 < kQH;
    const float2* sa = ss + j * kTSSI + 2 * pr * kFW;
    float2 z[kTW];
#pragma unroll
    for (int k = 0; k < kFW; ++k) {
      float2 A = sa[k], B = two ? sa[kFW + k] : make_float2(0.f, 0.f);
      if (k == 0 || 2 * k == kTW) A.y = B.y = 0.f;
      z[k] = make_float2(A.x - B.y, A.y + B.x);
      if (k > 0 && 2 * k < kTW) z[kTW - k] = make_float2(A.x + B.y, B.x - A.y);
    }
    FftInvW(z);
    float* o = os + (jh * kQH + 2 * pr) * kOWS + jw * kQW;
#pragma unroll
    for (int c = 0; c < kQW; ++c) {
      o[c] = z[kEW - 1 + c].x;
      if (two) o[kOWS + c] = z[kEW - 1 + c].y;
    }
  }
  __syncthreads();
  const float bv = kBias ? Ld(bias[co]) : 0.f;
  // The output plane, placed by the lattice map (kL* = 1, kO* = 0 and kY*out = k*out but for
  // lattice candidates, whose sub-problem output is every kL-th real output from kO).
  T* yp = y + (((idx_t)n * kCout + co) * kYDout + (kLD * od + kOD)) * ((idx_t)kYHout * kYWout);
  for (int e = threadIdx.x; e < kOutRows * kOutCols; e += 256) {
    const int r = e / kOutCols, c = e % kOutCols;
    const long long oh = th0 * kQH + r, ow = tw0 * kQW + c;
    if (oh < kHout && ow < kWout)
      yp[(idx_t)(kLH * oh + kOH) * kYWout + (kLW * ow + kOW)] = St(os[r * kOWS + c] + bv);
  }
}
