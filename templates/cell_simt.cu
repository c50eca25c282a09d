// cell_simt.cu: exact fp32 FFMA for layers with few output channels per group: a thread owns a
// block of input-aligned output cells and computes every stride phase of each, for every output
// channel of its group, so each staged input value and weight feeds many FFMAs.
//
// Specialised by a preamble (generator/families/cell_simt.cpp) with kTX kTY kTZ (threads along
// W, H, D), kCOB (output channels per thread; kCoutG / kCOB thread groups take the group's
// channels), kV, kHC and kDC (cells per thread along W, H and D), kCK (input channels per
// stage), kST (stages in flight), kDilD kDilH kDilW, kUnit (16: W rows copied 16 bytes at a
// time; 4: element by element) and kTilesD kTilesH kTilesW.
//
// Per dimension, output o = s * i - p + t * dil. Writing o = s * c + r (cell c, phase r), tap t
// adds input i = c + Delta(t) into phase r = Phase(t) of cell c, both compile-time facts. A
// thread's cells (c_d .. c_d + kDC - 1, c_h .. c_h + kHC - 1, c_w .. c_w + kV - 1) read the
// input rows c + Delta over the taps: (kJD + kDC - 1) x (kJH + kHC - 1) rows of kV + kJW - 1
// values per channel (each row loaded once for all of the thread's cells that read it), staged
// (with the block's halo, zeros outside the input) in shared memory by cp.async; the weights of
// a channel, kCoutG x kKD x kKH rows of kKW taps (padded to 16 bytes), are read as broadcasts by
// the threads of one channel block (a warp reads one row per channel block it holds). Per channel a
// thread runs kCOB x kKD x kKH x kKW x kV x kHC x kDC FFMAs on the rows' input loads and kCOB x kKD
// x kKH 16-byte weight loads (the compiler keeps them in registers for all of the thread's cells).
// A cell's phases along W are consecutive outputs, so a thread's outputs of one (channel, D cell
// and phase, H cell and phase) are kV x kSW consecutive floats of one output row: 16-byte stores
// where the row allows. Sums run over the channels in order and, per channel, over the staged rows
// (D, then H offset) and their taps in a fixed order (the generator bounds their count by the
// mode's tolerance).

constexpr int kTC = kCoutG / kCOB;  // thread groups along the output channels
constexpr int kCellThreads = kTX * kTY * kTZ;
constexpr int kThreads = kCellThreads * kTC;
// A channel block may end inside a warp: that warp's weight reads are then one broadcast per
// channel block it holds.
static_assert(kCoutG % kCOB == 0, "whole channel blocks");

// Tap t of a dimension (stride s, padding p, dilation dil): the phase r it writes and the input
// offset Delta (input c + Delta feeds output s * c + r).
__host__ __device__ constexpr int TapPhase(int t, int s, int p, int dil) {
  return ((t * dil - p) % s + s) % s;
}
__host__ __device__ constexpr int TapDelta(int t, int s, int p, int dil) {
  return (TapPhase(t, s, p, dil) + p - t * dil) / s;
}
__host__ __device__ constexpr int DeltaMin(int k, int s, int p, int dil) {
  int m = TapDelta(0, s, p, dil);
  for (int t = 1; t < k; ++t) m = TapDelta(t, s, p, dil) < m ? TapDelta(t, s, p, dil) : m;
  return m;
}
__host__ __device__ constexpr int DeltaMax(int k, int s, int p, int dil) {
  int m = TapDelta(0, s, p, dil);
  for (int t = 1; t < k; ++t) m = TapDelta(t, s, p, dil) > m ? TapDelta(t, s, p, dil) : m;
  return m;
}
constexpr int kDminD = DeltaMin(kKD, kSD, kPD, kDilD), kDminH = DeltaMin(kKH, kSH, kPH, kDilH);
constexpr int kDminW = DeltaMin(kKW, kSW, kPW, kDilW);
// Input rows (and W values beyond a thread's kV) that one cell's taps reach.
constexpr int kJD = DeltaMax(kKD, kSD, kPD, kDilD) - kDminD + 1;
constexpr int kJH = DeltaMax(kKH, kSH, kPH, kDilH) - kDminH + 1;
constexpr int kJW = DeltaMax(kKW, kSW, kPW, kDilW) - kDminW + 1;

