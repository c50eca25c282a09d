// candidates.h: the kernel candidates for a problem: plain data, stable names, pruning, heuristic.
//
// A candidate is a family plus its tuning parameters. Its name is derived from that data only,
// so a cache row, a log line and a bench row name the same kernel. The generator is pure: it
// needs no GPU, driver, NVRTC or SQLite.
#pragma once

#include <string>
#include <vector>

#include "convt3d/convt3d.h"

namespace convt3d::gen {

// Bumped whenever candidates or their launch geometry change: it is part of every cache key.
constexpr int kGeneratorVersion = 19;

enum class Family {
  kDirectPhase,  // templates/direct_phase.cu: direct gather, any dtype, any problem
  kIgemmSimt,    // templates/igemm_simt.cu: FFMA implicit GEMM with a shared-memory halo, f32
  kIgemmMma,     // templates/igemm_mma.cu: mma.sync implicit GEMM (tf32, fp32x3, bf16, f16)
  kIgemmWgmma,   // templates/igemm_wgmma.cu: wgmma (sm_90a) implicit GEMM, stride 1 (same types)
  kDirectTile,   // templates/direct_tile.cu: direct FFMA, staged halo and weights, f32/bf16/f16
  kWinograd,     // templates/winograd.cu: fused Winograd F(2,3) per dimension, f32, stride 1
  kFft,          // templates/fft_tiling.cu: FFT tiling over H x W, complex GEMMs, f32, stride 1
};

struct Config {
  Family family = Family::kDirectPhase;
  DType dtype = DType::kF32;
  // direct_phase (direct_tile: bx, by, bz threads along W, H, D; cob; ck)
  int bx = 64, by = 2;  // threads per block along q_w and along output rows (h)
  int opt = 1;          // outputs per thread along W (same W phase, bx apart)
  int cob = 1;          // output channels per thread
  // direct_tile: threads along D, and consecutive W outputs per thread (a multiple of the W
  // stride, so each thread covers every W phase)
  int bz = 1, vw = 4;
  // igemm_simt
  int bqd = 1, bqh = 4, bqw = 32;  // q-tile of one phase per block
  int tm = 4, tn = 8;              // consecutive W outputs x output channels per thread
  int nt = 1;                      // channel groups per block (block N = tn * nt)
  int ck = 1;                      // input channels per shared-memory stage
  // igemm_mma (also bqd, bqh, bqw, ck)
  int wm = 2, wn = 2;   // warps along M (outputs) and N (channels)
  int mt = 4, nt8 = 4;  // m16 and n8 mma fragments per warp
  int split = 1;        // 1: TF32 operands, 3: 3xTF32 (big/small split); 1 for 16-bit types
  // igemm_wgmma (also bqd, bqh, bqw, mt, ck, split): bqh and bqw are multiples of 8; the block
  // has wg warpgroups of mt m64 tiles (8 W x 8 H outputs each) and bn output channels (wgmma N)
  int wg = 1, bn = 8;
  int sr = 1;   // igemm_wgmma: tap rows (kH taps) per pipeline step: 1, or all kH ("_r<kH>")
  int pa = 0;   // 1: a block computes every stride phase of its q-box in turn ("_pa"); 2: and
                // stages each output row in shared memory for whole-row stores ("_pa_st");
                // direct_tile: 1 = every (D, H) phase from one shared halo ("_pa")
  int mma = 0;  // direct_tile: 0 FFMA; 1 mma.sync from the same staged tiles ("_tf32" with
                // split 1, "_3xtf32" with split 3); all-phases blocks, f32, tensor-core modes
  // winograd reuses bqd, bqh, bqw (output tiles of 2x2x2 per block), bn (channels per block), tm,
  // tn (tiles x channels per thread at each transform point) and ck (input channels per stage).
  // 1: the candidate runs the stride-1 sub-problem of a stride == dilation problem and writes
  // its output lattice, after a fill kernel wrote bias (or zero) everywhere else
  // (generator/lattice.h); its name is "lattice_" + the sub-problem kernel's. igemm_wgmma,
  // winograd and the plain direct_tile tiles take part. 2: the candidate runs the phase-channel
  // ("subpixel_") stride-1 form of a strided problem (igemm_wgmma only).
  int lattice = 0;
  // fft: transform points along H and W (8, 16, 32), and the GEMM's block rows; bn, tm, tn are
  // its block channels and a thread's rows x channels (complex elements).
  int ft_h = 16, ft_w = 16, bm = 128;
  int fc = 0;  // fft: samples per chunk ("_c<fc>"); 0: as many as 1 GiB of spectra holds
  // fft FFMA GEMMs: 1 = Gauss's three real products per complex one ("_3m"), 0 = four
  int gauss = 0;
  int fd = 0;  // fft: output planes per chunk of one sample ("_d<fd>"); 0: all

