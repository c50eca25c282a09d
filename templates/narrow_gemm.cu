// narrow_gemm.cu: layers with few output channels (generator/families/narrow_gemm.cpp): a GEMM
// whose rows are (output channel, D phase, H phase, W tap) and whose columns are a box of output
// cells' input positions, read in place; W taps are summed into whole output rows at the end.
//
// Preamble: kTD kTH (output cells of a block along D and H), kCK (input channels per stage), kST
// (stages), kMMA (1: mma.sync, 0: FFMA), kSplit (1, or 3 for 3xTF32), kJD kJH kOffD kOffH
// (cell q reads input rows q + off .. q + off + J - 1), kQloD kQloH kTilesD kTilesH (the cells
// with outputs, in tiles), kTapMaskD kTapMaskH (bit r * J + u: phase r has a tap on row u), kM
// kMP (GEMM rows, padded), kWN kWS kCS (GEMM columns per input row, row and channel strides of a
// stage's input slab, in elements), kKC kKCP (K per chunk, padded to the k-step), kChunks, kUnit
// (bytes per copy), kThreads, kZS (row stride of the product in the epilogue), kWChunkBytes,
// kStageBytes.
//
// A block owns output cells (q_d, q_h) of a kTD x kTH box of one (sample, group), over whole W
// rows. A stage holds kCK channels' input rows the box reaches ([channel][row d][row h][w],
// zero outside the input: cp.async) and the chunk's packed weights. For cell (q_d, q_h), output
// phase (r_d, r_h) and W tap kw, the product row m = ((co * kSD + r_d) * kSH + r_h) * kKW + kw
// sums, over channels and rows (u_d, u_h), weight x input(q_d + off_d + u_d, q_h + off_h + u_h,
// i_w) into column (q_d, q_h, i_w); output w of phase (r_d, r_h) then takes tap kw from column
// i_w = (w + p - kw * d) / s. Rows and offsets no tap links carry zero weights (the tensor
// cores multiply them; the FFMA form skips them at compile time).

constexpr bool k16 = CONVT3D_ELEM >= 2;
constexpr int kEB = k16 ? 2 : 4;
constexpr int kKStep = kMMA ? (k16 ? 16 : 8) : 1;
constexpr int kParts = kSplit == 3 ? 2 : 1;  // packed weight images: big (and small)
constexpr int kMT = kMP / 16;
constexpr int kRD = kTD + kJD - 1, kRH = kTH + kJH - 1;
constexpr int kJJ = kJD * kJH;
constexpr int kNB = kTD * kTH * kWN;          // GEMM columns of a block
constexpr int kNTW = kMMA ? kNB / 8 / 4 : 1;  // n8 tiles per warp (four warps)
constexpr int kSlabBytes = (kCK * kCS * kEB + 15) / 16 * 16;
constexpr int kUPR = kWin * kEB / kUnit;  // copies per input row
constexpr int kSlabRows = kCK * kRD * kRH;
constexpr int kSlabUnits = kSlabRows * kUPR;
constexpr int kUPT = (kSlabUnits + kThreads - 1) / kThreads;  // copies per thread
constexpr int kKS = kKCP / kKStep;                            // k-steps per chunk
constexpr int kWUnits = kWChunkBytes / 16;
constexpr int kOutRows = kCoutG * kSD * kSH * kTD * kTH;  // output rows of a block
static_assert(sizeof(Acc) == 4, "narrow_gemm: f32 accumulation only");
static_assert(kMMA || !k16, "the FFMA form stages f32 input");

// Element offset of K index k (channel, row u_d, row u_h) of a chunk in a stage's slab; padded K
// (weights zero) reads the first row.
__device__ __forceinline__ int KOff(int k) {
  if (k >= kKC) return 0;
  return k / kJJ * kCS + (k / kJH % kJD * kRH + k % kJH) * kWS;
}

// Weight of GEMM row m, channel ci of group g and input rows (ud, uh): the tap that links them,
// or zero.
__device__ float WeightAt(const T* __restrict__ w, int g, int ci, int m, int ud, int uh) {
  if (m >= kM || ci >= kCinG) return 0.f;
  const int kw = m % kKW, rh = m / kKW % kSH, rd = m / (kKW * kSH) % kSD,
            co = m / (kKW * kSH * kSD);
  const Phase pd = kPhD[rd], ph = kPhH[rh];
  const int jd = pd.c - kOffD - ud, jh = ph.c - kOffH - uh;  // j * d' of the tap
  if (jd < 0 || jd % kDRd != 0 || jd / kDRd >= pd.taps) return 0.f;
  if (jh < 0 || jh % kDRh != 0 || jh / kDRh >= ph.taps) return 0.f;
  const int kd = pd.kk0 + jd / kDRd * kSRd, kh = ph.kk0 + jh / kDRh * kSRh;
  return Ld(w[((long long)(g * kCinG + ci) * kCoutG + co) * (kKD * kKH * kKW) +
              (kd * kKH + kh) * kKW + kw]);
}

