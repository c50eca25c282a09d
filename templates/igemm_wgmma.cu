// igemm_wgmma.cu: Hopper warpgroup MMA (wgmma, sm_90a) implicit GEMM for stride-1 problems
// (family F4): TF32, 3xTF32, BF16 and FP16 operands straight from shared memory, fp32 sums.
//
// Specialised by a preamble (generator/source.cpp) with the shape constants of direct_phase.cu
// plus: kBQD kBQH kBQW (output box per block; kBQH and kBQW multiples of 8), kWG (warpgroups),
// kMT (m64 tiles per warpgroup), kBN (output channels per block = the wgmma's N), kCK (input
// channels per chunk), kSR (tap rows per step: 1 or kKH), kSPLIT (3: 3xTF32), kCG (16-byte
// units per position of a group's re-laid input), tile counts kQDTiles kQHTiles kQWTiles kCoTiles
// kTotalBlocks, and WgmmaSS(), the wgmma.mma_async for this N and type (its operand list depends on
// N).
//
// Why a position-major input: a wgmma operand in shared memory is a grid of 8-row x 16-byte
// "core matrices" whose rows are 16 bytes apart, addressed by a descriptor in 16-byte units.
// PREPX_KERNEL_NAME re-lays the input once per Run as [part][n][g][unit][D][H][W] 16-byte units,
// each holding 4 (f32) or 8 (16-bit) consecutive input channels of one position, TF32-rounded
// (3xTF32: a big and a small part). In shared memory the halo keeps that layout, so the A operand
// of output rows m (8 W positions x 8 H rows of one m64 tile) shifted by any tap is one
// descriptor: start = the tap's shifted first position, 8-row step (SBO) = one halo row, K step
// (LBO) = one channel unit plane. No thread touches an A or B element: a K step of the whole
// block is one wgmma per m64 tile. PREP_KERNEL_NAME re-lays the weights per (group, channel
// tile, chunk, tap D, kSR tap H rows) step as [part][row][tap W][unit][co] 16-byte units (B,
// K-major).
//
// Pipeline (kAsync below): weight tiles are copied with cp.async ahead of the compute, the next
// chunk's halo in slices over the current chunk's steps, and each step's wgmmas stay in flight
// while the next step is issued (3xTF32 and chunks of fewer than three steps: one step ahead,
// waiting for each step's wgmmas). 3xTF32 sums each step's three products per tap in a fresh
// accumulator and adds it to the running sum with FADD (as igemm_mma.cu does), so the tensor
// core's accumulation never spans more than one step of taps: the wgmma accumulator is not an
// IEEE fp32 sum, and over a whole reduction of thousands of products its error can exceed the
// 3xTF32 (fp32x3) contract of 1e-5 relative L2 error; per step it stays far inside it.

constexpr bool k16 = CONVT3D_ELEM >= 2;
constexpr int kEPW = k16 ? 8 : 4;  // input channels per 16-byte unit
constexpr int kKStep = 2 * kEPW;   // K of one wgmma: two units
constexpr int kParts = (!k16 && kSPLIT == 3) ? 2 : 1;
constexpr int kThreads = kWG * 128;
constexpr int kKG = kCK / kEPW;  // units per chunk
constexpr int kChunks = (kCinG + kCK - 1) / kCK;
constexpr int kTW = kBQW / 8, kTH = kBQH / 8;  // m64 tiles (8 W x 8 H outputs) along W and H
constexpr int kHD = kBQD + (kKD - 1) * kDRd;   // halo extents (positions)
constexpr int kHH = kBQH + (kKH - 1) * kDRh;
constexpr int kHW = kBQW + (kKW - 1) * kDRw;
constexpr int kPlaneU = kHD * kHH * kHW;                 // units of one channel-unit plane
constexpr int kHaloU = kParts * kKG * kPlaneU;           // units of one halo buffer
constexpr int kHG = kKH / kSR;                           // steps per tap D (kSR tap rows each)
constexpr int kWTileU = kParts * kSR * kKW * kKG * kBN;  // units of one step's weight tile
constexpr int kRows = kKD * kHG;                         // steps per chunk
constexpr int kSteps = kChunks * kRows;
constexpr long long kVolIn = (long long)kDin * kHin * kWin;
static_assert(kSD == 1 && kSH == 1 && kSW == 1, "stride-1 problems only");
static_assert(kBQW % 8 == 0 && kBQH % 8 == 0, "an m64 tile is 8 W x 8 H outputs");
static_assert(kBQD * kTH * kTW == kWG * kMT, "the box is the warpgroups' m64 tiles");
static_assert(kCK % kKStep == 0, "a chunk is whole wgmma K steps");
static_assert(kKH % kSR == 0, "a step is whole tap rows");
static_assert(kBN % 8 == 0 && kBN <= 256, "wgmma N");
static_assert(kWG == 1 || kWG == 2, "one or two warpgroups");
static_assert(kPlaneU > 0 && kPlaneU < (1 << 14) && kHW < (1 << 14),
              "descriptor LBO/SBO fields are 14 bits");

