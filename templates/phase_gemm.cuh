// phase_gemm.cuh: what the per-phase GEMM kernels (gemm_wgmma.cu, gemm_simt.cu) share: the tile
// grid over the stride phases, the rows of a tile, the state of a copied A row, and the input
// re-layout.
//
// Preamble (generator/families/phase_gemm.cpp): kBM, kBN, kKC, kCP, kNTiles, kPhases, kMTiles,
// kTotalTiles, kStagesAll, kQD kQH kQW, kBoxW kBoxH kBoxD kBoxN, kPhaseInner, kScaleParts,
// kAmaxThreads and the table kWork[kPhases]; kSplit (0: fp32 operands kept exact, 1:
// TF32-rounded or 16-bit, 3: 3xTF32 big and small parts, 4: 3xFP16 big and small parts of f32
// tensors scaled by powers of two).

constexpr bool kT16 = CONVT3D_ELEM >= 2;            // 16-bit tensors
constexpr bool k16 = kT16 || kSplit == 4;           // 16-bit operands
constexpr int kEB = k16 ? 2 : 4;                    // bytes per operand element
constexpr int kOperandParts = kSplit >= 3 ? 2 : 1;  // big and small parts (3xTF32, 3xFP16)
constexpr long long kPositions = (long long)kN * kG * kDin * kHin * kWin;
constexpr int kUPP = kCP * kEB / 16;  // 16-byte units per position of the re-laid input
// The re-laid input's 16-byte units: every part's positions (3xFP16: then the input's scale
// partials, kScaleParts floats).
constexpr long long kRelaidUnits = kOperandParts * kPositions * kUPP;

// 3xFP16 (kSplit 4): an f32 operand v becomes big = fp16(v * 2^e) and small = fp16(v * 2^e - big),
// so that big + small keeps 22 of its 24 bits and small x small (2^-22 of the product) is the
// only product left out. One exponent e per tensor, from its largest finite magnitude m
// (2^(E-1) <= m < 2^E): e = 14 - E, so that every scaled value is below 2^14 (fp16's largest is
// 65504) and its products below 2^28; e is clamped to [-126, 126] (a scale that f32 holds).
// Values below about 2^-15 of m lose bits to fp16's subnormals (their error stays near 2^-38 of
// m), which is why these tiles are an opt-in (gen::DeviceLimits::fp16_split): where such values
// carry an output that m's own values do not reach, the error can pass fp32x3's 1e-5.
// Non-finite values are left out of m; an Inf's big part is Inf and its small part NaN, so it
// makes NaN of the outputs it reaches, as in 3xTF32. gemm_wgmma's _amax and _wamax kernels write
// each of their kScaleParts blocks' m, and every kernel that needs e reduces those itself (a
// warp reads 1 KB), so no step has to zero a word.
__device__ __forceinline__ unsigned short HalfBits(float v) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}
__device__ __forceinline__ float HalfValue(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
// The scale exponent e of the tensor whose block maxima are `parts` (every lane of a full warp
// calls it and gets e).
__device__ __forceinline__ int ScaleExponent(const float* parts) {
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < kScaleParts / 32; ++i) m = fmaxf(m, parts[(threadIdx.x % 32) + 32 * i]);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (m == 0.f) return 0;
  int e2;
  frexpf(m, &e2);  // m = f * 2^e2, 0.5 <= f < 1
  return min(max(14 - e2, -126), 126);
}
// v * 2^e as fp16 big and small parts (bits).
__device__ __forceinline__ void SplitHalf(float v, float scale, unsigned short& big,
                                          unsigned short& small) {
  const float s = v * scale;  // exact: a power of two within f32's range
  big = HalfBits(s);
  small = HalfBits(s - HalfValue(big));
}

// Stages of phase slot ph's tile; the phase's tap count is 0 for a phase no tap reaches.
__device__ __forceinline__ int StagesOf(int ph) { return kWork[ph].taps * (kCP / kKC); }

