// direct_tile.cu: direct ConvTranspose3d for small channel counts, built around the output write
// (family F5).
//
// Specialised by a preamble (generator/source.cpp) that defines, besides direct_phase's common
// constants and phase tables: kDilW (W dilation), kBX kBY kBZ (threads along W, H, D), kV
// (consecutive W outputs per thread, a multiple of kSW), kCOB (output channels per thread), kCK
// (input channels per shared-memory stage), kDTiles kHTiles kWTiles kCoBlocks kTotalBlocks, the
// halo extents kHaloD kHaloH kHW (row stride kHWS), the W window kOffLo kWinN, kALLPH with
// the shared halo's first rows kUD0 kUH0 (relative to the tile's first q), and CONVT3D_MMA
// (0: FFMA; 1 or 3: the tensor-core variant, TF32 or 3xTF32, see MmaPhase), and CONVT3D_CP
// (1: the pipelined per-phase variant, see PREP_KERNEL_NAME and IssueStage).
//
// A block owns kBZ x kBY output rows of one (D, H) stride phase (or, with kALLPH, of every
// (D, H) phase in turn) of one (n, group, channel block), each kBX*kV outputs long in W. D and H
// taps come from the phase tables (uniform in the block); in W a thread's kV outputs cover every
// W phase, and which (output, kw) pairs meet is a compile-time fact, so the inner loop is
// straight FFMA code with no predicate. The input halo of the block's rows and the weights
// (kCK channels at a time) are staged in shared memory, zero-padded, so inner loops never test
// bounds; a thread reads its input window with vector loads and its weights as kCOB-wide
// broadcasts. kALLPH blocks (one chunk only) load one halo, the union of the phases' windows,
// and all kD x kH weight rows once, and run every phase from them: the fill, which is most of a
// per-phase block's non-FFMA work at few products per output, is paid once instead of
// kSD*kSH times. Each thread writes kV consecutive outputs per channel, 16 bytes at a time where
// the row alignment allows. Accumulation is f32 FFMA whatever the storage type, or f32 in the
// tensor cores for the mma variant.

static_assert(sizeof(Acc) == 4, "direct_tile stages f32 operands (no f64 instantiation)");
constexpr int kMMA = CONVT3D_MMA;  // 0: FFMA; 1: mma.sync TF32; 3: 3xTF32
constexpr int kThreads = kBX * kBY * kBZ;
constexpr int kVS = kV / kSW;  // input positions a thread's W window advances by
constexpr int kKvol = kKD * kKH * kKW;
// Weight rows staged per input channel: the phase's taps, or every (kd, kh) with kALLPH.
constexpr int kWD = kALLPH ? kKD : kJmaxD, kWH = kALLPH ? kKH : kJmaxH;
// Per-channel strides of the staged halo and weights; the tensor-core variant pads both to 8
// words mod 32 so that the four channels of an operand fragment fall on distinct banks.
__host__ __device__ constexpr int Pad8(int words) { return words + (40 - words % 32) % 32; }
constexpr int kPlaneS = kMMA ? Pad8(kHaloD * kHaloH * kHWS) : kHaloD * kHaloH * kHWS;
constexpr int kWCIS = kMMA ? Pad8(kWD * kWH * kKW * kCOB) : kWD * kWH * kKW * kCOB;
constexpr int kWStage = kCK * kWCIS;       // weight words per stage
constexpr int kHaloStage = kCK * kPlaneS;  // halo words per stage
constexpr int kHaloRows = kCK * kHaloD * kHaloH;
constexpr int kHaloElems = kHaloRows * kHW;  // of which filled
constexpr idx_t kInPlane = (idx_t)kDin * kHin * kWin;
constexpr int kBatch = 8;  // global loads a thread has in flight while filling a stage
// A channel's taps unroll into one straight block of FFMAs up to ~2560 of them; beyond that the
// D taps stay a loop: a longer straight block no longer fits the instruction cache, and warps
// stall waiting for instructions to be fetched.
constexpr bool kUnrollD = kJmaxD * kJmaxH * kKW * kV * kCOB <= 2560;

// The pipelined variant (kCP; f32 storage, per-phase blocks, kCinG a multiple of kCK): the
// weights are packed once per weight version into each (phase, group, channel block)'s layout,
// and the input channel chunks are copied by cp.async into two buffers, chunk k + 1 in flight
// while chunk k is summed. An FFMA chain sums at most 256 products of an output: over more, runs
// of kChainChunks chunks are summed apart and then added (the generator defines kChainChunks
// and keeps such tiles to 32 accumulators, since the run's sums double them). Without
// it a block fills its one stage with loads and index arithmetic while no FFMA issues (on k3 s2
// layers the fill held ~40% of the stall samples, the per-phase weight gather alone 14% of the
// instructions).
constexpr bool kCP = CONVT3D_CP;
static_assert(!kCP || (!kALLPH && !kMMA && sizeof(T) == 4 && kCinG % kCK == 0),
              "the pipelined variant: f32 per-phase blocks of whole chunks");
