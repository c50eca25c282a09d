// igemm_mma.cu: tensor-core (mma.sync) implicit GEMM per stride phase (family F3): TF32, 3xTF32,
// BF16 and FP16 operands, fp32 accumulation.
//
// Specialised by a preamble (generator/source.cpp) with the shape constants of direct_phase.cu
// plus: kBQD kBQH kBQW (q-tile per block), kWM kWN (warps along M and N), kMT kNT8 (16-row
// and 8-column mma fragments per warp), kCK (input channels per chunk: a multiple of 8, of 16
// for 16-bit), kSPLIT (1: TF32, 3: 3xTF32; 16-bit types ignore it), kALLPH (1: a block runs
// every stride phase of its q-box in turn instead of one phase per block), kSTAGE (1: all-phases
// blocks stage outputs for whole-row stores), kLPAD, kPlane, kHWS (halo row length), kVEC (input
// positions per halo copy; kWin is a multiple of it), kWCI (a weight tile's words per K row,
// padded), kKP (weight rows per chunk), kWTile (words of one step's weight tile), kHaloD kHaloH
// (halo extents), kShare kUD0 kUH0 kUW0 (one halo shared by all phases, and its origin), tile
// counts kQDTiles kQHTiles kQWTiles kCoTiles kTotalBlocks, the phase tables, kWOff (each phase's
// first word in the re-laid weights) and CONVT3D_FOR_PHASE_CLASSES(X) as in igemm_simt.cu.
//
// Two (16-bit: three) kernels. PREP_KERNEL_NAME re-lays the user's weights, once per Run, into
// one contiguous tile per (phase, group, channel tile, chunk, tap D, tap H) of kKP * kWCI words
// per part, in per-lane fragment blocks (BWordOf, below) and already in the mma's operand format
// (TF32-rounded; big and small halves for 3xTF32; channel pairs packed for 16-bit), so the main
// kernel streams each step's tile with 16-byte cp.async and feeds B fragments straight from
// shared memory. For
// 16-bit types PREPX_KERNEL_NAME also re-lays the input as channel pairs, [n][g][ci/2][D][H][W]
// words, so that an A-fragment register (two consecutive K of one row) is one shared-memory
// word, as it is for f32: without it each register would take two 16-bit loads and a PRMT.
//
// In all-phases blocks the last step of each phase already loads the next phase's first weight
// tile. When the group's channels fit one chunk (kShare) such a block loads one halo, the union
// of all phases' windows, before its first phase, and every phase reads it at its own offset.
// With kSTAGE the outputs of a row's W phases are staged in shared memory (StageTile).
//
// KERNEL_NAME: a block owns one phase (with kALLPH: every phase in turn), a q-box of kBQD x kBQH x
// kBQW outputs (GEMM M, one m16 fragment is 16 consecutive W outputs of one row) and kBN output
// channels of one group (GEMM N). K runs over chunks of kCK input channels and, inside a chunk,
// over the phase's taps. Per chunk the input halo of the q-box sits in shared memory, so every tap
// reads a shifted window of it; the weight tile of one (tap D, tap H) row of taps streams through a
// second double buffer. Both are filled with cp.async one step ahead of the compute. A fragments
// are read M-contiguous from the halo (plane stride = 8 mod 32 words: conflict-free) and rounded
// (TF32) or split into big + small (3xTF32) in registers; 16-bit words are used as loaded. 3xTF32
// sums each step's products in a fresh accumulator and then adds it to the running sum with FADD,
// so the tensor core's accumulation never spans more than one row of taps.

