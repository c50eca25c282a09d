// gemm_wgmma.cu: per-phase implicit GEMM on Hopper warpgroup MMA (wgmma, sm_90a) for any
// stride: TF32, BF16 and FP16 operands in swizzled shared memory, a multi-stage cp.async
// pipeline (optionally fed by a producer warpgroup) that runs across a persistent block's tiles,
// and a shared-memory epilogue.
//
// Specialised by a preamble (generator/families/gemm_wgmma.cpp) with the shape constants of
// direct_phase.cu plus: kWG (warpgroups), kMT (m64 tiles per warpgroup), kBN (output channels per
// tile = the wgmma's N), kKC (input channels per stage), kST (pipeline stages), kCP (channels per
// position of the re-laid input, a multiple of kKC), kNTiles (channel tiles per group), kPhases
// and the table kWork[kPhases] (struct PhaseWork: the stride phases in the order tiles visit
// them, most taps first, with their first stage in the packed weights), kQD kQH kQW (the largest
// q counts of any phase), kMTiles, kTotalTiles, kBoxW kBoxH kBoxD kBoxN (box tiles' shape),
// kStagesAll (stages of one group and channel tile over every phase), kMinBlocks (blocks per SM),
// kWS (0: no producer warpgroup, 1: a cp.async producer warpgroup, 2: a tensor-map producer),
// kPP (1: ping-pong consumers), kCM (1: the channels are the wgmma's M, see below; 2: and, with
// halo tiles, a warpgroup's positions two planes), GEMM_X_MAP
// (1 with kWS 2: the kernel takes the re-laid input's tensor map), kHaloSlots (0, or 2-4 with
// halo box tiles: kHaloW kHaloH kHaloD > 0, see below) and WgmmaSS(), the wgmma.mma_async for
// this N and type.
//
// The GEMM of stride phase (rd, rh, rw) (generator/phases.h): M = its output positions over the
// batch (n, qd, qh, qw), N = the group's output channels, K = its taps x the group's input
// channels. A tile is kBM = 64 x kMT x kWG rows of M by kBN channels; a stage is one tap and kKC
// channels, the taps of one channel chunk in turn (their rows overlap: the copies go through L1).
// PREPX_KERNEL_NAME re-lays the input position-major ([n][g][D][H][W][kCP], TF32-rounded
// or 16-bit, zero past the group's channels), so a row of A for one stage is kKC consecutive
// elements (kRowB = 32, 64 or 128 bytes) of one input position: cp.async copies it in 16-byte
// units (zeros where the tap's input lies outside the input), into the K-major layout that the
// wgmma descriptor's swizzle mode of kRowB bytes reads without bank conflicts (row r's unit u at
// unit u ^ ((r * kRowB / 128) & kSwz)). PREP_KERNEL_NAME packs the weights per (group, channel
// tile, phase, stage) as the B tile in the same layout, so a stage's B is one contiguous copy.
//
// Pipeline, kST slots, two forms. kWS = 0: every thread copies and computes; stage c+kPre is
// copied while stage c's wgmmas run and stage c-1's stay in flight (kPre = kST - 2), a block
// barrier per stage, and the copies run ahead into the block's next tile. kWS = 1 (faster where
// K is long: the consumers issue nothing but wgmmas and waits): an extra producer warpgroup
// copies stage after stage, tile after tile, into the slots and hands each over through a pair
// of mbarriers (full: the copies landed; empty: every consumer's wgmmas on it finished), so its
// copies go on while the consumers write a tile. kWS = 2: tiles are boxes of q positions
// (phase_gemm.cuh), so a stage's A rows are one box of the re-laid input, shifted by the tap:
// one thread copies it with a tensor-map copy (zeros outside the input, the swizzle applied by
// the copy engine) and the B tile with a bulk copy, instead of 128 threads' cp.async units.
// kPP = 1 (ping-pong, two consumer warpgroups): a tile is one warpgroup's kMT m64 tiles, and
// the block's tiles go to the warpgroups in turn; each starts its wgmmas once the other has
// waited for its last stage (a named-barrier hand-over), so one warpgroup's epilogue runs while
// the other's wgmmas keep the tensor cores busy. Epilogue per warpgroup: the accumulators of 32
// channels at a time go to shared memory, then the warpgroup writes them with consecutive
// threads on consecutive output positions (and, for a phase-channel problem, on the W phases of
// one position, which are neighbours in y), adding the bias.
//
// kCM = 1 (tensor-map forms, kBN a multiple of 64): the wgmma's A operand is the B tile (64
// output channels per m64 tile) and its B operand the warpgroup's 64 kMT positions (N), so that
// a narrow channel tile (64) still gets a wide wgmma: an m64n64 wgmma reads as many operand
// bytes from shared memory per product as the tensor pipe consumes, an m64n256 one 5/8 of that.
// The shared-memory tiles stay as they are (both operands are K-major rows of kRowB bytes); only
// the accumulators' roles turn: row = channel, column = position.