constexpr int kChunks = kCinG / kCK;
#if CONVT3D_CP
typedef float WeightT;  // the packed weights
constexpr bool kChainRuns = kChunks > kChainChunks;
#else
typedef T WeightT;
#endif
constexpr int kBufWords = kHaloStage + (kWStage + 3) / 4 * 4;  // one buffer, 16-byte multiple

// Output k of a thread's run (k < kV) and tap kw meet iff kw*dil = k + pad (mod stride): then the
// input is the run's first position + (k + pad - kw*dil) / stride (exact division).
__device__ constexpr bool Meets(int k, int kw) { return (k + kPW - kw * kDilW) % kSW == 0; }
__device__ constexpr int WinIndex(int k, int kw) { return (k + kPW - kw * kDilW) / kSW - kOffLo; }

// The thread's kWinN input values from its halo row (16- or 8-byte loads where aligned).
__device__ __forceinline__ void LoadWindow(const float* row, float (&win)[kWinN]) {
  constexpr int kVec = kVS % 4 == 0 && kHWS % 4 == 0 ? 4 : kVS % 2 == 0 && kHWS % 2 == 0 ? 2 : 1;
#pragma unroll
  for (int j = 0; j < kWinN; j += kVec) {
    if (kVec == 4 && j + 4 <= kWinN) {
      const float4 v = *reinterpret_cast<const float4*>(row + j);
      win[j] = v.x, win[j + 1] = v.y, win[j + 2] = v.z, win[j + 3] = v.w;
    } else if (kVec >= 2 && j + 2 <= kWinN) {
      const float2 v = *reinterpret_cast<const float2*>(row + j);
      win[j] = v.x, win[j + 1] = v.y;
      if (kVec == 4 && j + 3 <= kWinN) win[j + 2] = row[j + 2];
    } else {
#pragma unroll
      for (int u = 0; u < kVec; ++u)
        if (j + u < kWinN) win[j + u] = row[j + u];
    }
  }
}

// Vector fill width for halo rows (f32 storage): the halo's first column is iw0 = (W tile) *
// kBX*kVS + kOffLo, so kOffLo, kBX*kVS and the input width must all be multiples of it.
constexpr int FillWidth() {
  for (int v = 4; v > 1; v /= 2)
    if (sizeof(T) == 4 && kOffLo % v == 0 && (kBX * kVS) % v == 0 && kWin % v == 0 && kHWS % v == 0)
      return v;
  return 1;
}
constexpr int kFV = FillWidth();
template <int kN>
struct VecOf {
  typedef float type;
  __device__ static float Zero() { return 0.f; }
};
template <>
struct VecOf<2> {
  typedef float2 type;
  __device__ static float2 Zero() { return make_float2(0.f, 0.f); }
};
template <>
struct VecOf<4> {
  typedef float4 type;
  __device__ static float4 Zero() { return make_float4(0.f, 0.f, 0.f, 0.f); }
};

// Fills kCount shared-memory words: each thread issues kBatch loads (value(i): 0 outside the
// tensor and for i >= kCount) before it stores any (at(i) is the word's place), so the fill
// waits for global memory once per batch, not once per element, which would make the fill
// mostly load latency. value() is one predicated load, no branch: an early return in it becomes
// a divergent branch around each load.
template <int kCount, class Value, class At>
__device__ __forceinline__ void FillStage(float* dst, Value value, At at) {
  using V = decltype(value(0));  // float, or float2/float4 for vector fills
  for (int i0 = (int)threadIdx.x; i0 < kCount; i0 += kBatch * kThreads) {
    V v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) v[u] = value(i0 + u * kThreads);
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (i0 + u * kThreads < kCount) *reinterpret_cast<V*>(dst + at(i0 + u * kThreads)) = v[u];
  }
}

// Each halo row's offset from its stage's first channel plane (-1: outside the input in D or H,
// or past the stage's `channels`), decoded once per row, so that an element costs a division by
// kHW and one bounds test in W (decoding every element's position and bounds from scratch costs
// dozens of instructions per element). The same for every chunk of a block.
__device__ __forceinline__ void RowOffsets(int* rowoff, long long id0, long long ih0,
                                           int channels) {
  for (int r = (int)threadIdx.x; r < kHaloRows; r += kThreads) {
    const int hh = r % kHaloH, hd = r / kHaloH % kHaloD, ci = r / (kHaloH * kHaloD);
    const long long id = id0 + hd, ih = ih0 + hh;
    const bool in = ci < channels && id >= 0 && id < kDin && ih >= 0 && ih < kHin;
    rowoff[r] = in ? ci * (int)kInPlane + ((int)id * kHin + (int)ih) * kWin : -1;
  }
}

