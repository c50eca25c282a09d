// candidates.cpp: enumerates, prunes, names and ranks direct_phase candidates.
#include "generator/candidates.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "generator/phases.h"
#include "status_util.h"

namespace convt3d::gen {
namespace {

// The thread-block shapes tried: wide rows for long W, taller blocks for short W.
constexpr int kBlockShapes[][2] = {{64, 2}, {128, 1}, {32, 4}, {32, 8}};
constexpr int kOutputsPerThread[] = {1, 2, 4};
constexpr int kChannelsPerThread[] = {1, 2, 4, 8, 16};

// A rough register estimate: accumulators plus the per-tap weight registers plus addressing.
int EstimatedRegs(const Config& c) {
  const int words = c.dtype == DType::kF64 ? 2 : 1;
  return (c.cob * c.opt + c.cob) * words + 40;
}

int64_t QCountW(const Problem& p) {
  const Dim3 out = p.OutSize();
  return PhasesOf(p.in[2], p.kernel[2], p.stride[2], p.padding[2], p.dilation[2], out[2])
      .max_q_count;
}

bool Fits(const Config& c, const DeviceLimits& l) {
  const int threads = c.bx * c.by;
  const int regs = EstimatedRegs(c);
  return threads <= l.max_threads_per_block && regs <= l.max_regs_per_thread &&
         regs * threads <= l.max_regs_per_block;
}

}  // namespace

std::string Config::Name() const {
  return StrCat("direct_phase_", dtype == DType::kF64 ? "f64" : "f32", "_x", bx, "y", by, "_o", opt,
                "_c", cob);
}

std::string Config::ToJson() const {
  nlohmann::json j = {{"family", "direct_phase"},
                      {"dtype", dtype == DType::kF64 ? "f64" : "f32"},
                      {"bx", bx},
                      {"by", by},
                      {"opt", opt},
                      {"cob", cob}};
  return j.dump();
}

StatusOr<Config> Config::FromJson(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.at("family") != "direct_phase")
      return InvalidArgument(StrCat("unknown kernel family ", j.at("family").dump()));
    Config c;
    c.dtype = j.at("dtype") == "f64" ? DType::kF64 : DType::kF32;
    c.bx = j.at("bx");
    c.by = j.at("by");
    c.opt = j.at("opt");
    c.cob = j.at("cob");
    if (c.bx <= 0 || c.by <= 0 || c.opt <= 0 || c.cob <= 0)
      return InvalidArgument(StrCat("bad candidate parameters ", text));
    return c;
  } catch (const std::exception& e) {
    return InvalidArgument(StrCat("bad candidate JSON ", text, ": ", e.what()));
  }
}

std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits) {
  const int64_t cout_g = p.c_out / p.groups;
  const int64_t qw = QCountW(p);
  const int64_t rows = p.OutSize()[1];
  std::vector<std::pair<double, Config>> scored;
  for (const auto& shape : kBlockShapes) {
    for (int opt : kOutputsPerThread) {
      for (int cob : kChannelsPerThread) {
        Config c;
        c.dtype = p.dtype;
        c.bx = shape[0];
        c.by = shape[1];
        c.opt = opt;
        c.cob = cob;
        if (cout_g % cob != 0 || !Fits(c, limits)) continue;
        // A W tile far longer than a phase's row only adds idle threads.
        if (opt > 1 && static_cast<int64_t>(c.bx) * (opt / 2) >= qw) continue;
        if (c.by > 1 && c.by / 2 >= rows) continue;
        if (c.cob * c.opt > (p.dtype == DType::kF64 ? 16 : 32)) continue;
        // Rank: reuse of each input load across output channels matters most, then outputs
        // per thread, then fuller W tiles. Only ordering, never correctness, depends on it.
        const double waste =
            static_cast<double>((c.bx * c.opt - qw % (c.bx * c.opt)) % (c.bx * c.opt)) /
            static_cast<double>(qw + c.bx * c.opt);
        const double score = -std::min(c.cob, 8) * 1.0 - std::min(c.opt, 2) * 0.5 + waste * 4 +
                             (c.cob == 16 ? 0.25 : 0) + (c.opt == 4 ? 0.25 : 0);
        scored.push_back({score, c});
      }
    }
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Config> out;
  for (auto& s : scored) out.push_back(s.second);
  return out;
}

Config HeuristicPick(const Problem& p, const DeviceLimits& limits) {
  // Candidates() is ordered best guess first; it is never empty because (64,2,1,1) always fits.
  auto all = Candidates(p, limits);
  if (all.empty()) {
    Config c;
    c.dtype = p.dtype;
    return c;
  }
  return all.front();
}

LaunchGeometry Geometry(const Problem& p, const Config& c) {
  const Dim3 out = p.OutSize();
  const int64_t qw = QCountW(p);
  const int64_t wtiles = (qw + c.bx * c.opt - 1) / (c.bx * c.opt);
  const int64_t htiles = (out[1] + c.by - 1) / c.by;
  const int64_t blocks = wtiles * p.stride[2] * htiles * out[0] * (p.c_out / c.cob) * p.n;
  LaunchGeometry g;
  g.grid[0] = static_cast<unsigned>(std::min<int64_t>(blocks, 0x7fffffff));
  g.block[0] = c.bx;
  g.block[1] = c.by;
  return g;
}

}  // namespace convt3d::gen
