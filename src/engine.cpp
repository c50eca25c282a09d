// engine.cpp: the flow of a forward call: plan -> cache hit or tune -> launch (the glue room).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "base/status.h"
#include "cache/cache.h"
#include "cache/layers.h"
#include "cache/lease.h"
#include "convt3d/convt3d.h"
#include "generator/candidates.h"
#include "generator/source.h"
#include "runtime/cudnn.h"
#include "runtime/runtime.h"
#include "src/candidate.h"
#include "src/key_tags.h"
#include "src/tiers.h"
#include "src/tuner.h"
#include "src/vendor.h"

namespace convt3d {

// ---- Plan -------------------------------------------------------------------------------------
// A background tuning's winner, handed to every Plan made from the fallback (kBackground):
// each switches at its next Run (PlanImpl::Adopt).
struct Upgrade {
  std::atomic<bool> ready{false};
  std::mutex mu;
  std::shared_ptr<const PlanImpl> winner;  // set once, under mu, before ready
  void Publish(std::shared_ptr<const PlanImpl> w) {
    std::lock_guard<std::mutex> lock(mu);
    winner = std::move(w);
    ready.store(true, std::memory_order_release);
  }
};

// What the weight-only steps last wrote into a plan's workspace (Plan::Run with a version).
struct PackedWeights {
  // Run may be called from several threads, one at a time (the API: one Plan runs on one stream
  // at a time); the lock orders their reads and writes of this state, as Adopt's switch of the
  // kernels inside Run is ordered by the same contract.
  std::mutex mu;
  bool valid = false;
  const void* w = nullptr;
  uint64_t version = 0;
  // A Run was captured into a CUDA graph: its replays rewrite the workspace whenever they run,
  // so from then on this plan packs on every Run.
  bool captured = false;
};

class PlanImpl {
 public:
  // First, so that it is released last: the modules, buffers and the cuDNN handle below are
  // destroyed while the context they were made on still exists (a Plan may outlive its Engine).
  std::shared_ptr<rt::Context> context;
  Problem problem;
  CandidateKernels kernels;
  // The re-laid weights of families that have them; each Plan object owns its own, so plans
  // of one shape may run on different streams at once (one Plan runs on one stream at a time).
  std::shared_ptr<rt::DeviceBuffer> workspace;
  std::shared_ptr<PackedWeights> packed;  // set when the plan has weight-only steps
  std::string name, source;
  double tuned_ms = -1, rel_err = -1;
  PlanOrigin origin;
  std::shared_ptr<Upgrade> upgrade;  // a kBackground fallback's: the winner, once tuned

  // A kBackground fallback switches to its tuned winner once that is published (Adopt).
  Status MaybeAdopt(CUstream_st* stream) {
    if (!upgrade || !upgrade->ready.load(std::memory_order_acquire)) return Status();
    CONVT3D_RETURN_IF_ERROR(context->Activate());
    return Adopt(stream);
  }

  // Switches this plan to the published winner, keeping its own workspace when it is large
  // enough. Not while `stream` is being captured and a larger workspace would be allocated: the
  // next Run outside capture switches. A failed allocation keeps the fallback (and says so).
  Status Adopt(CUstream_st* stream) {
    std::shared_ptr<const PlanImpl> w;
    {
      std::lock_guard<std::mutex> lock(upgrade->mu);
      w = upgrade->winner;
    }
    std::shared_ptr<rt::DeviceBuffer> ws = workspace;
    const size_t bytes = w->kernels.workspace_bytes();
    if (bytes > (ws ? ws->size() : 0)) {
      if (rt::StreamIsCapturing(stream)) return Status();
      auto buf = rt::DeviceBuffer::Alloc(bytes);
      if (!buf.ok()) {
        upgrade.reset();  // keep the fallback rather than fail every Run
        origin.reason +=
            StrCat("; tuned winner ", w->name, " not adopted: ", buf.status().message());
        return Status();
      }
      ws = std::make_shared<rt::DeviceBuffer>(std::move(buf).value());
    }
    kernels = w->kernels;
    name = w->name;
    source = w->source;
    tuned_ms = w->tuned_ms;
    rel_err = w->rel_err;
    origin = w->origin;
    workspace = std::move(ws);
    // Another kernel: nothing of it is packed yet. A graph captured from the fallback still
    // rewrites the workspace when replayed, so a captured plan stays one.
    const bool captured = packed && packed->captured;
    packed = kernels.has_weight_steps() ? std::make_shared<PackedWeights>() : nullptr;
    if (packed) packed->captured = captured;
    upgrade.reset();
    return Status();
  }