// Stages input channels [c0, c0 + kCK) of group g, sample n: the halo whose first position is
// (id0, ih0, iw0), and the weight rows of output channel block cb: (kd, kh) = (wd0 + a*wds_d,
// wh0 + b*wds_h) for a < na, b < nb (zero beyond, and beyond the group's channels).
__device__ __forceinline__ void Stage(float* halo, float* wsm, const T* __restrict__ x,
                                      const T* __restrict__ w, int n, int g, int cb, int c0,
                                      long long id0, long long ih0, long long iw0, int wd0,
                                      int wds_d, int na, int wh0, int wds_h, int nb) {
  const T* xg = x + ((idx_t)n * kCin + (idx_t)g * kCinG + c0) * kInPlane;
  int* rowoff = reinterpret_cast<int*>(wsm + kWStage);  // [kHaloRows], offsets in xg
  RowOffsets(rowoff, id0, ih0, kCinG - c0);
  __syncthreads();
  // Halo columns [hw_lo, hw_hi) lie inside the input's W extent.
  const int hw_lo = iw0 < 0 ? (int)-iw0 : 0;
  const int hw_hi = iw0 + kHW > kWin ? (int)(kWin - iw0) : kHW;
  // A halo row is a piece of one input row: where the halo's first column, the input width
  // and x allow, kFV elements per load (the fill is most of the dense shapes' non-FFMA work).
  if (kFV > 1 && ((unsigned long long)x & (4 * kFV - 1)) == 0) {
    using V = typename VecOf<kFV>::type;
    constexpr int kHWV = (kHW + kFV - 1) / kFV;  // vectors per row (the last may pass kHW)
    FillStage<kHaloRows * kHWV>(
        halo,
        [=](int i) {
          const int r = i / kHWV, hw = (i - r * kHWV) * kFV;
          const int off = i < kHaloRows * kHWV ? rowoff[r] : -1;
          // iw0, kWin, hw are multiples of kFV: a vector is all inside the row or all outside.
          const bool in = off >= 0 && hw >= hw_lo && iw0 + hw + kFV <= kWin;
          return in ? *reinterpret_cast<const V*>(xg + off + (int)iw0 + hw) : VecOf<kFV>::Zero();
        },
        [](int i) {
          const int r = i / kHWV, hw = (i - r * kHWV) * kFV;
          if (kPlaneS == kHaloD * kHaloH * kHWS) return r * kHWS + hw;
          return r / (kHaloD * kHaloH) * kPlaneS + r % (kHaloD * kHaloH) * kHWS + hw;
        });
  } else {
    FillStage<kHaloElems>(
        halo,
        [=](int i) {
          const int r = i / kHW, hw = i - r * kHW;
          const int off = i < kHaloElems ? rowoff[r] : -1;
          const bool in = off >= 0 && hw >= hw_lo && hw < hw_hi;
          return in ? Ld(xg[off + (int)iw0 + hw]) : 0.f;
        },
        [](int i) {
          const int r = i / kHW;
          if (kPlaneS == kHaloD * kHaloH * kHWS) return r * kHWS + i % kHW;
          return r / (kHaloD * kHaloH) * kPlaneS + r % (kHaloD * kHaloH) * kHWS + i % kHW;
        });
  }
  if (kWD == kKD && kWH == kKH) {
    // Every tap is staged (stride 1, or all-phases blocks): walk the weights in memory order,
    // taps fastest, which decodes an element with two divisions instead of four (the weight
    // fill is a large share of the dense shapes' instructions) and reads them coalesced.
    const T* wg = w + (((idx_t)g * kCinG + c0) * kCoutG + cb * kCOB) * kKvol;
    FillStage<kCK * kKvol * kCOB>(
        wsm,
        [=](int i) {
          const int tap = i % kKvol, r = i / kKvol, ci = r / kCOB;
          const bool in = i < kCK * kKvol * kCOB && c0 + ci < kCinG;
          return in ? Ld(wg[(idx_t)ci * kCoutG * kKvol + (r - ci * kCOB) * kKvol + tap]) : 0.f;
        },
        [](int i) {
          const int tap = i % kKvol, r = i / kKvol, ci = r / kCOB;
          return ci * kWCIS + tap * kCOB + (r - ci * kCOB);
        });
    return;
  }
  FillStage<kCK * kWD * kWH * kKW * kCOB>(
      wsm,
      [=](int i) {
        const int c = i % kCOB;
        int r = i / kCOB;
        const int kw = r % kKW;
        r /= kKW;
        const int b = r % kWH;
        r /= kWH;
        const int a = r % kWD, ci = r / kWD;
        const int kd = wd0 + a * wds_d, kh = wh0 + b * wds_h;
        const bool in = i < kCK * kWD * kWH * kKW * kCOB && c0 + ci < kCinG && a < na && b < nb;
        return in ? Ld(w[(((idx_t)g * kCinG + c0 + ci) * kCoutG + cb * kCOB + c) * kKvol +
                         (kd * kKH + kh) * kKW + kw])
                  : 0.f;
      },
      [](int i) {
        constexpr int kWCI = kWD * kWH * kKW * kCOB;
        return kWCIS == kWCI ? i : i / kWCI * kWCIS + i % kWCI;
      });
}

