// tuner.cpp: compile, gate, probe, re-time the finalists, record (the protocol of tuner.h).
#include "src/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/status.h"
#include "generator/source.h"
#include "src/reference.h"
#include "src/vendor.h"

namespace convt3d::tuner {
namespace {

// Pass 2 re-times only candidates whose probe is within kFinalistSlack of the best probe (a
// single run with the L2 flushed varies by a few percent), at most kMaxFinalists of them; the
// others keep their probe time. Timing every candidate fully was most of the tuning time.
constexpr double kFinalistSlack = 1.3;
constexpr size_t kMaxFinalists = 8;
// A vendor algorithm's single probe can read up to 4x its timed median (first-call costs), so
// vendor algorithms get a wider cut; past it one cannot win, and timing it fully is what made
// tuning slow (cuDNN's ALGO_0 on L1-68 in f16: a 3.4 s probe, then 8 more runs of it).
constexpr double kVendorProbeSlack = 8;

Problem AsF64(Problem p) {
  p.dtype = DType::kF64;
  return p;
}

// The fp64 reference: the plainest configuration of the direct family (one output and one
// channel per thread). The GPU tests check it against the CPU reference.
gen::Config ReferenceConfig() {
  gen::Config c;
  c.dtype = DType::kF64;
  c.bx = 64;
  c.by = 2;
  c.opt = 1;
  c.cob = 1;
  return c;
}

}  // namespace

std::vector<size_t> Finalists(const std::vector<double>& probe_ms, const std::vector<bool>& passed,
                              const std::vector<bool>& vendor) {
  std::vector<size_t> order;
  for (size_t i = 0; i < passed.size(); ++i)
    if (passed[i]) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return probe_ms[a] < probe_ms[b]; });
  std::vector<size_t> finalists;
  size_t ours = 0;
  for (size_t i : order) {
    // A vendor algorithm that passed (at most six) is timed properly unless its probe is past
    // kVendorProbeSlack: a library's single probe run can carry first-call costs that its
    // later runs do not, which the 1.3x cut would mistake for slowness.
    if (vendor[i]) {
      if (probe_ms[i] <= kVendorProbeSlack * probe_ms[order.front()]) finalists.push_back(i);
    } else if (ours < kMaxFinalists && probe_ms[i] <= kFinalistSlack * probe_ms[order.front()]) {
      finalists.push_back(i);
      ++ours;
    }
  }
  std::sort(finalists.begin(), finalists.end());
  return finalists;
}

