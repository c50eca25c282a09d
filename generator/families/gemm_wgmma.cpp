// gemm_wgmma.cpp: the per-phase implicit GEMM on Hopper wgmma for any stride
// (templates/gemm_wgmma.cu, sm_90a): TF32, BF16, FP16; persistent, multi-stage cp.async.
#include <algorithm>
#include <cstdint>
#include <sstream>

#include "base/math.h"
#include "base/status.h"
#include "generator/families/phase_gemm.h"
#include "generator/families/wgmma_call.h"
#include "generator/family.h"
#include "generator/phases.h"
#include "generator/preamble.h"

namespace convt3d::gen {
namespace {

// The shared memory the scheduler leaves a block, and the SMs the ranking assumes (H100 SXM and
// H200; the launch itself uses the device's count).
constexpr int kSmemPerSm = 228 * 1024;
constexpr int kRankSms = 132;
// 3xFP16's per-block maxima of one operand (phase_gemm.h), after it in the workspace.
constexpr int64_t kScalePartBytes = 4 * kScaleParts;

// Derived sizes of a gemm_wgmma candidate, shared by ranking, preamble and launches.
struct GemmShape : PhaseGemm {
  int eb = 4, row_b = 128, bm = 64, threads = 128;
  int smem_bytes = 0, blocks_per_sm = 1;
  int64_t w_bytes = 0, x_bytes = 0;
};

GemmShape ShapeOf(const Problem& p, const Config& c) {
  GemmShape s;
  // A tile's rows: every consumer warpgroup's m64 tiles, or (ping-pong) one warpgroup's.
  s.bm = 64 * c.mt * (c.pp ? 1 : c.wg);
  static_cast<PhaseGemm&>(s) = PhaseGemmOf(p, s.bm, c.bn, c.ck);
  // Halo tiles: an m64 tile is a plane of 8 x 8 positions, or (cm) a warpgroup's N positions
  // are a plane of 8 x 8 mt.
  if (c.hl)
    UseHaloBoxTiles(p, c.cm ? 8 * c.mt / c.cm : 8, c.cm ? c.cm * s.bm / (64 * c.mt) : s.bm / 64, s);
  else if (c.ws == 2)
    UseBoxTiles(p, s.bm, s);
  s.eb = IsHalf(c.dtype) || c.split == 4 ? 2 : 4;
  s.row_b = c.ck * s.eb;
  s.threads = 128 * (c.wg + (c.ws ? 1 : 0));
  // 3xTF32 and 3xFP16: big and small parts of every operand
  const int parts = c.split >= 3 ? 2 : 1;
  // A stage holds A and B, or (halo tiles) B only: A is the chunk's halo box, in one of c.hl
  // slots of its own.
  const int a_rows = c.hl ? 0 : s.bm;
  const int stage_bytes = static_cast<int>(CeilDiv(parts * (a_rows + c.bn) * s.row_b, 1024) * 1024);
  const int64_t halo_bytes =
      c.hl * CeilDiv(s.halo[0] * s.halo[1] * s.halo[2] * s.row_b, int64_t{1024}) * 1024;
  const int epi_bytes = c.wg * (32 * 68 * 4 + 64 * 12 + 32 * 16);  // values, rows, columns
  // + the mbarriers of the warp-specialised form (and of the halo slots), + 1024: the tiles'
  // alignment. (A halo box can be larger than any shared memory: capped at 1 GiB, far past any
  // block's, so that the sums below stay in int.)
  s.smem_bytes =
      static_cast<int>(std::min<int64_t>(int64_t{c.st} * stage_bytes + halo_bytes + epi_bytes +
                                             (c.ws ? 16 * c.st : 0) + 16 * c.hl + 1024,
                                         int64_t{1} << 30));
  s.blocks_per_sm = std::max(1, kSmemPerSm / (s.smem_bytes + 1024));
  // Registers: the accumulators plus ~96 for addresses and the copies' row state; the launch
  // bound asks ptxas for this many blocks per SM.
  const int regs = c.mt * c.bn / 2 + 96;
  s.blocks_per_sm = std::min(s.blocks_per_sm, 65536 / (regs * s.threads));
  s.blocks_per_sm = c.ws ? 1 : std::max(1, std::min(s.blocks_per_sm, 2));
  s.w_bytes = p.groups * s.ntiles * s.stages_all * c.bn * s.row_b * parts;
  s.x_bytes = p.n * p.groups * p.in[0] * p.in[1] * p.in[2] * s.cp * s.eb * parts;
  // 3xFP16: each operand's scale partials (kScaleParts floats, phase_gemm.cuh) after it.
  if (c.split == 4) s.w_bytes += kScalePartBytes, s.x_bytes += kScalePartBytes;
  return s;
}

bool Applies(const Problem& p, const DeviceLimits& limits) {
  if (!limits.wgmma) return false;
  if (!IsHalf(p.dtype) && (p.dtype != DType::kF32 || p.precision == Precision::kFp32)) return false;
  return PhaseGemmFits(p);
}

// Lower is better: rows, channels and K padding wasted, the idle share of the last wave of
// tiles, and operand bytes per product (small tiles reread more).
double Score(const Problem& p, const Config& c, const GemmShape& s) {
  const int64_t slots = int64_t{kRankSms} * s.blocks_per_sm * (c.pp ? c.wg : 1);
  return PhaseGemmWaste(p, s, s.bm, c.bn, s.total_tiles, slots) +
         0.25 * (64.0 / s.bm + 64.0 / c.bn);
}

// gemm_wgmma candidates (tf32 and 16-bit tensors on an sm_90 target, at most 64 stride phases of
// at most 10 taps per dimension): 1-2 warpgroups of 1-2 m64 tiles, channel tiles of at most 256
// (128 accumulators per thread), stage rows of 128 bytes (64 or 32 where that pads fewer input
// channels), and per tile the most stages (3-6) that fit shared memory, once for one block per
// SM and once for two (more warps for short K loops and the epilogue's stores), each also with a
// producer warpgroup of its own (one block per SM), copying A rows with cp.async or (box tiles)
// as one tensor-map box per stage; the best few of each form by Score. Tiles of 64 channels also
// come with the channels as the wgmma's M and 128 or 256 positions as its N (cm), the tensor-map
// forms only.
std::vector<Config> GemmCandidates(const Problem& p, const DeviceLimits& limits, int split) {
  const bool half = IsHalf(p.dtype);
  const int eb = half || split == 4 ? 2 : 4, kstep = eb == 2 ? 16 : 8;
  const int64_t cin_g = p.c_in / p.groups, n8 = CeilDiv(p.c_out / p.groups, 8) * 8;
  std::vector<int> bns;
  for (int64_t bn : {n8, int64_t{256}, int64_t{128}, int64_t{64}, int64_t{32}})
    if (bn <= std::min<int64_t>(256, n8) && std::find(bns.begin(), bns.end(), bn) == bns.end())
      bns.push_back(static_cast<int>(bn));
  // 33-63 channels also as one padded tile of 64 for the channels-on-M forms (their wgmma's M is
  // 64 channels; its N, 128 or 256 positions, is what makes them wide).
  if (n8 > 32 && n8 < 64) bns.push_back(64);
  const int cap = std::min(limits.max_smem_per_block, 227 * 1024);
  std::vector<std::pair<double, Config>> scored;
  for (int row_b : {128, 64, 32}) {
    const int ck = row_b / eb;
    // Narrower rows only where they pad the group's channels less than 128-byte rows do.
    const int ck128 = 128 / eb;
    if (ck < kstep || (row_b < 128 && CeilDiv(cin_g, ck) * ck >= CeilDiv(cin_g, ck128) * ck128))
      continue;
    for (int bn : bns)
      for (int wg : {2, 1})
        for (int mt : {1, 2, 4})
          for (const int smem : {cap, kSmemPerSm / 2 - 1024})
            for (int form : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}) {
              // Forms: block barriers, cp.async producer, tensor-map producer, and that with
              // ping-pong consumers (two warpgroups); 4 and 5: the tensor-map forms with the
              // channels on M, where they widen a 64-channel tile's wgmma; 6 to 9: the
              // tensor-map forms and the channels-on-M forms with halo box tiles (128-byte rows,
              // TF32 or 16-bit); 10 and 11: the channels-on-M halo forms with two planes a
              // warpgroup (squarer boxes: less halo per position).
              const int cm = form >= 10 ? 2 : form == 4 || form == 5 || form >= 8, hl = form >= 6,
                        ws = cm || hl ? 2 : std::min(form, 2), pp = form % 2 == 1 && form >= 3;
              if (cm ? bn != 64 || mt == 1 : mt == 4 || bn > n8) continue;
              if (cm == 2 && mt % 2) continue;
              if (hl && (row_b != 128 || split != 1)) continue;
              // 3xTF32 and 3xFP16 also hold the promoted sums: at most 64 accumulators.
              const int acc_cap = split >= 3 ? 64 : 128;
              if (mt * bn / 2 > acc_cap || (ws && smem < cap) || (pp && wg != 2)) continue;
              Config c;
              c.family = "gemm_wgmma";
              c.dtype = p.dtype;
              c.wg = wg, c.mt = mt, c.bn = bn, c.ck = ck, c.ws = ws, c.pp = pp, c.cm = cm;
              c.split = split;
              // Halo forms: the most halo slots (4 to 2) that fit beside 4 stages (2 slots: 3).
              for (c.hl = hl ? 4 : 0;; --c.hl) {
                const int min_st = c.hl > 2 ? 4 : 3;
                for (c.st = 6; c.st > min_st && ShapeOf(p, c).smem_bytes > smem;) --c.st;
                if (c.hl <= 2 || ShapeOf(p, c).smem_bytes <= smem) break;
              }
              const GemmShape s = ShapeOf(p, c);
              if (s.smem_bytes > smem || s.threads > limits.max_threads_per_block) continue;
              // A tensor-map box has at most 256 elements a dimension.
              if (c.hl && (s.halo[0] > 256 || s.halo[1] > 256 || s.halo[2] > 256)) continue;
              // The re-laid input pads each group's channels to a stage: at most 4x the input.
              if (s.cp > 4 * cin_g) continue;
              if (smem < cap && s.blocks_per_sm < 2) continue;
              if (std::any_of(scored.begin(), scored.end(),
                              [&](const auto& o) { return o.second == c; }))
                continue;
              scored.push_back({Score(p, c, s), c});
            }
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  // Ping-pong forms also in phase-inner tile order where several phases have taps: the phases
  // of one box then run at once on neighbouring SMs, which read the same input rows and
  // complete each other's output sectors while they are in L2 (in phase order a large input is
  // read from DRAM once per phase).
  // (Which phases have taps depends on the problem alone, so any candidate's shape tells.)
  bool phases = false;
  if (!scored.empty()) {
    const std::vector<PhaseWork> work = ShapeOf(p, scored.front().second).work;
    phases =
        std::count_if(work.begin(), work.end(), [](const PhaseWork& w) { return w.taps > 0; }) > 1;
  }
  // The four best with block barriers, two cp.async producers and three of each tensor-map
  // form (faster than the cp.async one on most layers measured), two of each channels-on-M and
  // halo form, one of each two-plane form.
  std::vector<Config> out;
  int taken[12] = {};
  const int form_cap[12] = {4, 2, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1};
  for (const auto& [score, c] : scored) {
    const int form = c.hl ? 6 + c.pp + 2 * c.cm : c.ws + c.pp + 2 * c.cm;
    if (taken[form]++ >= form_cap[form]) continue;
    out.push_back(c);
    if (c.pp && phases) {
      Config inner = c;
      inner.po = 1;
      out.push_back(inner);
    }
  }
  // The halo forms after the others (on strided problems: after the other tensor-map forms,
  // below): they win few of the layers measured, and the phase-channel form takes the first few
  // candidates of its stride-1 sub-problem.
  std::stable_partition(out.begin(), out.end(), [](const Config& c) { return c.hl == 0; });
  // On strided problems the tensor-map forms first (score order within): they copy a stage with
  // one thread and measured fastest on the strided model layers, so the first candidate, the
  // untuned pick where this family leads, is one of them. (A stride-1 problem, such as the
  // phase-channel form that subpixel_ candidates take a prefix of, keeps the score order.)
  if (phases)
    std::stable_partition(out.begin(), out.end(), [](const Config& c) { return c.ws == 2; });
  return out;
}

// fp32x3 on f32 tensors: the 3xTF32 tiles; where the engine opts in (DeviceLimits::fp16_split),
// the 3xFP16 tiles first (half the operand bytes and twice the K per wgmma of 3xTF32, for one
// more read of each operand: its scale; 1.5-1.7x faster on the GAN and video layers).
std::vector<Config> GemmCandidates(const Problem& p, const DeviceLimits& limits) {
  if (!Applies(p, limits)) return {};
  const int split = IsHalf(p.dtype) ? 1 : OperandSplit(p.precision);
  if (split != 3 || !limits.fp16_split) return GemmCandidates(p, limits, split);
  std::vector<Config> out = GemmCandidates(p, limits, 4);
  for (const Config& c : GemmCandidates(p, limits, 3)) out.push_back(c);
  return out;
}

constexpr const char* kWsLabels[] = {"", "_ws", "_tma"};
constexpr const char* kPpLabels[] = {"", "_pp"};
constexpr const char* kCmLabels[] = {"", "_cm", "_cm2"};
constexpr const char* kPhaseOrderLabels[] = {"", "_pi"};

class GemmWgmma final : public Family {
 public:
  std::string_view name() const override { return "gemm_wgmma"; }
  const std::vector<Field>& fields() const override {
    static const std::vector<Field> f = {
        {"wg", &Config::wg, "_g", nullptr, Field::kRequired, 1, 2},  // warpgroups
        // m64 tiles per warpgroup (cm: 64-position blocks, the wgmma's N / 64)
        {"mt", &Config::mt, "_m", nullptr, Field::kRequired, 1, 4},
        {"bn", &Config::bn, "_n", nullptr, Field::kRequired, 8, 256},  // output channels (N)
        {"ck", &Config::ck, "_k"},                                     // input channels per stage
        {"st", &Config::st, "_s", nullptr, Field::kRequired, 3, 8},    // pipeline stages
        // 1: a producer warpgroup hands the stages over through mbarriers; 2: and copies each
        // stage's A rows as one box of a tensor map (box tiles)
        {"ws", &Config::ws, nullptr, kWsLabels, 0, 0, 2, true},
        // 1: each consumer warpgroup takes whole tiles, in turn with the other (ping-pong)
        {"pp", &Config::pp, nullptr, kPpLabels, 0, 0, 1, true},
        // 1: the output channels are the wgmma's M (the weights its A operand), the positions N;
        // 2: and (halo tiles) a warpgroup's positions are two planes, a wgmma each
        {"cm", &Config::cm, nullptr, kCmLabels, 0, 0, 2, true},
        // > 0: a stage's A is its tap's window of the chunk's halo box (halo box tiles), in
        // this many slots
        {"hl", &Config::hl, "_hl", nullptr, 0, 0, 4, true},
        // 1: the phases of one box are consecutive tiles (phase-inner order)
        {"po", &Config::po, nullptr, kPhaseOrderLabels, 0, 0, 1, true},
        // 1: TF32 or 16-bit, 3: 3xTF32, 4: 3xFP16 (scaled fp16 big and small parts)
        {"split", &Config::split, nullptr, nullptr, Field::kRequired, 1, 4},
    };
    return f;
  }
  std::string Token(const Config& c) const override { return OperandToken(c); }
  Status CheckFields(const Config& c) const override {
    if (c.pp && (c.ws != 2 || c.wg != 2))
      return InvalidArgument(
          StrCat(name(), ": pp=1 (ping-pong) needs ws=2 and wg=2, not ws=", c.ws, " wg=", c.wg));
    if (c.cm && (c.ws != 2 || c.bn % 64 != 0))
      return InvalidArgument(
          StrCat(name(), ": cm=1 (channels on M) needs ws=2 and bn a multiple of 64, not ws=", c.ws,
                 " bn=", c.bn));
    if (c.cm == 2 && (!c.hl || c.mt % 2))
      return InvalidArgument(
          StrCat(name(), ": cm=2 (two planes) needs halo tiles and an even mt, not hl=", c.hl,
                 " mt=", c.mt));
    const bool halo_ok = c.ws == 2 && c.split == 1 && c.ck * (IsHalf(c.dtype) ? 2 : 4) == 128;
    if (c.split == 4 && (IsHalf(c.dtype) || c.ck % 16 != 0 || c.ck * 2 > 128))
      return InvalidArgument(StrCat(name(), ": split=4 (3xFP16) is for f32 tensors, with ck a ",
                                    "multiple of 16 up to 64, not ", c.ToJson()));
    if (c.hl == 1 || (c.hl && !halo_ok))
      return InvalidArgument(StrCat(name(),
                                    ": hl>0 (halo box tiles) needs 2-4 slots, ws=2, split=1 "
                                    "and 128-byte stage rows, not hl=",
                                    c.hl, " ws=", c.ws, " split=", c.split, " ck=", c.ck));
    if (!c.cm && c.mt > 2)
      return InvalidArgument(
          StrCat(name(), ": mt=", c.mt, " needs cm=1 (at most 2 m64 tiles per warpgroup)"));
    return CheckWgmmaTile(c, name());
  }
  std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                 const RankContext&) const override {
    return GemmCandidates(p, limits);
  }
  // First on strided problems with at least 1024 products per output and 64 output channels
  // per group (GAN, video-decoder and MONAI UNet layers: the tensor pipe bounds them, and a wide
  // N tile reuses each gathered input row), so that it is the untuned pick there; elsewhere
  // after the first four.
  Placement Place(const Problem& p, const RankContext& ctx) const override {
    const bool strided = p.stride[0] * p.stride[1] * p.stride[2] > 1;
    const bool wide = p.c_out / p.groups >= 64;
    return {strided && ctx.products >= 1024 && wide ? Placement::kFront
                                                    : Placement::kAfterFirstFour};
  }
  bool TensorCoreGemm() const override { return true; }
  bool RunsPhaseChannels() const override { return true; }

