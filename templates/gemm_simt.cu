// gemm_simt.cu: per-phase implicit GEMM in strict fp32 FFMA for any stride: the GEMMs of
// gemm_wgmma (phase_gemm.cuh) on 8 x kTN register tiles, fed by a multi-stage cp.async pipeline
// that runs across a persistent block's tiles.
//
// Specialised by a preamble (generator/families/gemm_simt.cpp) with the shape constants of
// direct_phase.cu, the phase-GEMM constants (kBM = 32 kWM rows, kBN = 8 kTN kWN channels, kKC
// input channels per stage, kCP, kNTiles, kPhases, kWork, ...), kWM and kWN (warps along M and
// N), kTN (4 or 8 channels per thread), kST (pipeline stages), kMinBlocks, kSK (K splits per
// tile) and kPartOffset (where the split sums start in the workspace).
//
// PREPX_KERNEL_NAME re-lays the input position-major and exact (phase_gemm.cuh), so a stage's A
// row is kKC consecutive channels of one input position: cp.async copies it in 16-byte units
// (zeros where the tap's input lies outside the input) into a row of kALd floats. PREP_KERNEL_NAME
// packs the weights per (group, channel tile, phase, stage) as kKC rows of kBN channels, one
// contiguous copy per stage.
//
// A warp computes 32 rows x 8 kTN channels: lane (tm, tn) = (lane / 8, lane % 8) owns rows tm +
// 4 i (i < 8) and channels 4 tn + 32 h + j (j < 4, h < kTN / 4). Each 16-byte A read (4 channels
// of one row) is shared by the 8 lanes of a row and covers 4 neighbouring rows, kALd = kKC + 4
// floats apart: 4 distinct bank groups. Each 16-byte B read covers 128 contiguous bytes. A stage's
// products are summed apart, then added to the tile's sums: the rounding error of a sum of K
// products then grows with K / kKC + kKC instead of K, which keeps K = 4096 within 1e-6.
//
// kSK > 1 (layers with too few tiles to fill the GPU): a work item is one of kSK contiguous
// ranges of a tile's stages; it writes its sums to the workspace, and POST_KERNEL_NAME adds a
// tile's kSK sums in order, adds the bias and writes y.

constexpr int kTM = 8;  // rows per thread
constexpr int kThreads = 32 * kWM * kWN;
constexpr int kALd = kKC + 4;    // floats per A row in shared memory
constexpr int kUnits = kKC / 4;  // 16-byte units per A row
constexpr int kAFloats = kBM * kALd, kBFloats = kKC * kBN;
constexpr int kStageFloats = kAFloats + kBFloats;
constexpr int kRowsPerPass = kThreads / kUnits;  // A rows the block copies per pass
constexpr int kARows = kBM / kRowsPerPass;       // A rows one thread copies per stage
constexpr int kPre = kST - 1;                    // stages in flight ahead of the one computed
constexpr long long kItems = kTotalTiles * kSK;  // work items: tiles x K splits
constexpr int kTileFloats = kBM * kBN;
static_assert(kBM == 32 * kWM && kBN == 8 * kTN * kWN, "warp tiles of 32 rows x 8 kTN channels");
static_assert(kTN == 4 || kTN == 8, "one or two 16-byte B reads per K step");
static_assert(kKC % 4 == 0 && kThreads % kUnits == 0 && kBM % kRowsPerPass == 0,
              "whole A rows per pass");
static_assert(kSplit == 0 && !k16, "exact fp32 operands");