constexpr int kRowB = kKC * kEB;      // bytes of one operand row per stage
constexpr int kUnits = kRowB / 16;    // 16-byte units per row
constexpr int kKStep = k16 ? 16 : 8;  // K of one wgmma
constexpr int kSwz = kRowB / 16 - 1;  // swizzle mask: 7, 3, 1
constexpr int kLayout = kRowB == 128 ? 1 : kRowB == 64 ? 2 : 3;  // descriptor swizzle mode
// kWS: a producer warpgroup of its own copies the stages and hands them over through mbarriers
// (warp-specialised); otherwise every thread copies and computes in turn, a block barrier apart.
constexpr bool kTma = kWS == 2;
static_assert(!kCM || (kTma && kBN % 64 == 0), "channels on M: tensor-map tiles of 64k channels");
// The accumulators: kAccTiles m64 tiles of kAccN columns (rows x channels, or channels x
// positions with kCM); the wgmma's N is kAccN.
constexpr int kAccTiles = kCM ? kBN / 64 : kMT, kAccN = kCM ? 64 * kMT : kBN;
// kCM = 2 (halo tiles): a warpgroup's N positions are two planes of 8 x 4 kMT (a squarer box, so
// a smaller halo per position), each the N of one wgmma into its half of the accumulators (an
// m64nN wgmma's registers are its 8-column blocks in order, so the two halves of n(N/2) are
// the registers of one m64nN: the epilogue's order is unchanged).
constexpr int kCmPlanes = kCM == 2 ? 2 : 1;
static_assert(kCmPlanes == 1 || (kHaloW > 0 && kMT % 2 == 0), "two planes: halo tiles, even kMT");
static_assert(!kPP || (kTma && kWG == 2), "ping-pong: two consumer warpgroups, tensor-map copies");
// Rows of a tile before warpgroup wg's (ping-pong: each warpgroup's tiles are its own).
constexpr int kWgRows = kPP ? 0 : kMT * 64;
constexpr int kThreads = 128 * (kWG + (kWS ? 1 : 0));
static_assert(kTma == (GEMM_X_MAP != 0) && (kBoxRows > 0) == kTma, "box tiles with the map");
constexpr int kPThreads = kWS ? 128 : kThreads;            // threads that copy
constexpr int kATile = kBM * kRowB, kBTile = kBN * kRowB;  // bytes
// 3xTF32 (kSplit 3): every operand as a TF32 big part and the TF32 rounding of the rest; 3xFP16
// (kSplit 4): as scaled fp16 big and small parts (phase_gemm.cuh), at twice TF32's K per wgmma
// and half its bytes. A stage holds [A big][A small][B big][B small] (each part at a multiple of
// its swizzle period), the re-laid input both parts' regions and the packed weights both parts
// per stage. Both promote each stage's sums into fp32 registers.
constexpr int kParts = kOperandParts;
constexpr bool kPromoted = kParts == 2;
constexpr int kStageBytes = (kParts * ((kHaloW > 0 ? 0 : kATile) + kBTile) + 1023) / 1024 * 1024;
static_assert(kSplit == 1 || (kSplit == 3 && !k16) || (kSplit == 4 && !kT16),
              "3xTF32 and 3xFP16 for f32 tensors");
// The packed weights' 16-byte units (3xFP16: then the weights' scale partials).
constexpr long long kPackedUnits = (long long)kG * kNTiles * kStagesAll * kParts * (kBTile / 16);
constexpr int kPre = kST - 2;
// Epilogue: up to 32 channels x 64 rows at a time (+4 words per channel: no bank conflicts), and
// kRun (1 or 2) neighbouring channels on neighbouring threads, so that a thread keeps one row.
constexpr int kEpiCols = kBN % 32 == 0 ? 32 : kBN % 16 == 0 ? 16 : 8, kEpiLd = 64 + 4;
constexpr int kRun = kColRun == 2 ? 2 : 1;
constexpr long long kYPlane = (long long)kYDout * kYHout * kYWout;  // one output channel
// A chunk's columns start a block of kColPeriod (ColDelta, generator/lattice.cpp), so a thread's
// columns lie at compile-time offsets from its first.
constexpr bool kFixedColDeltas =
    kColPeriod > 0 && kBN % kColPeriod == 0 && kEpiCols % kColPeriod == 0;
constexpr int kARows = kBM * kUnits / kPThreads;  // A rows one thread copies per stage
static_assert(kRowB == 32 || kRowB == 64 || kRowB == 128, "a stage row is one swizzle atom");
static_assert(kKC % kKStep == 0 && kCP % kKC == 0, "whole wgmma K steps per stage");
static_assert(kBN % 8 == 0 && kAccN <= 256, "wgmma N");
static_assert(kST >= 3, "two stages in flight at least");
static_assert(kBM * kUnits % kPThreads == 0 && kPThreads % kUnits == 0, "whole A rows per thread");
// Per warpgroup: 32 x 68 epilogue words, 64 rows of 12 bytes, 32 columns of 16 bytes (as the
// generator counts them).
constexpr int kEpiBytes = kWG * (32 * 68 * 4 + 64 * 12 + 32 * 16);

// Halo box tiles (kHaloW > 0, tensor-map form, 128-byte rows, one operand part): a tile is 8 x 8
// q positions (W x H) x kBoxD planes of one sample, an m64 tile one plane. Per channel chunk the
// producer copies the halo box that every tap of the tile's phase reads (kHaloW x kHaloH x
// kHaloD input positions of kKC channels) with one tensor-map copy of the re-laid input, its
// 128-byte rows swizzled as a stage's A tile is. A tap's A operand is then the window of the box
// shifted by the tap: a descriptor that starts at the window's first row, its 8-row groups (the
// next H row) kHaloW rows apart. The swizzle that the copy applies and the wgmma undoes is a
// function of the shared-memory address (bits 7-9 into bits 4-6), so a window may start at any
// row and its groups may lie a whole number of rows apart, the descriptor's base offset 0
// (bench/micro/swizzle_address.cu: measured on an H100 for a bf16 A operand at K step 0, start
// rows 0, 1, 3, 9, 10 and 19, groups 8, 9 and 10 rows apart; the GPU suites cover the rest). So
// the chunk's input comes once for all of the phase's taps, in whole 128-byte lines, and a stage
// copies only its B tile. kHaloSlots halo slots: the next chunks' boxes land while this chunk's
// taps run.
constexpr bool kHalo = kHaloW > 0;
constexpr int kHaloRows = (int)(kHaloW * kHaloH * kHaloD);
constexpr int kHaloSlot = (kHaloRows * kRowB + 1023) / 1024 * 1024;
constexpr int kHS = kHalo ? kHaloSlots : 1;  // halo slots (preamble: kHaloSlots), as a divisor
static_assert(!kHalo || kHaloSlots >= 2, "a halo box lands while another is read");
static_assert(!kHalo || (kTma && kSplit == 1 && kRowB == 128 && kBoxW == 8 && kBoxN == 1 &&
                         (kCM ? kBoxH * kCmPlanes == 8 * kMT && kBoxD == kCmPlanes * (kPP ? 1 : kWG)
                              : kBoxH == 8 && kBoxD * 64 == kBM)),
              "halo tiles: tensor-map form, 128-byte rows, boxes of 8 x 8 (cm: 8 x 8 kMT) "
              "positions x planes");