// part += the staged channels' contributions to one (D, H) phase's rows: tap jd of phase phd
// reads halo row tz + hd0 - jd*d' and weight row wd0 + jd*wds_d (the same in H).
__device__ __forceinline__ void Accumulate(const float* halo, const float* wsm, int cis,
                                           const Phase& phd, const Phase& phh, int hd0, int hh0,
                                           int wd0, int wds_d, int wh0, int wds_h, int tx, int ty,
                                           int tz, float (&part)[kCOB][kV]) {
#pragma unroll 1
  for (int ci = 0; ci < cis; ++ci) {
    auto tap_row = [&](int jd) {
#pragma unroll
      for (int jh = 0; jh < kJmaxH; ++jh) {
        if (jh >= phh.taps) break;
        const int hd = tz + hd0 - jd * kDRd, hh = ty + hh0 - jh * kDRh;
        float win[kWinN];
        LoadWindow(halo + ((ci * kHaloD + hd) * kHaloH + hh) * kHWS + tx * kVS, win);
        const float* wrow =
            wsm + ((ci * kWD + wd0 + jd * wds_d) * kWH + wh0 + jh * wds_h) * (kKW * kCOB);
#pragma unroll
        for (int kw = 0; kw < kKW; ++kw) {
          float wv[kCOB];
          LoadRun<kCOB>(wrow + kw * kCOB, wv);
#pragma unroll
          for (int k = 0; k < kV; ++k) {
            if (!Meets(k, kw)) continue;
#pragma unroll
            for (int c = 0; c < kCOB; ++c)
              part[c][k] = fmaf(win[WinIndex(k, kw)], wv[c], part[c][k]);
          }
        }
      }
    };
    // (Two loops, not "#pragma unroll N": with N equal to the trip count ptxas allocates
    // registers differently and can spill all-phases tiles.)
    if (kUnrollD) {
#pragma unroll
      for (int jd = 0; jd < kJmaxD; ++jd) {
        if (jd >= phd.taps) break;
        tap_row(jd);
      }
    } else {
#pragma unroll 1
      for (int jd = 0; jd < kJmaxD; ++jd) {
        if (jd >= phd.taps) break;
        tap_row(jd);
      }
    }
  }
}

// Writes a thread's kV outputs of each of its kCOB channels (plus bias) at row (od, oh).
__device__ __forceinline__ void Store(T* __restrict__ y, const T* __restrict__ bias,
                                      float (&acc)[kCOB][kV], int n, int g, int cb, long long od,
                                      long long oh, int ow) {
  // Vector stores need every output row 16-byte aligned (8 bytes for 16-bit storage), and
  // consecutive outputs (a lattice kernel, generator/lattice.h, writes every kLW-th).
  constexpr int kStoreVec = kV % 4 == 0 && kLW == 1 && kYWout % 4 == 0 && kOW % 4 == 0 ? 4 : 1;
  const bool y_aligned = ((unsigned long long)y & (4 * sizeof(T) - 1)) == 0;
#pragma unroll
  for (int c = 0; c < kCOB; ++c) {
    const int co = g * kCoutG + cb * kCOB + c;
    if (kBias) {  // (acc + 0 is not a no-op in IEEE arithmetic: -0 becomes +0)
#pragma unroll
      for (int k = 0; k < kV; ++k) acc[c][k] += Ld(bias[co]);
    }
    T* yrow = y + (((idx_t)n * kCout + co) * kYDout + (kLD * od + kOD)) * ((idx_t)kYHout * kYWout) +
              (idx_t)(kLH * oh + kOH) * kYWout + kLW * ow + kOW;
#pragma unroll
    for (int k = 0; k < kV; k += kStoreVec) {
      if (kStoreVec == 4 && y_aligned) {
        if (ow + k < kWout) {  // kWout % 4 == 0: the four are all inside or all outside
          if (sizeof(T) == 4) {
            *reinterpret_cast<float4*>(yrow + k) =
                make_float4(acc[c][k], acc[c][k + 1], acc[c][k + 2], acc[c][k + 3]);
          } else {
            const unsigned lo = (unsigned)St(acc[c][k]) | ((unsigned)St(acc[c][k + 1]) << 16);
            const unsigned hi = (unsigned)St(acc[c][k + 2]) | ((unsigned)St(acc[c][k + 3]) << 16);
            *reinterpret_cast<uint2*>(yrow + k) = make_uint2(lo, hi);
          }
        }
      } else {
#pragma unroll
        for (int u = 0; u < kStoreVec; ++u)
          if (ow + k + u < kWout) yrow[kLW * (k + u)] = St(acc[c][k + u]);
      }
    }
  }
}

__device__ __forceinline__ void Zero(float (&a)[kCOB][kV]) {
#pragma unroll
  for (int c = 0; c < kCOB; ++c)
#pragma unroll
    for (int k = 0; k < kV; ++k) a[c][k] = 0.f;
}

