// shuffle_simt.cu: the scatter GEMM (input positions x input channels x (output channels x
// taps)) in strict fp32 FFMA: the input read in place (NCDHW) by TMA boxes or bulk copies, the
// weights used as the tensor lays them out. Where taps do not overlap (kernel == stride, latent
// inputs) every output is written once from the register tiles, in 16-byte stores along W where
// the shape allows; where they overlap, or where K is split (kColumns), the products go to a
// column buffer and POST_KERNEL_NAME adds each output's taps and K parts.
//
// Specialised by a preamble (generator/families/shuffle_simt.cpp) with the problem's constants
// and kWM, kWN (consumer warps along positions and columns), kKC (input channels per stage), kST
// (stages in flight), kSlices (column slices per group), kNT (samples per row tile), kMTS (row
// tiles per kNT samples), kStaged (each stage's products summed apart, then added: deep K keeps
// strict fp32's 1e-6), kMinBlocks (blocks per SM the launch asks for), kColumns, kSK (K splits,
// each kKS input channels), kFoldW (W taps summed in the tiles), kDilD kDilH kDilW and kXVol
// (positions of a channel plane of the input it reads: past kVol where PREPX_KERNEL_NAME copied the
// input into planes padded to whole 16-byte units, a pixel shuffle whose volume is not a multiple
// of 4), SHUFFLE_MAPS (1: the producer copies each stage as one tensor-map box and the slice's B as
// kBBoxes boxes of kBRows rows; the kernel then takes both maps), kBRows, and with maps kBStaged
// or kBStream (B's rows with the stages instead: below).
//
// With kernel == stride every output (n, co, d*kKD + td, h*kKH + th, w*kKW + tw) is bias[co] +
// sum_ci x[n, ci, d, h, w] * w[ci, co, td, th, tw]: per group one GEMM with M = the input
// positions (n, d, h, w), K = the group's input channels and N = its output channels x taps
// (column co * kT + t, which is the weight tensor's own order: row ci of B is contiguous). A
// block keeps one slice of kBS columns (all of K) in shared memory and walks row tiles of kBM
// positions (kPS consecutive ones of each of kNT samples); a producer warp copies the slice's B
// rows (where they are whole 16-byte units; else the consumers load them) and each stage's kKC
// channel planes (one TMA box for the stage, or one bulk copy per channel, completing on an
// mbarrier) into a ring of kST slots laid [channel][position]. With tensor maps B's rows may
// instead come with the stages: with those of a slice's first row tile, then kept (kBStaged), or
// with every stage into the slot's own rows, no slice kept (kBStream).
//
// A warp computes 32 positions x 64 columns: lane (pg, tn) = (lane / 8, lane % 8) owns positions
// 4 pg + 16 q + i (q < 2, i < 4: two quads of neighbours along W) and columns 4 tn + 32 h + j
// (h < 2, j < 4). Per input channel a thread reads two 16-byte A quads (the 4 row groups of a
// warp cover 64 contiguous bytes) and two 16-byte B quads (the 8 column groups cover 128
// contiguous bytes): one shared-memory wavefront each, 64 FFMA per 4 loads. With kKW == 2 and
// 4 | kT, a column quad is one channel's two (td, th) pairs of W taps, so a position quad's
// outputs of one pair are 8 consecutive floats of one output row: two 16-byte stores.
//
// With kColumns (taps that overlap, or K split), column (co, t) of input position i is one
// product of output i * stride - padding + t * dilation (per dimension), and outputs may take
// several. The GEMM runs per (group, slice, K split) and writes its sums to the column buffer,
// laid [split][n][group][column][position < kXVol] (a position quad is one 16-byte store);
// POST_KERNEL_NAME then sums, per output, its taps' columns over the splits in a fixed order
// (deterministic) and adds the bias.
//
// Folded (kFoldW: W stride 2, 4 | W, every output W cell c of an input's, generator FoldsW), a
// thread's columns are 4 W-tap runs (co, td, th) of kKW columns each (B is still the weights'
// own order) and its position quads come with their W neighbours, so it sums every W tap of an
// output in its registers: per run, a quad's outputs w = 2 * c0 .. 2 * c0 + 7 are two 16-byte
// stores into a buffer laid [split][n][group][run][d][h][w < 2 * kWin], 2 / kKW of the columns'
// size, and POST_KERNEL_NAME adds only the D and H taps.