// Where a stage's B tile starts in its slot (after A's parts, unless A is a halo box).
constexpr int kBOff = kHalo ? 0 : kParts * kATile;
// A tap's window in the halo box, in rows: tap j of a dimension reads input q + c - j*d', and the
// box starts (kHalo? - kBox?) positions below the box's tap-0 input.
__device__ __forceinline__ int HaloShift(int jd, int jh, int jw) {
  return (((int)(kHaloD - kBoxD) - jd * kDRd) * (int)kHaloH + (int)(kHaloH - kBoxH) - jh * kDRh) *
             (int)kHaloW +
         (int)(kHaloW - kBoxW) - jw * kDRw;
}

// Swizzled byte offset of byte `b` of a tile whose base is 1024-byte aligned: the 16-byte unit
// index XOR the row group bits, as the descriptor's swizzle mode expects.
__device__ __forceinline__ int Swz(int b) { return b ^ (((b >> 7) & kSwz) << 4); }

// Shared-memory matrix descriptor, high word: SBO (8 rows) and the swizzle mode (DescLo in
// wgmma.cuh has the start address).
constexpr unsigned kDescHi = (8 * kRowB >> 4) | ((unsigned)kLayout << 30);
// A halo window's descriptor, high word: its 8-row groups are one halo W row apart.
constexpr unsigned kHaloDescHi = (kHaloW * kRowB >> 4) | ((unsigned)kLayout << 30);

#ifdef AMAX_KERNEL_NAME
// The largest finite magnitude of `count` values per block of a kScaleParts-block grid of
// kAmaxThreads threads (preamble), into `parts` (phase_gemm.cuh: 3xFP16's scale partials). A
// read at copy bandwidth needs several MB in flight: each thread keeps kAmaxLoads loads issued
// at once.
constexpr int kAmaxLoads = 4;
__device__ __forceinline__ void BlockMaxima(const float* __restrict__ src, long long count,
                                            float* __restrict__ parts) {
  const long long step = (long long)kAmaxThreads * gridDim.x;
  float m = 0.f;
  for (long long i0 = blockIdx.x * (long long)kAmaxThreads + threadIdx.x; i0 < count;
       i0 += kAmaxLoads * step) {
    float a[kAmaxLoads];
#pragma unroll
    for (int j = 0; j < kAmaxLoads; ++j) a[j] = i0 + j * step < count ? src[i0 + j * step] : 0.f;
#pragma unroll
    for (int j = 0; j < kAmaxLoads; ++j) {
      const float v = fabsf(a[j]);
      if (v <= 3.402823466e38f) m = fmaxf(m, v);  // finite (NaN and Inf fail the test)
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ float warp_max[kAmaxThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 1; i < kAmaxThreads / 32; ++i) m = fmaxf(m, warp_max[i]);
    parts[blockIdx.x] = m;
  }
}
// The input's partials, after the re-laid input (xr: its start).
extern "C" __global__ void __launch_bounds__(kAmaxThreads)
    AMAX_KERNEL_NAME(const float* __restrict__ x, uint4* __restrict__ xr) {
  WaitForPreviousKernel();
  BlockMaxima(x, (long long)kN * kCin * kDin * kHin * kWin,
              reinterpret_cast<float*>(xr + kRelaidUnits));
}
// The weights' partials, after the packed weights (ws: the workspace, whose start they are).
// kWeightElems is the user's tensor's size (a phase-channel sub-problem's kernel is not its).
extern "C" __global__ void __launch_bounds__(kAmaxThreads)
    WAMAX_KERNEL_NAME(const float* __restrict__ w, uint4* __restrict__ ws) {
  WaitForPreviousKernel();
  BlockMaxima(w, kWeightElems, reinterpret_cast<float*>(ws + kPackedUnits));
}
#endif

// w [C_in][C_out/G][kD][kH][kW] -> per (group, channel tile, phase slot, stage) the B tile of
// kBN rows (output channels) x kRowB bytes (kKC input channels of one tap), swizzled (3xTF32:
// the big parts' tile, then the small parts'). A block packs one output channel of one group,
// channel tile and channel chunk, kPrepTaps kernel taps at a time: it reads them along the taps
// (consecutive in w for one input and output channel) into shared memory, then writes each
// tap's row of kKC channels whole, in 16-byte units. A thread keeps one tap and loads every
// kPrepRows-th channel of the chunk, all loads issued before the first store (only the channel
// offset moves, kWeightCiStep elements at a time), so each thread has kPrepPasses loads in
// flight with few live registers. kTapSlot and kTapIndex (preamble) give a tap's phase slot and
// its index among that phase's taps, hence its stage.
constexpr int kTaps = kKD * kKH * kKW, kPrepTaps = kTaps < 64 ? kTaps : 64, kPrepThreads = 256;
constexpr int kPrepRows = kPrepThreads / kPrepTaps;  // channels loaded per pass (4 or more)
constexpr int kPrepPasses = (kKC + kPrepRows - 1) / kPrepRows;
extern "C" __global__ void __launch_bounds__(kPrepThreads, 2)
    PREP_KERNEL_NAME(const T* __restrict__ w, uint4* __restrict__ ws) {
  WaitForPreviousKernel();
  constexpr int kChunks = kCP / kKC, kTileUnits = kBTile / 16;
  // Operand bits (16-bit values, or the fp32 word); +1: conflict-free tap-major writes.
  __shared__ unsigned vals[kPrepTaps][kKC + 1];
  const int tp = threadIdx.x % kPrepTaps, c_first = threadIdx.x / kPrepTaps;
  // 3xFP16: the weights' scale 2^e (each warp reduces the partials itself).
  float scale = 1.f;
  if constexpr (kSplit == 4)
    scale = ldexpf(1.f, ScaleExponent(reinterpret_cast<const float*>(ws + kPackedUnits)));
  const long long blocks = (long long)kG * kNTiles * kChunks * kBN;
  for (long long b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int row = (int)(b % kBN), chunk = (int)(b / kBN % kChunks);
    const int nt = (int)(b / kBN / kChunks % kNTiles), g = (int)(b / kBN / kChunks / kNTiles);
    for (int t0 = 0; t0 < kTaps; t0 += kPrepTaps) {
      const int tap = t0 + tp;
      // WeightIndex (preamble, generator/lattice.h) of input channel 0: the user's element, or
      // -1 for a zero (then for every channel).
      const long long at0 =
          tap < kTaps && c_first < kPrepRows
              ? WeightIndex(g, 0, nt * kBN + row, tap / (kKH * kKW), tap / kKW % kKH, tap % kKW)
              : -1;
      unsigned v[kPrepPasses];
#pragma unroll
      for (int j = 0; j < kPrepPasses; ++j) {
        const int ci = chunk * kKC + c_first + j * kPrepRows;
        v[j] = 0;
        if (at0 >= 0 && c_first + j * kPrepRows < kKC && ci < kCinG) {
          if constexpr (kT16)
            v[j] = w[at0 + ci * kWeightCiStep];
          else
            v[j] = __float_as_uint(Ld(w[at0 + ci * kWeightCiStep]));
        }
      }
      __syncthreads();  // the previous taps' rows are written
      if (c_first < kPrepRows) {
#pragma unroll
        for (int j = 0; j < kPrepPasses; ++j)
          if (c_first + j * kPrepRows < kKC) vals[tp][c_first + j * kPrepRows] = v[j];
      }
      __syncthreads();
      for (int e = threadIdx.x; e < kPrepTaps * kUnits; e += kPrepThreads) {
        const int u = e % kUnits, tpw = e / kUnits, wtap = t0 + tpw;
        if (wtap >= kTaps || kTapSlot[wtap] < 0) continue;
        const int slot = kTapSlot[wtap];
        const long long stage =
            kWork[slot].wstage0 + (long long)chunk * kWork[slot].taps + kTapIndex[wtap];
        uint4* tile =
            ws + (((long long)g * kNTiles + nt) * kStagesAll + stage) * kParts * kTileUnits;
        const int at = Swz(row * kRowB + u * 16) / 16;
        const unsigned* src = vals[tpw];
        if constexpr (kSplit == 4) {
          unsigned big[4], small[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            unsigned short b0, s0, b1, s1;
            SplitHalf(__uint_as_float(src[8 * u + 2 * k]), scale, b0, s0);
            SplitHalf(__uint_as_float(src[8 * u + 2 * k + 1]), scale, b1, s1);
            big[k] = Pack(b0, b1);
            small[k] = Pack(s0, s1);
          }
          tile[at] = make_uint4(big[0], big[1], big[2], big[3]);
          tile[kTileUnits + at] = make_uint4(small[0], small[1], small[2], small[3]);
        } else if constexpr (k16) {
          const int c = 8 * u;
          tile[at] = make_uint4(Pack(src[c], src[c + 1]), Pack(src[c + 2], src[c + 3]),
                                Pack(src[c + 4], src[c + 5]), Pack(src[c + 6], src[c + 7]));
        } else {
          unsigned big[4], small[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const float x = __uint_as_float(src[4 * u + k]);
            big[k] = Tf32Big(x);
            small[k] = Tf32(x - __uint_as_float(big[k]));
          }
          tile[at] = make_uint4(big[0], big[1], big[2], big[3]);
          if constexpr (kSplit == 3)
            tile[kTileUnits + at] = make_uint4(small[0], small[1], small[2], small[3]);
        }
      }
    }
  }
}

// One stage's wgmmas for warpgroup wg: kKC / kKStep K steps over its kAccTiles m64 tiles; the
// first K step of a tile starts the sums (scale_d 0). a_lo, b_lo: the big parts' A (positions)
// and B (weights) tiles; with kCM the wgmma takes the weights as its A. 3xTF32 also small x big
// and big x small first (small x small is below fp32's resolution).
__device__ __forceinline__ void StageMmas(float (&d)[kAccTiles][kAccN / 2], unsigned a_lo,
                                          unsigned b_lo, bool first) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int kk = 0; kk < kKC / kKStep; ++kk)