// Every phase's rows are laid out on the same grid: (n, qd, qh, qw) over the largest q counts
// of any phase (kQD x kQH x kQW), so that rows and tiles decode with constant divisors; rows past
// a phase's own q counts are skipped (at most one plane per dimension). A tile is kBM
// consecutive rows of that grid, or (box tiles, kBoxRows > 0) a box of kBoxW x kBoxH x kBoxD q
// positions of kBoxN samples, its rows W fastest (rows from kBoxRows on are unused).
constexpr long long kRowsAll = (long long)kN * kQD * kQH * kQW;
constexpr bool kRows32 = kRowsAll < (1LL << 31);
constexpr int kBoxRows = (int)(kBoxW * kBoxH * kBoxD * kBoxN);
static_assert(kBoxRows <= kBM, "a box fits its tile");

// Tile t: phase slot, group, channel tile and row tile (first row m0 of flat tiles, index mi).
// kPhaseInner: the phases of one row tile and channel tile are consecutive tiles (running at
// once on neighbouring SMs, they read the same input rows, and write neighbouring outputs); else
// each phase's tiles in turn.
struct Tile {
  int ph, g, nt;
  long long mi, m0;
};
__device__ __forceinline__ Tile TileOf(long long t) {
  Tile tile;
  if constexpr (kPhaseInner) {
    tile.ph = (int)(t % kPhases);
    t /= kPhases;
    tile.nt = (int)(t % kNTiles);
    t /= kNTiles;
    tile.mi = t % kMTiles;
    tile.g = (int)(t / kMTiles);
  } else {
    tile.mi = t % kMTiles;
    t /= kMTiles;
    tile.nt = (int)(t % kNTiles);
    t /= kNTiles;
    tile.g = (int)(t % kG);
    tile.ph = (int)(t / kG);
  }
  tile.m0 = tile.mi * kBM;
  return tile;
}

// Whether phase slot ph has the grid position (qd, qh, qw); if so, offsets it by the phase's
// q_lo (its phase-lattice coordinates).
__device__ __forceinline__ bool InPhase(int ph, long long& qd, long long& qh, long long& qw) {
  const Phase &pd = kPhD[kWork[ph].rd], &phh = kPhH[kWork[ph].rh], &pw = kPhW[kWork[ph].rw];
  if (qd >= pd.q_count || qh >= phh.q_count || qw >= pw.q_count) return false;
  qd += pd.q_lo, qh += phh.q_lo, qw += pw.q_lo;
  return true;
}

// A box tile's first grid position (sample, qd, qh, qw).
struct BoxOrigin {
  int n;
  int qd, qh, qw;
};
__device__ __forceinline__ BoxOrigin BoxOf(long long mi) {
  constexpr long long kTW = kBoxW ? (kQW + kBoxW - 1) / kBoxW : 1;
  constexpr long long kTH = kBoxH ? (kQH + kBoxH - 1) / kBoxH : 1;
  constexpr long long kTD = kBoxD ? (kQD + kBoxD - 1) / kBoxD : 1;
  BoxOrigin o;
  o.qw = (int)(mi % kTW * kBoxW), mi /= kTW;
  o.qh = (int)(mi % kTH * kBoxH), mi /= kTH;
  o.qd = (int)(mi % kTD * kBoxD);
  o.n = (int)(mi / kTD * kBoxN);
  return o;
}

// Row m of phase slot ph: whether the phase has it, and its sample and phase-lattice
// coordinates q (offset by q_lo).
__device__ __forceinline__ bool RowOf(int ph, long long m, int& n, long long& qd, long long& qh,
                                      long long& qw) {
  if (m >= kRowsAll) return false;
  if constexpr (kRows32) {
    unsigned u = (unsigned)m;
    qw = u % kQW, u /= kQW;
    qh = u % kQH, u /= kQH;
    qd = u % kQD, n = (int)(u / kQD);
  } else {
    qw = m % kQW, m /= kQW;
    qh = m % kQH, m /= kQH;
    qd = m % kQD, n = (int)(m / kQD);
  }
  return InPhase(ph, qd, qh, qw);
}

