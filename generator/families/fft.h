// fft.h: the fft family's tiling, candidates and preamble (generator-internal).
//
// Stride-1 problems whose H x W kernel is large (5x5, 5x7) cost a direct or GEMM kernel kH*kW
// products per output; FFT tiling pays per output about (tH*(tW/2+1)) / (lH*lW) complex
// products instead, lH = tH - eH + 1 outputs per tile of tH points (overlap-save), eH the
// dilated kernel extent. D taps stay direct. Four kernels (templates/fft_tiling.cu): weight
// spectra in f64 (prep), input tiles to spectra (prepx), one complex GEMM per frequency over (D
// tap, input channel) (main), spectra back to output tiles (post). Accuracy:
// bench/sim/fft_tiling_error.py, ~2e-7 against f64 for 3x5x5 and 3x5x7 kernels summed over 32
// channels.
#pragma once

#include <ostream>
#include <vector>

#include "generator/candidates.h"

namespace convt3d::gen {

// Derived sizes of an fft candidate, shared by pruning, geometry and source generation.
// Workspace (float2 units): weight spectra G [f][g][kd][ci][co] (tensor-core GEMMs: the real
// B', templates/fft_tiling.cu), input spectra X [f][c_in][mx],
// output spectra Y [f][c_out][m]; X and Y hold one chunk of `nc` samples, m = (n, d_out, tile),
// mx = (n, d_in, tile).
struct FftShape {
  bool fits = false;
  int t[2] = {0, 0}, e[2] = {0, 0}, l[2] = {0, 0};  // transform, kernel extent, outputs (H, W)
  int fw = 0, freqs = 0;                            // tW/2 + 1 and tH * fw
  int64_t tiles[2] = {0, 0}, tp = 0;                // tiles along H, W and per plane
  int tb[2] = {1, 1};                               // tiles per transform block along H, W
  int64_t tblocks = 0;                              // transform blocks per plane
  int rh = 0, rws = 0;                              // forward region rows, row stride (floats)
  int tss_fwd = 0, tss_inv = 0, ows = 0;            // per-tile spectrum strides, output stride
  int fwd_smem = 0, inv_smem = 0, gemm_smem = 0;    // dynamic shared memory (0: static)
  int bk =
      16;  // complex K per GEMM stage: 16 (tensor cores: two of their k8 steps more), FFMA 8-16
  int64_t nc = 1, chunks = 1, m = 0, mx = 0, k = 0;  // samples per chunk, GEMM rows, K
  int64_t dc = 1, xd = 1, dchunks = 1;  // output and input planes per chunk sample; D chunks
  int64_t mtiles = 0, ntiles = 0;
  int64_t g_elems = 0, x_elems = 0, y_elems = 0;  // float2 counts
  int64_t fwd_blocks = 0, inv_blocks = 0, gemm_blocks = 0, prep_elems = 0;
};
FftShape FftShapeOf(const Problem& p, const Config& c);
// Whether the family applies: f32 (FFMA GEMMs in strict fp32 and fp32x3, tensor-core ones in
// tf32 and fp32x3), stride 1, an H x W kernel of at least 9 taps whose dilated extents fit a
// 32-point transform.
bool FftApplies(const Problem& p);
// fft candidates for p (empty where the family does not apply), best-ranked first.
std::vector<Config> FftCandidates(const Problem& p, const DeviceLimits& limits);
// The family's preamble for candidate c (NotApplicable where it does not fit p): tiling
// constants, the FFTs as straight-line functions with literal twiddles, and the f64 twiddle
// tables of the weight transform.
Status FftPreamble(const Problem& p, const Config& c, std::ostream& os);

}  // namespace convt3d::gen