#pragma unroll
    for (int mt = 0; mt < kAccTiles; ++mt) {
      const unsigned kstep = kk * (kKStep * kEB >> 4), tile = mt * (64 * kRowB >> 4);
      // Positions (a) and weights (b) of this K step; (a, b) is the wgmma's (A, B) unless kCM.
      const unsigned a = a_lo + kstep + (kCM ? 0 : tile), b = b_lo + kstep + (kCM ? tile : 0);
      const unsigned a_small = a + (kATile >> 4), b_small = b + (kBTile >> 4);
      const int scale = (first && kk == 0) ? 0 : 1;
      auto mma = [&](unsigned x, unsigned w, int sc) {
        if constexpr (kCM)
          WgmmaSS(d[mt], w, kDescHi, x, kDescHi, sc);
        else
          WgmmaSS(d[mt], x, kDescHi, w, kDescHi, sc);
      };
      if constexpr (kPromoted) {
        mma(a_small, b, scale);
        mma(a, b_small, 1);
        mma(a, b, 1);
      } else {
        mma(a, b, scale);
      }
    }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// One stage's wgmmas of the halo form: the positions are the window of halo slot `halo` (shared
// address) starting `shift` rows in, B the stage's weights tile as in StageMmas. Without kCM the
// positions are the wgmma's A, m64 tile mt the plane plane0 + mt; with kCM its B (N = the
// warpgroup's 64 kMT positions, plane plane0: 8 kMT H rows of the halo; kCM 2: planes plane0
// and plane0 + 1, 4 kMT H rows each), and the weights tile mt of 64 channels its A.
// (A template so that the two-plane call, on an n(N/2) WgmmaSS only kCM 2's preamble defines, is
// instantiated for kCM 2 alone.)
template <int kPlanes = kCmPlanes>
__device__ __forceinline__ void HaloStageMmas(float (&d)[kAccTiles][kAccN / 2], unsigned halo,
                                              int plane0, int shift, unsigned b_lo, bool first) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int kk = 0; kk < kKC / kKStep; ++kk)