constexpr int kThreads = kWM * kWN * 32;
constexpr int kBM = kBQD * kBQH * kBQW;
constexpr int kBN = kWN * kNT8 * 8;
constexpr bool k16 = CONVT3D_ELEM >= 2;  // bf16 / f16 operands (m16n8k16), else f32 (m16n8k8)
constexpr int kKStep = k16 ? 16 : 8;     // K of one mma
static_assert(kBM == kWM * kMT * 16, "M tile must match the warps' fragments");
static_assert(kBQW % 16 == 0, "an m16 fragment must lie in one row");
static_assert(kCK % kKStep == 0, "a chunk is whole mma K steps");
static_assert(kWCI % 8 == 0 && kWTile % 4 == 0, "weight tiles are whole 16-byte vectors");
static_assert(kWin % kVEC == 0 && kHWS % kVEC == 0 && kPlane % kVEC == 0, "aligned halo copies");
constexpr int kHD = kHaloD;  // halo extents (the generator's: with kShare, the phases' union)
constexpr int kHH = kHaloH;
constexpr int kHW = kHWS;
// The halo holds 32-bit words: an f32 input, or (16-bit) a pair of consecutive input channels.
// Each group's input is kXRows rows (channels or channel pairs) of kDin*kHin*kWin words.
constexpr int kXRows = k16 ? (kCinG + 1) / 2 : kCinG;
constexpr int kXStage = kKP * kPlane;  // words of one halo buffer
constexpr int kChunks = (kCinG + kCK - 1) / kCK;
constexpr int kSmemX = (kShare ? 1 : 2) * kXStage * 4;  // bytes of the halo buffers
// Staged all-phases blocks keep their outputs (StageTile) after the halo and the weight buffers.
constexpr bool kStage = kALLPH && kSTAGE;
constexpr int kStageCols = kSW * kBQW;
constexpr int kStageStride = kBQD * kBQH * kStageCols + 1;  // odd: see StageTile
constexpr int kSmemStage = kSmemX + 2 * kWTile * 4;
// Outputs per 16-byte flush store (FlushStage).
constexpr int kOV = 16 / sizeof(T);
static_assert(kStageCols % kOV == 0, "a stage row is whole 16-byte slots");
// B fragments in shared memory: per (mma K step kk, tap W jw, group of kBG n8 fragments) one
// block of 32 lanes x 2*kBG words, lane gr*4+tg holding b0 b1 (K rows tg and tg+4, column gr) of
// each of its fragments side by side, so that a warp loads kBG fragments with one 16-byte (8-byte)
// load per lane, conflict-free, instead of two 4-byte loads per fragment (with 4-byte loads the
// B fragments are most of the shared-memory loads per mma). The blocks fill the first
// kKP * kJmaxW * kBN words of a part; the rest is kWCI's padding, which this layout does not need:
// zeros, still copied each step. Dropping it changes every tile's shared-memory size, and with it
// occupancy, so it is a tuning change to measure, not a cleanup.
constexpr int kBG = kNT8 % 2 == 0 ? 2 : 1;
constexpr int kBGroups = kBN / (8 * kBG);
constexpr int kBBlock = 64 * kBG;
static_assert(kKP % 8 == 0 && kJmaxW * kBN <= kWCI, "whole mma K steps; the blocks fit the tile");

// Word e of one part (kKP * kWCI words) of a step's weight tile: its K row kp (>= kKP: padding),
// tap W jw and column n (see kBG above).
__host__ __device__ constexpr void BWordOf(int e, int& kp, int& jw, int& n) {
  const int q = e % (2 * kBG), lane = e / (2 * kBG) % 32;
  int blk = e / kBBlock;
  const int grp = blk % kBGroups;
  blk /= kBGroups;
  jw = blk % kJmaxW;
  kp = blk / kJmaxW * 8 + lane % 4 + 4 * (q % 2);
  n = grp * 8 * kBG + q / 2 * 8 + lane / 4;
}

// One word of the re-laid weights: input channel ci (ci, ci+1 for 16-bit), output channel co
// of group g, tap (kd, kh, kw); zero outside the group's channels. `half`: 3xTF32's big (0) or
// small (1) part.
__device__ __forceinline__ unsigned WeightWord(const T* __restrict__ w, int g, int ci, int co,
                                               int kd, int kh, int kw, int half) {
  constexpr int kKVol = kKD * kKH * kKW;
  auto at = [&](int c) -> T {
    if (c >= kCinG || co >= kCoutG) return T(0);
    return w[((idx_t)(g * kCinG + c) * kCoutG + co) * kKVol + (kd * kKH + kh) * kKW + kw];
  };
  if constexpr (k16) {
    return Pack(at(ci), at(ci + 1));
  } else {
    unsigned big, small = 0;
    Split<kSPLIT>(Ld(at(ci)), big, small);
    return half ? small : big;
  }
}