// w [C_in][C_out/G][kD][kH][kW] -> per (group, channel tile, phase slot, stage) kKC rows (input
// channels of one tap) of kBN output channels. A block packs one input channel of one group and
// channel tile, kPrepTaps kernel taps at a time: a thread keeps one tap and loads every
// kPrepRows-th output channel of the tile (consecutive threads on consecutive taps: along w),
// all its loads issued before the first store, into shared memory; then the block writes each
// tap's row of kBN channels whole. kTapSlot and kTapIndex (preamble) give a tap's phase slot
// and its index among that phase's taps, hence its stage.
constexpr int kTaps = kKD * kKH * kKW, kPrepTaps = kTaps < 64 ? kTaps : 64, kPrepThreads = 256;
constexpr int kPrepRows = kPrepThreads / kPrepTaps;  // output channels loaded per pass (4 or more)
constexpr int kPrepPasses = (kBN + kPrepRows - 1) / kPrepRows;
extern "C" __global__ void __launch_bounds__(kPrepThreads, 2)
    PREP_KERNEL_NAME(const float* __restrict__ w, float* __restrict__ ws) {
  __shared__ float vals[kPrepTaps][kBN + 1];  // +1: conflict-free tap-major writes
  const int tp = threadIdx.x % kPrepTaps, c_first = threadIdx.x / kPrepTaps;
  const long long blocks = (long long)kG * kNTiles * kCP;
  for (long long b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int ci = (int)(b % kCP), nt = (int)(b / kCP % kNTiles), g = (int)(b / kCP / kNTiles);
    for (int t0 = 0; t0 < kTaps; t0 += kPrepTaps) {
      const int tap = t0 + tp, kd = tap / (kKH * kKW), kh = tap / kKW % kKH, kw = tap % kKW;
      float v[kPrepPasses];
#pragma unroll
      for (int j = 0; j < kPrepPasses; ++j) {
        const int co = c_first + j * kPrepRows;
        // WeightIndex (preamble, generator/lattice.h): the user's element, or -1 for a zero.
        const long long at = tap < kTaps && c_first < kPrepRows && co < kBN
                                 ? WeightIndex(g, ci, nt * kBN + co, kd, kh, kw)
                                 : -1;
        v[j] = at < 0 ? 0.f : w[at];
      }
      __syncthreads();  // the previous taps' rows are written
      if (c_first < kPrepRows) {
#pragma unroll
        for (int j = 0; j < kPrepPasses; ++j)
          if (c_first + j * kPrepRows < kBN) vals[tp][c_first + j * kPrepRows] = v[j];
      }
      __syncthreads();
      for (int e = threadIdx.x; e < kPrepTaps * kBN; e += kPrepThreads) {
        const int co = e % kBN, tpw = e / kBN, wtap = t0 + tpw;
        if (wtap >= kTaps || kTapSlot[wtap] < 0) continue;
        const int slot = kTapSlot[wtap];
        const long long stage =
            kWork[slot].wstage0 + (long long)(ci / kKC) * kWork[slot].taps + kTapIndex[wtap];
        ws[(((long long)g * kNTiles + nt) * kStagesAll + stage) * kBFloats + ci % kKC * kBN + co] =
            vals[tpw][co];
      }
    }
  }
}