#pragma unroll
    for (int mt = 0; mt < kAccTiles; ++mt) {
      const unsigned b = b_lo + kk * (kKStep * kEB >> 4) + (kCM ? mt * (64 * kRowB >> 4) : 0);
      const int scale = (first && kk == 0) ? 0 : 1;
#pragma unroll
      for (int pl = 0; pl < kPlanes; ++pl) {
        const int row = (plane0 + (kCM ? pl : mt)) * (int)(kHaloH * kHaloW) + shift;
        const unsigned x = DescLo(halo + (unsigned)(row * kRowB + kk * kKStep * kEB));
        if constexpr (kPlanes == 2)
          WgmmaSS(reinterpret_cast<float(&)[kAccN / 2 / kPlanes]>(d[mt][pl * kAccN / 4]), b,
                  kDescHi, x, kHaloDescHi, scale);
        else if constexpr (kCM)
          WgmmaSS(d[mt], b, kDescHi, x, kHaloDescHi, scale);
        else
          WgmmaSS(d[mt], x, kHaloDescHi, b, kDescHi, scale);
      }
    }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// mbarriers (warp-specialised forms, wgmma.cuh): a slot's "full" barrier completes when the
// producer's 128 threads' copies into it have landed (cp.async.mbarrier.arrive.noinc) and the B
// tile's bulk copy with them (tensor-map form: the one producer thread's arrival and the bytes
// of its copies), its "empty" barrier when every consumer thread has seen its wgmmas on the slot
// finish.

// The tensor-map form's extra parameter: the re-laid input's map (TensorMap, wgmma.cuh).
#if GEMM_X_MAP
#define GEMM_X_MAP_PARAM , const __grid_constant__ TensorMap x_map
#define GEMM_X_MAP_ADDR (&x_map)
#else
#define GEMM_X_MAP_PARAM
#define GEMM_X_MAP_ADDR nullptr
#endif

