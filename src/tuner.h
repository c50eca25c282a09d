// tuner.h: the tuning protocol. Every candidate is compiled, gated against an fp64 reference on
// fresh random inputs (the output poisoned first, so an unwritten element fails), probed once;
// the fastest are re-timed, and the winner and every trial go into the cache. With a cuDNN
// handle, each cuDNN backward-data algorithm that cuDNN accepts for the problem is one more
// candidate (src/vendor.h), under the same gate and timing.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "runtime/runtime.h"
#include "src/candidate.h"

namespace convt3d::tuner {

// Pass 1 of tuning leaves these candidates for the timed finals, in rank order (ties go to the
// higher-ranked): of those that passed the gate (passed[i], probe_ms[i] from one run), ours
// within 1.3x of the best probe (at most 8), and the vendor algorithms (vendor[i]) within 8x.
std::vector<size_t> Finalists(const std::vector<double>& probe_ms, const std::vector<bool>& passed,
                              const std::vector<bool>& vendor);

// Whether candidates include fp32x3's scaled 3xFP16 tiles (gen::DeviceLimits::fp16_split): their
// error depends on each operand's range, so only by opt-in: `option` (Options::fp32x3_fp16, a
// CLI flag) or $CONVT3D_FP32X3_FP16=1. The one place that resolves the two, for the engine, the
// compile-only path and `convt3d cache explain` alike. Results tuned with it are cached apart
// (src/key_tags.h).
bool Fp16SplitOptIn(bool option);

// The generator's candidates, best-ranked first, cut to max_candidates when that is positive.
std::vector<gen::Config> CandidatesUpTo(const Problem& p, const gen::DeviceLimits& limits,
                                        int max_candidates);

// What a tuning run takes from its engine.
struct Setup {
  std::string arch;  // the device's, e.g. "sm_90"
  gen::DeviceLimits limits;
  size_t l2_flush_bytes = 0;  // written before every timed run (rt::TimeIt)
  int max_candidates = 0;     // Options::max_candidates
  int warmup = 3, repeats = 20;
  // Compiles a batch in parallel, results in request order (the engine counts the compiles).
  std::function<std::vector<rt::CompileResult>(const std::vector<rt::CompileRequest>&)> compile;
  std::function<void(const std::string&)> log;  // one progress line
  // Background tuning (TunePolicy::kBackground): called after each candidate's GPU work (gate
  // and probe, or its final timing) with how long that took; the engine pauses as long (so the
  // tuner holds at most about half of the GPU's time) and returns false to stop the run, which
  // then fails with kUnavailable. Unset: no pauses.
  std::function<bool(std::chrono::steady_clock::duration busy)> between;
  // Where the tuner's launches, fills, timings and waits go; nullptr: the legacy default stream
  // (and context-wide waits). Background tuning passes its low-priority rt::Stream.
  CUstream_st* stream = nullptr;
  // Vendor arbitration: cuDNN's algorithms join the candidates (after the generator's, and
  // beyond max_candidates: they cost no compile). Null: ours alone.
  std::shared_ptr<cudnn::Handle> cudnn;
};

// The vendor candidates of p: one per cuDNN backward-data algorithm that cuDNN accepts for p's
// descriptors in p's precision (cudnn::PrecisionFor); none where cuDNN cannot express p
// (cudnn::MapConvTranspose3d), for f64, or without a handle. REQUIRES: the handle's context is
// current.
std::vector<CandidateKernels> VendorCandidates(const std::shared_ptr<cudnn::Handle>& handle,
                                               const Problem& p);

// A stored configuration re-checked here (the lookup tiers): its kernels, cubin, and its trial
// (gate error and one probe time on this device).
struct Checked {
  CandidateKernels kernels;
  std::vector<char> cubin;
  cache::Trial trial;
};

// A finished run: the winner (cubin included) with its loaded kernels, and one trial per
// candidate in rank order.
struct Result {
  cache::Winner winner;
  CandidateKernels kernels;
  std::vector<cache::Trial> trials;
};

// Runs the protocol on the current context. The utility kernels (random fills, comparisons)
// are compiled on first use and kept for later runs.
class Tuner {
 public:
  explicit Tuner(Setup setup);
  ~Tuner();

  // Fails when no candidate compiled, ran and passed the check, or when a candidate left the
  // context unusable (the message names it).
  StatusOr<Result> Run(const Problem& p);
  // Compiles c (and the fp64 reference) for p, gates it against the reference on fresh random
  // data as Run does, and probes it once. Fails, saying why, when c does not compile, load, run
  // or pass the check.
  StatusOr<Checked> Check(const Problem& p, const gen::Config& c);

 private:
  struct Util;
  struct TestBed;
  using Compiled = std::vector<rt::CompileResult>;
  using Loaded = std::vector<std::optional<CandidateKernels>>;

  StatusOr<Compiled> CompileBatch(const Problem& p, const std::vector<gen::Config>& configs,
                                  std::vector<cache::Trial>* trials);
  Status PrepareInputs(const Problem& p, const rt::CompileResult& reference, TestBed* bed);
  StatusOr<std::optional<CandidateKernels>> Gate(const Problem& p, const gen::Config& c,
                                                 const rt::CompileResult& compiled, TestBed* bed,
                                                 cache::Trial* t);
  // The gate's run and check of a loaded candidate (ours or a vendor's).
  StatusOr<std::optional<CandidateKernels>> Verify(const Problem& p, CandidateKernels kernel,
                                                   TestBed* bed, cache::Trial* t);
  Status Probe(const CandidateKernels& k, const TestBed& bed, cache::Trial* t);
  void LogProgress(const char* what, size_t done, size_t n,
                   std::chrono::steady_clock::time_point t0) const;
  StatusOr<int> TimeFinalists(const Loaded& kernels, const TestBed& bed,
                              std::vector<cache::Trial>* trials);
  std::optional<CandidateKernels> Reject(cache::Trial* t, const char* outcome, std::string message,
                                         const std::string& log_line);
  Status LoadUtil();  // compiles the utility kernels once
  // Setup::between with the time since `t0`; false when the run is to stop.
  bool Yield(std::chrono::steady_clock::time_point t0) const;
  Status Fill(DType t, const rt::DeviceBuffer& buf, const rt::DeviceBuffer* buf64, int64_t count,
              uint64_t seed);
  StatusOr<std::pair<double, double>> Compare(TestBed* bed, DType t, int64_t count,
                                              double* nonfinite);

  Setup setup_;
  std::unique_ptr<Util> util_;
};

// Stores the winner and every trial under `key`.
Status Record(cache::Store& store, const cache::Key& key, const Result& result);

}  // namespace convt3d::tuner