  // `version` null: pack every run (Plan::Run without a version).
  Status Run(const void* x, const void* w, const void* bias, void* y, CUstream_st* stream,
             const uint64_t* version);
};

Plan::Plan(std::unique_ptr<PlanImpl> impl) : impl_(std::move(impl)) {}
Plan::~Plan() = default;
Plan::Plan(Plan&&) noexcept = default;
Plan& Plan::operator=(Plan&&) noexcept = default;
const Problem& Plan::problem() const { return impl_->problem; }
const std::string& Plan::kernel_name() const { return impl_->name; }
const std::string& Plan::source() const { return impl_->source; }
double Plan::tuned_ms() const { return impl_->tuned_ms; }
double Plan::rel_err() const { return impl_->rel_err; }
const PlanOrigin& Plan::origin() const { return impl_->origin; }

Status Plan::Run(const void* x, const void* w, const void* bias, void* y,
                 CUstream_st* stream) const {
  return impl_->Run(x, w, bias, y, stream, nullptr);
}

Status Plan::Run(const void* x, const void* w, const void* bias, void* y, CUstream_st* stream,
                 uint64_t weight_version) const {
  return impl_->Run(x, w, bias, y, stream, &weight_version);
}

Status PlanImpl::Run(const void* x, const void* w, const void* bias, void* y, CUstream_st* stream,
                     const uint64_t* version) {
  CONVT3D_RETURN_IF_ERROR(MaybeAdopt(stream));
  if (x == nullptr || w == nullptr || y == nullptr)
    return InvalidArgument(
        StrCat("x, w and y must be device pointers (got x=", x, ", w=", w, ", y=", y, ")"));
  if (problem.bias && bias == nullptr)
    return InvalidArgument("bias is null but the problem has bias=true");
  CONVT3D_RETURN_IF_ERROR(context->Activate());
  void* const ws = workspace ? workspace->get() : nullptr;
  if (!packed) return kernels.Launch(x, w, bias, y, ws, stream);
  std::lock_guard<std::mutex> lock(packed->mu);
  // Checked on every run, versioned or not: a graph captured from an unversioned run rewrites
  // the workspace too.
  if (!packed->captured && rt::StreamIsCapturing(stream)) packed->captured = true;
  const bool skip = version != nullptr && !packed->captured && packed->valid && packed->w == w &&
                    packed->version == *version;
  Status s = kernels.Launch(x, w, bias, y, ws, stream, skip);
  packed->valid = s.ok() && version != nullptr && !packed->captured;
  packed->w = w;
  packed->version = version != nullptr ? *version : 0;
  return s;
}

// ---- Engine -----------------------------------------------------------------------------------
class EngineImpl {
 public:
  Options options;
  std::unique_ptr<cache::Store> store;
  std::vector<std::unique_ptr<cache::Store>> shared;  // read-only, looked up after `store`
  std::shared_ptr<rt::Context> context;
  Environment env;
  std::atomic<int> compiles{0};
  std::mutex mu;
  std::map<std::string, std::shared_ptr<PlanImpl>> plans;  // by signature, this process
  // Heuristic plans run while another tuner holds a shape's lease; kept apart from `plans` so
  // that every call looks for the winner again.
  std::map<std::string, std::shared_ptr<PlanImpl>> stand_ins;
  std::unique_ptr<tuner::Tuner> tuning;  // when there is a GPU
  // Vendor arbitration (Options::vendor_candidates): the cuDNN handle of this engine's context,
  // made once and shared by the tuners and every cuDNN plan (cudnn::Handle serialises its use),
  // and the tag it adds to every key's code hash (vendor::KeyTag). Null and "": ours alone.
  std::shared_ptr<cudnn::Handle> cudnn;
  std::string vendor_tag;
  // fp32x3's 3xFP16 opt-in (Options::fp32x3_fp16 or its variable, tuner::Fp16SplitOptIn), read
  // once: it sets the candidates (Limits) and tags fp32x3 keys (src/key_tags.h).
  bool fp16_split = false;

  // kBackground: a worker thread, started by the first shape it gets, tunes the queued shapes in
  // order with a tuner of its own and publishes each winner to `plans` and its Upgrade.
  std::mutex bg_mu;
  std::condition_variable bg_cv;
  std::deque<Problem> bg_queue;
  std::map<std::string, std::shared_ptr<Upgrade>> bg_slots;  // queued or being tuned
  std::atomic<bool> bg_stop{false};
  std::thread bg_thread;
  std::unique_ptr<rt::Stream> bg_stream;   // the worker's low-priority stream
  std::unique_ptr<tuner::Tuner> bg_tuner;  // the worker's own, on bg_stream