// x: the re-laid input; w: the packed weights.
extern "C" __global__ void __launch_bounds__(kThreads, kMinBlocks)
    KERNEL_NAME(const uint4* __restrict__ x, const uint4* __restrict__ w,
                const T* __restrict__ bias, T* __restrict__ y GEMM_X_MAP_PARAM) {
  WaitForPreviousKernel();
  extern __shared__ unsigned char smem_raw[];
  // 1024-byte aligned tiles (the swizzle repeats every 8 rows of kRowB bytes).
  const unsigned raw = (unsigned)__cvta_generic_to_shared(smem_raw);
  unsigned char* smem = smem_raw + ((1024 - (raw & 1023)) & 1023);
  const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned halo_base = sbase + kST * kStageBytes;  // [kHaloSlots][kHaloSlot]
  // [kWG][kEpiCols][kEpiLd]
  float* epi = reinterpret_cast<float*>(smem + kST * kStageBytes + kHaloSlots * kHaloSlot);
  long long* row_off = reinterpret_cast<long long*>(epi + kWG * kEpiCols * kEpiLd);  // [kWG][64]
  int* row_room = reinterpret_cast<int*>(row_off + kWG * 64);                        // [kWG][64]
  // Per warpgroup and chunk column: its offset in y, bias and phase (-1: past the channels).
  long long* col_off = reinterpret_cast<long long*>(row_room + kWG * 64);  // [kWG][kEpiCols]
  float* col_bias = reinterpret_cast<float*>(col_off + kWG * kEpiCols);    // [kWG][kEpiCols]
  int* col_phase = reinterpret_cast<int*>(col_bias + kWG * kEpiCols);      // [kWG][kEpiCols]

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), wtid = tid % 128;
  const int warp = wtid / 32, lane = tid % 32, gr = lane / 4, tg = lane % 4;

  // ---- producer: the stage it copies next (tile pt, stage ps of pst) and its rows ----
  long long pt = blockIdx.x;
  int ps = 0, pst = 0, pcount = 0;
  int jd = 0, jh = 0, jw = 0, chunk = 0, td = 1, th = 1, tw = 1;  // the stage's tap and chunk
  long long wstage = 0;  // the stage's B tile in the packed weights
  ARow arow[kARows];
  const int ptid = kWS ? tid - 128 * kWG : tid;  // index among the copying threads
  const int unit = ptid % kUnits;
  // Shared-memory offset of this thread's first A unit in a slot; row i is kRowsPerPass * i rows
  // further (a multiple of 8 rows: the same swizzle phase).
  constexpr int kRowsPerPass = kPThreads / kUnits;
  static_assert(kRowsPerPass % 8 == 0, "passes keep the swizzle phase");
  const int a_dst = Swz((ptid / kUnits) * kRowB + unit * 16);
  auto producer_tile = [&]() {
    const Tile tile = TileOf(pt);
    pst = StagesOf(tile.ph);
    const Phase& pd = kPhD[kWork[tile.ph].rd];
    const Phase& phh = kPhH[kWork[tile.ph].rh];
    const Phase& pw = kPhW[kWork[tile.ph].rw];
    td = pd.taps, th = phh.taps, tw = pw.taps;
    jd = jh = jw = chunk = 0;
    wstage = ((long long)tile.g * kNTiles + tile.nt) * kStagesAll + kWork[tile.ph].wstage0;
#pragma unroll
    for (int i = 0; i < kARows; ++i)
      arow[i] = ARowOf(tile, tile.m0 + ptid / kUnits + i * kRowsPerPass, unit);
  };
  // Copies stage ps of the producer's tile into `slot`, then steps to the next tap (W fastest),
  // then to the next channel chunk.
  // `full`: the slot's full mbarrier in the warp-specialised form, where one thread bulk-copies
  // the B tile (packed contiguous, pre-swizzled) instead of every thread a few 16-byte units.
  auto copy_stage = [&](unsigned char* slot, unsigned full) {
    const long long off = StageShift(chunk, jd, jh, jw);
    const unsigned sel = TapSelect(jd, jh, jw);
#pragma unroll
    for (int i = 0; i < kARows; ++i) {
      const bool ok = (arow[i].taps_in & sel) == sel;
      const uint4* src = ok ? x + (arow[i].unit + off) : x;
      CpAsyncZfill<16>(slot + a_dst + i * kRowsPerPass * kRowB, src, ok);
      if constexpr (kParts == 2)  // the small parts, from their region of the re-laid input
        CpAsyncZfill<16>(slot + kATile + a_dst + i * kRowsPerPass * kRowB,
                         ok ? src + kPositions * kUPP : x, ok);
    }
    const uint4* wsrc = w + (wstage + ps) * (kParts * kBTile / 16);
    if constexpr (kWS) {
      if (ptid == 0) {
        MbarExpect(full, kParts * kBTile);  // before this thread's own arrival below
        BulkCopy((unsigned)__cvta_generic_to_shared(slot + kParts * kATile), wsrc, kParts * kBTile,
                 full);
      }
    } else {
      uint4* bdst = reinterpret_cast<uint4*>(slot + kParts * kATile);
#pragma unroll
      for (int e = ptid; e < kParts * kBTile / 16; e += kPThreads) CpAsync16(bdst + e, wsrc + e);
    }
    ++ps;
    NextStage(jd, jh, jw, chunk, td, th, tw);
  };
  // The tensor-map producer (one thread): every stage of the block's tiles into its slot, A as
  // one box per operand part (3xTF32's small parts: the samples after the big parts'), B as one
  // bulk copy, both counted on the slot's full mbarrier. Halo form: per channel chunk the halo
  // box into the next halo slot (bars + 16 kST: full[kHaloSlots], then empty[kHaloSlots]), per
  // stage the B tile only.
  auto produce_boxes = [&](unsigned bars) {
    const unsigned hbars = bars + 16 * kST;
    int c = 0, hc = 0;
#pragma unroll 1
    for (long long t = blockIdx.x; t < kTotalTiles; t += gridDim.x) {
      const Tile tile = TileOf(t);
      const int stages = StagesOf(tile.ph);
      const BoxOrigin o = BoxOf(tile.mi);
      const Phase& pd = kPhD[kWork[tile.ph].rd];
      const Phase& phh = kPhH[kWork[tile.ph].rh];
      const Phase& pw = kPhW[kWork[tile.ph].rw];
      // Input position of tap 0 at the box's first row: q + q_lo + c (phases.cuh); a halo box
      // starts (kHalo? - kBox?) positions below it.
      const int id = (int)(o.qd + pd.q_lo + pd.c - (kHalo ? kHaloD - kBoxD : 0));
      const int ih = (int)(o.qh + phh.q_lo + phh.c - (kHalo ? kHaloH - kBoxH : 0));
      const int iw = (int)(o.qw + pw.q_lo + pw.c - (kHalo ? kHaloW - kBoxW : 0));
      const int ng = o.n * kG + tile.g;
      const long long wfirst =
          ((long long)tile.g * kNTiles + tile.nt) * kStagesAll + kWork[tile.ph].wstage0;
      int jd = 0, jh = 0, jw = 0, chunk = 0;
#pragma unroll 1
      for (int s = 0; s < stages; ++s, ++c) {
        if (kHalo && (jd | jh | jw) == 0) {
          const int hs = hc % kHS;
          MbarWait(hbars + 8 * (kHS + hs), ((hc / kHS) & 1) ^ 1);
          MbarArriveExpect(hbars + 8 * hs, kHaloRows * kRowB);
          TmaLoad5(halo_base + hs * kHaloSlot, GEMM_X_MAP_ADDR, chunk * kKC, iw, ih, id, ng,
                   hbars + 8 * hs);
          ++hc;
        }
        const int slot = c % kST;
        const unsigned full = bars + 8 * slot, dst = sbase + slot * kStageBytes;
        MbarWait(bars + 8 * (kST + slot), ((c / kST) & 1) ^ 1);
        MbarArriveExpect(full, kParts * ((kHalo ? 0 : kBoxRows * kRowB) + kBTile));
        if constexpr (!kHalo) {
#pragma unroll
          for (int part = 0; part < kParts; ++part)
            TmaLoad5(dst + part * kATile, GEMM_X_MAP_ADDR, chunk * kKC, iw - jw * kDRw,
                     ih - jh * kDRh, id - jd * kDRd, ng + part * (int)(kN * kG), full);
        }
        BulkCopy(dst + kBOff, w + (wfirst + s) * (kParts * kBTile / 16), kParts * kBTile, full);
        NextStage(jd, jh, jw, chunk, pd.taps, phh.taps, pw.taps);
      }
    }
  };
  // Without a producer warpgroup: copies the next stage (if any) into its slot and commits a
  // group (empty at the end), so the group count per consumer step stays uniform.
  auto produce = [&]() {
    while (pt < kTotalTiles && ps == pst) {
      pt += gridDim.x;
      ps = 0;
      if (pt < kTotalTiles) producer_tile();
    }
    if (pt < kTotalTiles) copy_stage(smem + (pcount++ % kST) * kStageBytes, 0);
    CpAsyncCommit();
  };

  // ---- consumer ----
  float acc[kAccTiles][kAccN / 2];
  // 3xTF32 promotes each stage's sums into `total` with fp32 adds: the wgmma accumulator adds
  // the small parts' products with less than fp32 rounding, an error that grew with K (1.3e-5
  // at K = 2048 without this).
  float total[kPromoted ? kAccTiles : 1][kPromoted ? kAccN / 2 : 1];
  auto promote = [&](bool first) {
    if constexpr (kPromoted) {
#pragma unroll
      for (int mt = 0; mt < kAccTiles; ++mt) {
        FenceRegs(acc[mt]);
#pragma unroll
        for (int i = 0; i < kAccN / 2; ++i)
          total[mt][i] = first ? acc[mt][i] : total[mt][i] + acc[mt][i];
      }
    }
  };
  // After a tile's last stage: the sums the epilogue writes.
  // 3xFP16: the sums are of (x 2^ex)(w 2^ew), so they are scaled back by 2^-(ex + ew) (ldexpf:
  // exact, and right where one factor alone would pass f32's range).
  int descale = 0;
  if constexpr (kSplit == 4)
    descale = -(ScaleExponent(reinterpret_cast<const float*>(x + kRelaidUnits)) +
                ScaleExponent(reinterpret_cast<const float*>(w + kPackedUnits)));
  auto finish = [&]() {
    if constexpr (kPromoted) {
#pragma unroll
      for (int mt = 0; mt < kAccTiles; ++mt)
#pragma unroll
        for (int i = 0; i < kAccN / 2; ++i)
          acc[mt][i] = kSplit == 4 ? ldexpf(total[mt][i], descale) : total[mt][i];
    }
  };
  // Writes the accumulators (zeros if `zero`) of this warpgroup's rows of `tile` to y, adding
  // the bias.
  auto epilogue = [&](const Tile& tile, bool zero) {
    float* e = epi + wg * kEpiCols * kEpiLd;
    long long* roff = row_off + wg * 64;
    int* rroom = row_room + wg * 64;
    const int rd = kWork[tile.ph].rd, rh = kWork[tile.ph].rh, rw = kWork[tile.ph].rw;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg));  // the previous rows are written
      if (wtid < 64) {
        int room = 0;
        long long off = 0;
        int n;
        long long qd, qh, qw;
        if (TileRowOf(tile, wg * kWgRows + mt * 64 + wtid, n, qd, qh, qw)) {
          // o = r - p + s*q (generator/phases.h)
          off = OutputRow(n, rd - kPD + kSD * qd, rh - kPH + kSH * qh, rw - kPW + kSW * qw, room);
        }
        roff[wtid] = off;
        rroom[wtid] = room;
      }