#if CONVT3D_MMA
// ---- Tensor-core variant (kMMA: 1 TF32, 3 3xTF32; all-phases blocks, f32 storage) ---------
// Where an output has few products, the FFMA variant's multiply-adds are most of its issue
// slots and the write stream waits on them. The same staged halo and weights feed mma.sync
// m16n8k8 instead: M = 16 W positions of one (D, H, W) phase, N = 8 output channels, K = (tap,
// input channel) with the channel fastest. The generator offers it only where every phase has
// the same taps (kernel % stride == 0, dilation 1), the group has a multiple of 4 input channels
// (so a fragment's K column t is channel t of a fixed tap: every offset below is a compile-time
// constant plus t and g) and kCOB is a multiple of 8.
constexpr int kTD = kKD / kSD, kTH = kKH / kSH, kTW = kKW / kSW;  // taps per phase
constexpr int kKTot = kTD * kTH * kTW * kCinG;
constexpr int kKSteps = (kKTot + 7) / 8;
constexpr int kMTiles = kBX * kV / kSW / 16 > 0 ? kBX* kV / kSW / 16 : 1;  // m16 per W phase
constexpr int kNT8 = kCOB / 8 > 0 ? kCOB / 8 : 1;

// K index k = 8*step + 4*half + t (t = lane % 4): its tap (D, H, W indices within the phase) and
// channel. kCinG % 4 == 0, so the channel is KChan(step, half) + t and the tap does not depend
// on t.
struct KTap {
  int jd, jh, jw;
};
__device__ constexpr KTap KTapOf(int step, int half) {
  return {(8 * step + 4 * half) / kCinG / (kTH * kTW), (8 * step + 4 * half) / kCinG / kTW % kTH,
          (8 * step + 4 * half) / kCinG % kTW};
}
__device__ constexpr int KChan(int step, int half) { return (8 * step + 4 * half) % kCinG; }
// The first W tap of W phase rr (outputs sW*q + rr of the block's W segment), and the halo
// column of its tap 0 relative to q (as WinIndex for the FFMA variant).
__device__ constexpr int KwOf(int rr) { return (rr + kPW) % kSW; }
__device__ constexpr int ColOf(int rr) { return (rr + kPW - KwOf(rr)) / kSW - kOffLo; }

