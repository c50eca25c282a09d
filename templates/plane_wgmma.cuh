// plane_wgmma.cuh: what the wgmma templates that read the input in place as [channel][position]
// slots share (shuffle_wgmma.cu, overlap_wgmma.cu): the B image of the weights (columns co * kT
// + t, swizzled K rows) and its packing kernel, the A fragments of a slot, and the producer
// warps' share of the copies.
//
// Needs from the preamble: kKC (input channels per swizzled row of B), kKP (the group's input
// channels padded to kKC), kBS (columns of one B image), kSlices (images per group), kSplit
// (3: 3xTF32) and kLDA (elements per channel of a slot).

constexpr bool k16 = CONVT3D_ELEM >= 2;
constexpr int kEB = k16 ? 2 : 4;      // bytes per operand element
constexpr int kRowB = kKC * kEB;      // bytes of one B row (column) per K chunk
constexpr int kKStep = k16 ? 16 : 8;  // K of one wgmma
constexpr int kSwz = kRowB / 16 - 1;
constexpr int kLayout = kRowB == 128 ? 1 : kRowB == 64 ? 2 : 3;  // descriptor swizzle mode
constexpr int kChunks = kKP / kKC;
constexpr int kT = kKD * kKH * kKW;
constexpr int kNCols = kCoutG * kT;
constexpr int kBPart = kChunks * kBS * kRowB;  // one B image (3xTF32: big, then small)
constexpr int kParts = kSplit == 3 ? 2 : 1;
constexpr int kBBytes = kBPart * kParts;
constexpr int kBRegion = (kBBytes + 1023) / 1024 * 1024;
static_assert(kRowB == 32 || kRowB == 64 || kRowB == 128, "a B row is one swizzle atom");
static_assert(kKC % kKStep == 0 && kKP % kKC == 0, "whole wgmma K steps per chunk");
static_assert(kSplit == 1 || (kSplit == 3 && !k16), "3xTF32 for f32 tensors");

__device__ __forceinline__ int Swz(int b) { return b ^ (((b >> 7) & kSwz) << 4); }
constexpr unsigned kDescHi = (8 * kRowB >> 4) | ((unsigned)kLayout << 30);

// w [C_in][C_out/G][kD][kH][kW] -> per (group, slice) the image of B in shared memory: per K
// chunk, kBS rows (columns co * kT + t of the slice) of kRowB bytes (kKC input channels),
// swizzled, zero past the group's channels and columns; 3xTF32: the big parts' image, then the
// small parts'.
extern "C" __global__ void __launch_bounds__(256)
    PREP_KERNEL_NAME(const T* __restrict__ w, unsigned* __restrict__ ws) {
  constexpr int kWords = kBPart / 4;
  const long long words = (long long)kG * kSlices * kParts * kWords;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < words;
       i += (long long)gridDim.x * blockDim.x) {
    const int b = Swz((int)(i % kWords) * 4);  // logical byte of this physical word
    const int part = (int)(i / kWords % kParts);
    const int s = (int)(i / kWords / kParts), g = s / kSlices, sl = s % kSlices;
    const int chunk = b / (kBS * kRowB), row = b / kRowB % kBS;
    const int ci = chunk * kKC + (b % kRowB) / kEB, col = sl * kBS + row;
    const int co = col / kT, t = col % kT;
    auto at = [&](int c) -> T {
      if (c >= kCinG || col >= kNCols) return T(0);
      return w[((long long)(g * kCinG + c) * kCoutG + co) * kT + t];
    };
    if constexpr (k16) {
      ws[i] = Pack(at(ci), at(ci + 1));
    } else {
      const float v = Ld(at(ci));
      const unsigned big = Tf32Big(v);  // rounded, low bits cleared: v - big is exact
      ws[i] = part == 0 ? big : Tf32(v - __uint_as_float(big));
    }
  }
}

// This thread's A fragment of K step k0 for the m64 tile whose warp rows start at r0, from slot
// `a` ([channel][position], kLDA elements per channel): TF32 (row g, k t), (g + 8, t), (g, t +
// 4), (g + 8, t + 4) rounded (3xTF32: big parts in frag, small parts in small); 16-bit through
// ldmatrix.trans (each register a pair of consecutive channels).
__device__ __forceinline__ void LoadPlaneA(const unsigned char* a, unsigned a_sh, int k0, int r0,
                                           int lane, unsigned (&frag)[4], unsigned (&small)[4]) {
  if constexpr (k16) {
    const int k = k0 + (lane & 7) + 8 * (lane >> 4), r = r0 + 8 * ((lane >> 3) & 1);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(frag[0]), "=r"(frag[1]), "=r"(frag[2]), "=r"(frag[3])
                 : "r"(a_sh + (unsigned)(k * kLDA + r) * 2));
  } else {
    const float* af = reinterpret_cast<const float*>(a);
    const int g = lane / 4, t = lane % 4;
    const float v[4] = {af[(k0 + t) * kLDA + r0 + g], af[(k0 + t) * kLDA + r0 + g + 8],
                        af[(k0 + t + 4) * kLDA + r0 + g], af[(k0 + t + 4) * kLDA + r0 + g + 8]};
#pragma unroll
    for (int e = 0; e < 4; ++e) Split<kSplit>(v[e], frag[e], small[e]);
  }
}

// How many of `items` items the producer's warp `warp` copies: those i with i % 4 == warp.
__device__ __forceinline__ int WarpShare(int items, int warp) {
  return items > warp ? (items - warp + 3) / 4 : 0;
}
