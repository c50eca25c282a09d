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
constexpr int kGeneratorVersion = 1;

enum class Family { kDirectPhase };

struct Config {
  Family family = Family::kDirectPhase;
  DType dtype = DType::kF32;
  int bx = 64, by = 2;  // threads per block along q_w and along output rows (h)
  int opt = 1;          // outputs per thread along W (same W phase, bx apart)
  int cob = 1;          // output channels per thread

  std::string Name() const;  // e.g. "direct_phase_f32_x64y2_o2_c4"; also the kernel symbol
  std::string ToJson() const;
  static StatusOr<Config> FromJson(const std::string& json);
  bool operator==(const Config& o) const { return Name() == o.Name(); }
};

// The device limits that prune candidates; defaults are sm_90's, so compile-only work prunes
// exactly as a tuning run on an H100/H200 would.
struct DeviceLimits {
  int max_threads_per_block = 1024;
  int max_regs_per_block = 65536;
  int max_regs_per_thread = 255;
  int max_smem_per_block = 227 * 1024;
};

struct LaunchGeometry {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned smem_bytes = 0;
};

// Every candidate that applies to `p` and fits `limits`, in a stable order, most promising
// first (so a max_candidates cut keeps the likely winners). REQUIRES: Validate(p).ok().
std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits = {});
// The untuned choice for the never-tune policy; always one of Candidates(p, limits).
Config HeuristicPick(const Problem& p, const DeviceLimits& limits = {});
LaunchGeometry Geometry(const Problem& p, const Config& c);

}  // namespace convt3d::gen