// Every W phase and channel tile of one (D, H) phase of the block: warps take (row, m16 tile)
// items in turn; a lane ends with, per W phase, outputs q = 16m + g (+8) of channels 2t, 2t+1
// (+8j), and writes the kSW W phases of each as one vector (they are consecutive in W).
__device__ __forceinline__ void MmaPhase(const float* halo, const float* wsm, const Phase& phd,
                                         const Phase& phh, int rd, int rh, long long qd0,
                                         long long qh0, T* __restrict__ y,
                                         const T* __restrict__ bias, int n, int g, int cb, int wt) {
  const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32;
  const int gq = lane / 4, t = lane % 4;
  // B fragments for the phase: b0 = weight (k = 8s + t, n = gq), b1 = (k + 4, gq).
  unsigned bb[kSW][kKSteps][kNT8][2], bs[kSW][kKSteps][kNT8][2];
  const float* wl = wsm + (phd.kk0 * kKH + phh.kk0) * kKW * kCOB + t * kWCIS + gq;
#pragma unroll
  for (int rr = 0; rr < kSW; ++rr)
#pragma unroll
    for (int st = 0; st < kKSteps; ++st)
#pragma unroll
      for (int j = 0; j < kNT8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          bb[rr][st][j][h] = bs[rr][st][j][h] = 0u;
          if (8 * st + 4 * h >= kKTot) continue;
          const KTap k = KTapOf(st, h);
          const float v =
              wl[KChan(st, h) * kWCIS +
                 ((k.jd * kSRd * kKH + k.jh * kSRh) * kKW + KwOf(rr) + k.jw * kSW) * kCOB + j * 8];
          Split<kMMA>(v, bb[rr][st][j][h], bs[rr][st][j][h]);
        }
  const int hd0 = (int)(phd.q_lo + phd.c - kUD0), hh0 = (int)(phh.q_lo + phh.c - kUH0);
  const float* al = halo + t * kPlaneS + gq;
  constexpr int kItems = kBZ * kBY * kMTiles;
  for (int it = warp; it < kItems; it += kThreads / 32) {  // warp-uniform
    const int tz = it / (kBY * kMTiles), ty = it / kMTiles % kBY, m = it % kMTiles;
    const long long qd = qd0 + tz, qh = qh0 + ty;
    if (qd >= phd.q_count || qh >= phh.q_count) continue;
    const float* arow = al + ((hd0 + tz) * kHaloH + hh0 + ty) * kHWS + 16 * m;
    float acc[kSW][kNT8][4];
#pragma unroll
    for (int rr = 0; rr < kSW; ++rr)
#pragma unroll
      for (int j = 0; j < kNT8; ++j)
#pragma unroll
        for (int v = 0; v < 4; ++v) acc[rr][j][v] = 0.f;
#pragma unroll
    for (int st = 0; st < kKSteps; ++st)
#pragma unroll
      for (int rr = 0; rr < kSW; ++rr) {
        unsigned ab[4] = {0u, 0u, 0u, 0u}, as[4] = {0u, 0u, 0u, 0u};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (8 * st + 4 * h >= kKTot) continue;
          const KTap k = KTapOf(st, h);
          const float* p = arow + KChan(st, h) * kPlaneS -
                           (k.jd * kDRd * kHaloH + k.jh * kDRh) * kHWS + ColOf(rr) - k.jw;
          Split<kMMA>(p[0], ab[2 * h], as[2 * h]);  // rows g and g + 8 of K column t (+4)
          Split<kMMA>(p[8], ab[2 * h + 1], as[2 * h + 1]);
        }
#pragma unroll
        for (int j = 0; j < kNT8; ++j) {
          MmaSplit<kMMA>(acc[rr][j], ab, as, bb[rr][st][j], bs[rr][st][j]);
        }
      }
    // Write: for each channel, row half and W position, the kSW W phases side by side.
    const long long od = rd - kPD + (long long)kSD * (phd.q_lo + qd);
    const long long oh = rh - kPH + (long long)kSH * (phh.q_lo + qh);
    constexpr bool kVec = (kSW == 2 || kSW == 4) && kWout % kSW == 0;
    const bool y_aligned = ((unsigned long long)y & (kSW * sizeof(T) - 1)) == 0;
#pragma unroll
    for (int j = 0; j < kNT8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int co = g * kCoutG + cb * kCOB + j * 8 + 2 * t + e;
        const float b = kBias ? Ld(bias[co]) : 0.f;
        T* yrow = y + (((idx_t)n * kCout + co) * kDout + od) * ((idx_t)kHout * kWout) +
                  (idx_t)oh * kWout + wt * (kBX * kV);
#pragma unroll
        for (int v = 0; v < 2; ++v) {
          const int ow = kSW * (16 * m + gq + 8 * v);  // within the block's W segment
          float o[kSW];
#pragma unroll
          for (int rr = 0; rr < kSW; ++rr)
            o[rr] = kBias ? acc[rr][j][2 * v + e] + b : acc[rr][j][2 * v + e];
          if (kVec && y_aligned) {
            if (wt * (kBX * kV) + ow < kWout) {  // kWout % kSW == 0: all kSW or none
              if (kSW == 4)
                *reinterpret_cast<float4*>(yrow + ow) =
                    make_float4(o[0], o[1], o[2 % kSW], o[3 % kSW]);
              else
                *reinterpret_cast<float2*>(yrow + ow) = make_float2(o[0], o[1 % kSW]);
            }
          } else {
#pragma unroll
            for (int rr = 0; rr < kSW; ++rr)
              if (wt * (kBX * kV) + ow + rr < kWout) yrow[ow + rr] = St(o[rr]);
          }
        }
      }
  }
}
#endif  // CONVT3D_MMA

#if CONVT3D_CP
// Packs the weights (once per weight version), f32, in the order a per-phase block stages them:
// [rd][rh][g][cb][ci][a][b][kw][c] with (kd, kh) = (kk0 + a*s', kk0 + b*s') of phase (rd, rh),
// zero for a or b past the phase's taps. A stage's weights are then one contiguous run.
extern "C" __global__ void __launch_bounds__(256)
    PREP_KERNEL_NAME(const T* __restrict__ w, float* __restrict__ packed) {
  constexpr long long kWords = (long long)kSD * kSH * kG * kCoBlocks * kCinG * kWCIS;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < kWords;
       i += (long long)gridDim.x * blockDim.x) {
    long long r = i;
    const int c = (int)(r % kCOB);
    r /= kCOB;
    const int kw = (int)(r % kKW);
    r /= kKW;
    const int b = (int)(r % kWH);
    r /= kWH;
    const int a = (int)(r % kWD);
    r /= kWD;
    const int ci = (int)(r % kCinG);
    r /= kCinG;
    const int cb = (int)(r % kCoBlocks);
    r /= kCoBlocks;
    const int g = (int)(r % kG);
    r /= kG;
    const Phase phd = kPhD[r / kSH], phh = kPhH[r % kSH];
    float v = 0.f;
    if (a < phd.taps && b < phh.taps) {
      const int kd = phd.kk0 + a * kSRd, kh = phh.kk0 + b * kSRh;
      v = Ld(w[(((idx_t)g * kCinG + ci) * kCoutG + cb * kCOB + c) * kKvol + (kd * kKH + kh) * kKW +
               kw]);
    }
    packed[i] = v;
  }
}