#pragma unroll
      for (int cc = 0; cc < kBN / kEpiCols; ++cc) {
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg));
        // Accumulator 4 j + v of an m64 tile: row 16*warp + gr (+8 for bit 1 of v), column
        // 8*j + 2*tg (+1 for odd v). Rows are positions and columns channels, or (kCM) rows
        // are channels: then the chunk's 32 channels are warps 2h and 2h+1's rows of channel
        // tile cc / 2, and its 64 positions the columns of position block mt.
        if constexpr (kCM) {
          if (warp / 2 == cc % 2) {
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
              for (int v = 0; v < 4; ++v) {
                const int col = 16 * (warp % 2) + gr + 8 * (v >> 1), row = j * 8 + 2 * tg + (v & 1);
                e[col * kEpiLd + row] = zero ? 0.f : acc[cc / 2][(mt * 8 + j) * 4 + v];
              }
          }
        } else {
#pragma unroll
          for (int j = 0; j < kEpiCols / 8; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
              const int col = j * 8 + 2 * tg + (v & 1), row = 16 * warp + gr + 8 * (v >> 1);
              e[col * kEpiLd + row] = zero ? 0.f : acc[mt][(cc * kEpiCols / 8 + j) * 4 + v];
            }
        }
        if (wtid < kEpiCols) {  // the chunk's columns, once
          const int co = tile.nt * kBN + cc * kEpiCols + wtid;
          int bias_co = 0, phase = -1;
          long long off = 0;
          if (co < kCoutG) off = OutputCol(tile.g, co, bias_co, phase);
          col_off[wg * kEpiCols + wtid] = off;
          col_phase[wg * kEpiCols + wtid] = phase;
          col_bias[wg * kEpiCols + wtid] = kBias && phase >= 0 ? Ld(bias[bias_co]) : 0.f;
        }
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg));
        // Consecutive threads: kRun neighbouring channels (W phases of a phase-channel problem:
        // neighbours in y), then consecutive rows: each thread keeps one row.
        const int row = wtid / kRun % 64, room = rroom[row];
        const long long row_at = roff[row];
        if (room != 0 && OutputFits(room, kLastPhase)) {
          // Every phase of the row lies inside y (every row of plain channels; all but the
          // output's last ones of phase channels): no per-output room test. Thread t's columns
          // (k = t + 128 i below) are c0, c0 + 2, ...; a plain column is its channel's plane of
          // y, so its offset needs no lookup (the general loop spent ~32 instructions an output).
          const int c0 = kRun == 2 ? wtid % 2 : wtid / 64;
          const int co0 = tile.nt * kBN + cc * kEpiCols + c0;
          T* yr = y + row_at;
          if constexpr (kPlainCols)
            yr += (long long)(tile.g * kCoutG + co0) * kYPlane;
          else if constexpr (kFixedColDeltas)
            yr += col_off[wg * kEpiCols + c0];
#pragma unroll
          for (int i = 0; i < kEpiCols / 2; ++i) {
            if (kCoutG % kBN != 0 && co0 + 2 * i >= kCoutG) break;  // a padded tile's last ones
            const int col = c0 + 2 * i;
            const float v = e[col * kEpiLd + row];
            const long long at = kFixedColDeltas ? ColDelta(2 * i) : col_off[wg * kEpiCols + col];
            yr[at] = St(kBias ? v + col_bias[wg * kEpiCols + col] : v);
          }
          continue;
        }
        // Rows of plain channels that failed the test above hold no output.
        if constexpr (kPlainCols) continue;