  // e.g. "direct_phase_f32_x64y2_o2_c4", "igemm_simt_f32_q1x4x32_t4x8_n8_k2",
  // "igemm_mma_3xtf32_q1x4x32_w2x2_m4n4_k8", "igemm_mma_bf16_q1x4x32_w2x2_m4n4_k16",
  // "igemm_wgmma_tf32_q1x16x8_g2_m1_n64_k8", "igemm_wgmma_bf16_q2x8x8_g1_m2_n24_k16_r3",
  // "direct_tile_f32_x8y8z4_v8_c8_k4", "direct_tile_f32_x8y4z4_v8_c8_k4_pa_3xtf32",
  // "winograd_f32_q2x2x2_n48_t4x6_k8", "fft_f32_t16x16_m128n64_r8x4"; also the
  // kernel's symbol (a family with a weight re-layout kernel adds PrepSymbol())
  std::string Name() const;
  std::string ToJson() const;
  static StatusOr<Config> FromJson(const std::string& json);
  // The weight re-layout kernel's symbol ("<Name()>_prep"), or "" for families without one.
  std::string PrepSymbol() const;
  // The input re-layout kernel's symbol ("<Name()>_prepx": 16-bit igemm_mma, igemm_wgmma), or "".
  std::string PrepXSymbol() const;
  // fft: the inverse transform's symbol ("<Name()>_post"), else "".
  std::string PostSymbol() const;
  // The kernel a lattice candidate runs on its sub-problem: this candidate with lattice = 0.
  Config Plain() const {
    Config c = *this;
    c.lattice = 0;
    return c;
  }
  // The lattice fill kernel's symbol ("<Name()>_fill"), or "" but for kind-1 lattice candidates.
  std::string FillSymbol() const;
  bool operator==(const Config& o) const { return Name() == o.Name(); }
};

// The device limits that prune candidates; defaults are sm_90's, so compile-only work prunes
// exactly as a tuning run on an H100/H200 would.
struct DeviceLimits {
  int max_threads_per_block = 1024;
  int max_regs_per_block = 65536;
  int max_regs_per_thread = 255;
  int max_smem_per_block = 227 * 1024;
  bool wgmma = true;  // an sm_90 target: the wgmma family applies (compiled for sm_90a)
};

// Whether the wgmma family can serve a device of `arch` ("sm_90": yes; wgmma is Hopper-only).
bool HasWgmma(const std::string& arch);
// The architecture to compile c for, given the device's ("sm_90"): wgmma needs the
// arch-specific sm_90a target, which loads only on sm_90 devices.
std::string CompileArch(const Config& c, const std::string& arch);

struct LaunchGeometry {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned smem_bytes = 0;
  // Families with a weight re-layout: bytes of the per-plan workspace it fills, and the prep
  // kernel's launch (prep(w, workspace) runs before main(x, workspace, bias, y)). 0: none.
  size_t workspace_bytes = 0;
  unsigned prep_grid[3] = {1, 1, 1};
  unsigned prep_block[3] = {256, 1, 1};
  // 16-bit igemm_mma and igemm_wgmma also re-lay the input (prepx(x, workspace + x_offset_bytes))
  // and reads it from there; 0 bytes: no input re-layout.
  size_t x_offset_bytes = 0, x_bytes = 0;
  unsigned prepx_grid[3] = {1, 1, 1};
  // Lattice candidates: fill(bias, y) runs first (256 threads, grid-stride over 16-byte stores).
  unsigned fill_grid[3] = {0, 0, 0};
  // fft: prep(w, workspace) once, then per chunk of samples prepx(x, workspace, chunk) (prepx
  // grid, prepx_smem), main(workspace, chunk) and post(workspace, bias, y, chunk) (post grid,
  // post_smem), 256 threads each.
  int chunks = 0;
  unsigned post_grid[3] = {1, 1, 1};
  unsigned prepx_smem = 0, post_smem = 0;
};

// Every candidate that applies to `p` and fits `limits`, in a stable order, most promising
// first (so a max_candidates cut keeps the likely winners). REQUIRES: Validate(p).ok().
std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits = {});
// Whether c's family can run a sub-problem of kind `kind` (Config::lattice: 1 or 2).
bool LatticeFamily(const Config& c, int kind);
// The untuned choice for the never-tune policy; always one of Candidates(p, limits).
Config HeuristicPick(const Problem& p, const DeviceLimits& limits = {});
LaunchGeometry Geometry(const Problem& p, const Config& c);