// Shared-memory matrix descriptor, no swizzle: start, LBO (next core matrix along K) and SBO
// (next 8 rows along M or N), each in 16-byte units. The low word holds start and LBO (adding n
// to it moves the start n units; starts stay below 2^14 units), the high word SBO.
__device__ __forceinline__ unsigned DescLo(const void* p, unsigned lbo_bytes) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(p);
  return ((a & 0x3FFFF) >> 4) | ((lbo_bytes >> 4) << 16);
}
constexpr unsigned DescHi(unsigned sbo_bytes) { return sbo_bytes >> 4; }

// TF32 operand halves (operands.cuh): big = Tf32Big(v); small = the rounded remainder.
__device__ __forceinline__ unsigned Tf32Part(float v, int part) {
  const unsigned big = Tf32Big(v);
  return part ? Tf32Big(v - __uint_as_float(big)) : big;
}

// x [N][C_in][D][H][W] -> [part][N][G][kCG][D][H][W] units of kEPW channels (zero past the
// group's channels), in the wgmma's operand format.
extern "C" __global__ void __launch_bounds__(256)
    PREPX_KERNEL_NAME(const T* __restrict__ x, uint4* __restrict__ xr) {
  const long long units = (long long)kN * kG * kCG * kVolIn;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < units;
       i += (long long)gridDim.x * blockDim.x) {
    const long long v = i % kVolIn, row = i / kVolIn;  // row = (n*kG + g)*kCG + unit
    const int unit = (int)(row % kCG);
    const long long ng = row / kCG;
    const T* src = x + (ng * kCinG + unit * kEPW) * kVolIn + v;
    auto at = [&](int e) -> T { return unit * kEPW + e < kCinG ? src[e * kVolIn] : T(0); };
    unsigned u[4];
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if constexpr (k16)
          u[k] = Pack(at(2 * k), at(2 * k + 1));
        else
          u[k] = Tf32Part(Ld(at(k)), part);
      }
      xr[part * units + i] = make_uint4(u[0], u[1], u[2], u[3]);
    }
  }
}

// w [C_in][C_out/G][kD][kH][kW] -> per step (g, co tile, chunk, kd, tap rows kh0 .. kh0+kSR-1)
// kWTileU units laid out [part][row][kw][unit][co]: unit = kEPW consecutive input channels (zero
// outside the group).
extern "C" __global__ void __launch_bounds__(256)
    PREP_KERNEL_NAME(const T* __restrict__ w, unsigned* __restrict__ ws) {
  const long long words = (long long)kG * kCoTiles * kSteps * kWTileU * 4;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < words;
       i += (long long)gridDim.x * blockDim.x) {
    const int word = (int)(i % 4);
    long long t = i / 4;
    const int n = (int)(t % kBN);
    t /= kBN;
    const int kg = (int)(t % kKG);
    t /= kKG;
    const int kw = (int)(t % kKW);
    t /= kKW;
    const int jh = (int)(t % kSR);
    t /= kSR;
    const int part = (int)(t % kParts);
    t /= kParts;
    const int kh = (int)(t % kHG) * kSR + jh;
    t /= kHG;
    const int kd = (int)(t % kKD);
    t /= kKD;
    const int chunk = (int)(t % kChunks);
    t /= kChunks;
    const int co_tile = (int)(t % kCoTiles);
    const int g = (int)(t / kCoTiles);
    const int co = co_tile * kBN + n;
    // WeightIndex (preamble, generator/lattice.h): the user's element, or -1 for a zero (past
    // the group's channels, or a phase-channel problem's tap that meets no real one).
    auto at = [&](int ci) -> T {
      const long long e = WeightIndex(g, ci, co, kd, kh, kw);
      return e < 0 ? T(0) : w[e];
    };
    const int ci = chunk * kCK + kg * kEPW;
    if constexpr (k16)
      ws[i] = Pack(at(ci + 2 * word), at(ci + 2 * word + 1));
    else
      ws[i] = Tf32Part(Ld(at(ci + word)), part);
  }
}