bool Fp16SplitOptIn(bool option) {
  if (option) return true;
  const char* v = std::getenv("CONVT3D_FP32X3_FP16");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

std::vector<gen::Config> CandidatesUpTo(const Problem& p, const gen::DeviceLimits& limits,
                                        int max_candidates) {
  auto configs = gen::Candidates(p, limits);
  if (max_candidates > 0 && static_cast<int>(configs.size()) > max_candidates)
    configs.resize(max_candidates);
  return configs;
}

std::vector<CandidateKernels> VendorCandidates(const std::shared_ptr<cudnn::Handle>& handle,
                                               const Problem& p) {
  std::vector<CandidateKernels> out;
  if (!handle) return out;
  const std::optional<cudnn::Precision> precision = cudnn::PrecisionFor(p);
  if (!precision || !cudnn::MapConvTranspose3d(p).ok()) return out;
  for (int algo = 0; algo < cudnn::kAlgorithms; ++algo) {
    // An algorithm cuDNN does not offer here is no candidate, as the generator prunes its own.
    auto a = cudnn::Algorithm::Create(handle, p, *precision, algo);
    if (!a.ok()) continue;
    const std::string name = vendor::ChoiceOf(*a.value()).Name();
    out.push_back(CandidateKernels::Vendor(std::move(a).value(), name));
  }
  return out;
}

// The utility kernels: uniform random fills and output comparisons, one per dtype.
struct Tuner::Util {
  std::shared_ptr<rt::Kernel> fill32, fill64, fill_bf16, fill_f16;
  std::shared_ptr<rt::Kernel> cmp32, cmp64, cmp_bf16, cmp_f16;
};

// One run's device memory: random inputs of the problem's dtype and their fp64 copies (when
// the dtype is not f64), the candidate's output, the reference output, the comparison sums,
// and the workspace, grown to the largest re-laid weights of the candidates.
struct Tuner::TestBed {
  rt::DeviceBuffer x, w, b, y, ref, x64, w64, b64, sums, workspace;
  CUstream_st* stream = nullptr;  // Setup::stream
  // The timed launch includes the weight re-layout: Plan::Run does it on every call.
  Status Launch(const CandidateKernels& k) const {
    return k.Launch(x.get(), w.get(), b.get(), y.get(), workspace.get(), stream);
  }
};

Tuner::Tuner(Setup setup) : setup_(std::move(setup)) {}
Tuner::~Tuner() = default;

// "  checked 12/40 (3.1 s)" at every tenth and the last: the CLI shows these (and "  compiled
// ...") as one progress line on a terminal, plain lines elsewhere.
void Tuner::LogProgress(const char* what, size_t done, size_t n,
                        std::chrono::steady_clock::time_point t0) const {
  if (done % std::max<size_t>(1, n / 10) != 0 && done != n) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  setup_.log(StrCat("  ", what, " ", done, "/", n, " (", StrFormat("%.1f", s), " s)"));
}

StatusOr<Result> Tuner::Run(const Problem& p) {
  const auto configs = CandidatesUpTo(p, setup_.limits, setup_.max_candidates);
  std::vector<CandidateKernels> vendors = VendorCandidates(setup_.cudnn, p);
  std::vector<cache::Trial> trials(configs.size() + vendors.size());
  setup_.log(StrCat("tuning ", p.Signature(), ": compiling ", configs.size(), " candidates",
                    vendors.empty() ? "" : StrCat(" (and ", vendors.size(), " of cuDNN)")));
  CONVT3D_ASSIGN_OR_RETURN(const Compiled compiled, CompileBatch(p, configs, &trials));
  TestBed bed;
  bed.stream = setup_.stream;
  CONVT3D_RETURN_IF_ERROR(PrepareInputs(p, compiled[0], &bed));
  // Pass 1: the gate, then one probe run (the check run warmed it up) ranks the candidate.
  // Ours first, then the vendor's: one index space, so that the finalists and ties treat them
  // alike (a tie goes to ours, ranked first).
  const size_t n = configs.size() + vendors.size();
  Loaded kernels(n);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) {
    const auto ti = std::chrono::steady_clock::now();
    if (i < configs.size()) {
      CONVT3D_ASSIGN_OR_RETURN(kernels[i], Gate(p, configs[i], compiled[i + 1], &bed, &trials[i]));
    } else {
      trials[i].candidate = vendors[i - configs.size()].Name();
      CONVT3D_ASSIGN_OR_RETURN(kernels[i],
                               Verify(p, std::move(vendors[i - configs.size()]), &bed, &trials[i]));
    }
    if (kernels[i]) CONVT3D_RETURN_IF_ERROR(Probe(*kernels[i], bed, &trials[i]));
    LogProgress("checked", i + 1, n, t0);
    if (!Yield(ti)) return Unavailable(StrCat("tuning ", p.Signature(), " cancelled"));
  }
  CONVT3D_ASSIGN_OR_RETURN(const int best, TimeFinalists(kernels, bed, &trials));
  if (best < 0)
    return Internal(StrCat("no candidate of ", p.Signature(), " compiled, ran and passed the ",
                           "correctness check; see the tuning log (convt3d cache show)"));
  Result r;
  if (static_cast<size_t>(best) < configs.size()) {
    r.winner.candidate = configs[best].Name();
    r.winner.params_json = configs[best].ToJson();
    r.winner.kernel_symbol = configs[best].Name();
    r.winner.cubin = compiled[best + 1].cubin;
  } else {
    r.winner = vendor::ChoiceOf(*kernels[best]->vendor)
                   .AsWinner(trials[best].median_ms, trials[best].rel_err);
  }
  r.winner.median_ms = trials[best].median_ms;
  r.winner.rel_err = trials[best].rel_err;
  r.kernels = std::move(*kernels[best]);
  r.trials = std::move(trials);
  return r;
}

