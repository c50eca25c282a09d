// candidates.h: the kernel candidates for a problem: plain data, stable names, pruning, heuristic.
//
// A candidate is a family plus its tuning parameters. Its name is derived from that data only,
// so a cache row, a log line and a bench row name the same kernel. The generator is pure: it
// needs no GPU, driver, NVRTC or SQLite.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/tiled_map.h"
#include "convt3d/convt3d.h"

namespace convt3d::gen {

// Bumped whenever candidates or their launch geometry change: it is part of every cache key.
constexpr int kGeneratorVersion = 33;

// A candidate: its family (the registered module's name, generator/registry.cpp) and the values
// of that family's parameters (its field table, generator/families/<family>.cpp, says which
// members it uses; the others keep their defaults).
struct Config {
  std::string_view family = "direct_phase";
  DType dtype = DType::kF32;
  // direct_phase: threads along W and output rows, outputs per thread along W, channels per thread
  int bx = 64, by = 2, opt = 1, cob = 1;
  // direct_tile (also bx, by, cob, ck): threads along D, consecutive W outputs per thread (a
  // multiple of the W stride, so each thread covers every W phase)
  int bz = 1, vw = 4;
  // the igemm families: the output box of one block (D x H x W), input channels per stage
  int bqd = 1, bqh = 4, bqw = 32, ck = 1;
  // igemm_simt: consecutive W outputs x output channels per thread, channel groups per block
  int tm = 4, tn = 8, nt = 1;
  // igemm_mma: warps along M (outputs) and N (channels), m16 and n8 fragments per warp
  int wm = 2, wn = 2, mt = 4, nt8 = 4;
  // operand split of the tensor-core kernels: 1 TF32 (or 16-bit), 3 3xTF32 (OperandSplit),
  // 4 3xFP16 (gemm_wgmma: scaled fp16 big and small parts)
  int split = 1;
  // igemm_wgmma (also mt: m64 tiles per warpgroup): warpgroups, output channels (wgmma N), tap
  // rows per pipeline step (1, or all kH)
  int wg = 1, bn = 8, sr = 1;
  // gemm_wgmma (also wg, mt, bn, ck): pipeline stages; ws 1 = a producer warpgroup of its own,
  // 2 = one that copies by tensor map; pp 1 = the consumer warpgroups take whole tiles in turn;
  // cm 1 = the output channels are the wgmma's M and 64 mt positions its N; narrow_gemm (also
  // st): ws 1 = one thread copies each stage by tensor map
  int st = 4, ws = 0, pp = 0, cm = 0;
  // gemm_wgmma: > 0 = a stage's A is the tap's window of one halo box per channel chunk (the
  // chunk's input read once for all of a phase's taps), in this many slots
  int hl = 0;
  // gemm_simt: 1 = consecutive tiles are the stride phases of one row tile (its input rows stay
  // in L2), 0 = each phase's row tiles in turn, phases with the most taps first
  int po = 0;
  // gemm_simt: each tile's K (its stages) split into this many parts, summed by a second kernel
  int sk = 1;
  // 1: a block computes every stride phase of its box in turn; igemm_mma 2: and stages each
  // output row in shared memory for whole-row stores
  int pa = 0;
  // direct_tile, fft: 1 = tensor-core (mma.sync) GEMMs instead of FFMA
  int mma = 0;
  // direct_tile: 1 = weights packed per weight version, input channel chunks double-buffered by
  // cp.async
  int cp = 0;
  // fft: transform points along H and W, GEMM block rows (bn, tm, tn: block channels and a
  // thread's rows x channels), samples per chunk (0: as many as 1 GiB of spectra holds), Gauss's
  // three real products per complex one, output planes per chunk of one sample (0: all)
  int ft_h = 16, ft_w = 16, bm = 128, fc = 0, gauss = 0, fd = 0;
  // 1: runs the stride-1 sub-problem of a stride == dilation problem and writes its output
  // lattice ("lattice_"); 2: runs the phase-channel form of a strided problem ("subpixel_")
  // (generator/lattice.h)
  int lattice = 0;
  // shuffle_simt: blocks per SM its persistent launch asks for (1-3); bst (tensor maps): 1 = the
  // slice's B rows come with each stage of its first row tile, 2 = with every stage (no slice
  // kept)
  int mb = 1, bst = 0;
  // cell_simt: output cells per thread along H and D (their input rows overlap: loaded once)
  int hc = 1, dc = 1;