// The weight of row m and chunk-local K index k of chunk `chunk`.
__device__ __forceinline__ float PackedAt(const T* __restrict__ w, int g, int chunk, int m, int k) {
  if (k >= kKC) return 0.f;
  return WeightAt(w, g, chunk * kCK + k / kJJ, m, k / kJH % kJD, k % kJH);
}

// w -> per (group, chunk) the stage image of the weights: mma A fragments [k-step][part][m16
// tile][lane][4 words] (TF32 rounded, or 16-bit pairs), or FFMA rows [k][kMP] of f32.
extern "C" __global__ void __launch_bounds__(256)
    PREP_KERNEL_NAME(const T* __restrict__ w, unsigned* __restrict__ ws) {
  constexpr int kWords = kWChunkBytes / 4;
  const long long words = (long long)kG * kChunks * kWords;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < words;
       i += (long long)gridDim.x * blockDim.x) {
    const int word = (int)(i % kWords);
    const int chunk = (int)(i / kWords % kChunks), g = (int)(i / kWords / kChunks);
    if constexpr (kMMA) {
      const int reg = word % 4, lane = word / 4 % 32, mt = word / 128 % kMT;
      const int part = word / 128 / kMT % kParts, ks = word / 128 / kMT / kParts;
      // A fragment: register 0 (row g, col), 1 (row g + 8), 2 (col + kKStep / 2), 3 (both).
      const int row = mt * 16 + lane / 4 + (reg & 1) * 8;
      if constexpr (k16) {
        const int col = ks * 16 + lane % 4 * 2 + (reg >> 1) * 8;
        ws[i] = Pack(St(PackedAt(w, g, chunk, row, col)), St(PackedAt(w, g, chunk, row, col + 1)));
      } else {
        const int col = ks * 8 + lane % 4 + (reg >> 1) * 4;
        unsigned big, small = 0;
        Split<kSplit>(PackedAt(w, g, chunk, row, col), big, small);
        ws[i] = part == 0 ? big : small;
      }
    } else {
      ws[i] = __float_as_uint(PackedAt(w, g, chunk, word % kMP, word / kMP));
    }
  }
}

// Whether row m has a tap on input rows (ud, uh): compile-time after unrolling.
__device__ __forceinline__ constexpr bool Linked(int m, int ud, int uh) {
  return m < kM && ((kTapMaskD >> ((m / (kKW * kSH) % kSD) * kJD + ud)) & 1) &&
         ((kTapMaskH >> ((m / kKW % kSH) * kJH + uh)) & 1);
}

