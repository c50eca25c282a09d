// shuffle_wgmma.cu: the pixel-shuffle GEMM of kernel == stride layers on Hopper warpgroup MMA
// (wgmma, sm_90a), TF32, BF16 and FP16: the input is read in place (NCDHW), once, and every
// output is written once, straight from the accumulators.
//
// Specialised by a preamble (generator/families/shuffle_wgmma.cpp) with the problem's constants
// and kWG (consumer warpgroups), kMT (m64 tiles per warpgroup), kBN (columns per warpgroup, the
// wgmma's N), kBS (columns of a slice: kWG x kBN), kKC (input channels per swizzled row of B), kST
// (A tiles in flight), kKP (the group's input channels padded to kKC), kSlices (column slices per
// group), kMTS (row tiles per sample), kASlot (bytes of one A tile), kLDA (elements per row of an A
// tile), kSplit (3: 3xTF32, each operand a TF32 big part and the TF32 rounding of the rest, three
// wgmmas per step) and WgmmaRS(), the register-A wgmma for this N and type.
//
// With kernel == stride every output (n, co, d*kSD + td, h*kSH + th, w*kSW + tw) is bias[co] +
// sum_ci x[n, ci, d, h, w] * w[ci, co, td, th, tw]: per group one GEMM with M = the input
// positions (n, d, h, w), K = the group's input channels and N = its output channels x taps
// (column co * kT + t). A block owns one slice of kWG * kBN columns (its B, all of K, stays in
// shared memory, packed and swizzled by PREP_KERNEL_NAME) and walks row tiles of kBM positions
// of one sample. A producer warpgroup copies each tile's channel planes (kBM consecutive positions
// of each input channel: one bulk copy each, cp.async.bulk completing on an mbarrier) into a ring
// of kST slots laid [channel][position]; each consumer warpgroup loads its A fragments from
// there (TF32: 32-bit loads, rounded; 16-bit: ldmatrix.trans), runs its kBN columns with wgmma,
// frees the slot and stores its accumulators: a thread's column pair (tw = 0, 1 when kKW == 2)
// are neighbours in y, and its 8-lane row groups are consecutive positions along W.
//
// An input of volume 1 (a latent vector's first layer: every output is a tap) is "latent": the
// rows are the samples, one row tile of kBM samples over the batch, and a slot holds each
// sample's channels in a row ([sample][channel], one bulk copy per sample), read K-major.

constexpr int kBM = 64 * kMT;
static_assert(kBS == kWG * kBN, "a slice is the consumer warpgroups' columns");
constexpr long long kVol = (long long)kDin * kHin * kWin;
constexpr long long kVolOut = (long long)kDout * kHout * kWout;
constexpr bool kLatent = kVol == 1;
constexpr int kThreads = 128 * (kWG + 1);
static_assert(kBN % 8 == 0 && kBN <= 256 && kMT * kBN / 2 <= 128, "wgmma N, accumulators");
static_assert((kLatent ? kCinG : kVol) * kEB % 16 == 0, "copies of whole 16-byte units");
// The epilogue through int row offsets: W tap pairs, and positions (up to a tile past the
// volume) and a group's output offsets (up to a plane past its last channel) within an int.
constexpr bool kRowOffsets = !kLatent && kKW == 2 && kVol + kBM < (1LL << 31) &&
                             (long long)(kCoutG + 1) * kVolOut < (1LL << 31);

// This thread's A fragments of K step kk for its m64 tiles: from a latent slot ([sample]
// [channel]) here, else from a [channel][position] slot (plane_wgmma.cuh).
__device__ __forceinline__ void LoadA(const unsigned char* a, unsigned a_sh, int k0, int warp,
                                      int lane, unsigned (&frag)[kMT][4],
                                      unsigned (&small)[kMT][4]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const int r0 = mt * 64 + 16 * warp;
    if constexpr (kLatent) {
      // [row][channel]: 16-bit through ldmatrix (rows r0 + 0..15, channels k0 + 0..15); TF32
      // (row g, k t), (g + 8, t), (g, t + 4), (g + 8, t + 4).
      if constexpr (k16) {
        const int r = r0 + (lane & 7) + 8 * ((lane >> 3) & 1), k = k0 + 8 * (lane >> 4);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(frag[mt][0]), "=r"(frag[mt][1]), "=r"(frag[mt][2]), "=r"(frag[mt][3])
                     : "r"(a_sh + (unsigned)(r * kLDA + k) * 2));
      } else {
        const float* af = reinterpret_cast<const float*>(a);
        const int g = lane / 4, t = lane % 4;
        const float v[4] = {af[(r0 + g) * kLDA + k0 + t], af[(r0 + g + 8) * kLDA + k0 + t],
                            af[(r0 + g) * kLDA + k0 + t + 4], af[(r0 + g + 8) * kLDA + k0 + t + 4]};
#pragma unroll
        for (int e = 0; e < 4; ++e) Split<kSplit>(v[e], frag[mt][e], small[mt][e]);
      }
    } else {
      LoadPlaneA(a, a_sh, k0, r0, lane, frag[mt], small[mt]);
    }
  }
}