// A block's cells (output o = s * c + r; the grid covers every c of the output).
constexpr int kBD = kTZ * kDC, kBH = kTY * kHC, kBW = kTX * kV;
constexpr int kRowsD = kJD + kDC - 1;  // input rows along D of a thread's kDC cells
constexpr int kRowsH = kJH + kHC - 1;  // input rows along H of a thread's kHC cells
// The staged halo: kHD x kHH rows per channel; in a row, input w = c0w + kDminW + e sits at
// kLeft + kDminW + e (kLeft puts the block's first cell on a 16-byte boundary).
constexpr int kHD = kBD + kJD - 1, kHH = kBH + kJH - 1;
constexpr int kRowN = kBW + kJW - 1;  // values per staged row
constexpr int kLeft = kDminW < 0 ? (-kDminW + 3) / 4 * 4 : 0;
constexpr int kRS = (kLeft + kBW + (kJW - 1 + kDminW > 0 ? kJW - 1 + kDminW : 0) + 3) / 4 * 4;
constexpr int kXChan = kHD * kHH * kRS;  // floats per staged channel
constexpr int kHaloLo = kDminW < 0 ? -kDminW : 0;
constexpr int kHaloHi = kJW - 1 + kDminW > 0 ? kJW - 1 + kDminW : 0;
// Weights: per channel kCoutG x kKD x kKH rows of kKW taps, each padded to 16 bytes.
constexpr int kKWP = (kKW + 3) / 4 * 4;
constexpr int kWRows = kCoutG * kKD * kKH;
constexpr int kWChan = kWRows * kKWP;
constexpr int kStage = kCK * (kXChan + kWChan);  // floats per stage
constexpr int kChunks = (kCinG + kCK - 1) / kCK;
constexpr long long kVolIn = (long long)kDin * kHin * kWin;
constexpr long long kVolOut = (long long)kDout * kHout * kWout;
static_assert(CONVT3D_ELEM == 0, "fp32 tensors");
static_assert(kUnit == 4 || (kWin % 4 == 0 && kBW % 4 == 0 && kV % 4 == 0),
              "16-byte row copies: whole units of the input's rows and of each thread's cells");
static_assert(kST >= 2, "at least two stages");
static_assert(kVolIn < (1LL << 31), "offsets within a channel plane fit an int");
// A thread's own cells' values are one aligned run of its row (kLeft, kRS, kV multiples of 4)
// where the taps' reach covers them.
constexpr bool kVecCells = kV % 4 == 0 && kDminW <= 0 && kDminW + kJW - 1 >= 0;

// A thread's share of a stage's copies, worked out once: the same items of every channel of
// every stage, so a copy costs an address add and the instruction. Body items are 16-byte units
// of the cells' own inputs (kUnit 16), halo items single values (or, kUnit 4, every value);
// weight items single taps.
constexpr int kBodyPerRow = kUnit == 16 ? kBW / 4 : 0;
constexpr int kHaloPerRow = kUnit == 16 ? kHaloLo + kHaloHi : kRowN;
constexpr int kBodyItems = kHD * kHH * kBodyPerRow, kHaloItems = kHD * kHH * kHaloPerRow;
constexpr int kWItems = kWRows * kKW;
constexpr int kBodyPer = (kBodyItems + kThreads - 1) / kThreads;
constexpr int kHaloPer = (kHaloItems + kThreads - 1) / kThreads;
constexpr int kWPer = (kWItems + kThreads - 1) / kThreads;

struct StageCopies {
  // The group's first input channel of the sample and its weights; per item: its offset in a
  // channel plane (0 where it lies outside: zeros), its place in a stage (bytes), and whether it
  // lies inside the input.
  const float* xg;
  const float* wg;
  int body_src[kBodyPer > 0 ? kBodyPer : 1];
  unsigned body_dst[kBodyPer > 0 ? kBodyPer : 1];
  bool body_ok[kBodyPer > 0 ? kBodyPer : 1];
  int halo_src[kHaloPer > 0 ? kHaloPer : 1];
  unsigned halo_dst[kHaloPer > 0 ? kHaloPer : 1];
  bool halo_ok[kHaloPer > 0 ? kHaloPer : 1];
  int w_src[kWPer];
  unsigned w_dst[kWPer];
  bool w_ok[kWPer];