// Copies units [lo, hi) of the halo of chunk `chunk` (kKG units of every part) for the box whose
// first input position is (id0, ih0, iw0) into buf [part][unit][kHD][kHH][kHW]; zeros outside
// the input and past the group's channels.
__device__ __forceinline__ void IssueHalo(const uint4* __restrict__ x, uint4* buf, int n, int g,
                                          int chunk, int lo, int hi, long long id0, long long ih0,
                                          long long iw0) {
  // Once per call: the halo's in-input index ranges [lo, lo + count) per dimension and the
  // chunk's first unit at the halo's first position, so that an element costs its own offset and
  // three unsigned compares instead of 64-bit bounds and index chains. xb may point outside x;
  // only in-range elements are read through it.
  auto range = [](long long o, int extent, long long size, int& first) {
    const long long f = o < 0 ? -o : 0, l = size - o < extent ? size - o : extent;
    first = (int)f;
    return (unsigned)(l > f ? l - f : 0);
  };
  int dl, hl, wl;
  const unsigned dn = range(id0, kHD, kDin, dl), hn = range(ih0, kHH, kHin, hl),
                 wn = range(iw0, kHW, kWin, wl);
  const uint4* xb =
      x + (((long long)n * kG + g) * kCG + chunk * kKG) * kVolIn + (id0 * kHin + ih0) * kWin + iw0;
  constexpr long long kPartU = (long long)kN * kG * kCG * kVolIn;  // units of one part
  for (int e = lo + (int)threadIdx.x; e < hi; e += kThreads) {
    const int pos = e % kPlaneU, pu = e / kPlaneU;  // pu = part * kKG + unit in the chunk
    const int hw = pos % kHW, hh = (pos / kHW) % kHH, hd = pos / (kHW * kHH);
    const int ku = pu % kKG, part = pu / kKG;
    const bool ok = chunk * kKG + ku < kCG && (unsigned)(hd - dl) < dn &&
                    (unsigned)(hh - hl) < hn && (unsigned)(hw - wl) < wn;
    const uint4* src =
        ok ? xb + (part * kPartU + (long long)ku * kVolIn) + (long long)(hd * kHin + hh) * kWin + hw
           : x;
    CpAsync16Zfill(buf + e, src, ok);
  }
}

// Halo units from a box's first position to m64 tile i's (i = warpgroup * kMT + mt).
__host__ __device__ constexpr int TileOffset(int i) {
  return ((i / (kTW * kTH)) * kHH + (i / kTW) % kTH * 8) * kHW + i % kTW * 8;
}

// One step's wgmmas for every m64 tile of warpgroup WG: taps (kd, kh0 .. kh0+kSR-1, every kw) of
// a chunk, A at `da` (the chunk's halo buffer shifted to tap row (kd, kh0)), B at `db` (the step's
// weight tile). 3xTF32: small x big, big x small, big x big into a fresh sum (scale_d 0 on the
// first). WG is a template argument so that every descriptor is a block-uniform value plus a
// constant: with the warpgroup's tile offsets at run time, each wgmma needs its own 64-bit
// descriptor arithmetic and register moves, which at small N outweigh the wgmmas on the issue
// pipes.
template <int WG>
__device__ __forceinline__ void StepMmas(float (&d)[kMT][kBN / 2], unsigned da, unsigned db) {
  constexpr unsigned kAHi = DescHi(kHW * 16), kBHi = DescHi(128);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int jh = 0; jh < kSR; ++jh)
#pragma unroll
    for (int kw = 0; kw < kKW; ++kw)
#pragma unroll
      for (int kk = 0; kk < kCK / kKStep; ++kk)
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          // A later tap row reads a halo row kDRh earlier; the offset stays inside the halo.
          const unsigned a = da + TileOffset(WG * kMT + mt) + 2 * kk * kPlaneU +
                             (kKW - 1 - kw) * kDRw - jh * kDRh * kHW;
          const unsigned b = db + ((jh * kKW + kw) * kKG + 2 * kk) * kBN;
          if constexpr (kParts == 2) {
            constexpr unsigned kSmallA = kKG * kPlaneU, kSmallB = kSR * kKW * kKG * kBN;
            WgmmaSS(d[mt], a + kSmallA, kAHi, b, kBHi, jh + kw + kk > 0);  // small terms first
            WgmmaSS(d[mt], a, kAHi, b + kSmallB, kBHi, 1);
          }
          WgmmaSS(d[mt], a, kAHi, b, kBHi, 1);
        }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void AddPart(float (&acc)[kMT][kBN / 2], float (&part)[kMT][kBN / 2]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    FenceRegs(part[mt]);
#pragma unroll
    for (int v = 0; v < kBN / 2; ++v) acc[mt][v] += part[mt][v];
  }
}