// The reference and every candidate, in one parallel batch: the reference's result first.
StatusOr<Tuner::Compiled> Tuner::CompileBatch(const Problem& p,
                                              const std::vector<gen::Config>& configs,
                                              std::vector<cache::Trial>* trials) {
  const gen::Config ref_cfg = ReferenceConfig();
  std::vector<rt::CompileRequest> reqs;
  CONVT3D_ASSIGN_OR_RETURN(std::string ref_src, gen::BuildSource(AsF64(p), ref_cfg));
  reqs.push_back({"reference_" + ref_cfg.Name(), ref_src, setup_.arch, {ref_cfg.Name()}, {}});
  for (size_t i = 0; i < configs.size(); ++i) {
    (*trials)[i].candidate = configs[i].Name();
    auto src = gen::BuildSource(p, configs[i]);
    reqs.push_back({configs[i].Name(),
                    src.ok() ? src.value() : std::string(),
                    gen::CompileArch(configs[i], setup_.arch),
                    {configs[i].Name()},
                    {}});
  }
  return setup_.compile(reqs);
}

// Fresh random inputs of our own (never the caller's data), an fp64 copy of them for the
// reference, and the reference's output.
Status Tuner::PrepareInputs(const Problem& p, const rt::CompileResult& reference, TestBed* bed) {
  CONVT3D_RETURN_IF_ERROR(reference.status);
  const gen::Config ref_cfg = ReferenceConfig();
  CONVT3D_ASSIGN_OR_RETURN(auto ref_kernel, rt::Kernel::Load(reference.cubin, ref_cfg.Name()));
  CONVT3D_RETURN_IF_ERROR(LoadUtil());
  const int64_t nx = p.InputElements(), nw = p.WeightElements(), ny = p.OutputElements();
  const size_t eb = DTypeBytes(p.dtype);
  TestBed& b = *bed;
  CONVT3D_ASSIGN_OR_RETURN(b.x, rt::DeviceBuffer::Alloc(nx * eb));
  CONVT3D_ASSIGN_OR_RETURN(b.w, rt::DeviceBuffer::Alloc(nw * eb));
  CONVT3D_ASSIGN_OR_RETURN(b.b, rt::DeviceBuffer::Alloc(p.c_out * eb));
  CONVT3D_ASSIGN_OR_RETURN(b.y, rt::DeviceBuffer::Alloc(ny * eb));
  CONVT3D_ASSIGN_OR_RETURN(b.ref, rt::DeviceBuffer::Alloc(ny * 8));
  CONVT3D_ASSIGN_OR_RETURN(b.sums, rt::DeviceBuffer::Alloc(4 * 8));
  const bool need64 = p.dtype != DType::kF64;
  if (need64) {
    CONVT3D_ASSIGN_OR_RETURN(b.x64, rt::DeviceBuffer::Alloc(nx * 8));
    CONVT3D_ASSIGN_OR_RETURN(b.w64, rt::DeviceBuffer::Alloc(nw * 8));
    CONVT3D_ASSIGN_OR_RETURN(b.b64, rt::DeviceBuffer::Alloc(p.c_out * 8));
  }
  const uint64_t seed = 0x5eed0000 + std::hash<std::string>()(p.Signature());
  CONVT3D_RETURN_IF_ERROR(Fill(p.dtype, b.x, need64 ? &b.x64 : nullptr, nx, seed));
  CONVT3D_RETURN_IF_ERROR(Fill(p.dtype, b.w, need64 ? &b.w64 : nullptr, nw, seed + 1));
  CONVT3D_RETURN_IF_ERROR(Fill(p.dtype, b.b, need64 ? &b.b64 : nullptr, p.c_out, seed + 2));
  const gen::LaunchStep& g = gen::Launches(AsF64(p), ref_cfg).steps.front();
  void* xr = (need64 ? b.x64 : b.x).get();
  void* wr = (need64 ? b.w64 : b.w).get();
  void* br = (need64 ? b.b64 : b.b).get();
  void* yr = b.ref.get();
  void* args[] = {&xr, &wr, &br, &yr};
  CONVT3D_RETURN_IF_ERROR(ref_kernel->Launch(g.grid, g.block, 0, setup_.stream, args));
  return rt::Synchronize(setup_.stream);
}

