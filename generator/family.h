// family.h: what every kernel family module provides, and the launches a plan makes.
//
// A family is one module (generator/families/<name>.cpp) beside its template(s): its parameters
// (one table for the name and the JSON), where it applies and its ranked candidates, where they
// go among the other families' candidates, its preamble constants and templates, and the
// kernels a plan launches. The registry (generator/registry.cpp) lists the families; nothing
// outside the generator switches on a family.
#pragma once

#include <climits>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "generator/candidates.h"

namespace convt3d::gen {

// One tuning parameter of a family: its JSON key, where it lives in Config, and how it shows in
// the candidate's name. The table's order is the name's order.
struct Field {
  static constexpr int kRequired = INT_MIN;
  const char* key;                 // JSON key (the Config member of the same name)
  int Config::*member;             //
  const char* fragment = nullptr;  // name text before the value ("_q", "x"); nullptr: not named
  const char* const* labels = nullptr;  // or the name text per value (flags: "", "_pa", ...)
  int fallback = kRequired;             // the value a JSON without the key means
  int lo = 1, hi = INT_MAX;             // the valid range
  bool omit_default = false;            // neither name nor JSON shows it while it equals fallback
  bool (*in_name)(const Config&) = nullptr;  // extra condition to show it in the name
  bool (*in_json)(const Config&) = nullptr;  // extra condition to write (and read) it in JSON
};

// What the families ranked before this one produced for the same problem (registry order).
struct RankContext {
  bool tensor_tiles = false;  // a tensor-core GEMM family has candidates
  bool dense = false;         // an output sums more than 1024 products
  int64_t products = 0;       // products per output of the densest phase: C_in/groups x taps
  size_t total = 0;           // candidates placed so far
  std::vector<std::pair<std::string_view, size_t>> counts;  // per family, before placement
  int max_block_n = 256;  // the widest channel tile a GEMM family may use
  size_t CountOf(std::string_view family) const;
};

// Where a family's candidates go among those placed before them, and how many of them.
struct Placement {
  enum Where { kBack, kFront, kAfterFirstFour } where = kBack;
  size_t cap = SIZE_MAX;
};

// Which kernels besides the main one a family's module defines (their symbols are the
// candidate's name plus "_prep", "_prepx", "_post").
struct KernelSet {
  bool prep = false, prepx = false, post = false;
};

class Family {
 public:
  virtual ~Family() = default;
  // "igemm_mma": the name prefix, the JSON "family" and the registry key.
  virtual std::string_view name() const = 0;
  virtual const std::vector<Field>& fields() const = 0;
  // The name's type token: the tensor dtype, or the operand type ("tf32", "3xtf32", "bf16").
  virtual std::string Token(const Config& c) const { return DTypeName(c.dtype); }
  // Rules across fields that the table cannot say (e.g. a consistent tile); checked by FromJson.
  virtual Status CheckFields(const Config&) const { return Status(); }

  // Its candidates for p, best first (empty where it does not apply).
  virtual std::vector<Config> Candidates(const Problem& p, const DeviceLimits& limits,
                                         const RankContext& ctx) const = 0;
  virtual Placement Place(const Problem&, const RankContext&) const { return {}; }
  // Whether it uses tensor-core GEMMs (RankContext::tensor_tiles).
  virtual bool TensorCoreGemm() const { return false; }
  // The untuned pick where its candidate ranks first (`all`: plain candidates, best first).
  virtual Config Pick(const Problem&, const std::vector<Config>& all) const { return all.front(); }
  // For a stride == dilation problem, how many of its best sub-problem candidates of c's kind
  // the lattice form takes (0: it cannot run a sub-lattice), counted per *bucket when given: the
  // caller sets it to the family's name, and a family that counts kinds of candidates apart
  // names the kind's bucket.
  virtual int SubLatticeQuota(const Config&, std::string* /*bucket*/) const { return 0; }
  // Whether it can run the phase-channel (subpixel) form of a strided problem, and whether its
  // phase-channel tile `plain` of sub-problem `sub` should be the untuned pick.
  virtual bool RunsPhaseChannels() const { return false; }
  virtual bool PrefersPhaseChannels(const Problem& /*sub*/, const Config& /*plain*/) const {
    return false;
  }
  // Whether its candidate `first`, ranked first among the plain candidates of p, should be the
  // untuned pick even where a phase-channel tile would be preferred.
  virtual bool PickOverPhaseChannels(const Problem& /*p*/, const Config& /*first*/) const {
    return false;
  }