#pragma unroll 4
        for (int k = wtid; k < 64 * kEpiCols; k += 128) {
          const int col = k / (64 * kRun) * kRun + k % kRun;
          const int phase = col_phase[wg * kEpiCols + col];
          if (room == 0 || phase < 0 || !OutputFits(room, phase)) continue;
          y[row_at + col_off[wg * kEpiCols + col]] =
              St(e[col * kEpiLd + row] + col_bias[wg * kEpiCols + col]);
        }
      }
    }
  };

  if constexpr (kWS) {
    // Warp-specialised: the last warpgroup copies, the others compute and write.
    // full[kST], empty[kST], then the halo slots' full[kHaloSlots], empty[kHaloSlots]
    const unsigned bars = sbase + kST * kStageBytes + kHaloSlots * kHaloSlot + kEpiBytes;
    if (tid == 0) {
      for (int i = 0; i < kST; ++i) {
        MbarInit(bars + 8 * i, kTma ? 1 : 128);
        MbarInit(bars + 8 * (kST + i), (kPP ? 1 : kWG) * 128);
      }
      for (int i = 0; i < kHaloSlots; ++i) {
        MbarInit(bars + 8 * (2 * kST + i), 1);
        MbarInit(bars + 8 * (2 * kST + kHaloSlots + i), (kPP ? 1 : kWG) * 128);
      }
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    // Two consumer warpgroups: registers move from the producer (72: its rows' pointers and tap
    // masks) to them (216: the accumulators), within the 64K of one block per SM.
    if (wg == kWG) {
      if constexpr (kWG == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 72;\n");
      if constexpr (kTma) {
        if (wtid == 0) produce_boxes(bars);  // one thread issues every copy
        return;
      }
      int c = 0;
#pragma unroll 1
      for (pt = blockIdx.x; pt < kTotalTiles; pt += gridDim.x) {
        producer_tile();
        ps = 0;
#pragma unroll 1
        for (int s = 0; s < pst; ++s, ++c) {
          const int slot = c % kST;
          MbarWait(bars + 8 * (kST + slot), ((c / kST) & 1) ^ 1);
          copy_stage(smem + slot * kStageBytes, bars + 8 * slot);
          MbarArriveOnCopies(bars + 8 * slot);
        }
      }
      CpAsyncWaitAll();
    } else {
      if constexpr (kWG == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 216;\n");
      int c = 0;   // the next slot use of this warpgroup's stages
      int hc = 0;  // halo boxes taken so far (the halo form)
      const unsigned hbars = bars + 16 * kST;
      // Ping-pong: the block's i-th tile is warpgroup i % 2's; named barrier 3 + wg: the other
      // warpgroup has waited for its tile's last stage, so this one's waits on the full
      // barriers see the phases of its own stages (a wait on a parity is only unambiguous
      // within one turn of the ring).
      const long long block_tiles = (kTotalTiles - blockIdx.x + gridDim.x - 1) / gridDim.x;
      long long i = 0;
#pragma unroll 1
      for (long long ct = blockIdx.x; ct < kTotalTiles; ct += gridDim.x, ++i) {
        const Tile tile = TileOf(ct);
        const int stages = StagesOf(tile.ph);
        if constexpr (kPP) {
          if (i % 2 != wg) {
            c += stages;
            hc += stages > 0 ? kCP / kKC : 0;
            continue;
          }
          if (i > 0) asm volatile("bar.sync %0, 256;\n" ::"r"(3 + wg));
        }
        // Halo form: each chunk's halo box waited for before its taps' stages; a halo slot is
        // free once the wgmmas of the chunk's last tap are done (seen at the next stage or the
        // tile's end).
        const Phase& pd = kPhD[kWork[tile.ph].rd];
        const Phase& phh = kPhH[kWork[tile.ph].rh];
        const Phase& pw = kPhW[kWork[tile.ph].rw];
        int jd = 0, jh = 0, jw = 0, chunk = 0;
#pragma unroll 1
        for (int s = 0; s < stages; ++s, ++c) {
          const int slot = c % kST;
          const bool chunk_start = kHalo && (jd | jh | jw) == 0;
          if (chunk_start) {
            MbarWait(hbars + 8 * (hc % kHS), (hc / kHS) & 1);
            ++hc;
          }
          MbarWait(bars + 8 * slot, (c / kST) & 1);
          asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
          const unsigned a = sbase + slot * kStageBytes;
          if constexpr (kHalo)  // the warpgroup's first plane: its m64 tiles' (kCM: N positions')
            HaloStageMmas(acc, halo_base + ((hc - 1) % kHS) * kHaloSlot,
                          kPP ? 0 : wg * (kCM ? kCmPlanes : kMT), HaloShift(jd, jh, jw), DescLo(a),
                          s == 0);
          else
            StageMmas(acc, DescLo(a + (wg * kWgRows) * kRowB), DescLo(a + kParts * kATile),
                      kPromoted || s == 0);
          if constexpr (kPromoted) {
            WgmmaWait<0>();  // this stage's sums, promoted; its slot is free
            promote(s == 0);
            MbarArrive(bars + 8 * (kST + slot));
          } else {
            WgmmaWait<1>();  // the previous stage's wgmmas are done: its slots are free
            if (s > 0) {
              MbarArrive(bars + 8 * (kST + (c - 1) % kST));
              if (chunk_start) MbarArrive(hbars + 8 * (kHS + (hc - 2) % kHS));
            }
          }
          if constexpr (kHalo) NextStage(jd, jh, jw, chunk, pd.taps, phh.taps, pw.taps);
        }
        if constexpr (kPP) {
          if (i + 1 < block_tiles) asm volatile("bar.arrive %0, 256;\n" ::"r"(4 - wg));
        }
        if (stages > 0) {
          if constexpr (kPromoted) {
            finish();
          } else {
            WgmmaWait<0>();
            MbarArrive(bars + 8 * (kST + (c - 1) % kST));
            if constexpr (kHalo) MbarArrive(hbars + 8 * (kHS + (hc - 1) % kHS));
          }
#pragma unroll
          for (int mt = 0; mt < kAccTiles; ++mt) FenceRegs(acc[mt]);
        }
        epilogue(tile, stages == 0);
      }
    }
    return;
  }

  if (blockIdx.x < kTotalTiles) producer_tile();
#pragma unroll 1
  for (int i = 0; i < kPre; ++i) produce();

  long long ct = blockIdx.x;
  int cs = 0, ccount = 0;
  Tile ctile{};
  int cst = 0;
  if (ct < kTotalTiles) {
    ctile = TileOf(ct);
    cst = StagesOf(ctile.ph);
  }
#pragma unroll 1
  while (ct < kTotalTiles) {
    // A phase no tap reaches gets bias (or zero) only: the epilogue writes zeros for the sums
    // (setting the accumulators here would make ptxas serialize every wgmma, C7515).
    if (cst > 0) {
      // Stage ccount has landed (later ones may still fly) and every warpgroup's wgmmas of stage
      // ccount-2 are done; the async proxy may read the copies once every thread has passed
      // the barrier. Then this stage's wgmmas, then the next copy into the slot of ccount-2.
      CpAsyncWait<kPre - 1>();
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      WgmmaWait<1>();
      __syncthreads();
      const unsigned slot = sbase + (ccount % kST) * kStageBytes;
      StageMmas(acc, DescLo(slot + (wg * kMT * 64) * kRowB), DescLo(slot + kParts * kATile),
                kPromoted || cs == 0);
      produce();
      if constexpr (kPromoted) {
        WgmmaWait<0>();
        promote(cs == 0);
      }
      ++ccount;
      if (++cs < cst) continue;
      WgmmaWait<0>();
      finish();
#pragma unroll
      for (int mt = 0; mt < kAccTiles; ++mt) FenceRegs(acc[mt]);
    }
    epilogue(ctile, cst == 0);
    ct += gridDim.x;
    cs = 0;
    if (ct < kTotalTiles) {
      ctile = TileOf(ct);
      cst = StagesOf(ctile.ph);
    }
  }
  CpAsyncWaitAll();
}