  // Row zy (of the kHD x kHH halo rows) of channel 0: its input (d, h) and its place.
  __device__ __forceinline__ static bool RowAt(int zy, int c0d, int c0h, int& plane_off,
                                               unsigned& dst_row) {
    const int d = c0d + kDminD + zy / kHH, h = c0h + kDminH + zy % kHH;
    plane_off = (d * kHin + h) * kWin;  // within the plane where the row lies inside
    dst_row = (unsigned)(zy * kRS + kLeft) * 4u;
    return d >= 0 && d < kDin && h >= 0 && h < kHin;
  }

  __device__ __forceinline__ StageCopies(const float* __restrict__ x, const float* __restrict__ w,
                                         int n, int g, int c0d, int c0h, int c0w) {
    xg = x + ((long long)n * kCin + (long long)g * kCinG) * kVolIn;
    wg = w + (long long)g * kCinG * kWItems;
#pragma unroll
    for (int i = 0; i < kBodyPer; ++i) {
      const int e = threadIdx.x + i * kThreads;
      int plane_off;
      unsigned dst_row;
      const int unit = e % (kBodyPerRow > 0 ? kBodyPerRow : 1);
      const bool row_ok =
          RowAt(e / (kBodyPerRow > 0 ? kBodyPerRow : 1), c0d, c0h, plane_off, dst_row);
      const int wi = c0w + 4 * unit;  // a whole unit inside or outside the row (4 | kWin)
      body_ok[i] = e < kBodyItems && row_ok && wi < kWin;
      body_src[i] = body_ok[i] ? plane_off + wi : 0;
      body_dst[i] = dst_row + 16u * unit;
    }
#pragma unroll
    for (int i = 0; i < kHaloPer; ++i) {
      const int e = threadIdx.x + i * kThreads;
      int plane_off;
      unsigned dst_row;
      const int j = e % (kHaloPerRow > 0 ? kHaloPerRow : 1);
      const bool row_ok =
          RowAt(e / (kHaloPerRow > 0 ? kHaloPerRow : 1), c0d, c0h, plane_off, dst_row);
      // kUnit 16: left of the cells, then right of them; kUnit 4: every value.
      const int off = kUnit != 16 ? kDminW + j : j < kHaloLo ? kDminW + j : kBW + (j - kHaloLo);
      const int wi = c0w + off;
      halo_ok[i] = e < kHaloItems && row_ok && wi >= 0 && wi < kWin;
      halo_src[i] = halo_ok[i] ? plane_off + wi : 0;
      halo_dst[i] = dst_row + 4u * (unsigned)off;  // off may be negative: modular, in the row
    }
#pragma unroll
    for (int i = 0; i < kWPer; ++i) {
      const int r = threadIdx.x + i * kThreads;  // w[g * kCinG + ci][co][td][th][tw]: row, tap
      w_ok[i] = r < kWItems;
      w_src[i] = w_ok[i] ? r : 0;
      w_dst[i] = (unsigned)(kCK * kXChan + r / kKW * kKWP + r % kKW) * 4u;
    }
  }

  // Copies stage `chunk` (input channels chunk * kCK ..) into `stage` (a shared-memory address);
  // channels past the group's and values outside the input are zeros.
  __device__ __forceinline__ void Load(unsigned stage, int chunk) const {
    const int ci0 = chunk * kCK;
#pragma unroll 4
    for (int k = 0; k < kCK; ++k) {
      const bool ch_ok = kCinG % kCK == 0 || ci0 + k < kCinG;
      const float* xk = xg + (long long)(ci0 + k) * kVolIn;
      const float* wk = wg + (long long)(ci0 + k) * kWItems;
      const unsigned so = stage + (unsigned)(k * kXChan) * 4u;
#pragma unroll
      for (int i = 0; i < kBodyPer; ++i)
        if (kBodyItems % kThreads == 0 || i < kBodyPer - 1 ||
            threadIdx.x + i * kThreads < kBodyItems) {
          const bool ok = body_ok[i] && ch_ok;
          CpAsync16Zfill(so + body_dst[i], ok ? xk + body_src[i] : xg, ok);
        }
#pragma unroll
      for (int i = 0; i < kHaloPer; ++i)
        if (kHaloItems % kThreads == 0 || i < kHaloPer - 1 ||
            threadIdx.x + i * kThreads < kHaloItems) {
          const bool ok = halo_ok[i] && ch_ok;
          CpAsyncZfill<4>(so + halo_dst[i], ok ? xk + halo_src[i] : xg, ok);
        }
#pragma unroll
      for (int i = 0; i < kWPer; ++i)
        if (w_ok[i]) {
          CpAsyncZfill<4>(stage + w_dst[i] + (unsigned)(k * kWChan) * 4u,
                          ch_ok ? wk + w_src[i] : wg, ch_ok);
        }
    }
  }
};