// Re-lays w into the tiles the main kernel streams (see the top of this file). Every word of
// the workspace is written, pads included, so nothing depends on its previous contents.
extern "C" __global__ void __launch_bounds__(256)
    PREP_KERNEL_NAME(const T* __restrict__ w, unsigned* __restrict__ ws) {
  constexpr int kRowWords = kKP * kWCI;  // one part (TF32, big or small) of a step tile
  for (int ph = 0; ph < kSD * kSH * kSW; ++ph) {
    const Phase phd = kPhD[ph / (kSH * kSW)], phh = kPhH[(ph / kSW) % kSH], phw = kPhW[ph % kSW];
    if (phd.taps == 0 || phh.taps == 0 || phw.taps == 0) continue;
    const long long words = (long long)kG * kCoTiles * kChunks * phd.taps * phh.taps * kWTile;
    unsigned* out = ws + kWOff[ph];
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < words;
         i += (long long)gridDim.x * blockDim.x) {
      long long step = i / kWTile;
      int e = (int)(i % kWTile);
      const int half = e / kRowWords;
      e %= kRowWords;
      int kp, jw, n;
      BWordOf(e, kp, jw, n);
      const int jh = (int)(step % phh.taps);
      step /= phh.taps;
      const int jd = (int)(step % phd.taps);
      step /= phd.taps;
      const int chunk = (int)(step % kChunks);
      step /= kChunks;
      const int co_tile = (int)(step % kCoTiles);
      const int g = (int)(step / kCoTiles);
      unsigned v = 0;
      if (kp < kKP && jw < phw.taps)
        v = WeightWord(w, g, chunk * kCK + kp * (k16 ? 2 : 1), co_tile * kBN + n,
                       phd.kk0 + jd * kSRd, phh.kk0 + jh * kSRh, phw.kk0 + jw * kSRw, half);
      out[i] = v;
    }
  }
}

#if CONVT3D_ELEM >= 2
// x [N][C_in][D][H][W] (16-bit) -> [N][G][kXRows][D][H][W] words of channel pairs (2c, 2c+1)
// of a group, the second zero past an odd group's last channel.
extern "C" __global__ void __launch_bounds__(256)
    PREPX_KERNEL_NAME(const T* __restrict__ x, unsigned* __restrict__ xw) {
  constexpr long long kVol = (long long)kDin * kHin * kWin;
  const long long words = (long long)kN * kG * kXRows * kVol;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < words;
       i += (long long)gridDim.x * blockDim.x) {
    const long long v = i % kVol, row = i / kVol;  // row = (n*kG + g)*kXRows + pair
    const int pair = (int)(row % kXRows);
    const long long ng = row / kXRows;  // n*kG + g
    const T* src = x + (ng * kCinG + 2 * pair) * kVol + v;
    xw[i] = Pack(src[0], 2 * pair + 1 < kCinG ? src[kVol] : T(0));
  }
}
#endif

// Copies halo rows [r0, r0 + kKP) of a kHDj x kHHj x kHW box whose first input position is
// (id0, ih0, iw0) into buf ([kKP][kPlane], rows kHH x kHW); zeros outside the input. It walks the
// spatial positions once, computing each address and bound once, and issues every row in an
// unrolled inner loop: per-element index arithmetic would be most of the kernel's instructions.
template <int kHDj, int kHHj>
__device__ __forceinline__ void IssueHalo(const unsigned* __restrict__ x, unsigned* buf, int n,
                                          int g, int r0, long long id0, long long ih0,
                                          long long iw0) {
  constexpr int kRow = kHW / kVEC;
  constexpr int kCopies = kHDj * kHHj * kRow;
  const unsigned* xc = x + (((idx_t)n * kG + g) * kXRows + r0) * (idx_t)(kDin * kHin * kWin);
  for (int e = threadIdx.x; e < kCopies; e += kThreads) {
    const int hw = (e % kRow) * kVEC, hh = (e / kRow) % kHHj, hd = e / (kRow * kHHj);
    const long long id = id0 + hd, ih = ih0 + hh, iw = iw0 + hw;
    const bool in = id >= 0 && id < kDin && ih >= 0 && ih < kHin && iw >= 0 && iw < kWin;
    const idx_t off = in ? (idx_t)((id * kHin + ih) * kWin + iw) : 0;
    unsigned* dst = buf + (hd * kHH + hh) * kHW + hw;
#pragma unroll
    for (int r = 0; r < kKP; ++r) {
      const bool ok = in && (kXRows % kKP == 0 || r0 + r < kXRows);
      CpAsyncZfill<kVEC * 4>(dst + r * kPlane, ok ? xc + off + (idx_t)r * (kDin * kHin * kWin) : x,
                             ok);
    }
  }
}

