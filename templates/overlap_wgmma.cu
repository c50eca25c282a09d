// overlap_wgmma.cu: strided layers with few output channels and overlapping taps (kernel longer
// than the stride) on Hopper warpgroup MMA (wgmma, sm_90a), TF32, 3xTF32, BF16 and FP16: every
// input position's tap products on the tensor cores, summed into outputs in shared memory.
//
// Specialised by a preamble (generator/families/overlap_wgmma.cpp) with the problem's constants
// and kWG (consumer warpgroups), kMinBlocks (blocks per SM), kBN (the wgmma's N: the group's output
// channels x taps, padded to 8), kKC (input channels per swizzled row of B), kST (slabs in flight),
// kKP (the group's input channels padded to kKC), kBHo / kBDo (output rows / planes of a block),
// kHs (input rows of a slab), kIhOff (the slab's first row less oh0 / kSH), kMTiles (m64 tiles of a
// slab), kLDA (elements per channel of a slab), kASlot (bytes of a slab slot), kPadL / kPadR (zero
// positions before and after each slab row of the products), kLDT (floats per column of the
// product), kR (output planes in the ring), kDlD/H/W (dilation) and kSplit (3: 3xTF32).
//
// The GEMM is input-stationary: M = a slab's input positions, K = the group's input channels,
// N = column co * kT + t (output channel, tap), so no product is a zero tap. Position (d, h, w)
// and tap (kd, kh, kw) land on output (d * kSD - kPD + kd * kDlD, ...): an output sums the taps
// of several positions, in shared memory. A block owns output planes [od0, od0 + kBDo) and rows
// [oh0, oh0 + kBHo) of one (sample, group), all of W; it walks the input planes that reach them
// in order. Per plane, a producer warpgroup copies the slab (the kHs input rows the block's
// output rows reach, all channels: one bulk copy per channel) into a ring of kST slots laid
// [channel][position]; the consumers run its m64 tiles (A from the slot through registers, B the
// packed weights), write the products to shared memory laid [column][position], and each thread
// adds its outputs' taps from there into a ring of kR output planes (fp32, in a fixed order:
// deterministic). A plane no later input plane reaches is complete: the thread that owns an
// output adds the bias and stores it, once, and clears its ring entry.

constexpr int kPlane = kHin * kWin, kPlaneOut = kHout * kWout;
constexpr int kThreads = 128 * (kWG + 1);
constexpr int kCT = 128 * kWG;  // consumer threads
// An output item: (co, qh, qw), the kSH x kSW outputs (oh0 + qh * kSH + rh, qw * kSW + rw).
constexpr int kQH = kBHo / kSH, kQW = (kWout + kSW - 1) / kSW;
constexpr int kItems = kCoutG * kQH * kQW;
constexpr int kItemsPerThread = (kItems + kCT - 1) / kCT;
constexpr int kTBytes = kNCols * kLDT * 4;
static_assert(kBS == kBN && kSlices == 1, "one B image of every column");
static_assert(kBN % 8 == 0 && kBN <= 256 && kBN >= kNCols, "wgmma N holds every column");
static_assert(kBHo % kSH == 0, "blocks start at an H phase 0");
static_assert(kWin * kEB % 16 == 0 && kLDA * kEB % 16 == 0, "copies of whole 16-byte units");
// The products of slab position (r, iw) are at r * kWinT + kPadL + iw of their column: the kPadL
// and kPadR positions around each row stay zero, as do the slab rows outside the input (never
// copied: zeroed once), so the sums take every tap without a test.
constexpr int kWinT = kPadL + kWin + kPadR;
static_assert(kMTiles * 64 <= kLDA, "a slab's rows fit its slot");
static_assert((kMTiles * 64 + kWin - 1) / kWin * kWinT <= kLDT && kLDT % 4 == 0,
              "every tile row has a product; columns of whole 16-byte units");

// floor(a / b) for b > 0 and any sign of a.
__device__ __forceinline__ int FloorDiv(int a, int b) {
  return a >= 0 ? a / b : -((b - 1 - a) / b);
}

// Named barriers of the consumer threads: 1, the slab's products are written; 2, before the
// next slab's first store, every thread is done reading them (after its first wgmmas, which
// need not wait for the slowest sums).
__device__ __forceinline__ void ConsumerSync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kCT) : "memory");
}