// Records why a candidate is out (and says so in the log when log_line is not empty).
std::optional<CandidateKernels> Tuner::Reject(cache::Trial* t, const char* outcome,
                                              std::string message, const std::string& log_line) {
  t->outcome = outcome;
  t->message = std::move(message);
  if (!log_line.empty()) setup_.log(StrCat("  ", t->candidate, ": ", log_line));
  return std::nullopt;
}

StatusOr<Checked> Tuner::Check(const Problem& p, const gen::Config& c) {
  std::vector<cache::Trial> trials(1);
  setup_.log(StrCat("re-checking ", c.Name(), " on ", p.Signature()));
  CONVT3D_ASSIGN_OR_RETURN(const Compiled compiled, CompileBatch(p, {c}, &trials));
  TestBed bed;
  bed.stream = setup_.stream;
  CONVT3D_RETURN_IF_ERROR(PrepareInputs(p, compiled[0], &bed));
  CONVT3D_ASSIGN_OR_RETURN(std::optional<CandidateKernels> k,
                           Gate(p, c, compiled[1], &bed, &trials[0]));
  if (!k)
    return FailedPrecondition(StrCat(c.Name(), " on ", p.Signature(), ": ", trials[0].outcome, ": ",
                                     trials[0].message.substr(0, 300)));
  CONVT3D_RETURN_IF_ERROR(Probe(*k, bed, &trials[0]));
  return Checked{std::move(*k), compiled[1].cubin, std::move(trials[0])};
}

bool Tuner::Yield(std::chrono::steady_clock::time_point t0) const {
  return !setup_.between || setup_.between(std::chrono::steady_clock::now() - t0);
}

// Loads a compiled candidate and runs it once into the poisoned output (0xFF bytes are NaN,
// so an unwritten element fails), then compares with the reference. Fills *t; returns the
// candidate's kernels when it passed, nullopt when it is out, an error when tuning must stop.
StatusOr<std::optional<CandidateKernels>> Tuner::Gate(const Problem& p, const gen::Config& c,
                                                      const rt::CompileResult& compiled,
                                                      TestBed* bed, cache::Trial* t) {
  t->compile_ms = compiled.compile_ms;
  const std::string& why = compiled.status.message();
  if (!compiled.status.ok())
    return Reject(t, "compile_failed", why.substr(0, 2000),
                  "compile failed: " + why.substr(0, 300));
  auto kernel = CandidateKernels::Load(p, c, compiled.cubin, c.Name());
  if (!kernel.ok()) return Reject(t, "launch_failed", kernel.status().message(), "");
  return Verify(p, std::move(kernel).value(), bed, t);
}

StatusOr<std::optional<CandidateKernels>> Tuner::Verify(const Problem& p, CandidateKernels kernel,
                                                        TestBed* bed, cache::Trial* t) {
  if (const size_t bytes = kernel.workspace_bytes(); bytes > bed->workspace.size()) {
    bed->workspace = rt::DeviceBuffer();  // free first: the new one may be the larger
    auto grown = rt::DeviceBuffer::Alloc(bytes);
    if (!grown.ok()) {  // out of device memory for this candidate: the others may still fit
      const std::string m = StrCat("workspace of ", bytes, " bytes: ", grown.status().message());
      return Reject(t, "launch_failed", m, m);
    }
    bed->workspace = std::move(grown).value();
  }
  Status st = bed->y.FillBytes(0xFF, setup_.stream);
  if (st.ok()) st = bed->Launch(kernel);
  if (st.ok()) st = rt::Synchronize(setup_.stream);
  if (!st.ok()) {
    Reject(t, "launch_failed", st.message(), st.message());
    // A fault inside a kernel (illegal or misaligned address, trap) is sticky: every later
    // call in this context fails too. Then stop instead of failing the rest one by one; the
    // message names the candidate so it can be reported (and excluded) upstream.
    if (!rt::Synchronize().ok())
      return Internal(StrCat("tuning ", p.Signature(), " stopped: candidate ", t->candidate,
                             " left the CUDA context unusable: ", st.message()));
    return std::optional<CandidateKernels>();
  }
  double nonfinite = 0;
  CONVT3D_ASSIGN_OR_RETURN(auto err, Compare(bed, p.dtype, p.OutputElements(), &nonfinite));
  t->rel_err = err.first;
  t->max_abs_err = err.second;
  if (!(err.first <= ToleranceOf(p))) {
    const std::string m = StrCat("rel_err ", err.first, " > ", ToleranceOf(p), ", ", nonfinite,
                                 " non-finite outputs");
    return Reject(t, "wrong_result", m, "WRONG (" + m + ")");
  }
  return std::optional<CandidateKernels>(std::move(kernel));
}