// Row r of `tile` (flat or box): whether its phase has it, and its sample and phase-lattice
// coordinates.
__device__ __forceinline__ bool TileRowOf(const Tile& tile, int r, int& n, long long& qd,
                                          long long& qh, long long& qw) {
  if constexpr (kBoxRows == 0) {
    return RowOf(tile.ph, tile.m0 + r, n, qd, qh, qw);
  } else {
    if (r >= kBoxRows) return false;
    const BoxOrigin o = BoxOf(tile.mi);
    qw = o.qw + r % kBoxW, r /= kBoxW;
    qh = o.qh + r % kBoxH, r /= kBoxH;
    qd = o.qd + r % kBoxD;
    n = o.n + r / kBoxD;
    if (n >= kN || qd >= kQD || qh >= kQH || qw >= kQW) return false;
    return InPhase(tile.ph, qd, qh, qw);
  }
}

// The state of one A row a thread copies: where the phase's first tap reads (its unit of channel
// chunk 0 in the re-laid input, 32-bit where possible: the producer keeps many rows) and, per
// dimension, which of the phase's taps read inside the input (bit j of each 10-bit field: tap j;
// zero for a row past the phase's rows).
template <bool kNarrow>
struct UnitIndex {  // a unit of the re-laid input: 32 bits where they reach every unit
  typedef unsigned type;
};
template <>
struct UnitIndex<false> {
  typedef long long type;
};
struct ARow {
  UnitIndex < kPositions* kUPP<(1LL << 32)>::type unit;
  unsigned taps_in;
};

// Row m of `tile` for the thread that copies unit `unit` (of kKC channels) of each row.
__device__ __forceinline__ ARow ARowOf(const Tile& tile, long long m, int unit) {
  ARow r;
  r.unit = 0;
  r.taps_in = 0;
  int n;
  long long qd, qh, qw;
  if (!RowOf(tile.ph, m, n, qd, qh, qw)) return r;
  const Phase& pd = kPhD[kWork[tile.ph].rd];
  const Phase& phh = kPhH[kWork[tile.ph].rh];
  const Phase& pw = kPhW[kWork[tile.ph].rw];
  // Bit j of a dimension's field: input i - j*d' of tap j lies in [0, size).
  auto in_range = [](long long i, int taps, int dr, int size) {
    unsigned bits = 0;
    for (int j = 0; j < taps; ++j) bits |= (unsigned)((unsigned long long)(i - j * dr) < size) << j;
    return bits;
  };
  const long long id = qd + pd.c, ih = qh + phh.c, iw = qw + pw.c;
  r.taps_in = in_range(id, pd.taps, kDRd, kDin) | in_range(ih, phh.taps, kDRh, kHin) << 10 |
              in_range(iw, pw.taps, kDRw, kWin) << 20;
  r.unit = (((((long long)n * kG + tile.g) * kDin + id) * kHin + ih) * kWin + iw) * kUPP + unit;
  return r;
}

// Units from a row's first-tap unit to those of stage (chunk, tap jd, jh, jw): the chunk, less
// the tap's input shift; and the taps_in bits the row needs for that tap.
__device__ __forceinline__ long long StageShift(int chunk, int jd, int jh, int jw) {
  return (long long)chunk * (kKC * kEB / 16) -
         ((((long long)jd * kDRd) * kHin + jh * kDRh) * kWin + jw * kDRw) * kUPP;
}
__device__ __forceinline__ unsigned TapSelect(int jd, int jh, int jw) {
  return 1u << jd | 1u << (10 + jh) | 1u << (20 + jw);
}
// Steps a stage to the next tap of the phase's td x th x tw (W fastest), then to the next
// channel chunk.
__device__ __forceinline__ void NextStage(int& jd, int& jh, int& jw, int& chunk, int td, int th,
                                          int tw) {
  if (++jw == tw) {
    jw = 0;
    if (++jh == th) {
      jh = 0;
      if (++jd == td) jd = 0, ++chunk;
    }
  }
}