// The halo is copied in aligned vectors of kVEC W positions (kWin is a multiple of kVEC, so a
// vector is wholly inside or outside the input): a row starts at the multiple of kVEC at or
// below the first position needed, and reads shift by the returned `sh`.
__device__ __forceinline__ int AlignRow(long long iw_need, long long& iw0) {
  const int sh = (int)(((iw_need % kVEC) + kVEC) % kVEC);
  iw0 = iw_need - sh;
  return sh;
}

// kShare: the first input position of the one halo all phases of b's tile share (the tile's
// first q, which is q0 - q_lo in every phase, plus the union's offset).
__device__ __forceinline__ int SharedOrigin(const BlockTile& b, long long& id0, long long& ih0,
                                            long long& iw0) {
  id0 = b.q0d - b.phd.q_lo + kUD0;
  ih0 = b.q0h - b.phh.q_lo + kUH0;
  return AlignRow(b.q0w - b.phw.q_lo + kUW0 - kLPAD, iw0);
}

// The re-laid weight tile of step s of b's phase: one contiguous run of kWTile words.
__device__ __forceinline__ const unsigned* WeightTile(const unsigned* __restrict__ wt,
                                                      const BlockTile& b, int s) {
  const int ph = (b.rd * kSH + b.rh) * kSW + b.rw;
  return wt + kWOff[ph] +
         (((long long)b.g * kCoTiles + b.co_tile) * kChunks * (b.phd.taps * b.phh.taps) + s) *
             kWTile;
}