// Pipeline depth. kAsync (TF32/16-bit with three or more steps per chunk): step s+2's weights
// are copied while step s computes and step s's wgmmas stay in flight while step s+1 is issued
// (wgmma.wait_group 1): four weight buffers, and a step's buffers are refilled only after the
// barrier that follows every warpgroup's wait for the wgmmas that read them; the next chunk's
// halo is copied in slices over the current chunk's steps 1 .. kRows-2 (its buffer is last read
// two steps before the first slice). Otherwise (3xTF32 adds each step's sum, so it waits for
// each step's wgmmas) copies run one step ahead in two weight buffers, as in igemm_mma.cu.
constexpr bool kAsync = kParts == 1 && kRows >= 3;
constexpr int kPre = kAsync ? 2 : 1;
constexpr int kWBufs = kAsync ? 4 : 2;
constexpr int kFirstSlice = 1;
constexpr int kSlices = kRows > 2 ? kRows - 2 : 1;

// w: the re-laid weights (PREP_KERNEL_NAME); x: the re-laid input (PREPX_KERNEL_NAME).
extern "C" __global__ void __launch_bounds__(kThreads)
    KERNEL_NAME(const uint4* __restrict__ x, const uint4* __restrict__ w,
                const T* __restrict__ bias, T* __restrict__ y) {
  extern __shared__ __align__(128) unsigned char smem[];
  uint4* hs = reinterpret_cast<uint4*>(smem);  // [2][kHaloU]
  uint4* wsm = hs + 2 * kHaloU;                // [kWBufs][kWTileU]
  const int tid = threadIdx.x;
  // The warpgroup through a shuffle: ptxas then treats it as warp-uniform and keeps the wgmma
  // descriptors in uniform registers (from tid / 128 alone it does not, and every wgmma pays
  // extra instructions to move them).
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), warp = (tid / 32) % 4, lane = tid % 32;
  const int gr = lane / 4, tg = lane % 4;
  // This warpgroup's wgmmas for one step (WG a compile-time value; see StepMmas).
  auto step_mmas = [&](float(&d)[kMT][kBN / 2], unsigned da, unsigned db) {
    if (kWG == 1 || wg == 0)
      StepMmas<0>(d, da, db);
    else
      StepMmas<kWG - 1>(d, da, db);
  };
  const unsigned desc_a0 = DescLo(hs, kPlaneU * 16);
  const unsigned desc_b0 = DescLo(wsm, kBN * 16);

  for (long long vb = blockIdx.x; vb < kTotalBlocks; vb += gridDim.x) {
    long long t = vb;
    const long long ow0 = (t % kQWTiles) * kBQW;
    t /= kQWTiles;
    const long long oh0 = (t % kQHTiles) * kBQH;
    t /= kQHTiles;
    const long long od0 = (t % kQDTiles) * kBQD;
    t /= kQDTiles;
    const int co_tile = (int)(t % kCoTiles);
    t /= kCoTiles;
    const int g = (int)(t % kG);
    const int n = (int)(t / kG);
    // Output o reads input o + p - k*d for tap k: the halo starts at the last tap's input.
    const long long id0 = od0 + kPD - (kKD - 1) * kDRd, ih0 = oh0 + kPH - (kKH - 1) * kDRh,
                    iw0 = ow0 + kPW - (kKW - 1) * kDRw;
    const uint4* wt = w + ((long long)g * kCoTiles + co_tile) * kSteps * kWTileU;
    auto copy_w = [&](int s) {
      const uint4* src = wt + (long long)s * kWTileU;
      uint4* dst = wsm + (s % kWBufs) * kWTileU;
      for (int e = tid; e < kWTileU; e += kThreads) CpAsync16Zfill(dst + e, src + e, true);
    };

    float acc[kMT][kBN / 2];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int v = 0; v < kBN / 2; ++v) acc[mt][v] = 0.f;
    float part[kMT][kBN / 2];  // 3xTF32: one step's sum

    __syncthreads();  // every warpgroup's wgmmas of the previous tile are done
    IssueHalo(x, hs, n, g, 0, 0, kHaloU, id0, ih0, iw0);
    copy_w(0);
    CpAsyncCommit();
    if (kAsync && kSteps > 1) copy_w(1);
    if (kAsync) CpAsyncCommit();
    // blockIdx.y is 0. A run-time bound keeps NVVM from unrolling the step loop whole despite
    // the pragma, which it does to short loops with a constant bound (3xTF32 with one m64 tile
    // per warpgroup): hundreds of wgmmas in a row, and registers spill.
    const int steps = kSteps + (int)blockIdx.y;