// Starts the copies of one chunk into buffer buf: the halo (zeros outside the input, by the
// copies' source size) from xc, the chunk's first channel plane, and the chunk's packed weights
// from wc. The caller commits them as one group.
__device__ __forceinline__ void IssueStage(float* buf, const int* rowoff, const float* xc,
                                           const float* wc, long long iw0) {
  const int hw_lo = iw0 < 0 ? (int)-iw0 : 0;
  const int hw_hi = iw0 + kHW > kWin ? (int)(kWin - iw0) : kHW;
  if (kFV > 1 && ((unsigned long long)xc & (4 * kFV - 1)) == 0) {
    constexpr int kHWV = (kHW + kFV - 1) / kFV;  // vectors per row (the last may pass kHW)
    for (int i = (int)threadIdx.x; i < kHaloRows * kHWV; i += kThreads) {
      const int r = i / kHWV, hw = (i - r * kHWV) * kFV;
      const int off = rowoff[r];
      // iw0, kWin, hw are multiples of kFV: a vector is all inside the row or all outside.
      const bool in = off >= 0 && hw >= hw_lo && iw0 + hw + kFV <= kWin;
      CpAsyncZfill<4 * kFV>(buf + r * kHWS + hw, in ? xc + off + iw0 + hw : xc, in);
    }
  } else {
    for (int i = (int)threadIdx.x; i < kHaloElems; i += kThreads) {
      const int r = i / kHW, hw = i - r * kHW;
      const int off = rowoff[r];
      const bool in = off >= 0 && hw >= hw_lo && hw < hw_hi;
      CpAsyncZfill<4>(buf + r * kHWS + hw, in ? xc + off + iw0 + hw : xc, in);
    }
  }
  float* wsm = buf + kHaloStage;
  if (kWStage % 4 == 0) {  // chunk offsets are multiples of kWStage: 16-byte aligned runs
    for (int i = 4 * (int)threadIdx.x; i < kWStage; i += 4 * kThreads) CpAsync16(wsm + i, wc + i);
  } else {
    for (int i = (int)threadIdx.x; i < kWStage; i += kThreads)
      CpAsyncZfill<4>(wsm + i, wc + i, true);
  }
}
#endif  // CONVT3D_CP