// x: the re-laid input; ws: the workspace (the packed weights, and the split sums if kSK > 1).
extern "C" __global__ void __launch_bounds__(kThreads, kMinBlocks)
    KERNEL_NAME(const uint4* __restrict__ x, float4* __restrict__ ws,
                const float* __restrict__ bias, float* __restrict__ y) {
  const float4* w = ws;  // the workspace: the packed weights first (read only here)
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int row0 = warp % kWM * 32 + lane / 8;             // this thread's rows: row0 + 4 i
  const int col0 = warp / kWM * (8 * kTN) + lane % 8 * 4;  // its channels: col0 + 32 h + j

  // ---- copies: the stage copied next (tile pt, stage ps of pst) and this thread's A rows ----
  long long pt = blockIdx.x;
  int ps = 0, pst = 0, pcount = 0;
  int jd = 0, jh = 0, jw = 0, chunk = 0, td = 1, th = 1, tw = 1;  // the stage's tap and chunk
  long long wstage = 0;  // the stage's B tile in the packed weights
  ARow arow[kARows];
  const int unit = tid % kUnits;
  const int a_dst = tid / kUnits * kALd + unit * 4;  // float offset of this thread's first unit
  // Work item t: tile t / kSK and the range [s0, s1) of its stages (split t % kSK).
  auto item_range = [](long long t, Tile& tile, int& s0, int& s1) {
    tile = TileOf(t / kSK);
    const int all = StagesOf(tile.ph), split = (int)(t % kSK);
    s0 = all * split / kSK, s1 = all * (split + 1) / kSK;
  };
  auto producer_tile = [&]() {
    Tile tile;
    int s0, s1;
    item_range(pt, tile, s0, s1);
    pst = s1 - s0;
    td = kPhD[kWork[tile.ph].rd].taps, th = kPhH[kWork[tile.ph].rh].taps;
    tw = kPhW[kWork[tile.ph].rw].taps;
    // Stage s0: channel chunk s0 / taps, tap s0 % taps (W fastest).
    const int taps = td * th * tw, tap = taps > 0 ? s0 % taps : 0;
    chunk = taps > 0 ? s0 / taps : 0;
    jw = tap % tw, jh = tap / tw % th, jd = tap / (tw * th);
    wstage = ((long long)tile.g * kNTiles + tile.nt) * kStagesAll + kWork[tile.ph].wstage0 + s0;
#pragma unroll
    for (int i = 0; i < kARows; ++i)
      arow[i] = ARowOf(tile, tile.m0 + tid / kUnits + i * kRowsPerPass, unit);
  };
  // Copies stage ps of the producer's tile into `slot`, then steps to the next tap (W fastest),
  // then to the next channel chunk.
  auto copy_stage = [&](float* slot) {
    const long long off = StageShift(chunk, jd, jh, jw);
    const unsigned sel = TapSelect(jd, jh, jw);
#pragma unroll
    for (int i = 0; i < kARows; ++i) {
      const bool ok = (arow[i].taps_in & sel) == sel;
      CpAsyncZfill<16>(slot + a_dst + i * kRowsPerPass * kALd, ok ? x + (arow[i].unit + off) : x,
                       ok);
    }
    const float4* wsrc = w + (wstage + ps) * (kBFloats / 4);
    float4* bdst = reinterpret_cast<float4*>(slot + kAFloats);
#pragma unroll
    for (int e = tid; e < kBFloats / 4; e += kThreads) CpAsync16(bdst + e, wsrc + e);
    ++ps;
    NextStage(jd, jh, jw, chunk, td, th, tw);
  };
  // Copies the next stage (if any) into its slot and commits a group (empty at the end), so the
  // group count per computed stage stays uniform.
  auto produce = [&]() {
    while (pt < kItems && ps == pst) {
      pt += gridDim.x;
      ps = 0;
      if (pt < kItems) producer_tile();
    }
    if (pt < kItems) copy_stage(smem + (pcount++ % kST) * kStageFloats);
    CpAsyncCommit();
  };

  // ---- compute ----
  float total[kTM][kTN];
  // One stage's products, summed apart from the tile's sums (see the file comment).
  auto stage = [&](const float* as, const float* bs) {
    float part[kTM][kTN];
#pragma unroll
    for (int k4 = 0; k4 < kKC / 4; ++k4) {
      float4 a[kTM];
#pragma unroll
      for (int i = 0; i < kTM; ++i)
        a[i] = *reinterpret_cast<const float4*>(as + (row0 + 4 * i) * kALd + 4 * k4);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        float b[kTN];
#pragma unroll
        for (int h = 0; h < kTN / 4; ++h) {
          const float4 v =
              *reinterpret_cast<const float4*>(bs + (4 * k4 + kk) * kBN + col0 + 32 * h);
          b[4 * h] = v.x, b[4 * h + 1] = v.y, b[4 * h + 2] = v.z, b[4 * h + 3] = v.w;
        }
#pragma unroll
        for (int i = 0; i < kTM; ++i) {
          const float av = kk == 0 ? a[i].x : kk == 1 ? a[i].y : kk == 2 ? a[i].z : a[i].w;
#pragma unroll
          for (int c = 0; c < kTN; ++c)
            part[i][c] = k4 == 0 && kk == 0 ? av * b[c] : fmaf(av, b[c], part[i][c]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kTM; ++i)
#pragma unroll
      for (int c = 0; c < kTN; ++c) total[i][c] += part[i][c];
  };
  // Writes the sums (zeros if `zero`) of this thread's rows and channels of `tile`, adding the
  // bias.
  auto epilogue = [&](const Tile& tile, long long item, bool zero) {
    if constexpr (kSK > 1) {  // this split's sums, for POST_KERNEL_NAME
      float* part =
          reinterpret_cast<float*>(reinterpret_cast<char*>(ws) + kPartOffset) + item * kTileFloats;
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int h = 0; h < kTN / 4; ++h) {
          float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
          if (!zero)
            v = make_float4(total[i][4 * h], total[i][4 * h + 1], total[i][4 * h + 2],
                            total[i][4 * h + 3]);
          *reinterpret_cast<float4*>(part + (row0 + 4 * i) * kBN + col0 + 32 * h) = v;
        }
      return;
    }
    const int rd = kWork[tile.ph].rd, rh = kWork[tile.ph].rh, rw = kWork[tile.ph].rw;
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
      int n;
      long long qd, qh, qw;
      if (!RowOf(tile.ph, tile.m0 + row0 + 4 * i, n, qd, qh, qw)) continue;
      int room;
      // o = r - p + s*q (generator/phases.h)
      const long long row_at =
          OutputRow(n, rd - kPD + kSD * qd, rh - kPH + kSH * qh, rw - kPW + kSW * qw, room);
#pragma unroll
      for (int c = 0; c < kTN; ++c) {
        const int co = tile.nt * kBN + col0 + 32 * (c / 4) + c % 4;
        if (co >= kCoutG) continue;
        int bias_co, phase;
        const long long col_at = OutputCol(tile.g, co, bias_co, phase);
        if (!OutputFits(room, phase)) continue;
        y[row_at + col_at] = (zero ? 0.f : total[i][c]) + (kBias ? bias[bias_co] : 0.f);
      }
    }
  };

  if (blockIdx.x < kItems) producer_tile();
#pragma unroll 1
  for (int i = 0; i < kPre; ++i) produce();

  long long ct = blockIdx.x;
  int cs = 0, ccount = 0, cst = 0;
  Tile ctile{};
  auto consumer_item = [&]() {
    int s0, s1;
    item_range(ct, ctile, s0, s1);
    cst = s1 - s0;
  };
  if (ct < kItems) consumer_item();
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int c = 0; c < kTN; ++c) total[i][c] = 0.f;
#pragma unroll 1
  while (ct < kItems) {
    // A phase no tap reaches (or an empty split) gets bias (or zero) only.
    if (cst > 0) {
      // Stage ccount has landed for every thread, and every thread is done with stage ccount-1,
      // whose slot the next copy refills.
      CpAsyncWait<kPre - 1>();
      __syncthreads();
      produce();
      const float* slot = smem + (ccount % kST) * kStageFloats;
      stage(slot, slot + kAFloats);
      ++ccount;
      if (++cs < cst) continue;
    }
    epilogue(ctile, ct, cst == 0);
#pragma unroll
    for (int i = 0; i < kTM; ++i)
#pragma unroll
      for (int c = 0; c < kTN; ++c) total[i][c] = 0.f;
    ct += gridDim.x;
    cs = 0;
    if (ct < kItems) consumer_item();
  }
  CpAsyncWaitAll();
}