// x: the input; w: the weights as given; bias may be null (kBias false).
extern "C" __global__ void __launch_bounds__(kThreads)
    KERNEL_NAME(const float* __restrict__ x, const float* __restrict__ w,
                const float* __restrict__ bias, float* __restrict__ y) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);

  // The block's tile: (n, group, D tile, H tile, W tile), W fastest.
  long long b = blockIdx.x;
  const int tw = (int)(b % kTilesW);
  b /= kTilesW;
  const int th = (int)(b % kTilesH);
  b /= kTilesH;
  const int td = (int)(b % kTilesD);
  b /= kTilesD;
  const int g = (int)(b % kG), n = (int)(b / kG);
  const int c0d = td * kBD, c0h = th * kBH, c0w = tw * kBW;
  const int tx = threadIdx.x % kTX, ty = threadIdx.x / kTX % kTY,
            tz = threadIdx.x / (kTX * kTY) % kTZ;
  const int co0 = kTC == 1 ? 0 : (int)(threadIdx.x / kCellThreads) * kCOB;  // first channel

  float acc[kCOB][kDC][kSD][kHC][kSH][kSW][kV];
#pragma unroll
  for (int co = 0; co < kCOB; ++co)
#pragma unroll
    for (int i = 0; i < kDC; ++i)
#pragma unroll
      for (int rd = 0; rd < kSD; ++rd)
#pragma unroll
        for (int j = 0; j < kHC; ++j)
#pragma unroll
          for (int rh = 0; rh < kSH; ++rh)
#pragma unroll
            for (int rw = 0; rw < kSW; ++rw)
#pragma unroll
              for (int v = 0; v < kV; ++v) acc[co][i][rd][j][rh][rw][v] = 0.f;

  const StageCopies copies(x, w, n, g, c0d, c0h, c0w);
#pragma unroll
  for (int s = 0; s < kST - 1; ++s) {
    if (s < kChunks) copies.Load(sbase + 4u * s * kStage, s);
    CpAsyncCommit();
  }
  // This thread's first value of its first row in a staged channel.
  const int xoff = (tz * kDC * kHH + ty * kHC) * kRS + kLeft + tx * kV + kDminW;