__device__ __forceinline__ void LdMatrixX4Trans(unsigned addr, unsigned (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

extern "C" __global__ void __launch_bounds__(kThreads)
    KERNEL_NAME(const T* __restrict__ x, const unsigned* __restrict__ wp,
                const T* __restrict__ bias, T* __restrict__ y) {
  extern __shared__ __align__(16) unsigned char smem[];
  long long b = blockIdx.x;
  const int th = (int)(b % kTilesH);
  b /= kTilesH;
  const int td = (int)(b % kTilesD);
  b /= kTilesD;
  const int g = (int)(b % kG), n = (int)(b / kG);
  const long long qd0 = kQloD + (long long)td * kTD, qh0 = kQloH + (long long)th * kTH;
  const long long id0 = qd0 + kOffD, ih0 = qh0 + kOffH;
  const T* xg = x + ((idx_t)n * kCin + (idx_t)g * kCinG) * ((idx_t)kDin * kHin * kWin);
  const unsigned char* wg =
      reinterpret_cast<const unsigned char*>(wp) + (long long)g * kChunks * kWChunkBytes;
  const int tid = threadIdx.x;

  // A thread's copies are the same units of every chunk: their shared-memory offsets, input
  // offsets (from the chunk's first channel) and whether the row is inside the input are worked
  // out once; per chunk only the channel moves.
  idx_t src_off[kUPT];
  int dst_off[kUPT], chan[kUPT];
  unsigned inside = 0;
#pragma unroll
  for (int i = 0; i < kUPT; ++i) {
    const int u = tid + i * kThreads;
    const int row = u / kUPR, part = u % kUPR;
    const int hh = row % kRH, dd = row / kRH % kRD, cl = row / (kRH * kRD);
    const long long id = id0 + dd, ih = ih0 + hh;
    if (u < kSlabUnits && id >= 0 && id < kDin && ih >= 0 && ih < kHin) inside |= 1u << i;
    src_off[i] = (((idx_t)cl * kDin + id) * kHin + ih) * kWin + part * (kUnit / kEB);
    dst_off[i] = (cl * kCS + (dd * kRH + hh) * kWS + part * (kUnit / kEB)) * kEB;
    chan[i] = cl;
  }
  // Stage `chunk` into slot `slot`: its channels' input rows (zero outside) and weights.
  auto load = [&](int chunk, int slot) {
    unsigned char* stage = smem + slot * kStageBytes;
    const T* xc = xg + (idx_t)chunk * kCK * kDin * kHin * kWin;
#pragma unroll
    for (int i = 0; i < kUPT; ++i) {
      if (kSlabUnits % kThreads != 0 && tid + i * kThreads >= kSlabUnits) break;
      const bool valid = (inside >> i & 1) && (kCinG % kCK == 0 || chunk * kCK + chan[i] < kCinG);
      const T* src = valid ? xc + src_off[i] : x;
      if constexpr (kUnit == 16)
        CpAsync16Zfill(stage + dst_off[i], src, valid);
      else
        CpAsyncZfill<4>(stage + dst_off[i], src, valid);
    }
    const unsigned char* wsrc = wg + (long long)chunk * kWChunkBytes;
    for (int u = tid; u < kWUnits; u += kThreads)
      CpAsync16(stage + kSlabBytes + u * 16, wsrc + u * 16);
  };

  const int warp = tid / 32, lane = tid % 32;
  // The mma form: this warp's n8 tiles' first elements in the slab. The FFMA form: this thread's
  // four columns.
  int coloff[kNTW];
#pragma unroll
  for (int j = 0; j < kNTW; ++j) {
    const int col = kMMA ? (warp * kNTW + j) * 8 : tid * 4;
    const int cell = col / kWN;
    coloff[j] = (cell / kTH * kRH + cell % kTH) * kWS + col % kWN;
  }
  // The slab offsets of this lane's K rows in each k-step (the same in every chunk): ldmatrix
  // rows (16-bit), or rows t and t + 4 (TF32).
  int koff[kMMA ? kKS : 1][2];
#pragma unroll
  for (int ks = 0; ks < (kMMA ? kKS : 1); ++ks) {
    koff[ks][0] = KOff(k16 ? ks * 16 + (lane >> 3 & 1) * 8 + (lane & 7) : ks * 8 + (lane & 3));
    koff[ks][1] = KOff(ks * 8 + (lane & 3) + 4);
  }
  constexpr int kAccRows = kMMA ? kMT : kMP;
  constexpr int kAccCols = kMMA ? kNTW : 1;
  float acc[kAccRows][kAccCols][4];
#pragma unroll
  for (int i = 0; i < kAccRows; ++i)
#pragma unroll
    for (int j = 0; j < kAccCols; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
  for (int s = 0; s < kST - 1; ++s) {
    if (s < kChunks) load(s, s);
    CpAsyncCommit();
  }
#pragma unroll 1
  for (int c = 0; c < kChunks; ++c) {
    CpAsyncWait<kST - 2>();
    __syncthreads();
    if (c + kST - 1 < kChunks) load(c + kST - 1, (c + kST - 1) % kST);
    CpAsyncCommit();
    const int slot = c % kST;
    const T* slab = reinterpret_cast<const T*>(smem + slot * kStageBytes);
    const unsigned char* wst = smem + slot * kStageBytes + kSlabBytes;
    if constexpr (kMMA) {
      const uint4* frag = reinterpret_cast<const uint4*>(wst);
#pragma unroll
      for (int ks = 0; ks < kKS; ++ks) {
        unsigned a[kParts][kMT][4];
#pragma unroll
        for (int pt = 0; pt < kParts; ++pt)
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            const uint4 v = frag[((ks * kParts + pt) * kMT + mt) * 32 + lane];
            a[pt][mt][0] = v.x, a[pt][mt][1] = v.y, a[pt][mt][2] = v.z, a[pt][mt][3] = v.w;
          }
        if constexpr (k16) {
          // ldmatrix.trans: lanes 8i..8i+7 address matrix i's rows (K half i & 1, n8 tile i >> 1
          // of the pair); registers 0, 1 are the first tile's B, 2, 3 the second's.
          const unsigned base = (unsigned)__cvta_generic_to_shared(slab) + 2u * koff[ks][0];
#pragma unroll
          for (int pr = 0; pr < kNTW / 2; ++pr) {
            unsigned r[4];
            LdMatrixX4Trans(base + 2u * (lane >> 4 ? coloff[2 * pr + 1] : coloff[2 * pr]), r);
            const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
              Mma(acc[mt][2 * pr], a[0][mt], b0);
              Mma(acc[mt][2 * pr + 1], a[0][mt], b1);
            }
          }
        } else {
          // TF32 B: lane (g, t) holds K rows t and t + 4 of column g.
          const float* s0 = reinterpret_cast<const float*>(slab) + koff[ks][0] + (lane >> 2);
          const float* s1 = reinterpret_cast<const float*>(slab) + koff[ks][1] + (lane >> 2);
#pragma unroll
          for (int j = 0; j < kNTW; ++j) {
            unsigned bb[2], bs[2] = {0, 0};
            Split<kSplit>(s0[coloff[j]], bb[0], bs[0]);
            Split<kSplit>(s1[coloff[j]], bb[1], bs[1]);
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt)
              MmaSplit<kSplit>(acc[mt][j], a[0][mt], a[kParts - 1][mt], bb, bs);
          }
        }
      }
    } else {
      const float* xs = reinterpret_cast<const float*>(slab) + coloff[0];
      const float* wk = reinterpret_cast<const float*>(wst);
      const int valid = kCinG - c * kCK < kCK ? kCinG - c * kCK : kCK;
#pragma unroll 1
      for (int cl = 0; cl < valid; ++cl) {
#pragma unroll
        for (int ud = 0; ud < kJD; ++ud)
#pragma unroll
          for (int uh = 0; uh < kJH; ++uh) {
            const float4 xv =
                *reinterpret_cast<const float4*>(xs + cl * kCS + (ud * kRH + uh) * kWS);
            const float* wr = wk + ((cl * kJD + ud) * kJH + uh) * kMP;
#pragma unroll
            for (int m4 = 0; m4 < kMP / 4; ++m4) {
              const float4 wv = *reinterpret_cast<const float4*>(wr + m4 * 4);
              const float wm[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                if (!Linked(m4 * 4 + e, ud, uh)) continue;
                float* a = acc[m4 * 4 + e][0];
                a[0] = fmaf(wm[e], xv.x, a[0]);
                a[1] = fmaf(wm[e], xv.y, a[1]);
                a[2] = fmaf(wm[e], xv.z, a[2]);
                a[3] = fmaf(wm[e], xv.w, a[3]);
              }
            }
          }
      }
    }
  }
  CpAsyncWaitAll();
  __syncthreads();

  // The product to shared memory ([row][column], f32), then whole output rows from it.
  float* zs = reinterpret_cast<float*>(smem);
  if constexpr (kMMA) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < kNTW; ++j) {
        const int row = mt * 16 + lane / 4, col = (warp * kNTW + j) * 8 + lane % 4 * 2;
        *reinterpret_cast<float2*>(zs + row * kZS + col) =
            make_float2(acc[mt][j][0], acc[mt][j][1]);
        *reinterpret_cast<float2*>(zs + (row + 8) * kZS + col) =
            make_float2(acc[mt][j][2], acc[mt][j][3]);
      }
  } else {
#pragma unroll
    for (int m = 0; m < kMP; ++m)
      *reinterpret_cast<float4*>(zs + m * kZS + tid * 4) =
          make_float4(acc[m][0][0], acc[m][0][1], acc[m][0][2], acc[m][0][3]);
  }
  __syncthreads();
  // Output rows: one per warp at a time (its cell, phases and channel uniform), lanes along W;
  // output w takes tap kw from column (w + p - kw * d) / s where that divides.
  constexpr int kWarps = kThreads / 32;