  ~EngineImpl() { StopBackground(); }
  // Loads cuDNN for vendor arbitration when the options and $CONVT3D_VENDOR_CANDIDATES allow it.
  // Without cuDNN this engine tunes ours alone, exactly as with arbitration off: the reason is
  // an info line of the log, never an error. REQUIRES: the context is current.
  void StartArbitration() {
    const char* env_switch = std::getenv("CONVT3D_VENDOR_CANDIDATES");
    if (!options.vendor_candidates || (env_switch != nullptr && std::strcmp(env_switch, "0") == 0))
      return;
    auto library = cudnn::Library::Load();
    if (!library.ok()) {
      Log(StrCat("no cuDNN arbitration: ", library.status().message()));
      return;
    }
    auto handle = cudnn::Handle::Create(library.value());
    if (!handle.ok()) {
      Log(StrCat("no cuDNN arbitration: ", handle.status().message()));
      return;
    }
    cudnn = std::move(handle).value();
    vendor_tag = vendor::KeyTag(static_cast<int64_t>(cudnn->library().version()));
    Log(StrCat("cuDNN ", cudnn->library().VersionString(), " arbitrates (", cudnn->library().path(),
               ")"));
  }
  StatusOr<convt3d::Plan> MakePlan(const Problem& p);
  tuner::Setup TunerSetup();
  void StopBackground() {
    {
      std::lock_guard<std::mutex> lock(bg_mu);
      bg_stop = true;
    }
    bg_cv.notify_all();
    if (bg_thread.joinable()) bg_thread.join();
  }
  // The one way out of the library: to options.log, else to stderr when verbose, else nowhere.
  void Log(const std::string& line, LogLevel level = LogLevel::kInfo) const {
    if (options.log) {
      options.log(level, line);
    } else if (options.verbose) {
      std::fprintf(stderr, "convt3d: %s%s\n", level == LogLevel::kWarning ? "warning: " : "",
                   line.c_str());
    }
  }
  void Warn(const std::string& line) const { Log(line, LogLevel::kWarning); }