  virtual KernelSet Kernels(const Problem&, const Config&) const { return {}; }
  // Its constants of candidate c, between the common ones and the template (NotApplicable where
  // c does not apply to p), its extra __constant__ tables, and its template files (a lattice
  // kernel's source adds the fill's own).
  virtual Status Preamble(const Problem& p, const Config& c, std::ostream& os) const = 0;
  virtual void Tables(const Problem&, const Config&, std::ostream&) const {}
  virtual std::vector<std::string> Templates() const = 0;
  // Needs the arch-specific target (sm_90a: wgmma).
  virtual bool ArchSpecific() const { return false; }
  // The kernels a plan of c runs on p, in order (symbols named after `named`).
  virtual LaunchPlan Launches(const Problem& p, const Config& c, const Config& named) const = 0;
};

// The instance of family class F that its module's accessor returns, made on first use (so the
// registry may list it from any static initialiser):
//   const Family& FftFamily() { return FamilyInstance<Fft>(); }
template <class F>
const Family& FamilyInstance() {
  static const F family;
  return family;
}

// The registered family called `name`, or null.
const Family* FindFamily(std::string_view name);
// c's family. REQUIRES: c.family names a registered family.
const Family& FamilyOf(const Config& c);
// Every registered family, in ranking order.
const std::vector<const Family*>& Families();
// Adds `family` after the registry's own, until the returned guard is destroyed: for tests (a
// toy family) and out-of-tree families. Not thread-safe against concurrent Candidates() calls.
class ScopedFamily {
 public:
  explicit ScopedFamily(const Family* family);
  ~ScopedFamily();
  ScopedFamily(const ScopedFamily&) = delete;
  ScopedFamily& operator=(const ScopedFamily&) = delete;

 private:
  const Family* family_;
};

// The ranked union of `families`' candidates for p (the stride-1 or plain problem; no lattice
// forms): each family in turn sees what those before it produced and places its own.
std::vector<Config> RankedCandidates(const std::vector<const Family*>& families, const Problem& p,
                                     const DeviceLimits& limits, int max_block_n = 256);

// Operand token of the tensor-core families: "bf16"/"f16" for 16-bit tensors, else "tf32" or
// "3xtf32" by the split.
std::string OperandToken(const Config& c);
// The operand split of a precision mode: 3 for fp32x3 (3xTF32), else 1.
int OperandSplit(Precision precision);
// Whether t is a 16-bit tensor type (bf16 or f16: 16-bit tensor-core operands).
inline bool IsHalf(DType t) { return t == DType::kBF16 || t == DType::kF16; }
// kInvalidArgument: candidate c does not apply to p.
Status NotApplicable(const Problem& p, const Config& c);

// The pieces of a LaunchPlan. A launch of `symbol` as `blocks` blocks (clamped to a launchable
// grid.x) of `threads` threads with `smem_bytes` of dynamic shared memory.
LaunchStep Step(std::string symbol, int64_t blocks, unsigned threads, unsigned smem_bytes,
                std::vector<Arg> args);
// A grid-stride launch of `symbol` over `items`, one per thread of 256-thread blocks, at most
// `max_blocks` of them: the re-layouts, transforms and fills beside a main kernel.
LaunchStep GridStride(std::string symbol, int64_t items, int64_t max_blocks, std::vector<Arg> args);
// The grid-stride weight preparation (re-layout, split, cast or transform) from Arg::kW into
// the workspace, marked LaunchStep::weight_only: it must depend on the weights alone, and no
// other step of the plan may write what it writes.
LaunchStep WeightPrep(std::string symbol, int64_t items, int64_t max_blocks);
// The plan of one kernel that needs no workspace.
LaunchPlan OneKernel(LaunchStep main);

}  // namespace convt3d::gen