  // Derived from the data only, e.g. "igemm_mma_3xtf32_q1x4x32_w2x2_m4n4_k8",
  // "lattice_winograd_f32_q2x2x2_n48_t4x6_k8"; also the main kernel's symbol.
  std::string Name() const;
  std::string ToJson() const;
  static StatusOr<Config> FromJson(const std::string& json);
  // The kernel a lattice or subpixel candidate runs on its sub-problem: this with lattice = 0.
  Config Plain() const {
    Config c = *this;
    c.lattice = 0;
    return c;
  }
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
  // fp32x3 may also run gemm_wgmma's scaled 3xFP16 tiles (opt-in, $CONVT3D_FP32X3_FP16=1): one
  // power-of-two scale per operand, so an operand whose largest magnitude is far above the rest
  // (about 2^22 x its RMS) can break the 1e-5 contract where those values do not dominate the
  // output (README, "fp32x3").
  bool fp16_split = false;
};

// Whether the wgmma family can serve a device of `arch` ("sm_90": yes; wgmma is Hopper-only).
bool HasWgmma(const std::string& arch);
// The architecture to compile c for, given the device's ("sm_90"): wgmma needs the
// arch-specific sm_90a target, which loads only on sm_90 devices.
std::string CompileArch(const Config& c, const std::string& arch);

// A kernel argument, resolved by the engine when it plays a plan.
enum class Arg {
  kX,           // the input tensor
  kW,           // the weight tensor
  kBias,        // the bias (null without bias)
  kY,           // the output tensor
  kWorkspace,   // the plan's workspace
  kXRelaid,     // the input re-laid in the workspace, at LaunchPlan::x_offset_bytes
  kChunk,       // LaunchStep::chunk, an int
  kXRelaidMap,  // a TMA tensor map (LaunchStep::x_map) over the re-laid input, by value
  kXMap,        // a TMA tensor map (LaunchStep::x_map) over the input tensor itself, by value
  // A TMA tensor map (LaunchStep::w_map) over the weight tensor, by value; all zeros where the
  // weights are not 16-byte aligned or w_map has rank 0 (the kernel then does not read it: it
  // checks the same and loads the weights itself).
  kWMap,
};

struct LaunchStep {
  std::string symbol;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned smem_bytes = 0;
  std::vector<Arg> args;
  int chunk = 0;
  // The shape of the tensor map of Arg::kXRelaidMap (its base is the re-laid input) or Arg::kXMap
  // (its base is the input).
  TiledMapShape x_map;
  TiledMapShape w_map;  // of Arg::kWMap (its base is the weights)
  // > 0: a persistent kernel; the engine caps grid[0] at this many blocks per SM of the device.
  int blocks_per_sm = 0;
  // Reads only the weights (Arg::kW) and writes only its part of the workspace, which no other
  // step writes: a plan may skip it while the weights are those it last packed (Plan::Run with
  // a weight version).
  bool weight_only = false;
  // The kernel runs griddepcontrol.wait before it touches memory: it is launched as a
  // programmatic dependent of the stream's previous kernel (the plan's previous launched step),
  // so it starts as that kernel's blocks exit (no kernel-boundary gap) and waits in the kernel
  // for their stores. Only for sm_90 kernels (the instruction needs it).
  bool overlaps_previous = false;
};

// The kernels one run of a plan launches, in order, and what they need.
struct LaunchPlan {
  std::vector<LaunchStep> steps;
  size_t workspace_bytes = 0;  // device memory the plan owns (re-laid operands, spectra)
  size_t x_offset_bytes = 0;   // where Arg::kXRelaid starts in the workspace
  size_t x_alignment = 1;      // bytes the input pointer must be aligned to
};

// Every candidate that applies to `p` and fits `limits`, in a stable order, most promising
// first (so a max_candidates cut keeps the likely winners). REQUIRES: Validate(p).ok().
std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits = {});
// The untuned choice for the never-tune policy; always one of Candidates(p, limits).
Config HeuristicPick(const Problem& p, const DeviceLimits& limits = {});
// The kernels a plan of candidate c runs on p. REQUIRES: c is one of Candidates(p, ...).
LaunchPlan Launches(const Problem& p, const Config& c);

}  // namespace convt3d::gen