// Per thread: kTM positions and kTN columns (folded: 4 W-tap runs x 2 output phases).
constexpr int kTM = 8, kTN = 8;
constexpr int kBM = 32 * kWM;  // positions per row tile
// A row tile holds kPS consecutive positions of each of kNT consecutive samples (kNT > 1: volumes
// that whole row tiles of one sample would leave part empty; tensor maps only), laid
// [sample][position] in a slot's channel row.
constexpr int kPS = kBM / kNT;
constexpr int kBS = kFoldW ? 32 * kWN * kKW : 64 * kWN;  // columns per slice
constexpr int kConsumers = 32 * kWM * kWN;
constexpr int kThreads = kConsumers + 32;  // and the producer warp
constexpr int kT = kKD * kKH * kKW;
constexpr int kNCols = kCoutG * kT;
constexpr int kChunks = (kKS + kKC - 1) / kKC;
constexpr int kLastKC = kKS - (kChunks - 1) * kKC;  // channels of the last stage of a tile
constexpr long long kVol = (long long)kDin * kHin * kWin;
constexpr long long kVolOut = (long long)kDout * kHout * kWout;
// An input of volume 1 (a latent vector's first layer, any stride: every output is a tap) is
// "latent": the rows are the samples, one row tile of kBM samples over the batch, and a slot holds
// each sample's kKC channels in a row of kLDA floats ([sample][channel], one bulk copy each).
constexpr bool kLatent = kVol == 1;
constexpr int kLDA = kKC + 4;
// A slot's channel row: kBM positions; folded, 4 more on each side (a quad's W neighbours).
constexpr int kARow = kFoldW ? kBM + 8 : kBM;
constexpr int kSlotFloats = kLatent ? kBM * kLDA : kKC * kARow;
constexpr int kBFloats = kKS * kBS;
// kBStaged (tensor maps): B's rows come with each stage of a slice's first row tile (kKC rows a
// stage, one box), so that the first products wait for one stage rather than the whole slice;
// B's region then has room for whole stages. kBStream (tensor maps): B's rows come with every
// stage, into the stage's own part of B's region (kST x kKC rows): a block keeps no slice, so
// that shared memory takes more blocks per SM (the rows are reread from L2 for each row tile).
constexpr int kBRegion = kBStream ? kST * kKC * kBS : kBStaged ? kChunks * kKC * kBS : kBFloats;
// Position quads lie in one W row and column quads are two W-tap pairs of one channel.
constexpr bool kQuads = kKW == 2 && kWin % 4 == 0 && kT % 4 == 0;
static_assert(kLatent ? kCin % 4 == 0 && kCinG % 4 == 0 && kKC % 4 == 0 : kXVol % 4 == 0,
              "channel planes (latent: sample rows and their stage parts) of whole 16-byte units");
static_assert(kXVol == kVol || (kXVol > kVol && kXVol - kVol < 4 && !kFoldW && !kLatent),
              "padded planes: less than 16 bytes of padding a plane, not folded, not latent");
static_assert(CONVT3D_ELEM == 0, "fp32 tensors");
static_assert(kKS * kSK == kCinG && (kSK == 1 || kColumns), "K splits sum in the column buffer");
static_assert(kNT == 1 ||
                  (SHUFFLE_MAPS && !kFoldW && !kLatent && kBM % (4 * kNT) == 0 && kN % kNT == 0),
              "samples in a row tile: by tensor map, whole position quads of each, whole groups");
static_assert(!(kLatent && kColumns), "latent inputs write the output directly");
static_assert(!kFoldW || (kColumns && kSW == 2 && kWin % 4 == 0 && kWout <= 2 * kWin),
              "folded: W stride 2, position quads in one W row, an output W cell per input's");
static_assert(!(kFoldW && kStaged), "folded tiles sum plainly: deeper K goes in parts");
// Folded (kFoldW), W tap tw adds input c + FoldShift(tw) into output w = 2 * c + FoldPhase(tw)
// (output w = 2 * input + tw * kDilW - kPW).
__host__ __device__ constexpr int FoldOffset(int tw) { return tw * kDilW - kPW; }
__host__ __device__ constexpr int FoldPhase(int tw) { return (FoldOffset(tw) % 2 + 2) % 2; }
__host__ __device__ constexpr int FoldShift(int tw) { return (FoldPhase(tw) - FoldOffset(tw)) / 2; }
// A quad's W neighbours reach one position each side (FoldShift falls as tw grows).
static_assert(!kFoldW || (FoldShift(0) <= 1 && FoldShift(kKW - 1) >= -1),
              "folded: every W tap reads its input cell or a neighbour");
// The column buffer: per K split, the sums of every (sample, group, column, position); folded,
// of every (sample, group, W-tap run (co, td, th), input d, h, output w < 2 kWin).
constexpr int kNRuns = kNCols / kKW;  // (output channel, D tap, H tap) of a group
constexpr long long kColSplit =
    kFoldW ? (long long)kN * kG * kNRuns * 2 * kVol : (long long)kN * kG * kNCols * kXVol;