 private:
  // Results tuned among other candidates (cuDNN's, the 3xFP16 tiles) get keys of their own.
  cache::Key KeyOf(const Problem& p) const {
    return {p.Signature(),     env.arch,
            env.gpu_name,      env.driver_version,
            env.nvrtc_version, keytag::KeyCodeHash(env.code_hash, vendor_tag, p, fp16_split)};
  }
  // The generator prunes candidates that this device could not launch.
  gen::DeviceLimits Limits() const {
    const rt::DeviceInfo& d = context->info();
    gen::DeviceLimits l;
    l.max_threads_per_block = d.max_threads_per_block;
    l.max_regs_per_block = d.max_regs_per_block;
    // Kernels above 48 KiB opt in (rt::Kernel::Launch raises their limit) up to this.
    if (d.max_smem_per_block_optin > 0) l.max_smem_per_block = d.max_smem_per_block_optin;
    l.wgmma = gen::HasWgmma(env.arch);
    l.fp16_split = fp16_split;
    return l;
  }
  std::vector<rt::CompileResult> Compile(const std::vector<rt::CompileRequest>& reqs) {
    return CompileWith(reqs, options.compile_threads);
  }
  std::vector<rt::CompileResult> CompileWith(const std::vector<rt::CompileRequest>& reqs,
                                             int threads) {
    compiles += static_cast<int>(reqs.size());
    if (!options.log && !options.verbose) return rt::CompileAll(reqs, threads);
    // "compiled i/N (s)" at each tenth: about ten lines per tuning, whatever N is.
    const auto t0 = std::chrono::steady_clock::now();
    const size_t n = reqs.size();
    size_t tenths = 0;
    return rt::CompileAll(reqs, threads, [&](size_t done) {
      if (done * 10 / n == tenths && done < n) return;
      tenths = done * 10 / n;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      Log(StrCat("  compiled ", done, "/", n, " (", StrFormat("%.1f", s), " s)"));
    });
  }
  // Every plan is built here: its launch geometry is always derived from (problem, config).
  std::shared_ptr<PlanImpl> NewPlan(const Problem& p, CandidateKernels kernels, std::string source,
                                    double tuned_ms = -1, double rel_err = -1) const {
    auto plan = std::make_shared<PlanImpl>();
    plan->problem = p;
    plan->name = kernels.Name();
    plan->kernels = std::move(kernels);
    plan->context = context;
    plan->source = std::move(source);
    plan->tuned_ms = tuned_ms;
    plan->rel_err = rel_err;
    return plan;
  }
  StatusOr<std::shared_ptr<PlanImpl>> FromConfig(const Problem& p, const gen::Config& c,
                                                 const std::string& source);
  StatusOr<std::shared_ptr<PlanImpl>> FromCache(const Problem& p, const cache::Winner& w);
  StatusOr<std::shared_ptr<PlanImpl>> Tune(const Problem& p);
  StatusOr<std::shared_ptr<PlanImpl>> TuneOnce(const Problem& p, bool* stand_in);
  // Records a tuning result under p's key with its note ("tuned", the winner's source hash).
  void RecordTuned(const Problem& p, const tuner::Result& r, const char* how);
  std::shared_ptr<PlanImpl> FromTiers(const Problem& p, std::vector<std::string>* missed);
  std::shared_ptr<Upgrade> ScheduleTuning(const Problem& p);
  void BackgroundLoop();
  StatusOr<std::shared_ptr<PlanImpl>> BackgroundTune(const Problem& p);
};

namespace {

// "; missed: a; b" or "".
std::string Missed(const std::vector<std::string>& missed) {
  std::string out;
  for (const std::string& m : missed) out += (out.empty() ? "; missed: " : "; ") + m;
  return out;
}

PlanOrigin OriginOf(tiers::Tier t, std::string reason) {
  return {static_cast<int>(t), tiers::TierName(t), std::move(reason)};
}

}  // namespace

StatusOr<std::shared_ptr<PlanImpl>> EngineImpl::FromConfig(const Problem& p, const gen::Config& c,
                                                           const std::string& source) {
  CONVT3D_ASSIGN_OR_RETURN(std::string src, gen::BuildSource(p, c));
  rt::CompileRequest req{c.Name(), src, gen::CompileArch(c, env.arch), {c.Name()}, {}};
  auto res = Compile({req});
  CONVT3D_RETURN_IF_ERROR(res[0].status);
  CONVT3D_ASSIGN_OR_RETURN(auto kernels, CandidateKernels::Load(p, c, res[0].cubin, c.Name()));
  return NewPlan(p, std::move(kernels), source);
}

StatusOr<std::shared_ptr<PlanImpl>> EngineImpl::FromCache(const Problem& p,
                                                          const cache::Winner& w) {
  if (vendor::IsVendorJson(w.params_json)) {
    // A cuDNN winner: usable only where this engine arbitrates with the cuDNN it was tuned with
    // (the key's tag says so, but a hand-made or imported entry may not); else the caller goes
    // on to the next tier, as for any entry it cannot use.
    CONVT3D_ASSIGN_OR_RETURN(vendor::CudnnChoice choice,
                             vendor::CudnnChoice::FromJson(w.params_json));
    if (choice.Name() != w.candidate)
      return Internal(StrCat("cache entry names ", w.candidate, " but its parameters describe ",
                             choice.Name()));
    if (!cudnn) return Unavailable(StrCat(w.candidate, ": no cuDNN arbitration in this engine"));
    if (static_cast<int64_t>(cudnn->library().version()) != choice.cudnn_version)
      return Unavailable(StrCat(w.candidate, " was tuned with cuDNN ", choice.cudnn_version,
                                ", this engine has ", cudnn->library().version()));
    const std::optional<cudnn::Precision> precision = cudnn::PrecisionFor(p);
    if (!precision) return Unavailable(StrCat(w.candidate, ": cuDNN has no mode for this dtype"));
    CONVT3D_ASSIGN_OR_RETURN(auto algorithm,
                             cudnn::Algorithm::Create(cudnn, p, *precision, choice.algo));
    if (algorithm->math_name() != choice.math)
      return Unavailable(StrCat(w.candidate, " ran with ", choice.math, ", here it would get ",
                                algorithm->math_name()));
    return NewPlan(p, CandidateKernels::Vendor(std::move(algorithm), choice.Name()), "cache",
                   w.median_ms, w.rel_err);
  }
  CONVT3D_ASSIGN_OR_RETURN(gen::Config c, gen::Config::FromJson(w.params_json));
  if (c.Name() != w.candidate)
    return Internal(
        StrCat("cache entry names ", w.candidate, " but its parameters describe ", c.Name()));
  CONVT3D_ASSIGN_OR_RETURN(auto kernels, CandidateKernels::Load(p, c, w.cubin, w.kernel_symbol));
  return NewPlan(p, std::move(kernels), "cache", w.median_ms, w.rel_err);
}

tuner::Setup EngineImpl::TunerSetup() {
  tuner::Setup s;
  s.arch = env.arch;
  s.limits = Limits();
  // Twice the L2: every timed run starts from a cold cache.
  s.l2_flush_bytes = std::max<size_t>(2 * static_cast<size_t>(context->info().l2_bytes), 1 << 20);
  s.max_candidates = options.max_candidates;
  s.warmup = options.warmup;
  s.repeats = options.repeats;
  s.compile = [this](const std::vector<rt::CompileRequest>& reqs) { return Compile(reqs); };
  s.log = [this](const std::string& line) { Log(line); };
  s.cudnn = cudnn;
  return s;
}

void EngineImpl::RecordTuned(const Problem& p, const tuner::Result& r, const char* how) {
  std::string source_hash;
  if (auto c = gen::Config::FromJson(r.winner.params_json); c.ok())
    source_hash = gen::SourceHash(p, c.value());
  Status rs = store->Record(KeyOf(p), r.winner, r.trials, cache::Note{how, source_hash});
  if (!rs.ok()) Warn(StrCat("tuning result not cached: ", rs.message()));
  Log(StrCat("winner ", r.winner.candidate, " ", r.winner.median_ms, " ms"));
}

StatusOr<std::shared_ptr<PlanImpl>> EngineImpl::Tune(const Problem& p) {
  CONVT3D_ASSIGN_OR_RETURN(tuner::Result r, tuning->Run(p));
  RecordTuned(p, r, "tuned");
  auto impl = NewPlan(p, std::move(r.kernels), "tuned", r.winner.median_ms, r.winner.rel_err);
  impl->origin = OriginOf(
      tiers::Tier::kTuned,
      StrCat("tuned now: ", r.trials.size(), " candidates, winner ", r.winner.median_ms, " ms"));
  return impl;
}

// Tiers 2-4 (src/tiers.h): the first option the policy takes (tiers::RuleFor) that recompiles
// (and, tiers 2-3, passes the check here); recorded as this key's entry, with a note saying
// where it came from, where the rule says so. nullptr when none serves; *missed gets a line per
// tier or option that did not.
std::shared_ptr<PlanImpl> EngineImpl::FromTiers(const Problem& p,
                                                std::vector<std::string>* missed) {
  std::vector<cache::Store*> layers{store.get()};
  for (const auto& s : shared) layers.push_back(s.get());
  const cache::Key key = KeyOf(p);
  StatusOr<tiers::Found> found = tiers::Find(layers, key, p, Limits());
  if (!found.ok()) {
    missed->push_back(StrCat("tiers 2-4: cache not readable: ", found.status().message()));
    return nullptr;
  }
  for (const std::string& m : found->missed)
    if (m.rfind("tier 1", 0) != 0) missed->push_back(m);  // the exact lookup said it already
  for (const tiers::Option& o : found->options) {
    if (o.tier == tiers::Tier::kExact) continue;
    const std::string label =
        StrCat("tier ", static_cast<int>(o.tier), " ", tiers::TierName(o.tier));
    const tiers::Rule rule = tiers::RuleFor(options.policy, o.tier);
    if (!rule.serve) {
      missed->push_back(StrCat(label, ": ", o.what, ": not taken by this policy (it tunes)"));
      continue;
    }
    StatusOr<gen::Config> c = gen::Config::FromJson(o.winner.params_json);
    if (o.tier == tiers::Tier::kNearest) {
      // A stand-in like the heuristic pick (a candidate of this problem, never recorded):
      // compiled, not re-checked, so it costs what the heuristic pick costs.
      auto impl = c.ok() ? FromConfig(p, c.value(), "cache")
                         : StatusOr<std::shared_ptr<PlanImpl>>(c.status());
      if (!impl.ok()) {
        missed->push_back(
            StrCat(label, ": ", o.what, ": does not compile here: ", impl.status().message()));
        continue;
      }
      impl.value()->origin = OriginOf(
          o.tier, StrCat(label, ": ", o.what,
                         "; compiled, not re-checked (a stand-in, like the heuristic pick)"));
      return impl.value();
    }
    StatusOr<tuner::Checked> checked =
        c.ok() ? tuning->Check(p, c.value()) : StatusOr<tuner::Checked>(c.status());
    if (!checked.ok()) {
      missed->push_back(
          StrCat(label, ": ", o.what, ": re-check failed: ", checked.status().message()));
      continue;
    }
    const cache::Trial& t = checked->trial;
    std::string reason = StrCat(label, ": ", o.what, "; re-checked here: rel_err ", t.rel_err,
                                ", probe ", t.median_ms, " ms");
    if (rule.record) {
      cache::Winner w;
      w.candidate = w.kernel_symbol = c->Name();
      w.params_json = c->ToJson();
      w.cubin = checked->cubin;
      w.median_ms = t.median_ms;
      w.rel_err = t.rel_err;
      const cache::Note note{
          StrCat(label, " from ", o.key.gpu_name, " driver ", o.key.driver_version, " nvrtc ",
                 o.key.nvrtc_version, " code ", o.key.code_hash),
          gen::SourceHash(p, c.value())};
      Status rs = store->Record(key, w, {t}, note);
      if (rs.ok()) {
        reason += "; recorded as this key's entry";
      } else {
        Warn(StrCat(label, " result not cached: ", rs.message()));
      }
    }
    auto impl = NewPlan(p, std::move(checked->kernels), "cache", t.median_ms, t.rel_err);
    impl->origin = OriginOf(o.tier, reason);
    return impl;
  }
  return nullptr;
}

std::shared_ptr<Upgrade> EngineImpl::ScheduleTuning(const Problem& p) {
  std::lock_guard<std::mutex> lock(bg_mu);
  std::shared_ptr<Upgrade>& slot = bg_slots[p.Signature()];
  if (slot) return slot;
  slot = std::make_shared<Upgrade>();
  bg_queue.push_back(p);
  if (!bg_thread.joinable()) bg_thread = std::thread([this] { BackgroundLoop(); });
  bg_cv.notify_one();
  return slot;
}

void EngineImpl::BackgroundLoop() {
  const Status active = context->Activate();
  // The stream and the tuner's device memory go on this thread, with the context current.
  struct Release {
    EngineImpl* e;
    ~Release() {
      e->bg_tuner.reset();
      e->bg_stream.reset();
    }
  } release{this};
  while (true) {
    Problem p;
    {
      std::unique_lock<std::mutex> lock(bg_mu);
      bg_cv.wait(lock, [this] { return bg_stop || !bg_queue.empty(); });
      if (bg_stop) return;
      p = bg_queue.front();
      bg_queue.pop_front();
    }
    const std::string sig = p.Signature();
    StatusOr<std::shared_ptr<PlanImpl>> winner = active.ok() ? BackgroundTune(p) : active;
    std::shared_ptr<Upgrade> slot;
    {
      std::lock_guard<std::mutex> lock(bg_mu);
      slot = bg_slots[sig];
      bg_slots.erase(sig);
    }
    if (!winner.ok()) {
      if (!bg_stop)
        Warn(StrCat("background tuning of ", sig, " failed: ", winner.status().message()));
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      plans[sig] = winner.value();
      stand_ins.erase(sig);
    }
    if (slot) slot->Publish(winner.value());
    Log(StrCat("background: ", sig, " now runs ", winner.value()->name));
  }
}

// The worker's tuning of one shape under single flight: tunes when it gets the lease (or the
// store cannot coordinate), else waits in one-second slices (so that a stop is noticed) for the
// holder's winner, or for its lease to expire.
StatusOr<std::shared_ptr<PlanImpl>> EngineImpl::BackgroundTune(const Problem& p) {
  if (!bg_tuner) {
    CONVT3D_ASSIGN_OR_RETURN(bg_stream, rt::Stream::CreateLowPriority());
    tuner::Setup s = TunerSetup();
    s.stream = bg_stream->get();
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const int threads =
        options.compile_threads > 0 ? options.compile_threads : std::max(1, cores / 2);
    // In batches of `threads`, so that a stopping engine waits for one batch, not the list (one
    // progress line per batch).
    s.compile = [this, threads](const std::vector<rt::CompileRequest>& reqs) {
      std::vector<rt::CompileResult> out;
      for (size_t i = 0; i < reqs.size(); i += static_cast<size_t>(threads)) {
        if (bg_stop) {
          for (size_t j = i; j < reqs.size(); ++j) {
            rt::CompileResult r;
            r.name = reqs[j].name;
            r.status = Unavailable(StrCat(reqs[j].name, ": not compiled, the engine is stopping"));
            out.push_back(std::move(r));
          }
          break;
        }
        const size_t end = std::min(reqs.size(), i + static_cast<size_t>(threads));
        compiles += static_cast<int>(end - i);
        for (auto& r : rt::CompileAll({reqs.begin() + i, reqs.begin() + end}, threads))
          out.push_back(std::move(r));
        Log(StrCat("  background: compiled ", end, "/", reqs.size()));
      }
      return out;
    };
    // Pause as long as the GPU work took, waking at once when the engine stops.
    s.between = [this](std::chrono::steady_clock::duration busy) {
      std::unique_lock<std::mutex> lock(bg_mu);
      bg_cv.wait_for(lock, busy, [this] { return bg_stop.load(); });
      return !bg_stop;
    };
    bg_tuner = std::make_unique<tuner::Tuner>(std::move(s));
  }
  const cache::Key key = KeyOf(p);
  while (!bg_stop) {
    StatusOr<cache::Claimed> claim =
        cache::WaitForTuning(*store, key, std::chrono::milliseconds(1000));
    if (!claim.ok() || claim->result.claim == cache::Claim::kAcquired) {
      const auto t0 = std::chrono::steady_clock::now();
      CONVT3D_ASSIGN_OR_RETURN(tuner::Result r, bg_tuner->Run(p));
      RecordTuned(p, r, "tuned (background)");
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      auto impl = NewPlan(p, std::move(r.kernels), "tuned", r.winner.median_ms, r.winner.rel_err);
      impl->origin =
          OriginOf(tiers::Tier::kTuned,
                   StrCat("tuned in the background: ", r.trials.size(), " candidates in ",
                          StrFormat("%.1f", s), " s, winner ", r.winner.median_ms, " ms"));
      return impl;
    }
    if (claim->result.claim == cache::Claim::kStored) {
      CONVT3D_ASSIGN_OR_RETURN(std::optional<cache::Winner> w, store->Lookup(key));
      if (!w) return NotFound(StrCat(p.Signature(), ": stored winner vanished (pruned?)"));
      CONVT3D_ASSIGN_OR_RETURN(auto impl, FromCache(p, *w));
      impl->origin = OriginOf(tiers::Tier::kExact, "tier 1 exact: stored by another tuner");
      return impl;
    }
  }
  return Unavailable("engine shutting down");
}

// Single flight (cache/lease.h): tunes p unless another thread or process holds its lease; then
// the winner once it is stored, else a stand-in (*stand_in). A store that cannot coordinate
// (read-only, damaged) leaves this engine tuning alone.
StatusOr<std::shared_ptr<PlanImpl>> EngineImpl::TuneOnce(const Problem& p, bool* stand_in) {
  const cache::Key key = KeyOf(p);
  StatusOr<cache::Claimed> claim =
      options.tune_wait_ms > 0
          ? cache::WaitForTuning(*store, key, std::chrono::milliseconds(options.tune_wait_ms))
          : cache::ClaimTuning(*store, key);
  if (!claim.ok() || claim->result.claim == cache::Claim::kAcquired) return Tune(p);
  if (claim->result.claim == cache::Claim::kStored) {
    StatusOr<std::optional<cache::Winner>> w = store->Lookup(key);
    if (w.ok() && w.value()) {
      auto cached = FromCache(p, *w.value());
      if (cached.ok()) {
        cached.value()->origin =
            OriginOf(tiers::Tier::kExact, "tier 1 exact: stored by another tuner meanwhile");
        return cached;
      }
    }
    return Tune(p);  // damaged (Record replaces it) or pruned meanwhile
  }
  const cache::Lease& holder = claim->result.lease;
  Log(StrCat(p.Signature(), " is being tuned by ", holder.owner, "; heuristic pick meanwhile"));
  *stand_in = true;
  if (auto it = stand_ins.find(p.Signature()); it != stand_ins.end()) return it->second;
  CONVT3D_ASSIGN_OR_RETURN(auto impl, FromConfig(p, gen::HeuristicPick(p, Limits()), "heuristic"));
  impl->origin = OriginOf(tiers::Tier::kHeuristic,
                          StrCat("tier 5 heuristic while ", holder.owner, " tunes this shape"));
  stand_ins[p.Signature()] = impl;
  return impl;
}

StatusOr<convt3d::Plan> EngineImpl::MakePlan(const Problem& p) {
  CONVT3D_RETURN_IF_ERROR(Validate(p));
  if (!context) return FailedPrecondition(StrCat("no usable GPU: ", env.driver_error));
  std::lock_guard<std::mutex> lock(mu);
  CONVT3D_RETURN_IF_ERROR(context->Activate());
  const std::string sig = p.Signature();
  // Each Plan object gets its own copy, with its own workspace for re-laid weights.
  const auto wrap = [](std::shared_ptr<PlanImpl> impl) -> StatusOr<convt3d::Plan> {
    auto copy = std::make_unique<PlanImpl>(*impl);
    if (const size_t bytes = copy->kernels.workspace_bytes(); bytes > 0) {
      CONVT3D_ASSIGN_OR_RETURN(auto buf, rt::DeviceBuffer::Alloc(bytes));
      copy->workspace = std::make_shared<rt::DeviceBuffer>(std::move(buf));
    }
    if (copy->kernels.has_weight_steps()) copy->packed = std::make_shared<PackedWeights>();
    return convt3d::Plan(std::move(copy));
  };
  const TunePolicy policy = options.policy;
  if (policy != TunePolicy::kExhaustive) {
    if (auto it = plans.find(sig); it != plans.end()) return wrap(it->second);
  }
  std::shared_ptr<PlanImpl> impl;
  std::vector<std::string> missed;  // why the better tiers did not serve, one line each
  if (policy != TunePolicy::kNever && policy != TunePolicy::kExhaustive) {
    std::string layer;
    auto hit = cache::LookupLayered(*store, shared, KeyOf(p), &layer);
    if (!hit.ok()) {
      Warn(StrCat("cache lookup failed: ", hit.status().message()));
      missed.push_back(StrCat("tier 1 exact: ", hit.status().message()));
    } else if (hit.value()) {
      auto cached = FromCache(p, *hit.value());
      if (cached.ok()) {
        impl = cached.value();
        std::string how;
        if (layer == store->path()) {
          auto note = store->ReadNote(KeyOf(p));
          if (note.ok() && note.value() && note.value()->origin != "tuned")
            how = StrCat(" (recorded by ", note.value()->origin, ")");
        }
        impl->origin =
            OriginOf(tiers::Tier::kExact, StrCat("tier 1 exact: ", impl->name, " in ", layer, how));
      } else {
        Warn(StrCat("cached kernel for ", sig, " unusable (", cached.status().message(),
                    "); replanning"));
        missed.push_back(StrCat("tier 1 exact: entry unusable: ", cached.status().message()));
      }
    } else {
      missed.push_back("tier 1 exact: no entry for this exact key");
    }
    if (!impl) impl = FromTiers(p, &missed);
  }
  bool stand_in = false;
  if (!impl) {
    if (policy == TunePolicy::kTuneIfMissing) {
      CONVT3D_ASSIGN_OR_RETURN(impl, TuneOnce(p, &stand_in));
    } else if (policy == TunePolicy::kExhaustive) {
      CONVT3D_ASSIGN_OR_RETURN(impl, Tune(p));
    } else {
      CONVT3D_ASSIGN_OR_RETURN(impl, FromConfig(p, gen::HeuristicPick(p, Limits()), "heuristic"));
      impl->origin = OriginOf(tiers::Tier::kHeuristic, policy == TunePolicy::kNever
                                                           ? "tier 5 heuristic: policy kNever"
                                                           : "tier 5 heuristic");
    }
  }
  if (!stand_in && impl->origin.tier != 1) impl->origin.reason += Missed(missed);
  // kBackground: a stand-in from tier 3 down gets tuned; its plans switch when the winner is in.
  if (!stand_in && tiers::RuleFor(policy, static_cast<tiers::Tier>(impl->origin.tier)).background) {
    impl->upgrade = ScheduleTuning(p);
    impl->origin.reason += "; tuning in the background";
  }
  if (!stand_in) {
    plans[sig] = impl;
    stand_ins.erase(sig);
  }
  return wrap(impl);
}

StatusOr<Engine> Engine::Create(const Options& options) {
  auto impl = std::make_unique<EngineImpl>();
  impl->options = options;
  impl->fp16_split = tuner::Fp16SplitOptIn(options.fp32x3_fp16);
  if (impl->fp16_split)
    impl->Log(StrCat("fp32x3 may run the 3xFP16 tiles (opt-in; its results are cached under '",
                     keytag::kFp16Split, "')"));
  impl->env = DescribeEnvironment(options.device);
  if (!impl->env.nvrtc_error.empty() && impl->env.driver_error.empty())
    return FailedPrecondition(impl->env.nvrtc_error);
  if (impl->env.driver_error.empty()) {
    CONVT3D_ASSIGN_OR_RETURN(impl->context, rt::Context::Create(options.device));
    impl->StartArbitration();
    impl->tuning = std::make_unique<tuner::Tuner>(impl->TunerSetup());
  }
  impl->store = cache::Store::Open(options.cache_path.empty() ? cache::Store::DefaultPath()
                                                              : options.cache_path);
  impl->shared = cache::OpenShared(options.shared_cache_paths.empty() ? cache::SharedPathsFromEnv()
                                                                      : options.shared_cache_paths);
  const auto warn = [&impl](const cache::Store& s) {
    const std::string prefix = "convt3d: ";  // the store's warnings stand alone; Log adds it
    const std::string& w = s.warning();
    if (!w.empty()) impl->Warn(w.rfind(prefix, 0) == 0 ? w.substr(prefix.size()) : w);
  };
  warn(*impl->store);
  for (const auto& s : impl->shared) warn(*s);
  return Engine(std::move(impl));
}

Engine::Engine(std::unique_ptr<EngineImpl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

StatusOr<Plan> Engine::Plan(const Problem& problem) { return impl_->MakePlan(problem); }

Status Engine::Forward(const Problem& problem, const void* x, const void* w, const void* bias,
                       void* y, CUstream_st* stream) {
  CONVT3D_ASSIGN_OR_RETURN(auto plan, Plan(problem));
  return plan.Run(x, w, bias, y, stream);
}

std::string Engine::cache_path() const { return impl_->store->path(); }
std::string Engine::cache_warning() const { return impl_->store->warning(); }
int Engine::nvrtc_compiles() const { return impl_->compiles.load(); }

// ---- Free functions ---------------------------------------------------------------------------
Environment DescribeEnvironment(int device) {
  Environment env;
  env.code_hash = gen::CodeHash();
  auto nv = rt::NvrtcVersion();
  if (nv.ok()) {
    env.nvrtc_version = nv.value();
  } else {
    env.nvrtc_error = nv.status().message();
  }
  if (auto lib = cudnn::Library::Load(); lib.ok()) {
    env.cudnn_version = static_cast<int>(lib.value()->version());
    env.cudnn_path = lib.value()->path();
  } else {
    env.cudnn_error = lib.status().message();
  }
  auto dev = rt::QueryDevice(device);
  if (dev.ok()) {
    env.gpu_name = dev->name;
    env.arch = dev->arch();
    env.driver_version = dev->driver_version;
  } else {
    env.driver_error = dev.status().message();
  }
  return env;
}

StatusOr<CompileReport> CompileCandidates(const Problem& problem, const std::string& arch,
                                          int threads, const std::string& emit_dir,
                                          int max_candidates,
                                          const std::function<void(int, int)>& progress,
                                          bool fp32x3_fp16) {
  CONVT3D_RETURN_IF_ERROR(Validate(problem));
  gen::DeviceLimits limits;
  limits.wgmma = gen::HasWgmma(arch);
  limits.fp16_split = tuner::Fp16SplitOptIn(fp32x3_fp16);
  const auto configs = tuner::CandidatesUpTo(problem, limits, max_candidates);
  std::vector<rt::CompileRequest> reqs;
  for (const auto& c : configs) {
    CONVT3D_ASSIGN_OR_RETURN(std::string src, gen::BuildSource(problem, c));
    reqs.push_back({c.Name(), std::move(src), gen::CompileArch(c, arch), {c.Name()}, {}});
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::function<void(size_t)> each;
  if (progress) {
    each = [&](size_t done) { progress(static_cast<int>(done), static_cast<int>(reqs.size())); };
  }
  const auto results = rt::CompileAll(reqs, threads, each);
  CompileReport rep;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.candidates = static_cast<int>(configs.size());
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (!emit_dir.empty()) {
      std::ofstream(emit_dir + "/" + r.name + ".cu") << reqs[i].source;
      if (!r.cubin.empty())
        std::ofstream(emit_dir + "/" + r.name + ".cubin", std::ios::binary)
            .write(r.cubin.data(), static_cast<std::streamsize>(r.cubin.size()));
    }
    if (r.status.ok() && !r.cubin.empty()) {
      ++rep.compiled;
    } else {
      rep.failures.push_back(StrCat(r.name, ": ", r.status.message()));
    }
  }
  return rep;
}

}  // namespace convt3d