  KernelSet Kernels(const Problem&, const Config&) const override { return {true, true, false}; }
  Status Preamble(const Problem& p, const Config& c, std::ostream& os) const override {
    const GemmShape s = ShapeOf(p, c);
    DefInt(os, "kWG", c.wg);
    DefInt(os, "kMT", c.mt);
    DefInt(os, "kST", c.st);
    DefInt(os, "kWS", c.ws);
    DefInt(os, "kPP", c.pp);
    DefInt(os, "kCM", c.cm);
    DefInt(os, "kHaloSlots", c.hl);
    os << "#define GEMM_X_MAP " << (c.ws == 2 ? 1 : 0) << "\n";
    DefInt(os, "kSplit", c.split);
    if (c.split == 4)  // the operands' scale kernels: "<name>_amax" (input), "_wamax" (weights)
      os << "#define CONVT3D_PASTE_(a, b) a##b\n#define CONVT3D_PASTE(a, b) CONVT3D_PASTE_(a, b)\n"
            "#define AMAX_KERNEL_NAME CONVT3D_PASTE(KERNEL_NAME, _amax)\n"
            "#define WAMAX_KERNEL_NAME CONVT3D_PASTE(KERNEL_NAME, _wamax)\n";
    DefInt(os, "kMinBlocks", s.blocks_per_sm);
    PhaseGemmConstants(s, s.bm, c.bn, c.ck, c.po == 1, os);
    const DType operand = c.split == 4 ? DType::kF16 : c.dtype;
    os << WgmmaFunction(operand, c.cm ? 64 * c.mt : c.bn);
    if (c.cm == 2) os << WgmmaFunction(operand, 32 * c.mt);  // one plane's wgmma
    return Status();
  }
  void Tables(const Problem& p, const Config& c, std::ostream& os) const override {
    const GemmShape s = ShapeOf(p, c);
    PhaseWorkTable(s, os);
    TapSlotTables(s, os);
  }
  std::vector<std::string> Templates() const override {
    return {"elem.cuh",  "phases.cuh",     "operands.cuh",
            "wgmma.cuh", "phase_gemm.cuh", "gemm_wgmma.cu"};
  }
  bool ArchSpecific() const override { return true; }

  LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const override {
    const GemmShape s = ShapeOf(p, c);
    // The weight packing: a block per (group, channel tile, channel chunk, output channel).
    const int64_t prep_blocks = p.groups * s.ntiles * (s.cp / c.ck) * c.bn;
    LaunchPlan plan =
        PhaseGemmLaunches(named.Name(), s.w_bytes, s.x_bytes, s.eb, s.total_tiles, s.threads,
                          s.smem_bytes, s.blocks_per_sm, prep_blocks * 256);
    if (c.ws == 2) {
      plan.steps.back().args.push_back(Arg::kXRelaidMap);
      plan.steps.back().x_map = c.hl ? HaloInputMap(p, s, c.ck, s.eb)
                                     : RelaidInputMap(p, s, c.ck, s.eb, c.split >= 3 ? 2 : 1);
    }
    if (c.split == 4) {
      // Each operand's scale partials before its split: the input's per run (in front of the
      // re-layout), the weights' with their packing (weight-only: skipped with it).
      LaunchStep x_amax =
          Step(named.Name() + "_amax", kScaleParts, kAmaxThreads, 0, {Arg::kX, Arg::kXRelaid});
      LaunchStep w_amax =
          Step(named.Name() + "_wamax", kScaleParts, kAmaxThreads, 0, {Arg::kW, Arg::kWorkspace});
      w_amax.weight_only = true;
      auto prep = std::find_if(plan.steps.begin(), plan.steps.end(),
                               [](const LaunchStep& st) { return st.weight_only; });
      plan.steps.insert(prep, w_amax);
      plan.steps.insert(plan.steps.begin(), x_amax);
    }
    // Every kernel after the first waits for its predecessor in the kernel
    // (WaitForPreviousKernel), so it is launched as a programmatic dependent: it starts as the
    // previous kernel's blocks exit, without the kernel boundary's gap.
    for (size_t i = 1; i < plan.steps.size(); ++i) plan.steps[i].overlaps_previous = true;
    return plan;
  }
};

}  // namespace

const Family& GemmWgmmaFamily() { return FamilyInstance<GemmWgmma>(); }

}  // namespace convt3d::gen