// Adds a chunk of kc input channels' products into s (kFirst: s starts at this chunk's sums):
// A from slot `a` ([channel][position], kBM floats per channel; latent: [sample][channel], kLDA
// floats per sample, read one value at a time), B from `b` ([channel][column], kBS floats per
// channel).
template <int kc, bool kFirst>
__device__ __forceinline__ void Chunk(const float* __restrict__ a, const float* __restrict__ b,
                                      float (&s)[kTM][kTN]) {
#pragma unroll 8
  for (int k = 0; k < kc; ++k) {
    float av[kTM];
    if constexpr (kLatent) {
#pragma unroll
      for (int i = 0; i < kTM; ++i) av[i] = a[(16 * (i / 4) + i % 4) * kLDA + k];
    } else {
      const float4 a0 = *reinterpret_cast<const float4*>(a + k * kBM);
      const float4 a1 = *reinterpret_cast<const float4*>(a + k * kBM + 16);
      av[0] = a0.x, av[1] = a0.y, av[2] = a0.z, av[3] = a0.w;
      av[4] = a1.x, av[5] = a1.y, av[6] = a1.z, av[7] = a1.w;
    }
    const float4 b0 = *reinterpret_cast<const float4*>(b + k * kBS);
    const float4 b1 = *reinterpret_cast<const float4*>(b + k * kBS + 32);
    const float bv[kTN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
    for (int i = 0; i < kTM; ++i)
#pragma unroll
      for (int j = 0; j < kTN; ++j)
        s[i][j] = kFirst && k == 0 ? av[i] * bv[j] : fmaf(av[i], bv[j], s[i][j]);
  }
}

// Folded (kFoldW): adds a chunk of kc input channels' products into s. Per channel the thread's
// two position quads (c0 .. c0 + 3 of a W row) come with their W neighbours c0 - 1 and c0 + 4
// (zero past the row's ends: lo_ok, hi_ok), and its 4 W-tap runs of B are kKW floats each; tap
// tw of run j adds x[c + FoldShift(tw)] * B into s[4 q + i][2 j + FoldPhase(tw)] (cell c0 + i).
template <int kc>
__device__ __forceinline__ void ChunkFoldW(const float* __restrict__ a, const float* __restrict__ b,
                                           const bool (&lo_ok)[2], const bool (&hi_ok)[2],
                                           float (&s)[kTM][kTN]) {
  // Which neighbours any tap reads (FoldShift falls as tw grows).
  constexpr bool kLo = FoldShift(kKW - 1) < 0;
  constexpr bool kHi = FoldShift(0) > 0;
#pragma unroll 4
  for (int k = 0; k < kc; ++k) {
    float v[2][6];  // x[c0 - 1 .. c0 + 4] of each quad
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const float* aq = a + k * kARow + 16 * q;
      const float4 m = *reinterpret_cast<const float4*>(aq);
      v[q][1] = m.x, v[q][2] = m.y, v[q][3] = m.z, v[q][4] = m.w;
      v[q][0] = kLo && lo_ok[q] ? aq[-1] : 0.f;
      v[q][5] = kHi && hi_ok[q] ? aq[4] : 0.f;
    }
    float bv[4 * kKW];
#pragma unroll
    for (int e = 0; e < kKW; ++e) {
      const float4 t = *reinterpret_cast<const float4*>(b + k * kBS + 4 * e);
      bv[4 * e] = t.x, bv[4 * e + 1] = t.y, bv[4 * e + 2] = t.z, bv[4 * e + 3] = t.w;
    }
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int tw = 0; tw < kKW; ++tw) {
            float& acc = s[4 * q + i][2 * j + FoldPhase(tw)];
            acc = fmaf(v[q][i + FoldShift(tw) + 1], bv[j * kKW + tw], acc);
          }
  }
}

// The consumers' own load of B's rows first .. first + rows - 1 of a slice (input channels c0..,
// columns col0..) into dst, zeros past the split's rows or the last column: where B's rows are
// not whole 16-byte units or w is misaligned (no copies by the producer).
__device__ __forceinline__ void LoadBRows(float* dst, const float* __restrict__ w, int c0, int col0,
                                          int first, int rows) {
#pragma unroll 4
  for (int e = threadIdx.x; e < rows * kBS; e += kConsumers) {
    const int ci = first + e / kBS, col = col0 + e % kBS;
    dst[e] = ci < kKS && col < kNCols ? w[(long long)(c0 + ci) * kNCols + col] : 0.f;
  }
}

// Barrier of the consumer warps alone (the producer warp never joins).
__device__ __forceinline__ void ConsumerSync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
}

#if SHUFFLE_MAPS
// Tensor maps: x as (position, sample, channel), innermost first (a box: kPS positions x kNT
// samples x kKC channels, folded kARow x 1 x kKC; zeros outside the tensor), and w as [input
// channel][column] (a box: kBRows rows x kBS columns, zeros past the last column); both boxes
// land dense, as the slots and B are laid out. One thread issues a stage's copy where the bulk
// form issues one copy per channel, one lane at a time.
#define SHUFFLE_MAPS_PARAM \
  , const __grid_constant__ TensorMap x_map, const __grid_constant__ TensorMap w_map
