// narrow_gemm.cu: layers with few output channels (generator/families/narrow_gemm.cpp): a GEMM
// whose rows are (output channel, D phase, H phase, W tap) and whose columns are a box of output
// cells' input positions, read in place; W taps are summed into whole output rows at the end.
//
// Preamble: kTD kTH (output cells of a block along D and H), kCK (input channels per stage), kST
// (stages), kMMA (1: mma.sync, 0: FFMA), kSplit (1, or 3 for 3xTF32), kJD kJH kOffD kOffH
// (cell q reads input rows q + off .. q + off + J - 1), kQloD kQloH kTilesD kTilesH kTotalTiles
// (the cells with outputs, in tiles), kPersist (1: a block runs several tiles), kTapMaskD
// kTapMaskH (bit r * J + u: phase r has a tap on row u), kM kMP (GEMM rows, padded), kWN kWS kCS
// (GEMM columns per input row, row and channel strides of a stage's input slab, in elements), kKC
// (K per chunk), kDilW, kChunks, kUnit (bytes per copy), kThreads, kZS (row stride of the product
// in the epilogue), kWChunkBytes, kStageBytes, kSlabBytes (a stage's input rows, then its
// weights), NARROW_X_MAP (1: stages copied by tensor map; the kernel takes the map), kBarOffset
// (tensor map: the stages' mbarriers).
//
// A tile is the output cells (q_d, q_h) of a kTD x kTH box of one (sample, group), over whole W
// rows; a block runs one tile (kPersist: every gridDim.x-th tile, in one pipeline). A stage holds
// kCK channels' input rows the box reaches ([channel][row d][row h][w], zero outside the input
// and past the group's channels) and the chunk's packed weights: copied by every thread
// (cp.async, a __syncthreads per stage), or (kTMA) by one thread as one tensor-map box and one
// bulk copy that complete the stage's mbarrier, so that no other thread spends instructions on
// addresses. For cell (q_d, q_h), output phase (r_d, r_h) and W tap
// kw, the product row m = ((co * kSD + r_d) * kSH + r_h) * kKW + kw sums, over channels and rows
// (u_d, u_h), weight x input(q_d + off_d + u_d, q_h + off_h + u_h, i_w) into column (q_d, q_h,
// i_w); output w of phase (r_d, r_h) then takes tap kw from column i_w = (w + p - kw * d) / s. Rows
// and offsets no tap links carry zero weights (the tensor cores multiply them; the FFMA form skips
// them at compile time).

constexpr bool k16 = CONVT3D_ELEM >= 2;
constexpr bool kTMA = NARROW_X_MAP;  // one thread copies each stage by tensor map
constexpr int kEB = k16 ? 2 : 4;
constexpr int kKStep = kMMA ? (k16 ? 16 : 8) : 1;
constexpr int kParts = kSplit == 3 ? 2 : 1;  // packed weight images: big (and small)
constexpr int kMT = kMMA ? kMP / 16 : 1;     // m16 tiles (mma)
constexpr int kRD = kTD + kJD - 1, kRH = kTH + kJH - 1;
constexpr int kJJ = kJD * kJH;
constexpr int kWT = kWN / 8;  // mma: 8-column W tiles, a warp each per D group
constexpr int kDG = kMMA ? kThreads / 32 / kWT : 1;  // mma: warps along D
constexpr int kTDW = kTD / kDG;                      // mma: cells along D per warp
constexpr int kUPR = kWin * kEB / kUnit;             // copies per input row
constexpr int kSlabRows = kCK * kRD * kRH;
constexpr int kSlabUnits = kSlabRows * kUPR;
constexpr int kUPT = (kSlabUnits + kThreads - 1) / kThreads;  // copies per thread
constexpr int kWUnits = kWChunkBytes / 16;
constexpr int kOutRows = kCoutG * kSD * kSH * kTD * kTH;  // output rows of a block
static_assert(sizeof(Acc) == 4, "narrow_gemm: f32 accumulation only");
static_assert(kMMA || !k16, "the FFMA form stages f32 input");
static_assert(!kTMA || kCS == kRD * kRH * kWS, "a tensor-map box is dense");

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