// One phase of a block's tile. The weight buffers alternate with a parity `wp` that runs on
// across the phases of an all-phases block: the last step of a phase already loads the next
// phase's first weight tile (`next_w0`, null if none), and that phase is then told `w0_ready`.
template <int JD, int JH, int JW>
__device__ __forceinline__ void Tile(unsigned char* smem, const unsigned* __restrict__ x,
                                     const unsigned* __restrict__ wt, const BlockTile& b, int& wp,
                                     bool w0_ready, const unsigned* next_w0,
                                     float (&acc)[kMT][kNT8][4]) {
  const int tid = threadIdx.x;
  const int lane = tid % 32, warp = tid / 32;
  const int wm = warp % kWM, wn = warp / kWM;
  const int gr = lane / 4, tg = lane % 4;            // mma fragment row group and thread-in-group
  unsigned* xs = reinterpret_cast<unsigned*>(smem);  // [kShare ? 1 : 2][kKP][kPlane]
  unsigned* ws = reinterpret_cast<unsigned*>(smem + kSmemX);  // [2][kWTile]
  constexpr int kHDj = kBQD + (JD - 1) * kDRd;
  constexpr int kHHj = kBQH + (JH - 1) * kDRh;
  const Phase &phd = b.phd, &phh = b.phh, &phw = b.phw;
  // This phase's window inside the halo: its own halo, or its offset in the shared one.
  long long id0, ih0, iw0;
  int sh, od = 0, oh = 0, ow = 0;
  if constexpr (kShare) {
    sh = SharedOrigin(b, id0, ih0, iw0);
    od = (int)(phd.q_lo + phd.c - (JD - 1) * kDRd - kUD0);
    oh = (int)(phh.q_lo + phh.c - (JH - 1) * kDRh - kUH0);
    ow = (int)(phw.q_lo + phw.c - kUW0);
  } else {
    id0 = b.q0d + phd.c - (long long)(JD - 1) * kDRd;
    ih0 = b.q0h + phh.c - (long long)(JH - 1) * kDRh;
    sh = AlignRow(b.q0w + phw.c - kLPAD, iw0);
  }
  auto issue_halo = [&](int ci0, unsigned* buf) {
    IssueHalo<kHDj, kHHj>(x, buf, b.n, b.g, k16 ? ci0 / 2 : ci0, id0, ih0, iw0);
  };
  auto wbuf = [&](int s) { return ws + ((wp + s) & 1) * kWTile; };
  // Copies one weight tile (16-byte cp.async). Kept as a lambda on the hoisted thread index: as a
  // separate __restrict__ function it changes how ptxas allocates the kernel's registers (fewer of
  // them, a slower schedule).
  auto copy_w = [&](const unsigned* src, unsigned* buf) {
    for (int e = tid * 4; e < kWTile; e += kThreads * 4) CpAsync16(buf + e, src + e);
  };

  // Fragment f of this warp covers M rows [wm*kMT*16 + f*16, +16): one W run of one q row.
  // Thread (gr, tg) reads halo row tg (f32: K index tg; 16-bit: K indices 2tg, 2tg+1) of row gr.
  int xoff[kMT];
#pragma unroll
  for (int f = 0; f < kMT; ++f) {
    const int m = wm * kMT * 16 + f * 16;
    const int tw = m % kBQW, th = (m / kBQW) % kBQH, td = m / (kBQW * kBQH);
    xoff[f] = tg * kPlane + ((td + od) * kHH + th + oh) * kHW + tw + gr + kLPAD + sh + ow;
  }
  const int woff = lane * 2 * kBG + wn * (kNT8 / kBG) * kBBlock;  // this lane's B words

  constexpr int kRows = JD * JH;  // steps per chunk: one (tap D, tap H) row of taps each
  constexpr int kSteps = kChunks * kRows;
  if (!kShare) issue_halo(0, xs);  // a shared halo is already on its way
  if (!w0_ready) copy_w(WeightTile(wt, b, 0), wbuf(0));
  CpAsyncCommit();
#pragma unroll 1
  for (int s = 0; s < kSteps; ++s) {
    const int chunk = s / kRows, r = s % kRows;
    // Prefetch step s+1's weights (after the last step: the next phase's first), and at a
    // chunk's first step the next chunk's halo (its buffer was last read by chunk-1, which every
    // thread has finished).
    if (s + 1 < kSteps)
      copy_w(WeightTile(wt, b, s + 1), wbuf(s + 1));
    else if (next_w0 != nullptr)
      copy_w(next_w0, wbuf(s + 1));
    if (!kShare && r == 0 && chunk + 1 < kChunks)
      issue_halo((chunk + 1) * kCK, xs + ((chunk + 1) & 1) * kXStage);
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();

    const int jd = r / JH, jh = r % JH;
    const unsigned* xb = xs + (kShare ? 0 : (chunk & 1) * kXStage) +
                         ((JD - 1 - jd) * kDRd * kHH + (JH - 1 - jh) * kDRh) * kHW;
    const unsigned* wb = wbuf(s) + woff;
    // One step's products go straight into acc (TF32, 16-bit) or into a fresh partial (3xTF32).
    auto step = [&](float(&sum)[kMT][kNT8][4]) {
#pragma unroll
      for (int jw = 0; jw < JW; ++jw) {
#pragma unroll
        for (int kk = 0; kk < kCK / kKStep; ++kk) {
          unsigned ab[kMT][4], as[kMT][4], bb[kNT8][2], bs[kNT8][2];
#pragma unroll
          for (int f = 0; f < kMT; ++f) {
            const unsigned* p = xb + xoff[f] + kk * 8 * kPlane - jw * kDRw;
            if constexpr (k16) {
              ab[f][0] = p[0];
              ab[f][1] = p[8];
              ab[f][2] = p[4 * kPlane];
              ab[f][3] = p[4 * kPlane + 8];
            } else {
              Split<kSPLIT>(__uint_as_float(p[0]), ab[f][0], as[f][0]);
              Split<kSPLIT>(__uint_as_float(p[8]), ab[f][1], as[f][1]);
              Split<kSPLIT>(__uint_as_float(p[4 * kPlane]), ab[f][2], as[f][2]);
              Split<kSPLIT>(__uint_as_float(p[4 * kPlane + 8]), ab[f][3], as[f][3]);
            }
          }
#pragma unroll
          for (int j = 0; j < kNT8; ++j) {
            if (j % kBG != 0) continue;  // loaded with fragment j - 1
            const unsigned* p = wb + ((kk * kJmaxW + jw) * kBGroups + j / kBG) * kBBlock;
            auto load = [&](const unsigned* q, unsigned(&v)[kNT8][2]) {
              if constexpr (kBG == 2) {
                const uint4 u = *reinterpret_cast<const uint4*>(q);
                v[j][0] = u.x, v[j][1] = u.y, v[j + 1][0] = u.z, v[j + 1][1] = u.w;
              } else {
                const uint2 u = *reinterpret_cast<const uint2*>(q);
                v[j][0] = u.x, v[j][1] = u.y;
              }
            };
            load(p, bb);
            if constexpr (!k16 && kSPLIT == 3) load(p + kKP * kWCI, bs);
          }
#pragma unroll
          for (int f = 0; f < kMT; ++f)
#pragma unroll
            for (int j = 0; j < kNT8; ++j) {
              MmaSplit<!k16 && kSPLIT == 3 ? 3 : 1>(sum[f][j], ab[f], as[f], bb[j], bs[j]);
            }
        }
      }
    };
    if constexpr (!k16 && kSPLIT == 3) {
      float part[kMT][kNT8][4];
#pragma unroll
      for (int f = 0; f < kMT; ++f)
#pragma unroll
        for (int j = 0; j < kNT8; ++j)
#pragma unroll
          for (int v = 0; v < 4; ++v) part[f][j][v] = 0.f;
      step(part);
#pragma unroll
      for (int f = 0; f < kMT; ++f)
#pragma unroll
        for (int j = 0; j < kNT8; ++j)
#pragma unroll
          for (int v = 0; v < 4; ++v) acc[f][j][v] += part[f][j][v];
    } else {
      step(acc);
    }
    __syncthreads();  // both buffers of this step are refilled by later steps
  }
  wp = (wp + kSteps) & 1;
}