constexpr int kBBoxes = kKS / kBRows;
static_assert(kKS % kBRows == 0 && kBRows <= 256 && kBS <= 256 && kARow <= 256 && !kLatent &&
                  kXVol == kVol,
              "tensor maps: B in whole boxes of at most 256 rows and columns, not latent, planes "
              "read in place");
static_assert(kSlotFloats * 4 % 128 == 0 && kBS * 4 % 128 == 0,
              "tensor-map boxes land on 128-byte boundaries");
#else
#define SHUFFLE_MAPS_PARAM
static_assert(!kBStaged && !kBStream, "B's rows by stage: tensor maps only");
#endif

// x: the input; w: the weights as given; bias may be null (kBias 0).
extern "C" __global__ void __launch_bounds__(kThreads, kMinBlocks)
    KERNEL_NAME(const float* __restrict__ x, const float* __restrict__ w,
                const float* __restrict__ bias, float* __restrict__ y SHUFFLE_MAPS_PARAM) {
  extern __shared__ __align__(128) float4 smem4[];
  float* bs = reinterpret_cast<float*>(smem4);  // the slice's B
  float* as = bs + kBRegion;                    // the A slots
  const unsigned sa = (unsigned)__cvta_generic_to_shared(as);
  const unsigned sb = (unsigned)__cvta_generic_to_shared(bs);
  // full[kST], empty[kST], B full, B empty
  const unsigned bars = sa + kST * kSlotFloats * 4;
  const unsigned bfull = bars + 16 * kST, bempty = bfull + 8;
  // B's rows come by bulk copies where they are whole 16-byte units, else by the consumers' loads.
  const bool bulk_b = kNCols % 4 == 0 && ((unsigned long long)w & 15) == 0;

  // Slices (group, column slice, K split) and row tiles (shuffle.cuh).
  constexpr int kS = kG * kSlices * kSK;
  constexpr long long kMAll = kLatent ? kMTS : (long long)(kN / kNT) * kMTS;
  int s0, sstep;
  long long m0, mstep;
  if (!ShuffleWalk(kS, s0, sstep, m0, mstep)) return;

  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int i = 0; i < kST; ++i) {
      MbarInit(bars + 8 * i, 1);
      MbarInit(bars + 8 * (kST + i), kConsumers);
    }
    MbarInit(bfull, 1);
    MbarInit(bempty, kConsumers);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Padded planes: a programmatic dependent of their copy (PREPX_KERNEL_NAME), waited for before
  // any global memory; launched plainly (every other form), a no-op.
  WaitForPreviousKernel();

  if (tid >= kConsumers) {
    // ---- producer warp: a stage's channel planes (a bulk copy each, or one tensor-map box) ----
    const int lane = tid % 32;
    // Tensor maps: lane 0 alone issues every copy; the other lanes have nothing to wait for (and
    // none of them may fall phases behind on a barrier lane 0 has moved past).
    if (SHUFFLE_MAPS && lane != 0) return;
    int c = 0, si = 0;
#pragma unroll 1
    for (int s = s0; s < kS; s += sstep, ++si) {
      const int g = s / (kSlices * kSK), c0 = g * kCinG + s % kSK * kKS;  // first input channel
      // The slice's B rows: columns col0.. of each input channel's row of w.
      const int col0 = (s / kSK % kSlices) * kBS;
      if (bulk_b && !kBStream) {
        if (si > 0) MbarWait(bempty, (si - 1) & 1);  // every consumer is done with the last B
#if SHUFFLE_MAPS
        if (!kBStaged) {  // whole boxes: the columns past kNCols land as zeros
          MbarArriveExpect(bfull, kBFloats * 4);
          for (int r = 0; r < kBBoxes; ++r)
            TmaLoad5(sb + r * kBRows * kBS * 4, &w_map, col0, c0 + r * kBRows, 0, 0, 0, bfull);
        }
#else
        const unsigned bytes = (unsigned)min(kBS, kNCols - col0) * 4;
        if (lane == 0) MbarArriveExpect(bfull, bytes * kKS);
        __syncwarp();
        for (int ci = lane; ci < kKS; ci += 32)
          BulkCopy(sb + ci * kBS * 4, w + (long long)(c0 + ci) * kNCols + col0, bytes, bfull);
#endif
      }
#pragma unroll 1
      for (long long m = m0; m < kMAll; m += mstep) {
        const int n = (int)(m / kMTS) * kNT;  // the tile's first sample
        const long long p0 = m % kMTS * kPS;
#if SHUFFLE_MAPS
        // B's rows with the stage: streamed, always; staged, in the slice's first row tile.
        const bool with_b = bulk_b && (kBStream || (kBStaged && m == m0));
#pragma unroll 1
        for (int ch = 0; ch < kChunks; ++ch, ++c) {
          const int slot = c % kST;
          MbarWait(bars + 8 * (kST + slot), ((c / kST) & 1) ^ 1);
          // The box of kKC channels from the stage's first (a short last stage's extra channels
          // are not read) x kNT samples from n x kPS positions from p0 (folded: kARow from
          // p0 - 4), zeros outside the input; with_b, the stage's kKC rows of B as well.
          MbarArriveExpect(bars + 8 * slot, (kSlotFloats + (with_b ? kKC * kBS : 0)) * 4);
          TmaLoad5(sa + slot * kSlotFloats * 4, &x_map, (int)(kFoldW ? p0 - 4 : p0), n,
                   c0 + ch * kKC, 0, 0, bars + 8 * slot);
          if (with_b)
            TmaLoad5(sb + (kBStream ? slot : ch) * kKC * kBS * 4, &w_map, col0, c0 + ch * kKC, 0, 0,
                     0, bars + 8 * slot);
        }
#else
        // The row tile's positions [p0, p0 + kBM) (folded: 4 more on each side) within the volume.
        const long long lo = kFoldW ? max(p0 - 4, 0ll) : p0;
        const long long hi = min(p0 + kBM + (kFoldW ? 4 : 0), kXVol);
        const unsigned bytes = kLatent ? 0u : (unsigned)((hi - lo) * 4);
        const int dst0 = kFoldW ? (int)(lo - (p0 - 4)) : 0;  // lo's place in the slot row
        const float* src = x + ((long long)n * kCin + c0) * kXVol + lo;
        const int rows = kLatent ? (int)min((long long)kBM, kN - m * kBM) : 0;
#pragma unroll 1
        for (int ch = 0; ch < kChunks; ++ch, ++c) {
          const int slot = c % kST;
          const int chans = ch == kChunks - 1 ? kLastKC : kKC;
          MbarWait(bars + 8 * (kST + slot), ((c / kST) & 1) ^ 1);
          if (lane == 0)
            MbarArriveExpect(bars + 8 * slot, kLatent ? rows * chans * 4 : bytes * chans);
          __syncwarp();
          if constexpr (kLatent) {  // each sample's chans channels of the group
            for (int r = lane; r < rows; r += 32)
              BulkCopy(sa + (slot * kSlotFloats + r * kLDA) * 4,
                       x + (m * kBM + r) * kCin + c0 + ch * kKC, chans * 4, bars + 8 * slot);
          } else {
            for (int ci = lane; ci < chans; ci += 32)
              BulkCopy(sa + (slot * kSlotFloats + ci * kARow + dst0) * 4,
                       src + (ch * kKC + ci) * kXVol, bytes, bars + 8 * slot);
          }
        }
#endif
      }
    }
    return;
  }

  // ---- consumers ----
  const int warp = tid / 32, lane = tid % 32;
  const int pg = lane / 8, tn = lane % 8;
  const int prow = (warp % kWM) * 32 + 4 * pg;  // this thread's first position in the tile
  // and its first column in the slice (folded: the first of its 4 W-tap runs)
  const int pcol = kFoldW ? ((warp / kWM) * 32 + 4 * tn) * kKW : (warp / kWM) * 64 + 4 * tn;
  // Two 16-byte stores per pair of W taps where y is 16-byte aligned.
  const bool vec = ((unsigned long long)y & 15) == 0;
  int c = 0, si = 0;
