// tiers.h: the lookup tiers: which stored results may serve a problem here, and why others miss.
//
// A plan comes from the first tier that serves it (architecture.md, "Lookup tiers"):
//   1 exact      the entry of this exact key (problem, arch, GPU, driver, NVRTC, code hash)
//   2 same_gpu   this problem tuned on this GPU model under another driver, NVRTC or code
//                version: the stored winner's configuration, recompiled and re-checked here
//   3 same_arch  this problem tuned on another GPU model of this architecture: the same
//   4 nearest    the nearest tuned shape of the same kernel, stride, dilation, groups, dtype
//                and precision whose winner is a candidate of this problem (ShapeDistance)
//   5 heuristic  the generator's untuned pick
// Tiers 2 and 3 take a winner only where its kernel source is what it was when tuned (the
// entry's note holds gen::SourceHash then; an entry without a note is taken, and re-checked like
// the others): after a change to one family's template the other families' entries are served
// from tier 2 without tuning, while that family's winners miss (their timing no longer holds).
// The engine recompiles tier 2 and 3 winners and re-checks them against fp64 (they become the
// key's entry); a tier-4 winner is, like the heuristic pick, a candidate of this problem that
// stands in until tuning: compiled, not re-checked, never recorded.
// This file is pure (cache reads and the generator); the engine compiles and re-checks.
#pragma once

#include <string>
#include <vector>

#include "cache/cache.h"
#include "convt3d/convt3d.h"
#include "generator/candidates.h"

namespace convt3d::tiers {

enum class Tier {
  kTuned = 0,
  kExact = 1,
  kSameGpu = 2,
  kSameArch = 3,
  kNearest = 4,
  kHeuristic = 5
};
// "tuned", "exact", "same_gpu", "same_arch", "nearest", "heuristic".
const char* TierName(Tier t);

// One stored result that may serve the problem.
struct Option {
  Tier tier = Tier::kExact;
  cache::Key key;        // the entry's
  cache::Winner winner;  // its cubin not loaded
  std::string layer;     // the path of the store holding it
  double distance = 0;   // tier 4: ShapeDistance to the problem asked for
  // One line: what it is, e.g. "igemm_mma_... tuned on NVIDIA H100 (driver 12080 != 13000)".
  std::string what;
};

struct Found {
  std::vector<Option> options;      // best first: by tier, then as each tier orders them
  std::vector<std::string> missed;  // "tier N name: why", one per tier 1-4 without an option
                                    // and one per entry a tier turned down
};

// What a policy does with a plan of each tier: whether it serves the plan (else the next tier,
// and kTuneIfMissing/kExhaustive tune), whether a served plan is recorded as the key's entry,
// and whether the shape is then tuned on the background worker.
//   kNever             serves 5 only (no lookup)
//   kCacheOrHeuristic  serves 1-5, never tunes
//   kTuneIfMissing     serves 1-3, tunes where they miss (another shape's winner is no answer)
//   kExhaustive        serves none: always tunes
//   kBackground        serves 1-5 at once; from tier 3 down tunes in the background
// Tier 2 results are recorded; tier 3 results too, except under kBackground (the worker tunes
// that shape here, and a recorded entry would end its claim); tier 4 and 5 results never.
struct Rule {
  bool serve = false, record = false, background = false;
};
Rule RuleFor(TunePolicy policy, Tier tier);

// The parse of Problem::Signature(); kInvalidArgument naming the part that does not read.
StatusOr<Problem> ParseSignature(const std::string& signature);

// Whether a result for one may serve the other as tier 4: equal kernel, stride, dilation,
// groups, dtype and precision.
bool SameClass(const Problem& a, const Problem& b);
// The tier-4 distance: the sum of |ln(a/b)| over n, c_in, c_out and the three input sizes, plus
// 1 for each of padding, output_padding and bias that differs. 0 for equal shapes.
double ShapeDistance(const Problem& a, const Problem& b);

// What the layers (the user's store first) hold for `p` on the machine of `want` (want.problem
// is p's signature), in tier order. `limits` are the device's (candidate validity); at most
// `max_nearest` tier-4 options. REQUIRES: Validate(p).ok(). Errors only when the first layer
// cannot be listed.
StatusOr<Found> Find(const std::vector<cache::Store*>& layers, const cache::Key& want,
                     const Problem& p, const gen::DeviceLimits& limits, int max_nearest = 1);

}  // namespace convt3d::tiers