// y[0], y[1] = v0, v1 (8-byte aligned for f32, 4-byte for 16-bit) by st.global: the caller's
// pointer is opaque to the compiler, which would otherwise emit a generic store.
__device__ __forceinline__ void StorePair(T* y, float v0, float v1) {
  if constexpr (k16) {
    asm volatile("st.global.b32 [%0], %1;\n" ::"l"(y), "r"(Pack(St(v0), St(v1))) : "memory");
  } else {
    asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(y), "f"(v0), "f"(v1) : "memory");
  }
}

// x: the input; w: the packed B images.
extern "C" __global__ void __launch_bounds__(kThreads, 1)
    KERNEL_NAME(const T* __restrict__ x, const uint4* __restrict__ w, const T* __restrict__ bias,
                T* __restrict__ y) {
  extern __shared__ unsigned char smem_raw[];
  const unsigned raw = (unsigned)__cvta_generic_to_shared(smem_raw);
  unsigned char* smem = smem_raw + ((1024 - (raw & 1023)) & 1023);
  const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned sa = sbase + kBRegion;  // A slots
  // full[kST], empty[kST], B full, B empty
  const unsigned bars = sa + kST * kASlot;
  const unsigned bfull = bars + 16 * kST, bempty = bfull + 8;

  // Slices (group, column slice) and row tiles (shuffle.cuh).
  constexpr int kS = kG * kSlices;
  constexpr long long kMAll = kLatent ? kMTS : (long long)kN * kMTS;
  int s0, sstep;
  long long m0, mstep;
  if (!ShuffleWalk(kS, s0, sstep, m0, mstep)) return;

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), wtid = tid % 128;
  const int warp = wtid / 32, lane = tid % 32;
  // The padding channels of every slot are never copied: zeros, once.
  constexpr int kPadElems = (kKP - kCinG) * (kLatent ? kBM : kLDA);
  for (int e = tid; e < kST * kPadElems; e += kThreads) {
    const int slot = e / max(kPadElems, 1), r = e % max(kPadElems, 1);
    T* a = reinterpret_cast<T*>(smem + kBRegion + slot * kASlot);
    if constexpr (kLatent)
      a[r / max(kKP - kCinG, 1) * kLDA + kCinG + r % max(kKP - kCinG, 1)] = T(0);  // row tails
    else
      a[kCinG * kLDA + r] = T(0);  // the padding channels' rows
  }
  if (tid == 0) {
    for (int i = 0; i < kST; ++i) {
      MbarInit(bars + 8 * i, 4);  // each producer warp announces its copies
      MbarInit(bars + 8 * (kST + i), kWG * 128);
    }
    MbarInit(bfull, 1);
    MbarInit(bempty, kWG * 128);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // A programmatic dependent of the weight packing (PlaneWgmmaPlan): shared memory is set up;
  // global memory only after the packing's stores.
  WaitForPreviousKernel();

  if (wg == kWG) {
    // ---- producer: the warpgroup's four warps issue the copies ----
    // A bulk copy takes warp-uniform operands, so a warp issues its lanes' copies one after
    // another (~8 instructions each): the tile's channel planes are dealt out over the four
    // warps (channel ci to warp ci % 4), each announcing its own bytes on the slot's barrier.
    if constexpr (kWG == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    int c = 0, si = 0;
#pragma unroll 1
    for (int s = s0; s < kS; s += sstep, ++si) {
      if (warp == 0) {
        if (si > 0) MbarWait(bempty, (si - 1) & 1);  // every consumer is done with the last B
        if (lane == 0) {
          MbarArriveExpect(bfull, kBBytes);
          BulkCopy(sbase, w + (long long)s * (kBBytes / 16), kBBytes, bfull);
        }
      }
      const int g = s / kSlices;
#pragma unroll 1
      for (long long m = m0; m < kMAll; m += mstep, ++c) {
        const int slot = c % kST;
        MbarWait(bars + 8 * (kST + slot), ((c / kST) & 1) ^ 1);
        if constexpr (kLatent) {
          // One copy of the group's channels per sample of the tile: sample r to warp r % 4.
          const long long n0 = m * kBM;
          const int rows = (int)min((long long)kBM, kN - n0);
          if (lane == 0) MbarArriveExpect(bars + 8 * slot, WarpShare(rows, warp) * kCinG * kEB);
          __syncwarp();
          for (int r = warp + 4 * lane; r < rows; r += 128)
            BulkCopy(sa + slot * kASlot + r * kLDA * kEB, x + (n0 + r) * kCin + g * kCinG,
                     kCinG * kEB, bars + 8 * slot);
        } else {
          const int n = (int)(m / kMTS);
          const long long p0 = m % kMTS * kBM;
          const unsigned bytes = (unsigned)(min((long long)kBM, kVol - p0) * kEB);
          if (lane == 0) MbarArriveExpect(bars + 8 * slot, bytes * WarpShare(kCinG, warp));
          __syncwarp();
          const T* src = x + ((long long)n * kCin + g * kCinG) * kVol + p0;
          for (int ci = warp + 4 * lane; ci < kCinG; ci += 128)
            BulkCopy(sa + slot * kASlot + ci * kLDA * kEB, src + ci * kVol, bytes, bars + 8 * slot);
        }
      }
    }
    return;
  }

  // ---- consumers ----
  if constexpr (kWG == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int gr = lane / 4, tg = lane % 4;
  // A y offset pair goes out as one 8-byte (4-byte for 16-bit) store where y is aligned for it.
  const bool pairs = kKW == 2 && ((unsigned long long)y & (2 * sizeof(T) - 1)) == 0;
  float acc[kMT][kBN / 2];
  unsigned frag[2][kKC / kKStep][kMT][4], small[2][kKC / kKStep][kMT][4];
  int c = 0, si = 0;
#pragma unroll 1
  for (int s = s0; s < kS; s += sstep, ++si) {
    MbarWait(bfull, si & 1);
    const int g = s / kSlices;
    const int col0 = (s % kSlices) * kBS + wg * kBN;  // this warpgroup's first column
#pragma unroll 1
    for (long long m = m0; m < kMAll; m += mstep, ++c) {
      const int slot = c % kST;
      MbarWait(bars + 8 * slot, (c / kST) & 1);
      const unsigned char* a = smem + kBRegion + slot * kASlot;
      const unsigned a_sh = sa + slot * kASlot;
      // Chunk ch's fragments go to register set ch % 2, which chunk ch - 2's wgmmas read: one
      // wgmma group in flight while the next chunk's fragments load.
#pragma unroll
      for (int ch = 0; ch < kChunks; ++ch) {
#pragma unroll
        for (int kk = 0; kk < kKC / kKStep; ++kk)
          LoadA(a, a_sh, ch * kKC + kk * kKStep, warp, lane, frag[ch & 1][kk], small[ch & 1][kk]);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        const unsigned b_lo = DescLo(sbase + (ch * kBS + wg * kBN) * kRowB);
#pragma unroll
        for (int kk = 0; kk < kKC / kKStep; ++kk)
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            const unsigned b_k = b_lo + kk * (kKStep * kEB >> 4);
            const int first = (ch == 0 && kk == 0) ? 0 : 1;
            if constexpr (kSplit == 3) {
              // The two small-by-big terms, then big by big (small by small is below fp32's
              // resolution).
              WgmmaRS(acc[mt], small[ch & 1][kk][mt], b_k, kDescHi, first);
              WgmmaRS(acc[mt], frag[ch & 1][kk][mt], b_k + (kBPart >> 4), kDescHi, 1);
              WgmmaRS(acc[mt], frag[ch & 1][kk][mt], b_k, kDescHi, 1);
            } else {
              WgmmaRS(acc[mt], frag[ch & 1][kk][mt], b_k, kDescHi, first);
            }
          }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        WgmmaWait<1>();
      }
      WgmmaWait<0>();
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) FenceRegs(acc[mt]);
      MbarArrive(bars + 8 * (kST + slot));  // the slot is free

      // Epilogue: rows (positions) of this thread, then its column pairs.
      const int n = kLatent ? 0 : (int)(m / kMTS);
      const long long p0 = kLatent ? m * kBM : m % kMTS * kBM;
      if constexpr (kRowOffsets) {
        // A thread's rows as int offsets in an output channel plane, its column pairs as
        // pointers: one wide multiply-add per store (the store loop is most of the consumers'
        // issue in these memory-bound layers).
        int row_off[kMT][2];
        bool row_ok[kMT][2];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int pos = (int)p0 + mt * 64 + 16 * warp + gr + 8 * h;
            const int d = pos / (kHin * kWin), hh = pos / kWin % kHin, ww = pos % kWin;
            row_ok[mt][h] = pos < kVol;
            row_off[mt][h] = (d * kKD * kHout + hh * kKH) * kWout + ww * kKW;
          }
        T* const y_group = y + ((idx_t)n * kCout + g * kCoutG) * (idx_t)kVolOut;
        // Whole tiles (all but a sample's last) with pair-aligned y store without a test; the
        // others test each store here rather than in the general path below, which keeps its
        // own 64-bit row offsets live beside these and made wide tiles spill (up to 192 bytes).
        const bool whole = pairs && p0 + kBM <= kVol;
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          const int col = col0 + 8 * j + 2 * tg;  // columns (co, td, th, tw = 0, 1)
          if (col >= kNCols) continue;
          const int co = col / kT, t = col % kT;
          T* col_y =
              y_group + (co * (int)kVolOut + (t / (kKH * kKW) * kHout + t / kKW % kKH) * kWout);
          // Opaque to the compiler, which would rebuild each store's address from y and a
          // 64-bit offset (four instructions instead of one).
          asm("mov.b64 %0, %0;" : "+l"(col_y));
          const float b = kBias ? Ld(bias[g * kCoutG + co]) : -0.f;  // x + -0 is x: no add
          if (whole) {
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
              for (int h = 0; h < 2; ++h)
                StorePair(col_y + row_off[mt][h], acc[mt][4 * j + 2 * h] + b,
                          acc[mt][4 * j + 2 * h + 1] + b);
          } else {
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                if (!row_ok[mt][h]) continue;
                const float v0 = acc[mt][4 * j + 2 * h] + b, v1 = acc[mt][4 * j + 2 * h + 1] + b;
                if (pairs) {
                  if constexpr (k16)
                    *reinterpret_cast<unsigned*>(col_y + row_off[mt][h]) = Pack(St(v0), St(v1));
                  else
                    *reinterpret_cast<float2*>(col_y + row_off[mt][h]) = make_float2(v0, v1);
                } else {
                  col_y[row_off[mt][h]] = St(v0);
                  col_y[row_off[mt][h] + 1] = St(v1);
                }
              }
          }
        }
        continue;
      }
      idx_t row_at[kMT][2];
      bool row_ok[kMT][2];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const long long pos = p0 + mt * 64 + 16 * warp + gr + 8 * h;
          if constexpr (kLatent) {  // pos is the sample; its outputs are the taps
            row_ok[mt][h] = pos < kN;
            row_at[mt][h] = (idx_t)pos * kCout * (idx_t)kVolOut;
            continue;
          }
          row_ok[mt][h] = pos < kVol;
          const long long d = pos / ((long long)kHin * kWin), hh = pos / kWin % kHin,
                          ww = pos % kWin;
          row_at[mt][h] = (idx_t)n * kCout * (idx_t)kVolOut +
                          (idx_t)((d * kKD * kHout + hh * kKH) * kWout + ww * kKW);
        }
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        const int col = col0 + 8 * j + 2 * tg;
        if (col >= kNCols) continue;
        const int co = col / kT, t = col % kT;
        const int td = t / (kKH * kKW), th = t / kKW % kKH, tw = t % kKW;
        const idx_t at =
            (idx_t)(g * kCoutG + co) * (idx_t)kVolOut + ((idx_t)td * kHout + th) * kWout + tw;
        const float b = kBias ? Ld(bias[g * kCoutG + co]) : 0.f;
        // The second column of the pair: tw + 1 of the same channel when kKW == 2.
        idx_t at1 = at + 1;
        float b1 = b;
        const bool ok1 = col + 1 < kNCols;
        if (kKW != 2 && ok1) {
          const int co1 = (col + 1) / kT, t1 = (col + 1) % kT;
          at1 = (idx_t)(g * kCoutG + co1) * (idx_t)kVolOut +
                ((idx_t)(t1 / (kKH * kKW)) * kHout + t1 / kKW % kKH) * kWout + t1 % kKW;
          b1 = kBias ? Ld(bias[g * kCoutG + co1]) : 0.f;
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (!row_ok[mt][h]) continue;
            const float v0 = acc[mt][4 * j + 2 * h] + b, v1 = acc[mt][4 * j + 2 * h + 1] + b1;
            T* dst = y + row_at[mt][h] + at;
            if (pairs) {
              if constexpr (k16) {
                *reinterpret_cast<unsigned*>(dst) = Pack(St(v0), St(v1));
              } else {
                *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
              }
            } else {
              *dst = St(v0);
              if (ok1) y[row_at[mt][h] + at1] = St(v1);
            }
          }
      }
    }
    MbarArrive(bempty);  // this warpgroup is done with the slice's B
  }
}