#pragma unroll 1
  for (int s = s0; s < kS; s += sstep, ++si) {
    const int g = s / (kSlices * kSK), split = s % kSK, c0 = g * kCinG + split * kKS;
    const int col0 = (s / kSK % kSlices) * kBS;
    // The slice's B: row ci is columns col0.. of w[g * kCinG + ci] (past the last column: by
    // bulk copies stale values, whose sums are never stored; by tensor map or loads zeros).
    if (bulk_b) {
      // Staged or streamed: each stage's barrier covers its rows.
      if (!kBStaged && !kBStream) MbarWait(bfull, si & 1);
    } else if (!kBStream) {        // streamed: the consumers load each stage's rows (below)
      if (si > 0) ConsumerSync();  // every consumer is done with the last slice's B
      LoadBRows(bs, w, c0, col0, 0, kKS);
      ConsumerSync();
    }
    // The bias of this thread's two column quads (each one channel's taps where kQuads).
    float quad_bias[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = min(col0 + pcol + 32 * h, kNCols - 1);
      quad_bias[h] = kBias && kQuads && !kColumns ? Ld(bias[g * kCoutG + col / kT]) : 0.f;
    }
    const float* bt = bs + pcol;
#pragma unroll 1
    for (long long m = m0; m < kMAll; m += mstep) {
      // Plain sums start at zero, so that one unrolled form of a stage (two with a partial last
      // stage) serves every stage: each form is ~2 k instructions.
      float acc[kTM][kTN];
      if constexpr (!kStaged) {
#pragma unroll
        for (int i = 0; i < kTM; ++i)
#pragma unroll
          for (int j = 0; j < kTN; ++j) acc[i][j] = 0.f;
      }
      // Position quad q's sample and position (a row tile holds kPS positions of each of kNT
      // samples).
      auto quad_n = [&](int q) { return (int)(m / kMTS) * kNT + (prow + 16 * q) / kPS; };
      auto quad_pos = [&](int q) { return m % kMTS * kPS + (prow + 16 * q) % kPS; };
      // Folded: whether each quad's W neighbours lie in its W row.
      bool lo_ok[2], hi_ok[2];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int c0 = kLatent ? 0 : (int)(quad_pos(q) % kWin);
        lo_ok[q] = c0 != 0;
        hi_ok[q] = c0 + 4 < kWin;
      }
#pragma unroll 1
      for (int ch = 0; ch < kChunks; ++ch, ++c) {
        const int slot = c % kST;
        MbarWait(bars + 8 * slot, (c / kST) & 1);
        if (kBStream && !bulk_b) {
          // The stage's kKC rows of B into its part of the region (every consumer is past this
          // slot's last use: the producer refilled it only once all of them had freed it).
          LoadBRows(bs + slot * kKC * kBS, w, c0, col0, ch * kKC, kKC);
          ConsumerSync();
        }
        const float* a =
            as + slot * kSlotFloats + (kLatent ? prow * kLDA : prow + (kFoldW ? 4 : 0));
        const float* b = bt + (kBStream ? slot : ch) * kKC * kBS;
        if constexpr (kFoldW) {  // plain sums only
          if (ch < kChunks - 1 || kLastKC == kKC)
            ChunkFoldW<kKC>(a, b, lo_ok, hi_ok, acc);
          else
            ChunkFoldW<kLastKC>(a, b, lo_ok, hi_ok, acc);
        } else if constexpr (kStaged) {
          // This stage's products apart, then into the tile's sums.
          float part[kTM][kTN];
          if (ch < kChunks - 1 || kLastKC == kKC)
            Chunk<kKC, true>(a, b, part);
          else
            Chunk<kLastKC, true>(a, b, part);
#pragma unroll
          for (int i = 0; i < kTM; ++i)
#pragma unroll
            for (int j = 0; j < kTN; ++j) acc[i][j] = ch == 0 ? part[i][j] : acc[i][j] + part[i][j];
        } else if (ch < kChunks - 1 || kLastKC == kKC) {
          Chunk<kKC, false>(a, b, acc);
        } else {
          Chunk<kLastKC, false>(a, b, acc);
        }
        MbarArrive(bars + 8 * (kST + slot));  // the slot is free
      }

      if constexpr (kLatent) {
        // Each sample's outputs are its columns in order (the output volume is the taps).
#pragma unroll
        for (int i = 0; i < kTM; ++i) {
          const long long n = m * kBM + prow + 16 * (i / 4) + i % 4;
          if (n >= kN) continue;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int col = col0 + pcol + 32 * h;
            float* dst = y + (idx_t)n * kCout * (idx_t)kT + (idx_t)g * kNCols + col;
            float v[4];
#pragma unroll
            for (int jc = 0; jc < 4; ++jc)
              v[jc] = acc[i][4 * h + jc] +
                      (kBias ? Ld(bias[g * kCoutG + min(col + jc, kNCols - 1) / kT]) : 0.f);
            if (vec && kNCols % 4 == 0) {
              if (col < kNCols)
                *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
            } else {
#pragma unroll
              for (int jc = 0; jc < 4; ++jc)
                if (col + jc < kNCols) dst[jc] = v[jc];
            }
          }
        }
        continue;
      }
      // Epilogue: each position quad, then each column quad.
      if constexpr (kFoldW) {
        // Into the column buffer (y): per W-tap run, a quad's 8 outputs w = 2 * c0 .. 2 * c0 + 7
        // of its W row (d, h), which start at 2 * pos: two 16-byte stores.
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          float* runs =
              y + split * kColSplit + ((long long)quad_n(q) * kG + g) * kNRuns * (2 * kVol);
          const long long pos = quad_pos(q);
          if (pos >= kVol) continue;  // quads lie wholly inside or outside (4 | kVol)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int run = (col0 + pcol) / kKW + j;
            if (run >= kNRuns) continue;
            float* dst = runs + run * (2 * kVol) + 2 * pos;
            *reinterpret_cast<float4*>(dst) =
                make_float4(acc[4 * q][2 * j], acc[4 * q][2 * j + 1], acc[4 * q + 1][2 * j],
                            acc[4 * q + 1][2 * j + 1]);
            *reinterpret_cast<float4*>(dst + 4) =
                make_float4(acc[4 * q + 2][2 * j], acc[4 * q + 2][2 * j + 1], acc[4 * q + 3][2 * j],
                            acc[4 * q + 3][2 * j + 1]);
          }
        }
        continue;
      } else if constexpr (kColumns) {
        // Into the column buffer (y): column-major, a position quad per 16-byte store.
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          float* cols = y + split * kColSplit + ((long long)quad_n(q) * kG + g) * kNCols * kXVol;
          const long long pos = quad_pos(q);
          if (pos >= kVol) continue;  // whole quads (padded planes: into the padding)
#pragma unroll
          for (int j = 0; j < kTN; ++j) {
            const int col = col0 + pcol + 32 * (j / 4) + j % 4;
            if (col < kNCols)
              *reinterpret_cast<float4*>(cols + col * kXVol + pos) = make_float4(
                  acc[4 * q][j], acc[4 * q + 1][j], acc[4 * q + 2][j], acc[4 * q + 3][j]);
          }
        }
        continue;
      }
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const int n = quad_n(q);
        const long long pos = quad_pos(q);
        if (pos >= kVol) continue;  // past the plane (a padded plane's last quad: per position)
        const long long d = pos / ((long long)kHin * kWin), hh = pos / kWin % kHin, ww = pos % kWin;
        const idx_t row = (idx_t)n * kCout * (idx_t)kVolOut +
                          (idx_t)((d * kKD * kHout + hh * kKH) * kWout + ww * kKW);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int col = col0 + pcol + 32 * h;
          if constexpr (kQuads) {
            if (col >= kNCols) continue;  // column quads lie wholly inside or outside (4 | kT)
            const int co = col / kT, t = col % kT;
            const float b = quad_bias[h];
#pragma unroll
            for (int pr = 0; pr < 2; ++pr) {  // the two (td, th) pairs of W taps
              const int tt = t + 2 * pr;
              const int td = tt / (kKH * kKW), th = tt / kKW % kKH;
              float* dst = y + row + (idx_t)(g * kCoutG + co) * (idx_t)kVolOut +
                           ((idx_t)td * kHout + th) * kWout;
              const int j = 4 * h + 2 * pr;
              // Output w * 2 + tw of the quad's positions w: 8 consecutive floats.
              const float v[8] = {acc[4 * q][j] + b,     acc[4 * q][j + 1] + b,
                                  acc[4 * q + 1][j] + b, acc[4 * q + 1][j + 1] + b,
                                  acc[4 * q + 2][j] + b, acc[4 * q + 2][j + 1] + b,
                                  acc[4 * q + 3][j] + b, acc[4 * q + 3][j + 1] + b};
              if (vec) {
                *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
                *reinterpret_cast<float4*>(dst + 4) = make_float4(v[4], v[5], v[6], v[7]);
              } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) dst[e] = v[e];
              }
            }
          } else {
            // Any other shape: element by element (a quad's positions may cross W rows).
#pragma unroll
            for (int jc = 0; jc < 4; ++jc) {
              const int cc = col + jc;
              if (cc >= kNCols) continue;
              const int co = cc / kT, t = cc % kT;
              const int td = t / (kKH * kKW), th = t / kKW % kKH, tw = t % kKW;
              const float b = kBias ? Ld(bias[g * kCoutG + co]) : 0.f;
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                const long long pi = pos + i;
                if (pi >= kVol) continue;  // a padded plane's quad may cross its end
                const long long di = pi / ((long long)kHin * kWin), hi = pi / kWin % kHin,
                                wi = pi % kWin;
                y[(idx_t)n * kCout * (idx_t)kVolOut + (idx_t)(g * kCoutG + co) * (idx_t)kVolOut +
                  (idx_t)(((di * kKD + td) * kHout + hi * kKH + th) * kWout + wi * kKW + tw)] =
                    acc[4 * q + i][4 * h + jc] + b;
              }
            }
          }
        }
      }
    }
    if (bulk_b && !kBStream) MbarArrive(bempty);  // this consumer is done with the slice's B
  }
}