// One timed run of a candidate that passed the gate: its rank for the finalists.
Status Tuner::Probe(const CandidateKernels& k, const TestBed& bed, cache::Trial* t) {
  auto launch = [&]() { return bed.Launch(k); };
  CONVT3D_ASSIGN_OR_RETURN(rt::Timing probe,
                           rt::TimeIt(launch, 0, 1, setup_.l2_flush_bytes, setup_.stream));
  t->outcome = "ok";
  t->median_ms = t->min_ms = probe.median_ms;
  t->repeats = 1;
  setup_.log(StrCat("  ", t->candidate, ": probe ", probe.median_ms, " ms, rel_err ", t->rel_err));
  return Status();
}

// Pass 2: the finalists timed properly (about 300 ms' worth of runs, at least 5, at most
// `repeats`, after `warmup`). Returns the fastest one's index, -1 when there is none.
StatusOr<int> Tuner::TimeFinalists(const Loaded& kernels, const TestBed& bed,
                                   std::vector<cache::Trial>* trials) {
  double best = INFINITY;
  int best_i = -1;
  std::vector<double> probe_ms(kernels.size());
  std::vector<bool> passed(kernels.size()), vendor(kernels.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    probe_ms[i] = (*trials)[i].median_ms;
    passed[i] = kernels[i].has_value();
    vendor[i] = passed[i] && kernels[i]->vendor != nullptr;
  }
  const std::vector<size_t> finalists = Finalists(probe_ms, passed, vendor);
  const auto t0 = std::chrono::steady_clock::now();
  size_t timed = 0;
  for (size_t i : finalists) {
    const auto ti = std::chrono::steady_clock::now();
    cache::Trial& t = (*trials)[i];
    auto launch = [&]() { return bed.Launch(*kernels[i]); };
    const int reps = std::clamp(static_cast<int>(300.0 / std::max(t.median_ms, 1e-3)), 5,
                                std::max(5, setup_.repeats));
    CONVT3D_ASSIGN_OR_RETURN(rt::Timing tm, rt::TimeIt(launch, setup_.warmup, reps,
                                                       setup_.l2_flush_bytes, setup_.stream));
    t.median_ms = tm.median_ms;
    t.min_ms = tm.min_ms;
    t.repeats = tm.repeats;
    setup_.log(StrCat("  ", t.candidate, ": ", tm.median_ms, " ms (", tm.repeats, " runs)"));
    LogProgress("timed", ++timed, finalists.size(), t0);
    // Ties go to the earlier (higher-ranked) candidate, so every process picks the same one.
    if (tm.median_ms < best) {
      best = tm.median_ms;
      best_i = static_cast<int>(i);
    }
    if (!Yield(ti)) return Unavailable("tuning cancelled");
  }
  return best_i;
}