// Accumulator (f, j, v) is output row m = f*16 + gr (+8 for v >= 2) of its warp's M range and
// channel j*8 + 2*tg (+1 for odd v) of its warp's N range.
__device__ __forceinline__ void StoreTile(const BlockTile& b, const T* __restrict__ bias,
                                          T* __restrict__ y, const float (&acc)[kMT][kNT8][4]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = warp % kWM, wn = warp / kWM;
  const int gr = lane / 4, tg = lane % 4;
#pragma unroll
  for (int f = 0; f < kMT; ++f) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = wm * kMT * 16 + f * 16 + gr + half * 8;
      const int tw = m % kBQW, th = (m / kBQW) % kBQH, td = m / (kBQW * kBQH);
      const long long qd = b.q0d + td, qh = b.q0h + th, qw = b.q0w + tw;
      if (qd >= b.phd.q_lo + b.phd.q_count || qh >= b.phh.q_lo + b.phh.q_count ||
          qw >= b.phw.q_lo + b.phw.q_count)
        continue;
      const long long od = b.rd - kPD + kSD * qd, oh = b.rh - kPH + kSH * qh,
                      ow = b.rw - kPW + kSW * qw;
#pragma unroll
      for (int j = 0; j < kNT8; ++j) {
#pragma unroll
        for (int odd = 0; odd < 2; ++odd) {
          const int cog = b.co_tile * kBN + wn * kNT8 * 8 + j * 8 + 2 * tg + odd;
          if (cog >= kCoutG) continue;
          const int co = b.g * kCoutG + cog;
          const float bv = kBias ? Ld(bias[co]) : 0.f;
          y[((((idx_t)b.n * kCout + co) * kDout + od) * kHout + oh) * (idx_t)kWout + ow] =
              St(acc[f][j][half * 2 + odd] + bv);
        }
      }
    }
  }
}

// Staged all-phases blocks keep the outputs of the kSW W phases of one (D, H) phase in shared
// memory: [channel][td][th][kSW * kBQW] final values (bias added, in the output's type), the last
// index the output's W offset in the tile (the phases interleave there). A fragment store to
// global memory wrote 4-byte lanes spread over four channels and, with stride 2, every other
// element of a row; the flush writes whole row runs. Entries of empty phases or past a phase's
// range are never written and map to outputs past the output's end, which the flush skips. The
// odd channel stride keeps staging stores at most two-way bank-conflicted.
__device__ __forceinline__ void StageTile(unsigned char* smem, const BlockTile& b,
                                          const T* __restrict__ bias,
                                          const float (&acc)[kMT][kNT8][4]) {
  T* st = reinterpret_cast<T*>(smem + kSmemStage);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = warp % kWM, wn = warp / kWM;
  const int gr = lane / 4, tg = lane % 4;
  const int e = (int)(b.rw - kPW + kSW * b.phw.q_lo);  // this phase's first output, in [0, kSW)
#pragma unroll
  for (int f = 0; f < kMT; ++f) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = wm * kMT * 16 + f * 16 + gr + half * 8;
      const int tw = m % kBQW, thd = m / kBQW;  // thd = td * kBQH + th
      const int col = thd * kStageCols + kSW * tw + e;
#pragma unroll
      for (int j = 0; j < kNT8; ++j)
#pragma unroll
        for (int odd = 0; odd < 2; ++odd) {
          const int c = wn * kNT8 * 8 + j * 8 + 2 * tg + odd, cog = b.co_tile * kBN + c;
          const float bv = kBias && cog < kCoutG ? Ld(bias[b.g * kCoutG + cog]) : 0.f;
          // Without bias no FADD: x + 0.f is not x for x = -0, so NVVM kept it.
          st[c * kStageStride + col] =
              St(kBias ? acc[f][j][half * 2 + odd] + bv : acc[f][j][half * 2 + odd]);
        }
    }
  }
}