#ifdef PREPX_KERNEL_NAME
// Padded planes (kXVol > kVol): the input copied into the workspace with every (sample, channel)
// plane padded with zeros to kXVol positions, so that each plane starts on a 16-byte boundary
// and its bulk copies are whole 16-byte units.
extern "C" __global__ void __launch_bounds__(256)
    PREPX_KERNEL_NAME(const float* __restrict__ x, float* __restrict__ xr) {
  constexpr long long kItems = (long long)kN * kCin * kXVol;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < kItems;
       e += (long long)gridDim.x * blockDim.x) {
    const long long plane = e / kXVol, pos = e - plane * kXVol;
    xr[e] = pos < kVol ? x[plane * kVol + pos] : 0.f;
  }
}
#endif

#ifdef POST_KERNEL_NAME
// kColumns: y[n, co, od, oh, ow] = bias[co] + the column buffer's products of every tap
// (td, th, tw) that meets an input position (id, ih, iw), od = id * kSD - kPD + td * kDilD (and so
// on), summed over the taps in order and, per tap, over the K splits in order. A thread takes a
// quad of 4 consecutive outputs of one output row: the row's D and H taps are found once per
// quad, and where the W stride divides 4 (so every quad starts on the same W phase) which
// (output, W tap) pairs meet is a compile-time fact. The quads are taken in (n, co, od, H
// phase, row of that phase, quad) order, so that a warp's rows share their H phase (and mostly
// their od): the same taps meet, and the warp's loads go out in one round rather than one per
// tap set.
constexpr int kQuadsW = (kWout + 3) / 4;
constexpr int kHRows = (kHout + kSH - 1) / kSH;  // output rows per H phase (the last may be short)
constexpr long long kPostItems = (long long)kN * kCout * kDout * kSH * kHRows * kQuadsW;