Status Tuner::LoadUtil() {
  if (util_) return Status();
  CONVT3D_ASSIGN_OR_RETURN(std::string src, gen::UtilitySource());
  auto res = setup_.compile({{"convt3d_util", src, setup_.arch, {}, {}}});
  CONVT3D_RETURN_IF_ERROR(res[0].status);
  const std::vector<char>& cubin = res[0].cubin;
  auto u = std::make_unique<Util>();
  CONVT3D_ASSIGN_OR_RETURN(u->fill32, rt::Kernel::Load(cubin, "convt3d_fill_uniform_f32"));
  CONVT3D_ASSIGN_OR_RETURN(u->fill64, rt::Kernel::Load(cubin, "convt3d_fill_uniform_f64"));
  CONVT3D_ASSIGN_OR_RETURN(u->cmp32, rt::Kernel::Load(cubin, "convt3d_compare_f32"));
  CONVT3D_ASSIGN_OR_RETURN(u->cmp64, rt::Kernel::Load(cubin, "convt3d_compare_f64"));
  CONVT3D_ASSIGN_OR_RETURN(u->fill_bf16, rt::Kernel::Load(cubin, "convt3d_fill_uniform_bf16"));
  CONVT3D_ASSIGN_OR_RETURN(u->fill_f16, rt::Kernel::Load(cubin, "convt3d_fill_uniform_f16"));
  CONVT3D_ASSIGN_OR_RETURN(u->cmp_bf16, rt::Kernel::Load(cubin, "convt3d_compare_bf16"));
  CONVT3D_ASSIGN_OR_RETURN(u->cmp_f16, rt::Kernel::Load(cubin, "convt3d_compare_f16"));
  util_ = std::move(u);
  return Status();
}

// Fills buf (of dtype t) and, when given, buf64 with the same uniform values: the fp64 copy
// holds exactly the values rounded to t.
Status Tuner::Fill(DType t, const rt::DeviceBuffer& buf, const rt::DeviceBuffer* buf64,
                   int64_t count, uint64_t seed) {
  const Util& u = *util_;
  const unsigned grid[3] = {2048, 1, 1}, block[3] = {256, 1, 1};
  // convt3d_fill_uniform_f64 takes a fourth argument, the type whose values it copies (the
  // CONVT3D_ELEM code); the other fills take three and ignore the extra parameter pointer.
  int as = t == DType::kBF16 ? 2 : t == DType::kF16 ? 3 : 0;
  auto run = [&](const rt::Kernel& k, const rt::DeviceBuffer& b) {
    void* ptr = b.get();
    void* args[] = {&ptr, &count, &seed, &as};
    return k.Launch(grid, block, 0, setup_.stream, args);
  };
  const rt::Kernel& k = t == DType::kF64    ? *u.fill64
                        : t == DType::kBF16 ? *u.fill_bf16
                        : t == DType::kF16  ? *u.fill_f16
                                            : *u.fill32;
  CONVT3D_RETURN_IF_ERROR(run(k, buf));
  if (buf64 != nullptr) CONVT3D_RETURN_IF_ERROR(run(*u.fill64, *buf64));
  return rt::Synchronize(setup_.stream);
}

// Returns (relative L2 error, max abs error) of bed->y against bed->ref.
StatusOr<std::pair<double, double>> Tuner::Compare(TestBed* bed, DType t, int64_t count,
                                                   double* nonfinite) {
  const Util& u = *util_;
  CONVT3D_RETURN_IF_ERROR(bed->sums.FillBytes(0, setup_.stream));
  const unsigned grid[3] = {1024, 1, 1}, block[3] = {256, 1, 1};
  void* y = bed->y.get();
  void* ref = bed->ref.get();
  void* sums = bed->sums.get();
  void* args[] = {&y, &ref, &count, &sums};
  const rt::Kernel& k = t == DType::kF64    ? *u.cmp64
                        : t == DType::kBF16 ? *u.cmp_bf16
                        : t == DType::kF16  ? *u.cmp_f16
                                            : *u.cmp32;
  CONVT3D_RETURN_IF_ERROR(k.Launch(grid, block, 0, setup_.stream, args));
  CONVT3D_RETURN_IF_ERROR(rt::Synchronize(setup_.stream));
  double s[4];  // the kernel's sums: (y-ref)^2, ref^2, max |y-ref|, non-finite outputs
  CONVT3D_RETURN_IF_ERROR(bed->sums.Download(s, sizeof s));
  *nonfinite = s[3];
  ref::ErrorSums e;
  e.diff2 = s[0];
  e.ref2 = s[1];
  e.nonfinite = static_cast<int64_t>(s[3]);
  // The max abs error as the kernel found it, over the finite outputs.
  return std::make_pair(e.Stats().rel_l2, s[2]);
}

Status Record(cache::Store& store, const cache::Key& key, const Result& result) {
  return store.Record(key, result.winner, result.trials);
}

}  // namespace convt3d::tuner