// Writes the staged rows of b's (D, H) phase in 16-byte slots of y, whatever the output width
// (also where rows do not start on a 16-byte boundary, as with an odd width). With m the row's
// first output past a 16-byte boundary, a row's columns [kOV - m, kStageCols - m) are whole
// aligned slots (one vector store each) and its other kOV columns take scalar stores. The
// block's first output and how many of its rows, channels and columns lie inside the tensor are
// decoded once: decoding each store's 64-bit index from scratch costs dozens of instructions
// (64-bit divisions) per store, far more than the store itself.
__device__ __forceinline__ void FlushStage(unsigned char* smem, const BlockTile& b,
                                           T* __restrict__ y) {
  const T* st = reinterpret_cast<const T*>(smem + kSmemStage);
  constexpr unsigned kRowsN = kBN * kBQD * kBQH;   // row = (c * kBQD + td) * kBQH + th
  constexpr unsigned kMid = kStageCols / kOV - 1;  // whole slots in every row
  // Strides in y between staged rows: next channel, next q in D (kSD outputs), next q in H.
  constexpr idx_t kCS = (idx_t)kDout * kHout * kWout, kDS = (idx_t)kSD * kHout * kWout,
                  kHS = (idx_t)kSH * kWout;
  const long long ow0 = kSW * (b.q0w - b.phw.q_lo);
  const long long od0 = b.rd - kPD + kSD * b.q0d, oh0 = b.rh - kPH + kSH * b.q0h;
  auto clamp = [](long long v, int hi) { return (int)(v < hi ? v : hi); };
  const int nc = kCoutG - b.co_tile * kBN;
  const int nd = clamp(b.phd.q_lo + b.phd.q_count - b.q0d, kBQD);
  const int nh = clamp(b.phh.q_lo + b.phh.q_count - b.q0h, kBQH);
  const int nw = clamp(kWout - ow0, kStageCols);
  const idx_t first =
      ((((idx_t)b.n * kCout + b.g * kCoutG + b.co_tile * kBN) * kDout + od0) * kHout + oh0) *
          (idx_t)kWout +
      ow0;
  // A y that is not 16-byte aligned (a view into a larger buffer) takes scalar stores.
  const bool y_aligned = ((unsigned long long)y & 15) == 0;
  // Row `row`: its first output in y (e0), its staged values (src), m; false outside the tensor.
  auto decode = [&](unsigned row, idx_t& e0, const T*& src, int& m) {
    const int th = (int)(row % kBQH), td = (int)(row / kBQH % kBQD), c = (int)(row / (kBQH * kBQD));
    if (c >= nc || td >= nd || th >= nh) return false;  // (e0 could overflow idx_t there)
    e0 = first + c * kCS + td * kDS + th * kHS;
    src = st + c * kStageStride + (int)(row % (kBQD * kBQH)) * kStageCols;
    m = y_aligned ? (int)(e0 & (kOV - 1)) : 0;
    return true;
  };
  __syncthreads();  // every thread's staged outputs are in place
  // kRowLanes threads share a row (8 x 16 bytes: a 128-byte line per row and store), each taking
  // every kRowLanes-th whole slot, then the row's kOV edge columns; the row is decoded once per
  // thread, not once per slot (one slot per thread-iteration would decode the row for each).
  constexpr int kSlots = kStageCols / kOV;
  constexpr int kRowLanes = kSlots < 8 ? kSlots : 8;
  const int lane = (int)threadIdx.x % kRowLanes;
  for (unsigned row = threadIdx.x / kRowLanes; row < kRowsN; row += kThreads / kRowLanes) {
    idx_t e0;
    const T* src;
    int m;
    if (!decode(row, e0, src, m)) continue;
    T* dst = y + e0;
    for (int k = lane; k < (int)kMid; k += kRowLanes) {
      const int c0 = (k + 1) * kOV - m;
      if (y_aligned && c0 + kOV <= nw) {
        // Word q of the vector: one f32, or two 16-bit outputs (low half first).
        auto word = [&](int q) {
          if constexpr (sizeof(T) == 4)
            return __float_as_uint(src[c0 + q]);
          else
            return (unsigned)src[c0 + 2 * q] | (unsigned)src[c0 + 2 * q + 1] << 16;
        };
        // Inline PTX: as a plain uint4 store NVVM merged it with the scalar stores below and
        // split it into four 4-byte ones.
        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(dst + c0), "r"(word(0)),
                     "r"(word(1)), "r"(word(2)), "r"(word(3))
                     : "memory");
      } else {  // an unaligned y, or the tensor's last W tile
#pragma unroll
        for (int q = 0; q < kOV; ++q)
          if (c0 + q < nw) dst[c0 + q] = src[c0 + q];
      }
    }
    for (int q = lane; q < kOV; q += kRowLanes) {
      const int col = q < kOV - m ? q : kStageCols - kOV + q;
      if (col < nw) dst[col] = src[col];
    }
  }
  __syncthreads();  // the stage is free for the next (D, H) phase
}