// w -> per (group, chunk) the stage image of the weights: mma A fragments [channel group of
// kKStep][offset (u_d, u_h)][part][m16 tile][lane][4 words] (TF32 rounded, or 16-bit pairs), or
// FFMA rows [k][kMP] of f32.
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
      const int part = word / 128 / kMT % kParts, u = word / 128 / kMT / kParts % kJJ;
      const int kg = word / 128 / kMT / kParts / kJJ;
      // A fragment: register 0 (row g, col), 1 (row g + 8), 2 (col + kKStep / 2), 3 (both); the
      // columns are channels kg * kKStep + col of offset u.
      const int row = mt * 16 + lane / 4 + (reg & 1) * 8;
      const int ci = chunk * kCK + kg * kKStep;
      auto at = [&](int col) { return WeightAt(w, g, ci + col, row, u / kJH, u % kJH); };
      if constexpr (k16) {
        const int col = lane % 4 * 2 + (reg >> 1) * 8;
        ws[i] = Pack(St(at(col)), St(at(col + 1)));
      } else {
        unsigned big, small = 0;
        Split<kSplit>(at(lane % 4 + (reg >> 1) * 4), big, small);
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

// The epilogue's output runs (W strides 1, 2 and 4; else 0: one (row, cell) at a time). Output
// w = kRun * j + t of a row takes tap kw from column c0 + Off(t, kw), c0 = j * kRun / kSW, where
// t + kPW - kw * kDilW divides by kSW: with kRun a multiple of kSW, known at compile time.
constexpr int kRun = kSW == 1 || kSW == 2 || kSW == 4 ? 4 : 0;
constexpr int kRunDiv = kRun > 0 ? kRun : 1;  // for expressions compiled even where kRun is 0
__device__ __forceinline__ constexpr int RunMod(int t, int kw) {  // (t + kPW - kw d) mod kSW
  return ((t + kPW - kw * kDilW) % kSW + kSW) % kSW;
}
__device__ __forceinline__ constexpr bool RunTap(int t, int kw) { return RunMod(t, kw) == 0; }
__device__ __forceinline__ constexpr int RunOff(int t, int kw) {  // floor division
  return (t + kPW - kw * kDilW - RunMod(t, kw)) / kSW;
}
// The lowest and highest column offset of a run's taps: a run whose columns all lie in the
// input is summed without bounds checks.
__device__ constexpr int RunOffBound(bool high) {
  int b = high ? -(1 << 30) : (1 << 30);
  for (int t = 0; t < kRunDiv; ++t)
    for (int kw = 0; kw < kKW; ++kw)
      if (RunTap(t, kw))
        b = high ? (RunOff(t, kw) > b ? RunOff(t, kw) : b)
                 : (RunOff(t, kw) < b ? RunOff(t, kw) : b);
  return b;
}
constexpr int kRunOffLo = RunOffBound(false), kRunOffHi = RunOffBound(true);

// A run's sums (zrow: the product row at column c0): bias, then the taps in kw order.
template <bool kGuard>
__device__ __forceinline__ void SumRun(const float* zrow, int c0, float bias, float (&v)[kRunDiv]) {
#pragma unroll
  for (int t = 0; t < kRun; ++t) {
    v[t] = bias;
#pragma unroll
    for (int kw = 0; kw < kKW; ++kw) {
      if (!RunTap(t, kw)) continue;
      const int c = c0 + RunOff(t, kw);
      if (!kGuard || (c >= 0 && c < kWin)) v[t] += zrow[kw * kZS + RunOff(t, kw)];
    }
  }
}

// A whole run to y (aligned to kRun elements): one 16-byte (f32) or 8-byte (16-bit) store.
__device__ __forceinline__ void StoreRun(T* y, const float (&v)[kRunDiv]) {
  if constexpr (kRun == 4) {
    if constexpr (k16) {
      *reinterpret_cast<uint2*>(y) = make_uint2((unsigned)St(v[0]) | (unsigned)St(v[1]) << 16,
                                                (unsigned)St(v[2]) | (unsigned)St(v[3]) << 16);
    } else {
      *reinterpret_cast<float4*>(y) = make_float4(v[0], v[1], v[2], v[3]);
    }
  }
}

#if NARROW_X_MAP
#define NARROW_X_MAP_PARAM , const __grid_constant__ TensorMap x_map
#else
#define NARROW_X_MAP_PARAM
#endif

__device__ __forceinline__ void LdMatrixX2Trans(unsigned addr, unsigned (&r)[2]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

extern "C" __global__ void __launch_bounds__(kThreads)
    KERNEL_NAME(const T* __restrict__ x, const unsigned* __restrict__ wp,
                const T* __restrict__ bias, T* __restrict__ y NARROW_X_MAP_PARAM) {
  extern __shared__ __align__(128) unsigned char smem[];
  // Tile t: sample, group and the first cells along D and H.
  struct Tile {
    int n, g;
    long long qd0, qh0;
  };
  auto tile_of = [](long long t) {
    Tile tl;
    const int th = (int)(t % kTilesH);
    t /= kTilesH;
    const int td = (int)(t % kTilesD);
    t /= kTilesD;
    tl.g = (int)(t % kG), tl.n = (int)(t / kG);
    tl.qd0 = kQloD + (long long)td * kTD, tl.qh0 = kQloH + (long long)th * kTH;
    return tl;
  };
  const int tid = threadIdx.x;

  // A copy unit: its input offset from the tile's first row of the chunk's first channel, its
  // shared-memory byte offset, its channel in the chunk and its slab row (dd << 16 | hh).
  auto unit_of = [](int u, idx_t& src, int& dst, int& cl, int& at) {
    const int row = u / kUPR, part = u % kUPR;
    const int hh = row % kRH, dd = row / kRH % kRD;
    cl = row / (kRH * kRD);
    at = dd << 16 | hh;
    src = (((idx_t)cl * kDin + dd) * kHin + hh) * kWin + part * (kUnit / kEB);
    dst = (cl * kCS + (dd * kRH + hh) * kWS + part * (kUnit / kEB)) * kEB;
  };
  // One copy to shared address dst (zeros where !valid, reading nothing).
  auto copy = [&](unsigned dst, const T* src, bool valid) {
    if constexpr (kUnit == 16)
      CpAsync16Zfill(dst, valid ? src : x, valid);
    else
      CpAsyncZfill<4>(dst, valid ? src : x, valid);
  };
  const unsigned smem_at = (unsigned)__cvta_generic_to_shared(smem);
  // A thread's units are the same in every chunk and tile: up to 8 are worked out once, more
  // per copy.
  constexpr bool kKept = !kTMA && kUPT <= 8;
  idx_t src_off[kKept ? kUPT : 1];
  int dst_off[kKept ? kUPT : 1], chan[kKept ? kUPT : 1], slab_at[kKept ? kUPT : 1];
  // A block of one tile (not kPersist) also knows which of its units are inside the input.
  unsigned inside_once = 0;
  if constexpr (kKept) {
    const Tile tl = tile_of(blockIdx.x);
#pragma unroll
    for (int i = 0; i < kUPT; ++i) {
      unit_of(tid + i * kThreads, src_off[i], dst_off[i], chan[i], slab_at[i]);
      const long long id = tl.qd0 + kOffD + (slab_at[i] >> 16);
      const long long ih = tl.qh0 + kOffH + (slab_at[i] & 0xffff);
      if (id >= 0 && id < kDin && ih >= 0 && ih < kHin && tid + i * kThreads < kSlabUnits)
        inside_once |= 1u << i;
    }
  }
  // Step s of this block: chunk s % kChunks of its tile s / kChunks, staged into slot s % kST:
  // the chunk's channels' input rows (zero outside) and its weights.
  const unsigned bars = smem_at + kBarOffset;  // kTMA: stage i's "full" mbarrier at + 8 i
  auto load = [&](int s) {
    const Tile tl = tile_of(blockIdx.x + (long long)(s / kChunks) * gridDim.x);
    const int chunk = s % kChunks;
    const unsigned stage = smem_at + s % kST * kStageBytes;
#if NARROW_X_MAP
    // One thread: the box of the chunk's channels x the rows the cells reach x kWS columns (zeros
    // outside the input and past the group's channels), then the chunk's weights.
    const unsigned bar = bars + s % kST * 8;
    MbarArriveExpect(bar, kCK * kCS * kEB + kWChunkBytes);
    TmaLoad5(stage, &x_map, 0, (int)(tl.qh0 + kOffH), (int)(tl.qd0 + kOffD), chunk * kCK,
             tl.n * kG + tl.g, bar);
    BulkCopy(stage + kSlabBytes,
             reinterpret_cast<const unsigned char*>(wp) +
                 ((long long)tl.g * kChunks + chunk) * kWChunkBytes,
             kWChunkBytes, bar);
#else
    const long long id0 = tl.qd0 + kOffD, ih0 = tl.qh0 + kOffH;
    const T* xc =
        x + ((((idx_t)tl.n * kCin + tl.g * kCinG + chunk * kCK) * kDin + id0) * kHin + ih0) * kWin;
    // Inside the input: rows id0 + dd, ih0 + hh, and a channel of the group.
    auto inside = [&](int at, int cl) {
      return (unsigned long long)(id0 + (at >> 16)) < (unsigned long long)kDin &&
             (unsigned long long)(ih0 + (at & 0xffff)) < (unsigned long long)kHin &&
             (kCinG % kCK == 0 || chunk * kCK + cl < kCinG);
    };
    if constexpr (kKept) {
#pragma unroll
      for (int i = 0; i < kUPT; ++i) {
        if (kSlabUnits % kThreads != 0 && tid + i * kThreads >= kSlabUnits) break;
        const bool valid = kPersist ? inside(slab_at[i], chan[i])
                                    : (inside_once >> i & 1) &&
                                          (kCinG % kCK == 0 || chunk * kCK + chan[i] < kCinG);
        copy(stage + dst_off[i], xc + src_off[i], valid);
      }
    } else {
      for (int u = tid; u < kSlabUnits; u += kThreads) {
        idx_t src;
        int dst, cl, at;
        unit_of(u, src, dst, cl, at);
        copy(stage + dst, xc + src, inside(at, cl));
      }
    }
    const unsigned char* wsrc = reinterpret_cast<const unsigned char*>(wp) +
                                ((long long)tl.g * kChunks + chunk) * kWChunkBytes;
    for (int u = tid; u < kWUnits; u += kThreads)
      CpAsync16(stage + kSlabBytes + u * 16, wsrc + u * 16);
#endif
  };
  auto clear = [](auto& acc) {
#pragma unroll
    for (auto& row : acc)
#pragma unroll
      for (auto& col : row)
#pragma unroll
        for (float& v : col) v = 0.f;
  };

  const int warp = tid / 32, lane = tid % 32;
  // The mma form: warp (w tile, D group) computes kTDW x kTH cells of one 8-column W tile; the
  // FFMA form: a thread's four columns.
  const int wt = warp % kWT, dg = warp / kWT;
  int xoff;  // this lane's first slab element
  if constexpr (kMMA) {
    xoff = k16 ? (lane & 15) * kCS + (dg * kTDW * kRH) * kWS + wt * 8
               : (lane & 3) * kCS + (dg * kTDW * kRH) * kWS + wt * 8 + (lane >> 2);
  } else {
    const int cell = tid * 4 / kWN;
    xoff = (cell / kTH * kRH + cell % kTH) * kWS + tid * 4 % kWN;
  }
  constexpr int kAccRows = kMMA ? kTDW * kTH : kMP;
  constexpr int kAccCols = kMMA ? kMT : 1;
  float acc[kAccRows][kAccCols][4];
  clear(acc);
  // Persistent blocks keep the product apart from the stages (the next tile's copies are in
  // flight while it is summed); a block of one tile reuses the stages for it.
  float* zs = reinterpret_cast<float*>(smem + (kPersist ? kST * kStageBytes : 0));

  // The block's tiles blockIdx.x, + gridDim.x, ... (one unless kPersist): one pipeline of steps
  // over all of them, so that the next tile's copies are in flight while a tile's products are
  // summed and stored.
  const int steps = (int)((kTotalTiles - 1 - blockIdx.x) / gridDim.x + 1) * kChunks;
  if constexpr (kTMA) {
    // The barriers are initialised and made visible to the copy engine (the async proxy) before
    // any copy that completes on them is issued, as in gemm_wgmma.
    if (tid == 0) {
#pragma unroll
      for (int i = 0; i < kST; ++i) MbarInit(bars + 8 * i, 1);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();
    if (tid == 0) {
#pragma unroll
      for (int s = 0; s < kST - 1; ++s)
        if (s < steps) load(s);
    }
  } else {
#pragma unroll
    for (int s = 0; s < kST - 1; ++s) {
      if (s < steps) load(s);
      CpAsyncCommit();
    }
  }
#pragma unroll 1
  for (int s = 0; s < steps; ++s) {
    if constexpr (kTMA) {
      // Every thread is done with step s - 1, whose slot the next load refills.
      __syncthreads();
      if (tid == 0 && s + kST - 1 < steps) load(s + kST - 1);
      MbarWait(bars + s % kST * 8, s / kST & 1);
    } else {
      CpAsyncWait<kST - 2>();
      __syncthreads();
      if (s + kST - 1 < steps) load(s + kST - 1);
      CpAsyncCommit();
    }
    const int slot = s % kST, c = s % kChunks;
    const T* slab = reinterpret_cast<const T*>(smem + slot * kStageBytes);
    const unsigned char* wst = smem + slot * kStageBytes + kSlabBytes;
    if constexpr (kMMA) {
      const uint4* frag = reinterpret_cast<const uint4*>(wst);
      const T* xs = slab + xoff;
#pragma unroll 1
      for (int kg = 0; kg < kCK / kKStep; ++kg) {
        // The A fragments of every offset (u_d, u_h) of these kKStep channels.
        unsigned a[kParts][kJJ][kMT][4];
#pragma unroll
        for (int u = 0; u < kJJ; ++u)
#pragma unroll
          for (int pt = 0; pt < kParts; ++pt)
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
              const uint4 v = frag[(((kg * kJJ + u) * kParts + pt) * kMT + mt) * 32 + lane];
              a[pt][u][mt][0] = v.x, a[pt][u][mt][1] = v.y, a[pt][u][mt][2] = v.z;
              a[pt][u][mt][3] = v.w;
            }
        const T* xk = xs + kg * kKStep * kCS;
        // Each input row the warp's cells reach, loaded once: B of these channels x 8 columns,
        // multiplied into every cell that reads it (cell = row - offset).
#pragma unroll
        for (int rd = 0; rd < kTDW + kJD - 1; ++rd)
#pragma unroll
          for (int rh = 0; rh < kRH; ++rh) {
            const T* xr = xk + (rd * kRH + rh) * kWS;
            unsigned bb[2], bs[2] = {0, 0};
            if constexpr (k16) {
              // ldmatrix.trans x2: lanes 0-7 address channels 0-7, lanes 8-15 channels 8-15.
              LdMatrixX2Trans((unsigned)__cvta_generic_to_shared(xr), bb);
            } else {
              // TF32 B: lane (g, t) holds channels t and t + 4 of column g.
              Split<kSplit>(reinterpret_cast<const float*>(xr)[0], bb[0], bs[0]);
              Split<kSplit>(reinterpret_cast<const float*>(xr)[4 * kCS], bb[1], bs[1]);
            }
#pragma unroll
            for (int ud = 0; ud < kJD; ++ud)
#pragma unroll
              for (int uh = 0; uh < kJH; ++uh) {
                const int cd = rd - ud, ch = rh - uh;
                if (cd < 0 || cd >= kTDW || ch < 0 || ch >= kTH) continue;
#pragma unroll
                for (int mt = 0; mt < kMT; ++mt)
                  MmaSplit<kSplit>(acc[cd * kTH + ch][mt], a[0][ud * kJH + uh][mt],
                                   a[kParts - 1][ud * kJH + uh][mt], bb, bs);
              }
          }
      }
    } else {
      const float* xs = reinterpret_cast<const float*>(slab) + xoff;
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
    if (c != kChunks - 1) continue;

    // The tile's last chunk: its product to shared memory ([row][column], f32), then whole
    // output rows from it.
    const Tile tl = tile_of(blockIdx.x + (long long)(s / kChunks) * gridDim.x);
    const int n = tl.n, g = tl.g;
    const long long qd0 = tl.qd0, qh0 = tl.qh0;
    if constexpr (!kPersist) {
      if constexpr (!kTMA) CpAsyncWaitAll();
      __syncthreads();  // every warp is done with the stages the product overwrites
    }
    if constexpr (kMMA) {
#pragma unroll
      for (int cell = 0; cell < kTDW * kTH; ++cell)
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          const int row = mt * 16 + lane / 4;
          const int col =
              ((dg * kTDW + cell / kTH) * kTH + cell % kTH) * kWN + wt * 8 + lane % 4 * 2;
          *reinterpret_cast<float2*>(zs + row * kZS + col) =
              make_float2(acc[cell][mt][0], acc[cell][mt][1]);
          *reinterpret_cast<float2*>(zs + (row + 8) * kZS + col) =
              make_float2(acc[cell][mt][2], acc[cell][mt][3]);
        }
    } else {
#pragma unroll
      for (int m = 0; m < kMP; ++m)
        *reinterpret_cast<float4*>(zs + m * kZS + tid * 4) =
            make_float4(acc[m][0][0], acc[m][0][1], acc[m][0][2], acc[m][0][3]);
    }
    clear(acc);
    // Output rows: where each lies and its bias, once per row. Then (row, q) pairs over the
    // threads: q is the output cell along W, whose kSW outputs w = kSW * q + r_w - p each take
    // tap kw from column q + (r_w - kw * d) / kSW where that divides (known at compile time).
    struct RowInfo {
      long long y;  // offset of the output row in y, or -1 outside the output
      int z;        // offset of its first product row in zs
      float bias;
    };
    RowInfo* rows = reinterpret_cast<RowInfo*>(zs + kMP * kZS);
    for (int r = tid; r < kOutRows; r += kThreads) {
      const int tqh = r % kTH, tqd = r / kTH % kTD, rh = r / (kTH * kTD) % kSH;
      const int rd = r / (kTH * kTD * kSH) % kSD, co = r / (kTH * kTD * kSH * kSD);
      const long long od = rd - kPD + (long long)kSD * (qd0 + tqd);
      const long long oh = rh - kPH + (long long)kSH * (qh0 + tqh);
      const bool in = od >= 0 && od < kDout && oh >= 0 && oh < kHout;
      rows[r].y =
          in ? (((long long)n * kCout + g * kCoutG + co) * kDout + od) * kHout * kWout + oh * kWout
             : -1;
      rows[r].z = ((co * kSD + rd) * kSH + rh) * kKW * kZS + (tqd * kTH + tqh) * kWN;
      rows[r].bias = kBias ? Ld(bias[g * kCoutG + co]) : 0.f;
    }
    __syncthreads();
    if constexpr (kRun > 0) {
      // Runs of kRun consecutive outputs per (row, run): coalesced vector stores where W rows
      // are whole runs and y is aligned to one.
      constexpr int kRuns = (kWout + kRunDiv - 1) / kRunDiv;
      const bool vector =
          kWout % kRunDiv == 0 && (unsigned long long)y % (kRunDiv * sizeof(T)) == 0;
#pragma unroll 1
      for (int e = tid; e < kOutRows * kRuns; e += kThreads) {
        const int r = e / kRuns, j = e - r * kRuns;
        const RowInfo ri = rows[r];
        if (ri.y < 0) continue;
        const int c0 = j * (kRun / kSW);
        const float* zrow = zs + ri.z + c0;
        float v[kRunDiv];
        if (c0 + kRunOffLo >= 0 && c0 + kRunOffHi < kWin)
          SumRun<false>(zrow, c0, ri.bias, v);
        else
          SumRun<true>(zrow, c0, ri.bias, v);
        T* yrun = y + ri.y + j * kRun;
        if (vector) {
          StoreRun(yrun, v);
        } else {
#pragma unroll
          for (int t = 0; t < kRun; ++t)
            if (j * kRun + t < kWout) yrun[t] = St(v[t]);
        }
      }
    } else {
      constexpr int kQN = (kWout - 1 + kPW) / kSW + 1;  // W cells q = 0 .. kQN - 1
#pragma unroll 1
      for (int e = tid; e < kOutRows * kQN; e += kThreads) {
        const int r = e / kQN, q = e - r * kQN;
        const RowInfo ri = rows[r];
        if (ri.y < 0) continue;
        const float* zrow = zs + ri.z + q;
        T* yrow = y + ri.y;
#pragma unroll
        for (int rw = 0; rw < kSW; ++rw) {
          const int ow = kSW * q + rw - kPW;
          if (ow < 0 || ow >= kWout) continue;
          float v = ri.bias;
#pragma unroll
          for (int kw = 0; kw < kKW; ++kw) {
            if ((rw - kw * kDilW) % kSW != 0) continue;
            const int off = (rw - kw * kDilW) / kSW;
            if (q + off >= 0 && q + off < kWin) v += zrow[kw * kZS + off];
          }
          yrow[ow] = St(v);
        }
      }
    }
  }
  CpAsyncWaitAll();
}