#pragma unroll 1
    for (int s = 0; s < steps; ++s) {
      const int chunk = s / kRows, r = s % kRows, kd = r / kHG, kh = r % kHG * kSR;
      const unsigned da = desc_a0 + (chunk & 1) * kHaloU +
                          ((kKD - 1 - kd) * kDRd * kHH + (kKH - 1 - kh) * kDRh) * kHW;
      const unsigned db = desc_b0 + (s % kWBufs) * kWTileU;
      if constexpr (kAsync) {
        // Step s's copies have landed (step s+1's may still fly) and step s-2's wgmmas are
        // done; the async proxy (wgmma) may read the copies once every thread has passed the
        // barrier. Then this step's wgmmas (asynchronous), then the refills, which write only
        // buffers that no wgmma in flight reads.
        CpAsyncWait<kPre - 1>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        WgmmaWait<1>();
        __syncthreads();
        step_mmas(acc, da, db);
        if (s + kPre < steps) copy_w(s + kPre);
        if (chunk + 1 < kChunks && r >= kFirstSlice && r < kFirstSlice + kSlices) {
          constexpr int kPer = (kHaloU + kSlices - 1) / kSlices;
          const int lo = (r - kFirstSlice) * kPer, hi = min(kHaloU, lo + kPer);
          IssueHalo(x, hs + ((chunk + 1) & 1) * kHaloU, n, g, chunk + 1, lo, hi, id0, ih0, iw0);
        }
        CpAsyncCommit();
      } else {
        // One step ahead: step s+1's weights (and at a chunk's first step the next chunk's
        // whole halo, whose buffer chunk-1 last read) are issued before waiting for step s's.
        // For 3xTF32, which waits for every step's wgmmas anyway, this order is faster than
        // kAsync's (copies after the wgmmas, the halo in slices).
        if (s + 1 < steps) copy_w(s + 1);
        if (r == 0 && chunk + 1 < kChunks)
          IssueHalo(x, hs + ((chunk + 1) & 1) * kHaloU, n, g, chunk + 1, 0, kHaloU, id0, ih0, iw0);
        CpAsyncCommit();
        CpAsyncWait<1>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        if constexpr (kParts == 2) {
          // Waiting for this step's sum before adding it: adding the previous step's sum while
          // this one runs makes ptxas serialize every wgmma (warning C7514), however the sums
          // alternate.
          step_mmas(part, da, db);
          WgmmaWait<0>();
          AddPart(acc, part);
        } else {
          step_mmas(acc, da, db);
          WgmmaWait<0>();
        }
        __syncthreads();  // both buffers of this step are refilled by later steps
      }
    }
    WgmmaWait<0>();
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) FenceRegs(acc[mt]);

      // Accumulator v of m64 tile mt: row m = 16*warp + gr (+8 for bit 1 of v) = W offset gr of
      // H row m / 8; channel 8*(v/4) + 2*tg (+1 for odd v).
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const int i = wg * kMT + mt, tw = i % kTW, th = (i / kTW) % kTH, td = i / (kTW * kTH);
      const long long od = od0 + td, ow = ow0 + tw * 8 + gr;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const long long oh = oh0 + th * 8 + 2 * warp + half;
        if (od >= kDout || oh >= kHout || ow >= kWout) continue;
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
          for (int odd = 0; odd < 2; ++odd) {
            const int cog = co_tile * kBN + j * 8 + 2 * tg + odd;
            if (cog >= kCoutG) continue;
            // OutputIndex (preamble, generator/lattice.h): y's element, also for lattice and
            // phase-channel sub-problems (false: past y's end).
            idx_t at;
            int bco;
            if (!OutputIndex(n, g, cog, od, oh, ow, at, bco)) continue;
            const float bv = kBias ? Ld(bias[bco]) : 0.f;
            y[at] = St(acc[mt][j * 4 + half * 2 + odd] + bv);
          }
      }
    }
  }
}
