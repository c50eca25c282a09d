// phase_gemm.h: the per-stride-phase GEMM layout that gemm_wgmma and gemm_simt share: which
// phases a tile visits, their stages in the packed weights, and the tile grid.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "convt3d/convt3d.h"
#include "generator/candidates.h"

namespace convt3d::gen {

// One stride phase's GEMM in the order the tiles visit them (most taps first, so the longest
// tiles start first and the short ones fill the tail).
struct PhaseWork {
  int rd = 0, rh = 0, rw = 0, taps = 0;  // taps: the product of the phase's per-dimension taps
  int64_t rows = 0;
  int64_t wstage0 = 0;  // its first stage in a (group, channel tile)'s packed weights
};

// The GEMM of stride phase (rd, rh, rw): M = its output positions over the batch, N = the
// group's output channels, K = its taps x the group's input channels (padded to `cp`). A tile is
// `bm` rows x `bn` channels; a stage is one tap and `ck` channels.
struct PhaseGemm {
  int64_t cp = 0;      // input channels per position of the re-laid input: a multiple of ck
  int64_t ntiles = 1;  // channel tiles per group
  int64_t qmax[3] = {0, 0, 0};  // every phase's rows on one grid (the largest q counts)
  // Box tiles (UseBoxTiles): a tile's rows are a box of q positions, W x H x D x samples (W
  // fastest); all zero: a tile is `bm` consecutive rows of the flattened grid.
  int64_t box[4] = {0, 0, 0, 0};
  // Halo box tiles (UseHaloBoxTiles): the input box of a tile's taps, W x H x D; else zeros.
  int64_t halo[3] = {0, 0, 0};
  int64_t mtiles = 0, total_tiles = 0;
  int64_t stages_all = 0;  // stages of one group and channel tile over every phase
  std::vector<PhaseWork> work;
  // Per kernel tap (kd, kh, kw), W fastest: its phase slot in `work` and its index there.
  std::vector<int> tap_slot, tap_index;
};
PhaseGemm PhaseGemmOf(const Problem& p, int bm, int bn, int ck);
// Makes s's tiles boxes of at most `bm` rows (W x H x D over the largest q counts, then samples;
// one sample per box where groups > 1), the shape that needs the fewest tiles: a tensor-map copy
// reads each stage's rows as one box of the re-laid input.
void UseBoxTiles(const Problem& p, int bm, PhaseGemm& s);
// Makes s's tiles halo boxes: 8 x `rows_h` q positions (W x H) x `planes` (D) of one sample, so
// that a wgmma operand of one plane is 8-row core matrices of W runs (see gemm_wgmma.cu), and
// sets `halo` to the input box every tap of every phase reads from (W, H, D).
void UseHaloBoxTiles(const Problem& p, int rows_h, int planes, PhaseGemm& s);
// Whether the phase GEMM kernels can take p: at most 64 stride phases, at most 10 taps per
// dimension (a copy row holds each dimension's in-range taps in 10 bits).
bool PhaseGemmFits(const Problem& p);
// What a tile shape wastes (lower is better): the shares of rows, channels and K padded, and the
// idle share of the last wave when `items` work items run `slots` at a time.
double PhaseGemmWaste(const Problem& p, const PhaseGemm& s, int bm, int bn, int64_t items,
                      int64_t slots);

// 3xFP16 (gemm_wgmma split 4): the block maxima kept per operand (floats after the operand in
// the workspace; the grid of its scale kernel), and that kernel's threads per block.
constexpr int kScaleParts = 256, kAmaxThreads = 1024;

// The preamble constants the shared template part (templates/phase_gemm.cuh) reads: kBM, kBN,
// kKC, kCP, kNTiles, kPhases, kMTiles, kTotalTiles, kStagesAll, kQD/kQH/kQW, kBoxW/H/D/N (0:
// flat tiles), kPhaseInner (the tile order: the phases of a row tile consecutive, or each
// phase's tiles in turn), kScaleParts and kAmaxThreads.
void PhaseGemmConstants(const PhaseGemm& s, int bm, int bn, int ck, bool phase_inner,
                        std::ostream& os);
// The table kWork[kPhases] (struct PhaseWork) in the order tiles visit the phases.
void PhaseWorkTable(const PhaseGemm& s, std::ostream& os);
// The tables kTapSlot[taps] and kTapIndex[taps]: each kernel tap's phase slot and its index
// among that phase's taps (PhaseGemm::tap_slot, tap_index), for weight packing in tap order.
void TapSlotTables(const PhaseGemm& s, std::ostream& os);

// Where the re-laid input starts in the workspace: after the packed weights (w_bytes).
int64_t RelaidInputOffset(int64_t w_bytes);
// The launches of a phase-GEMM candidate `name`: the input re-layout (x_bytes, `eb` bytes per
// element) into the workspace after the packed weights (w_bytes), the weight packing, and the
// persistent GEMM over `tiles` work items.
// `prep_items`: the weight packing's grid-stride items (256 per block); 0: one per packed word.
LaunchPlan PhaseGemmLaunches(const std::string& name, int64_t w_bytes, int64_t x_bytes, int eb,
                             int64_t tiles, int threads, int smem_bytes, int blocks_per_sm,
                             int64_t prep_items = 0);
// The tensor map of box tiles' stage copies: the re-laid input as [N*G (x2 with 3xTF32's small
// parts)][D][H][W][cp] elements of `eb` bytes, read in boxes of ck channels x the tile's box.
TiledMapShape RelaidInputMap(const Problem& p, const PhaseGemm& s, int ck, int eb, int parts);
// The tensor map of halo box tiles' chunk copies: the position-major re-laid input read in boxes
// of ck channels x the halo (W x H x D), swizzled by its 128-byte rows like a stage's A tile.
TiledMapShape HaloInputMap(const Problem& p, const PhaseGemm& s, int ck, int eb);

}  // namespace convt3d::gen