// 16 warps per SM (a cap of 128 registers): with the thread count alone ptxas can cap large
// all-phases tiles (bf16 ones) too low and spill, and with a minimum of one block it can take so
// many registers that fewer than 16 warps fit an SM.
// The TF32 tensor-core variant keeps few registers live (fragments, not kCOB x kV sums): 20
// warps per SM, which still leaves it enough registers (at 24 warps per SM it spills).
extern "C" __global__ void __launch_bounds__(kThreads, kThreads >= 512
                                                           ? 1
                                                           : (kMMA == 1 ? 640 : 512) / kThreads)
    KERNEL_NAME(const T* __restrict__ x, const WeightT* __restrict__ w, const T* __restrict__ bias,
                T* __restrict__ y) {
  static_assert(!kALLPH || kCK >= kCinG, "all-phases blocks stage every channel at once");
  extern __shared__ __align__(16) float smem[];
  float* halo = smem;              // [kCK][kHaloD][kHaloH][kHWS]
  float* wsm = smem + kHaloStage;  // [kCK][kWD][kWH][kKW][kCOB], then Stage's row offsets
  const int tx = (int)threadIdx.x % kBX;
  const int ty = (int)threadIdx.x / kBX % kBY;
  const int tz = (int)threadIdx.x / (kBX * kBY);

  // A grid-stride loop over virtual blocks lets any problem size run with a 1-D grid; every
  // condition that skips work below is uniform in the block, so barriers stay matched.
  for (long long vb = blockIdx.x; vb < kTotalBlocks; vb += gridDim.x) {
    long long t = vb;
    const int wt = (int)(t % kWTiles);
    t /= kWTiles;
    const int ht = (int)(t % kHTiles);
    t /= kHTiles;
    const int rh_block = kALLPH ? 0 : (int)(t % kSH);
    t /= kALLPH ? 1 : kSH;
    const int dt = (int)(t % kDTiles);
    t /= kDTiles;
    const int rd_block = kALLPH ? 0 : (int)(t % kSD);
    t /= kALLPH ? 1 : kSD;
    const int cb = (int)(t % kCoBlocks);
    t /= kCoBlocks;
    const int g = (int)(t % kG);
    const int n = (int)(t / kG);
    const long long qd0 = (long long)dt * kBZ, qh0 = (long long)ht * kBY;  // from q_lo
    const long long iw0 = (long long)wt * (kBX * kVS) + kOffLo;
    const int ow = wt * (kBX * kV) + tx * kV;
    float acc[kCOB][kV];

    if (kALLPH) {
      // One halo (the union of the phases' windows) and every weight row, then each phase.
      __syncthreads();  // the previous virtual block is done with shared memory
      Stage(halo, wsm, x, w, n, g, cb, 0, qd0 + kUD0, qh0 + kUH0, iw0, 0, 1, kKD, 0, 1, kKH);
      __syncthreads();
#pragma unroll 1
      for (int rd = 0; rd < kSD; ++rd) {
#pragma unroll 1
        for (int rh = 0; rh < kSH; ++rh) {
          const Phase phd = kPhD[rd], phh = kPhH[rh];
          if (qd0 >= phd.q_count || qh0 >= phh.q_count) continue;  // uniform in the block
#if CONVT3D_MMA
          MmaPhase(halo, wsm, phd, phh, rd, rh, qd0, qh0, y, bias, n, g, cb, wt);
          continue;
#endif
          Zero(acc);
          // Tap 0 of phase r reads input q + c: halo row tz + (q_lo + c) - kU0.
          Accumulate(halo, wsm, kCinG, phd, phh, (int)(phd.q_lo + phd.c - kUD0),
                     (int)(phh.q_lo + phh.c - kUH0), phd.kk0, kSRd, phh.kk0, kSRh, tx, ty, tz, acc);
          const long long qd = qd0 + tz, qh = qh0 + ty;
          if (qd < phd.q_count && qh < phh.q_count)
            Store(y, bias, acc, n, g, cb, rd - kPD + (long long)kSD * (phd.q_lo + qd),
                  rh - kPH + (long long)kSH * (phh.q_lo + qh), ow);
        }
      }
      continue;
    }

    const Phase phd = kPhD[rd_block], phh = kPhH[rh_block];
    if (qd0 >= phd.q_count || qh0 >= phh.q_count) continue;
    Zero(acc);
    if (phd.taps > 0 && phh.taps > 0) {  // else the rows are bias only
      // First input position of the block's halo in D and H: tap taps-1 of its first row.
      const long long id0 = phd.q_lo + qd0 + phd.c - (long long)(phd.taps - 1) * kDRd;
      const long long ih0 = phh.q_lo + qh0 + phh.c - (long long)(phh.taps - 1) * kDRh;
#if CONVT3D_CP
      int* rowoff = reinterpret_cast<int*>(smem + 2 * kBufWords);
      __syncthreads();  // the previous virtual block is done with shared memory
      RowOffsets(rowoff, id0, ih0, kCK);
      __syncthreads();
      const float* xc = x + ((idx_t)n * kCin + (idx_t)g * kCinG) * kInPlane;
      const float* wc =
          w + (((long long)(rd_block * kSH + rh_block) * kG + g) * kCoBlocks + cb) * kCinG * kWCIS;
      IssueStage(smem, rowoff, xc, wc, iw0);
      CpAsyncCommit();
      float run[kCOB][kV];  // the current run's sums (kChainRuns)
      if (kChainRuns) Zero(run);
#pragma unroll 1
      for (int k = 0; k < kChunks; ++k) {
        CpAsyncWait<0>();
        // Chunk k has landed for every thread, and every thread is done with chunk k - 1's
        // buffer, which chunk k + 1's copies then fill while chunk k is summed: one barrier per
        // chunk.
        __syncthreads();
        if (k + 1 < kChunks) {
          IssueStage(smem + ((k + 1) & 1) * kBufWords, rowoff, xc + (idx_t)(k + 1) * kCK * kInPlane,
                     wc + (long long)(k + 1) * kWStage, iw0);
          CpAsyncCommit();
        }
        const float* buf = smem + (k & 1) * kBufWords;
        Accumulate(buf, buf + kHaloStage, kCK, phd, phh, (phd.taps - 1) * kDRd,
                   (phh.taps - 1) * kDRh, 0, 1, 0, 1, tx, ty, tz, kChainRuns ? run : acc);
        if (kChainRuns && ((k + 1) % kChainChunks == 0 || k + 1 == kChunks)) {
#pragma unroll
          for (int c = 0; c < kCOB; ++c)
#pragma unroll
            for (int v = 0; v < kV; ++v) acc[c][v] += run[c][v], run[c][v] = 0.f;
        }
      }  // (the buffers are next written after the following virtual block's first barrier)
#else
      for (int c0 = 0; c0 < kCinG; c0 += kCK) {
        __syncthreads();  // the previous stage (or virtual block) is done with shared memory
        Stage(halo, wsm, x, w, n, g, cb, c0, id0, ih0, iw0, phd.kk0, kSRd, phd.taps, phh.kk0, kSRh,
              phh.taps);
        __syncthreads();
        // Chunk partials, then their sum: two-level summation for long reductions (a single
        // chunk folds into a plain copy).
        float part[kCOB][kV];
        Zero(part);
        Accumulate(halo, wsm, kCinG - c0 < kCK ? kCinG - c0 : kCK, phd, phh, (phd.taps - 1) * kDRd,
                   (phh.taps - 1) * kDRh, 0, 1, 0, 1, tx, ty, tz, part);
#pragma unroll
        for (int c = 0; c < kCOB; ++c)
#pragma unroll
          for (int k = 0; k < kV; ++k) acc[c][k] += part[c][k];
      }
#endif
    }
    const long long qd = qd0 + tz, qh = qh0 + ty;
    if (qd < phd.q_count && qh < phh.q_count)
      Store(y, bias, acc, n, g, cb, rd_block - kPD + (long long)kSD * (phd.q_lo + qd),
            rh_block - kPH + (long long)kSH * (phh.q_lo + qh), ow);
  }
}
