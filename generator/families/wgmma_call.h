// wgmma_call.h: what the Hopper GEMM families share: the wgmma.mma_async calls their preambles
// define and their tile rules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"

namespace convt3d::gen {

// The source of WgmmaSS(d, a_lo, a_hi, b_lo, b_hi, scale_d): one wgmma.mma_async m64n<bn>k<8|16>
// (TF32 for f32 tensors, else the tensor's 16-bit type) with A and B from shared-memory
// descriptors given as 32-bit halves and scale_d 0 (start the sum) or 1 (add to it).
std::string WgmmaFunction(DType dtype, int bn);
// The source of WgmmaRS(d, a, b_lo, b_hi, scale_d): the same with A from registers (a[4]: the
// thread's fragment of the m64 x k8 TF32 or m64 x k16 16-bit tile, as mma.sync's A) and B from a
// K-major shared-memory descriptor.
std::string WgmmaRegisterAFunction(DType dtype, int bn);

// The tile rules both Hopper GEMM families' fields share (Family::CheckFields): N a multiple of 8,
// at most 128 accumulators per thread, K rows of one swizzle atom (32, 64 or 128 bytes), and a
// split of 1, or 3 (3xTF32) for f32 tensors; the message names `family` and the JSON.
Status CheckWgmmaTile(const Config& c, std::string_view family);

// What the families reading the input in place through templates/plane_wgmma.cuh share
// (shuffle_wgmma, overlap_wgmma):
// - the modes they run: 16-bit tensors, or f32 in TF32 or 3xTF32, on a device with wgmma;
bool PlaneWgmmaMode(const Problem& p, const DeviceLimits& limits);
// - the input channels of one swizzled K row of B (kKC) worth offering for cin_g channels a
//   group: 128-byte rows, and 64- or 32-byte rows where they pad K less;
std::vector<int> PlaneWgmmaKRows(const Problem& p, int64_t cin_g);
// - the plan: the weights packed into w_bytes of B images, then `units` blocks of the main
//   kernel (persistent at blocks_per_sm > 0) as a programmatic dependent of the packing (the
//   kernel calls WaitForPreviousKernel), the input 16-byte aligned for its bulk copies.
LaunchPlan PlaneWgmmaPlan(const std::string& name, int64_t w_bytes, int64_t units, unsigned threads,
                          unsigned smem_bytes, int blocks_per_sm);

}  // namespace convt3d::gen