// x [N][C_in][D][H][W] -> [N][G][D][H][W][kCP] (16-byte units of consecutive channels, zero past
// the group's), TF32-rounded or 16-bit (3xTF32 and 3xFP16: the big parts, then the small
// parts' copy): a transpose through shared memory in tiles of 64 positions x kTC channels, read
// along positions and written along channels, both coalesced. A thread keeps one position of a tile
// and loads every fourth channel, all its loads issued before the first store (the channel moves
// its address by a whole volume), so that each thread has kTC / 4 loads in flight.
extern "C" __global__ void __launch_bounds__(256)  // the plan launches 256 threads
    PREPX_KERNEL_NAME(const T* __restrict__ x, uint4* __restrict__ xr) {
  WaitForPreviousKernel();
  constexpr int kTP = 64, kTC = kCP % 32 == 0 ? 32 : kCP % 16 == 0 ? 16 : 8;
  constexpr int kPerUnit = 16 / kEB, kTU = kTC / kPerUnit;  // elements per unit, units per tile
  constexpr int kRowsPerPass = 256 / kTP, kPasses = kTC / kRowsPerPass;
  constexpr long long kVolIn = (long long)kDin * kHin * kWin;
  constexpr long long kPTiles = (kPositions + kTP - 1) / kTP;
  __shared__ unsigned tile[kTC][kTP + 1];  // operand bits (TF32 word or 16-bit value)
  const int pp = threadIdx.x % kTP, c_first = threadIdx.x / kTP;
  // 3xFP16: the input's scale 2^e (each warp reduces the partials itself).
  float scale = 1.f;
  if constexpr (kSplit == 4)
    scale = ldexpf(1.f, ScaleExponent(reinterpret_cast<const float*>(xr + kRelaidUnits)));
  for (long long t = blockIdx.x; t < kPTiles * (kCP / kTC); t += gridDim.x) {
    const long long p0 = t % kPTiles * kTP;
    const int c0 = (int)(t / kPTiles) * kTC;
    const long long pos = p0 + pp;  // (n*G + g)*vol + v
    const T* src = x + (pos / kVolIn * kCinG + c0 + c_first) * kVolIn + pos % kVolIn;
    unsigned v[kPasses];
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const int c = c_first + j * kRowsPerPass;
      v[j] = 0;
      if (pos < kPositions && c0 + c < kCinG) {
        const T val = src[j * kRowsPerPass * kVolIn];
        if constexpr (kT16)
          v[j] = val;
        else if constexpr (kSplit != 1)
          v[j] = __float_as_uint(Ld(val));  // exact, or split when written
        else
          v[j] = Tf32Big(Ld(val));
      }
    }
    __syncthreads();  // the previous tile's units are written
#pragma unroll
    for (int j = 0; j < kPasses; ++j) tile[c_first + j * kRowsPerPass][pp] = v[j];
    __syncthreads();
    for (int e = threadIdx.x; e < kTP * kTU; e += 256) {
      // A thread's units along the channels.
      const int wp = e / kTU, u = e % kTU;
      if (p0 + wp >= kPositions) continue;
      unsigned w[4], w_small[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if constexpr (kSplit == 4) {
          unsigned short b0, s0, b1, s1;
          SplitHalf(__uint_as_float(tile[u * 8 + 2 * k][wp]), scale, b0, s0);
          SplitHalf(__uint_as_float(tile[u * 8 + 2 * k + 1][wp]), scale, b1, s1);
          w[k] = Pack(b0, b1);
          w_small[k] = Pack(s0, s1);
        } else if constexpr (k16) {
          w[k] = tile[u * 8 + 2 * k][wp] | tile[u * 8 + 2 * k + 1][wp] << 16;
        } else if constexpr (kSplit == 3) {
          const float f = __uint_as_float(tile[u * 4 + k][wp]);
          w[k] = Tf32Big(f);  // rounded, low bits cleared: f - big is exact
          w_small[k] = Tf32(f - __uint_as_float(w[k]));
        } else {
          w[k] = tile[u * 4 + k][wp];
        }
      }
      const long long wpos = p0 + wp, unit = c0 / kPerUnit + u;
      const long long at = wpos * kUPP + unit;
      xr[at] = make_uint4(w[0], w[1], w[2], w[3]);
      if constexpr (kOperandParts == 2)
        xr[kPositions * kUPP + at] = make_uint4(w_small[0], w_small[1], w_small[2], w_small[3]);
    }
  }
}