// x: the input; w: the packed B images.
extern "C" __global__ void __launch_bounds__(kThreads, kMinBlocks)
    KERNEL_NAME(const T* __restrict__ x, const uint4* __restrict__ w, const T* __restrict__ bias,
                T* __restrict__ y) {
  extern __shared__ unsigned char smem_raw[];
  const unsigned raw = (unsigned)__cvta_generic_to_shared(smem_raw);
  unsigned char* smem = smem_raw + ((1024 - (raw & 1023)) & 1023);
  const unsigned sbase = (unsigned)__cvta_generic_to_shared(smem);
  const unsigned sa = sbase + kBRegion;                                          // slab slots
  float* const prod = reinterpret_cast<float*>(smem + kBRegion + kST * kASlot);  // [col][pos]
  // full[kST], empty[kST], B full
  const unsigned bars = sa + kST * kASlot + kTBytes;
  const unsigned bfull = bars + 16 * kST;

  // This block's (sample, group, output planes, output rows).
  constexpr int kHTiles = (kHout + kBHo - 1) / kBHo, kDTiles = (kDout + kBDo - 1) / kBDo;
  int u = blockIdx.x;
  const int ht = u % kHTiles;
  u /= kHTiles;
  const int dt = u % kDTiles;
  u /= kDTiles;
  const int g = u % kG, n = u / kG;
  const int oh0 = ht * kBHo, od0 = dt * kBDo, od_end = min(od0 + kBDo, kDout);
  const int ih_lo = oh0 / kSH + kIhOff;  // the slab's first input row (may be outside)
  const int d_lo = max(0, -FloorDiv(-(od0 + kPD - (kKD - 1) * kDlD), kSD));
  const int d_hi = min(kDin - 1, FloorDiv(od_end - 1 + kPD, kSD));

  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), wtid = tid % 128;
  const int warp = wtid / 32, lane = tid % 32;
  // Zeros, once: the products (their pad positions are never written), the padding channels of
  // every slot and the slab rows outside the input (never copied).
  const int r_lo = max(ih_lo, 0) - ih_lo, r_hi = min(ih_lo + kHs, kHin) - ih_lo;  // copied rows
  for (int e = tid; e < kNCols * kLDT / 4; e += kThreads)
    reinterpret_cast<float4*>(prod)[e] = make_float4(0.f, 0.f, 0.f, 0.f);
  constexpr int kRowUnits = kWin * kEB / 16;  // 16-byte units of a slab row
  for (int e = tid; e < kST * kKP * kHs; e += kThreads) {
    const int r = e % kHs, ci = e / kHs % kKP, slot = e / (kHs * kKP);
    if (ci < kCinG && r >= r_lo && r < r_hi) continue;
    uint4* row =
        reinterpret_cast<uint4*>(smem + kBRegion + slot * kASlot + (ci * kLDA + r * kWin) * kEB);
    for (int u = 0; u < kRowUnits; ++u) row[u] = make_uint4(0, 0, 0, 0);
  }
  if (tid == 0) {
    for (int i = 0; i < kST; ++i) {
      MbarInit(bars + 8 * i, 4);  // each producer warp announces its copies
      MbarInit(bars + 8 * (kST + i), kCT);
    }
    MbarInit(bfull, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // A programmatic dependent of the weight packing (PlaneWgmmaPlan): shared memory is set up;
  // global memory only after the packing's stores.
  WaitForPreviousKernel();

  if (wg == kWG) {
    // ---- producer: the warpgroup's four warps copy the slabs, channel ci by warp ci % 4 ----
    if constexpr (kWG == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (warp == 0 && lane == 0) {
      MbarArriveExpect(bfull, kBBytes);
      BulkCopy(sbase, w + (long long)g * (kBBytes / 16), kBBytes, bfull);
    }
    const unsigned bytes = r_hi > r_lo ? (unsigned)((r_hi - r_lo) * kWin * kEB) : 0u;
    const unsigned dst0 = sa + (unsigned)(r_lo * kWin * kEB);
    int c = 0;
#pragma unroll 1
    for (int d = d_lo; d <= d_hi; ++d, ++c) {
      const int slot = c % kST;
      MbarWait(bars + 8 * (kST + slot), ((c / kST) & 1) ^ 1);
      if (lane == 0) MbarArriveExpect(bars + 8 * slot, bytes * WarpShare(kCinG, warp));
      __syncwarp();
      if (bytes == 0) continue;
      const T* src =
          x + (((long long)n * kCin + g * kCinG) * kDin + d) * kPlane + (ih_lo + r_lo) * kWin;
      for (int ci = warp + 4 * lane; ci < kCinG; ci += 128)
        BulkCopy(dst0 + slot * kASlot + ci * kLDA * kEB, src + (long long)ci * kDin * kPlane, bytes,
                 bars + 8 * slot);
    }
    return;
  }

  // ---- consumers ----
  if constexpr (kWG == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int gr = lane / 4, tg = lane % 4;
  const int ctid = wg * 128 + wtid;
  // This thread's items; ring[i][j] holds output plane base + j of item i, where base = d * kSD
  // - kPD for the current input plane d: its tap kd lands in plane j = kd * kDlD (static), and
  // after each plane the ring shifts down by kSD (the planes below are complete).
  int item_qw[kItemsPerThread], item_qh[kItemsPerThread], item_co[kItemsPerThread];
  bool item_ok[kItemsPerThread];
#pragma unroll
  for (int i = 0; i < kItemsPerThread; ++i) {
    const int item = ctid + i * kCT;
    item_ok[i] = item < kItems;
    item_qw[i] = item % kQW, item_qh[i] = item / kQW % kQH, item_co[i] = item / (kQW * kQH);
  }
  float ring[kItemsPerThread][kR][kSH][kSW] = {};
  // Stores output plane od of this thread's items: ring plane j plus the bias (j < 0: the bias
  // alone, a plane no input reaches).
  auto store_plane = [&](int od, int j) {
    if (od < od0 || od >= od_end) return;
#pragma unroll
    for (int i = 0; i < kItemsPerThread; ++i) {
      if (!item_ok[i]) continue;
      const int co = item_co[i];
      const float b = kBias ? Ld(bias[g * kCoutG + co]) : 0.f;
      T* const yp = y + ((idx_t)(n * kCout + g * kCoutG + co) * kDout + od) * (idx_t)kPlaneOut;
#pragma unroll
      for (int rh = 0; rh < kSH; ++rh) {
        const int oh = oh0 + item_qh[i] * kSH + rh;
#pragma unroll
        for (int rw = 0; rw < kSW; ++rw) {
          const int ow = item_qw[i] * kSW + rw;
          float v = b;
#pragma unroll
          for (int jj = 0; jj < kR; ++jj)
            if (jj == j) v += ring[i][jj][rh][rw];
          if (oh < kHout && ow < kWout) yp[oh * kWout + ow] = St(v);
        }
      }
    }
  };

  MbarWait(bfull, 0);
  // Planes below the first input plane's reach have no taps: the bias.
  for (int od = od0; od < min(d_lo * kSD - kPD, od_end); ++od) store_plane(od, -1);
  if (d_lo > d_hi)
    for (int od = max(od0, d_lo * kSD - kPD); od < od_end; ++od) store_plane(od, -1);
  int c = 0;
  unsigned frag[kKC / kKStep][4], small[kKC / kKStep][4];
  constexpr int kMyTiles = (kMTiles + kWG - 1) / kWG;
#pragma unroll 1
  for (int d = d_lo; d <= d_hi; ++d, ++c) {
    const int slot = c % kST;
    MbarWait(bars + 8 * slot, (c / kST) & 1);
    const unsigned char* a = smem + kBRegion + slot * kASlot;
    const unsigned a_sh = sa + slot * kASlot;
    // The slab's m64 tiles, warpgroup wg taking tiles wg, wg + kWG, ...; each tile's products
    // go to shared memory once its wgmmas are done (storing tile i - 1's under tile i's wgmmas
    // made ptxas serialize every wgmma, and ran 6-10% slower).
    float acc[kBN / 2];
    auto store_products = [&](int i) {
      const int r0 = (wg + i * kWG) * 64 + 16 * warp;
      // Rows r0 + gr (+ 8), columns 8j + 2tg (+ 1): a column's stores from a warp fall in 32
      // banks (kLDT % 32 == 4) but where a row of the slab ends.
      int at[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int pos = r0 + gr + 8 * h;
        at[h] = pos / kWin * kWinT + kPadL + pos % kWin;
      }
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * j + 2 * tg + e;
          if (col >= kNCols) continue;
#pragma unroll
          for (int h = 0; h < 2; ++h) prod[col * kLDT + at[h]] = acc[4 * j + 2 * h + e];
        }
    };
#pragma unroll
    for (int i = 0; i < kMyTiles; ++i) {
      const int mt = wg + i * kWG;
      if (mt < kMTiles) {
        const int r0 = mt * 64 + 16 * warp;
#pragma unroll
        for (int ch = 0; ch < kChunks; ++ch) {
#pragma unroll
          for (int kk = 0; kk < kKC / kKStep; ++kk)
            LoadPlaneA(a, a_sh, ch * kKC + kk * kKStep, r0, lane, frag[kk], small[kk]);
          asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
          const unsigned b_lo = DescLo(sbase + ch * kBN * kRowB);
#pragma unroll
          for (int kk = 0; kk < kKC / kKStep; ++kk) {
            const unsigned b_k = b_lo + kk * (kKStep * kEB >> 4);
            const int first = (ch == 0 && kk == 0) ? 0 : 1;
            if constexpr (kSplit == 3) {
              WgmmaRS(acc, small[kk], b_k, kDescHi, first);
              WgmmaRS(acc, frag[kk], b_k + (kBPart >> 4), kDescHi, 1);
              WgmmaRS(acc, frag[kk], b_k, kDescHi, 1);
            } else {
              WgmmaRS(acc, frag[kk], b_k, kDescHi, first);
            }
          }
          asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
          // The fragments are reused by the next chunk: its wgmmas must have read them.
          if (ch + 1 < kChunks) WgmmaWait<0>();
        }
        WgmmaWait<0>();
        FenceRegs(acc);
      }
      if (i == 0 && c > 0) ConsumerSync(2);  // the last slab's products are read
      if (mt < kMTiles) store_products(i);
    }
    MbarArrive(bars + 8 * (kST + slot));  // this thread's reads of the slot are done
    ConsumerSync(1);                      // the slab's products are in shared memory

    // Each item adds its taps from this input plane to the ring planes they reach.
#pragma unroll
    for (int i = 0; i < kItemsPerThread; ++i) {
      if (!item_ok[i]) continue;
      const int qw = item_qw[i], qh = item_qh[i];
      const float* const pc = prod + item_co[i] * kT * kLDT;
#pragma unroll
      for (int kd = 0; kd < kKD; ++kd)
#pragma unroll
        for (int rh = 0; rh < kSH; ++rh)
#pragma unroll
          for (int rw = 0; rw < kSW; ++rw) {
            float sum = 0.f;
#pragma unroll
            for (int kh = 0; kh < kKH; ++kh) {
              const int nh = rh + kPH - kh * kDlH;  // a multiple of kSH where the tap reaches
              if (((nh % kSH) + kSH) % kSH != 0) continue;
              const int r = qh + nh / kSH - kIhOff;  // the slab row
#pragma unroll
              for (int kw = 0; kw < kKW; ++kw) {
                const int nw = rw + kPW - kw * kDlW;
                if (((nw % kSW) + kSW) % kSW != 0) continue;
                sum += pc[((kd * kKH + kh) * kKW + kw) * kLDT + r * kWinT + kPadL + qw + nw / kSW];
              }
            }
            ring[i][kd * kDlD][rh][rw] += sum;
          }
    }
    // Planes base .. base + kSD - 1 are complete (after the last input plane, all of them);
    // then the ring moves down by kSD.
    const int base = d * kSD - kPD;
    const bool last = d == d_hi;
#pragma unroll
    for (int j = 0; j < kR; ++j)
      if (j < kSD || last) store_plane(base + j, j);
#pragma unroll
    for (int i = 0; i < kItemsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < kR; ++j)
#pragma unroll
        for (int rh = 0; rh < kSH; ++rh)
#pragma unroll
          for (int rw = 0; rw < kSW; ++rw)
            ring[i][j][rh][rw] = j + kSD < kR ? ring[i][j + kSD][rh][rw] : 0.f;
    if (last)  // planes past the last input plane's reach: the bias
      for (int od = max(od0, base + kR); od < od_end; ++od) store_plane(od, -1);
  }
}