// Derived sizes of an igemm_simt candidate, shared by pruning, geometry and source generation.
struct IgemmShape {
  int jmax[3] = {1, 1, 1}, dred[3] = {1, 1, 1};
  int64_t qmax[3] = {1, 1, 1};
  int lpad = 0;  // W halo padding: (jmax_w-1)*d'_w rounded up to 4 for 16-byte loads
  int smem_bytes = 0, threads = 0;
  // igemm_mma: padded smem strides of a halo channel (elements) and of a weight row (words), the
  // halo row length, weight rows per chunk, words of one step's weight tile, and the per-phase
  // first word of the re-laid weights (indexed (rd*sH + rh)*sW + rw) and their total.
  int plane = 0, wci = 0, hws = 0, kp = 0, wtile = 0;
  int vec = 1;  // input positions per halo copy (16 bytes where the input width allows)
  // igemm_wgmma: plane and wtile count 16-byte units, hws is the halo's W extent, kp the units
  // per chunk, and cg the units per position of a group's re-laid input.
  int cg = 0;
  // igemm_mma halo extents in D and H. With `share` (all-phases blocks whose whole channel group
  // is one chunk) the block loads one halo, the union of every phase's window, and each phase
  // reads it at an offset; u0[i] is that union's first position relative to the tile's first q
  // (D, H: the lowest input any phase reads; W: the lowest q_lo + c, the row then starts lpad
  // earlier as for one phase).
  int halo_d = 0, halo_h = 0;
  bool share = false;
  int64_t u0[3] = {0, 0, 0};
  int64_t chunks = 1;
  std::vector<int64_t> woff;
  int64_t weight_words = 0;  // re-laid weights, at word 0 of the workspace
  int64_t x_words = 0;       // 16-bit: re-laid input (channel pairs), after the weights
  int64_t workspace_words = 0;
  int bn = 0;  // channels per block
  int64_t tiles[3] = {1, 1, 1}, co_tiles = 1, blocks = 1;
};
IgemmShape IgemmShapeOf(const Problem& p, const Config& c);

// Derived sizes of a direct_tile candidate (templates/direct_tile.cu), shared by pruning,
// geometry and source generation. W: a thread's kV outputs start at a multiple of the stride, so
// output k and tap kw meet iff (k + pad - kw*dil) % stride == 0, reading the run's first input
// plus (k + pad - kw*dil) / stride; off_lo/off_hi bound that offset, win_n = off_hi - off_lo + 1.
struct TileShape {
  bool fits = false;  // false: some extent is too large for any shared memory
  int jmax[3] = {1, 1, 1}, dred[3] = {1, 1, 1};
  int halo_d = 0, halo_h = 0, hw = 0, hws = 0;  // halo extents, W row stride (multiple of 4)
  int off_lo = 0, off_hi = 0, win_n = 0;
  int smem_bytes = 0, threads = 0;
  int64_t k_chunk = 0;            // products one output sums within a chunk (ck * taps, at most)
  int64_t u0[2] = {0, 0};         // all-phases blocks: the halo's first D, H row from the tile's q
  int64_t needed[3] = {1, 1, 1};  // rows of the longest D and H phase, and the output width
  int64_t tiles[3] = {1, 1, 1}, co_blocks = 1, blocks = 1;
};
TileShape TileShapeOf(const Problem& p, const Config& c);

// Derived sizes of a winograd candidate (templates/winograd.cu): F(2, k) per dimension with
// alpha = k + 1 transform points (k <= 3), p points in all; the block's raw input region, its
// shared-memory stage (raw input, transformed input, transformed
// weights; strides padded for conflict-free vector loads) and the epilogue's point sums, which
// reuse the stage's memory.
struct WinoShape {
  bool fits = false;  // false: the family does not apply, or the candidate is inconsistent
  int alpha[3] = {1, 1, 1}, points = 0, tiles_per_block = 0, threads = 0;
  int region[3] = {0, 0, 0}, region_ws = 0;  // raw input extents, W row stride
  int vs = 0, us = 0, ms = 0;                // per-point strides of V, U and the epilogue sums
  int cpad = 0;                              // input channels rounded up to whole stages
  int smem_bytes = 0;
  int64_t tiles[3] = {1, 1, 1}, blocks_per_dim[3] = {1, 1, 1}, co_blocks = 1, blocks = 1;
  int64_t workspace_words = 0;  // transformed weights, [g][co block][cpad][point][bn]
};
WinoShape WinoShapeOf(const Problem& p, const Config& c);
// Whether the winograd family applies to p at all (f32, stride 1, dilation 1, kernel <= 3, at
// least 8 taps, and the strict-grade contracts: its error is ~3e-7 on L1-61's shape).
bool WinogradApplies(const Problem& p);

}  // namespace convt3d::gen