// w: the re-laid weights PREP_KERNEL_NAME wrote (not the user's tensor); x: the input's bits
// (f32) or the channel pairs PREPX_KERNEL_NAME wrote (16-bit).
extern "C" __global__ void __launch_bounds__(kThreads)
    KERNEL_NAME(const unsigned* __restrict__ x, const unsigned* __restrict__ w,
                const T* __restrict__ bias, T* __restrict__ y) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kPhases = kALLPH ? kSD * kSH * kSW : 1;
  // A phase with taps in every dimension runs a Tile; the others only write bias (or zeros).
  auto has_taps = [](const BlockTile& b) {
    return !b.Empty() && b.phd.taps > 0 && b.phh.taps > 0 && b.phw.taps > 0;
  };
  for (long long vb = blockIdx.x; vb < kTotalBlocks; vb += gridDim.x) {
    const BlockTile b0 = DecodeBlock(vb, 0);
    if constexpr (kShare) {
      // One halo for every phase of the tile: wait for any copy still in flight and for every
      // thread's reads of the previous tile's halo before overwriting it.
      long long id0, ih0, iw0;
      CpAsyncWaitAll();
      __syncthreads();
      SharedOrigin(b0, id0, ih0, iw0);
      IssueHalo<kHD, kHH>(x, reinterpret_cast<unsigned*>(smem), b0.n, b0.g, 0, id0, ih0, iw0);
      CpAsyncCommit();
    }
    int wp = 0;             // weight buffer parity, carried across phases
    bool w0_ready = false;  // this phase's first weight tile was loaded by the previous phase
    // All-phases blocks take the phase from this loop (W phases innermost, so the phases of an
    // output row are written close in time), the others from the block index.
    for (int pi = 0; pi < kPhases; ++pi) {
      const BlockTile bt = kALLPH ? WithPhase(b0, pi) : b0;
      if (!bt.Empty()) {
        const unsigned* next_w0 = nullptr;
        for (int pj = pi + 1; pj < kPhases; ++pj) {
          const BlockTile nb = WithPhase(b0, pj);
          if (has_taps(nb)) {
            next_w0 = WeightTile(w, nb, 0);
            break;
          }
        }
        float acc[kMT][kNT8][4];
#pragma unroll
        for (int f = 0; f < kMT; ++f)
#pragma unroll
          for (int j = 0; j < kNT8; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[f][j][v] = 0.f;
        const int jd = bt.phd.taps, jh = bt.phh.taps, jw = bt.phw.taps;
#define CONVT3D_CASE(A, B, C) \
  if (jd == A && jh == B && jw == C) Tile<A, B, C>(smem, x, w, bt, wp, w0_ready, next_w0, acc);
        if (has_taps(bt)) {
          CONVT3D_FOR_PHASE_CLASSES(CONVT3D_CASE)
          w0_ready = next_w0 != nullptr;
        }
#undef CONVT3D_CASE
        if constexpr (kStage)
          StageTile(smem, bt, bias, acc);
        else
          StoreTile(bt, bias, y, acc);
      }
      // The W phases of one (D, H) phase are innermost: their row is complete after the last.
      if constexpr (kStage)
        if (bt.rw == kSW - 1) FlushStage(smem, bt, y);
    }
  }
}