#pragma unroll 1
  for (int r = warp; r < kOutRows; r += kWarps) {
    const int tqh = r % kTH, tqd = r / kTH % kTD, rh = r / (kTH * kTD) % kSH;
    const int rd = r / (kTH * kTD * kSH) % kSD, co = r / (kTH * kTD * kSH * kSD);
    const long long od = rd - kPD + (long long)kSD * (qd0 + tqd);
    const long long oh = rh - kPH + (long long)kSH * (qh0 + tqh);
    if (od < 0 || od >= kDout || oh < 0 || oh >= kHout) continue;
    const float b0 = kBias ? Ld(bias[g * kCoutG + co]) : 0.f;
    const float* zrow = zs + ((co * kSD + rd) * kSH + rh) * kKW * kZS + (tqd * kTH + tqh) * kWN;
    T* yrow = y + (((idx_t)n * kCout + g * kCoutG + co) * kDout + od) * ((idx_t)kHout * kWout) +
              oh * kWout;
    for (int ow = lane; ow < kWout; ow += 32) {
      float v = b0;
#pragma unroll
      for (int kw = 0; kw < kKW; ++kw) {
        const int t = ow + kPW - kw * kDilW;
        if (t >= 0 && t % kSW == 0 && t / kSW < kWin) v += zrow[kw * kZS + t / kSW];
      }
      yrow[ow] = St(v);
    }
  }
}