#pragma unroll 1
  for (int c = 0; c < kChunks; ++c) {
    CpAsyncWait<kST - 2>();
    __syncthreads();  // stage c is in; every thread is done with stage c - 1
    if (c + kST - 1 < kChunks)
      copies.Load(sbase + 4u * ((c + kST - 1) % kST) * kStage, c + kST - 1);
    CpAsyncCommit();
    const float* xs = smem + (c % kST) * kStage + xoff;
    const float* ws = smem + (c % kST) * kStage + kCK * kXChan;
#pragma unroll 1
    for (int k = 0; k < kCK; ++k) {
#pragma unroll
      for (int ud = 0; ud < kRowsD; ++ud)
#pragma unroll
        for (int uh = 0; uh < kRowsH; ++uh) {
          // Input w = (this thread's first cell) + kDminW + e of row (ud, uh).
          float v[kV + kJW - 1];
          const float* row = xs + k * kXChan + (ud * kHH + uh) * kRS;
#pragma unroll
          for (int e = 0; e < kV + kJW - 1; ++e)
            if (!kVecCells || e + kDminW < 0 || e + kDminW >= kV) v[e] = row[e];
          if constexpr (kVecCells) {  // the cells' own values, 16 bytes at a time
#pragma unroll
            for (int q = 0; q < kV; q += 4) {
              const float4 t = *reinterpret_cast<const float4*>(row - kDminW + q);
              v[q - kDminW] = t.x, v[q - kDminW + 1] = t.y, v[q - kDminW + 2] = t.z,
                    v[q - kDminW + 3] = t.w;
            }
          }
#pragma unroll
          for (int i = 0; i < kDC; ++i)  // the cells whose taps read row ud
#pragma unroll
            for (int kd = 0; kd < kKD; ++kd) {
              if (TapDelta(kd, kSD, kPD, kDilD) - kDminD != ud - i) continue;
              const int rd = TapPhase(kd, kSD, kPD, kDilD);
#pragma unroll
              for (int j = 0; j < kHC; ++j)  // the cells whose taps read row uh
#pragma unroll
                for (int kh = 0; kh < kKH; ++kh) {
                  if (TapDelta(kh, kSH, kPH, kDilH) - kDminH != uh - j) continue;
                  const int rh = TapPhase(kh, kSH, kPH, kDilH);
#pragma unroll
                  for (int co = 0; co < kCOB; ++co) {
                    const float* wr = ws + k * kWChan + (((co0 + co) * kKD + kd) * kKH + kh) * kKWP;
                    float wv[kKWP];
#pragma unroll
                    for (int q = 0; q < kKWP; q += 4) {
                      const float4 t = *reinterpret_cast<const float4*>(wr + q);
                      wv[q] = t.x, wv[q + 1] = t.y, wv[q + 2] = t.z, wv[q + 3] = t.w;
                    }
#pragma unroll
                    for (int kw = 0; kw < kKW; ++kw) {
                      const int rw = TapPhase(kw, kSW, kPW, kDilW);
                      const int e0 = TapDelta(kw, kSW, kPW, kDilW) - kDminW;
#pragma unroll
                      for (int c2 = 0; c2 < kV; ++c2)
                        acc[co][i][rd][j][rh][rw][c2] =
                            fmaf(v[c2 + e0], wv[kw], acc[co][i][rd][j][rh][rw][c2]);
                    }
                  }
                }
            }
        }
    }
  }

  // Epilogue: per (channel, D cell and phase, H cell and phase), the thread's kV cells x kSW
  // phases along W are outputs ow0 .. ow0 + kV * kSW - 1 of one output row.
  const int cd = c0d + tz * kDC, cw = c0w + tx * kV;
  const int ow0 = cw * kSW;
  const bool vec = kWout % 4 == 0 && (kV * kSW) % 4 == 0 && ((unsigned long long)y & 15) == 0 &&
                   ow0 + kV * kSW <= kWout;
#pragma unroll
  for (int co = 0; co < kCOB; ++co) {
    const int cog = g * kCoutG + co0 + co;
    const float bv = kBias ? bias[cog] : 0.f;
#pragma unroll
    for (int i = 0; i < kDC; ++i)
#pragma unroll
      for (int rd = 0; rd < kSD; ++rd) {
        const int od = (cd + i) * kSD + rd;
        if (od >= kDout) continue;
#pragma unroll
        for (int j = 0; j < kHC; ++j)
#pragma unroll
          for (int rh = 0; rh < kSH; ++rh) {
            const int oh = (c0h + ty * kHC + j) * kSH + rh;
            if (oh >= kHout) continue;
            float* dst = y + (((idx_t)n * kCout + cog) * (idx_t)kVolOut +
                              ((idx_t)od * kHout + oh) * (idx_t)kWout + ow0);
            float o[kV * kSW];
#pragma unroll
            for (int c2 = 0; c2 < kV; ++c2)
#pragma unroll
              for (int rw = 0; rw < kSW; ++rw)
                o[c2 * kSW + rw] = acc[co][i][rd][j][rh][rw][c2] + bv;
            if (vec) {
#pragma unroll
              for (int q = 0; q < kV * kSW; q += 4)
                *reinterpret_cast<float4*>(dst + q) =
                    make_float4(o[q], o[q + 1], o[q + 2], o[q + 3]);
            } else {
#pragma unroll
              for (int q = 0; q < kV * kSW; ++q)
                if (ow0 + q < kWout) dst[q] = o[q];
            }
          }
      }
  }
}