// Whether output ow0 + k meets W tap tw (nw = ow0 + k + kPW - tw * kDilW).
__device__ __forceinline__ bool MeetsW(int nw, int k, int tw) {
  if (nw < 0 || nw / kSW >= kWin) return false;
  if constexpr (4 % kSW == 0) return ((k + kPW - tw * kDilW) % kSW + kSW) % kSW == 0;
  return nw % kSW == 0;
}

extern "C" __global__ void __launch_bounds__(256)
    POST_KERNEL_NAME(const float* __restrict__ cols, const float* __restrict__ bias,
                     float* __restrict__ y) {
  // Launched as a programmatic dependent of the GEMM (LaunchStep::overlaps_previous).
  WaitForPreviousKernel();
  const bool vec = kWout % 4 == 0 && ((unsigned long long)y & 15) == 0;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < kPostItems;
       e += (long long)gridDim.x * blockDim.x) {
    const long long hrow = e / kQuadsW;  // (n, co, od, H phase, row of the phase)
    const int ow0 = (int)(e - hrow * kQuadsW) * 4;
    const int oh = (int)(hrow % kHRows) * kSH + (int)(hrow / kHRows % kSH);
    if (oh >= kHout) continue;
    const long long ncod = hrow / ((long long)kHRows * kSH);  // (n, co, od)
    const int od = (int)(ncod % kDout);
    const long long nco = ncod / kDout;
    const int co = (int)(nco % kCout), n = (int)(nco / kCout);
    const long long row = ncod * kHout + oh;  // (n, co, od, oh)
    const float* base =
        cols + (((long long)n * kG + co / kCoutG) * kNCols + co % kCoutG * kT) * kXVol;
    float sum[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int td = 0; td < kKD; ++td) {
      const int nd = od + kPD - td * kDilD;
      if (nd < 0 || nd % kSD != 0 || nd / kSD >= kDin) continue;
#pragma unroll
      for (int th = 0; th < kKH; ++th) {
        const int nh = oh + kPH - th * kDilH;
        if (nh < 0 || nh % kSH != 0 || nh / kSH >= kHin) continue;
        if constexpr (kFoldW) {
          // Folded: run (co, td, th)'s outputs ow0 .. ow0 + 3 of input row (id, ih), in place.
          const long long run =
              ((long long)n * kG + co / kCoutG) * kNRuns + (co % kCoutG * kKD + td) * kKH + th;
          const float* at = cols + run * (2 * kVol) +
                            ((long long)(nd / kSD) * kHin + nh / kSH) * (2 * kWin) + ow0;
#pragma unroll
          for (int j = 0; j < kSK; ++j) {
            const float4 v = *reinterpret_cast<const float4*>(at + j * kColSplit);
            sum[0] += v.x, sum[1] += v.y, sum[2] += v.z, sum[3] += v.w;
          }
          continue;
        }
        // Tap (td, th, 0)'s column at input row (id, ih).
        const float* at = base + (long long)((td * kKH + th) * kKW) * kXVol +
                          ((long long)(nd / kSD) * kHin + nh / kSH) * kWin;
#pragma unroll
        for (int tw = 0; tw < kKW; ++tw)
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const int nw = ow0 + k + kPW - tw * kDilW;
            if (!MeetsW(nw, k, tw)) continue;
#pragma unroll
            for (int j = 0; j < kSK; ++j) sum[k] += at[tw * kXVol + j * kColSplit + nw / kSW];
          }
      }
    }
    const float b = kBias ? Ld(bias[co]) : 0.f;
    float* dst = y + row * kWout + ow0;
    if (vec) {
      *reinterpret_cast<float4*>(dst) = make_float4(sum[0] + b, sum[1] + b, sum[2] + b, sum[3] + b);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (ow0 + k < kWout) dst[k] = sum[k] + b;
    }
  }
}
#endif