#ifdef POST_KERNEL_NAME
// kSK > 1: y = the sum of each tile's kSK split sums, in split order, plus the bias.
extern "C" __global__ void __launch_bounds__(256)
    POST_KERNEL_NAME(const float* __restrict__ ws, const float* __restrict__ bias,
                     float* __restrict__ y) {
  const float* parts =
      reinterpret_cast<const float*>(reinterpret_cast<const char*>(ws) + kPartOffset);
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
       e < kTotalTiles * kTileFloats; e += (long long)gridDim.x * blockDim.x) {
    const long long t = e / kTileFloats;
    const int r = (int)(e % kTileFloats / kBN), col = (int)(e % kBN);
    const Tile tile = TileOf(t);
    const int co = tile.nt * kBN + col;
    int n;
    long long qd, qh, qw;
    if (co >= kCoutG || !RowOf(tile.ph, tile.m0 + r, n, qd, qh, qw)) continue;
    float sum = 0.f;
#pragma unroll 1
    for (int j = 0; j < kSK; ++j) sum += parts[(t * kSK + j) * kTileFloats + r * kBN + col];
    const int rd = kWork[tile.ph].rd, rh = kWork[tile.ph].rh, rw = kWork[tile.ph].rw;
    int room, bias_co, phase;
    const long long row_at =
        OutputRow(n, rd - kPD + kSD * qd, rh - kPH + kSH * qh, rw - kPW + kSW * qw, room);
    const long long col_at = OutputCol(tile.g, co, bias_co, phase);
    if (OutputFits(room, phase)) y[row_at + col_at] = sum + (kBias ? bias[bias_co] : 0.f);
  }
}
#endif
