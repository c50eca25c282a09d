// cmd_cache.cpp: `convt3d cache path|list|show|explain|export|import|prune|check`.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cache/layers.h"
#include "generator/candidates.h"
#include "src/key_tags.h"
#include "src/tiers.h"
#include "src/tuner.h"
#include "src/vendor.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

namespace convt3d::cli {
namespace {

struct CacheArgs {
  std::string cache, signature, file;
  bool full = false, force = false, wide = false, json = false;
  bool no_cudnn = false;     // `explain`: for an engine without cuDNN arbitration
  bool fp32x3_fp16 = false;  // `explain`: for an engine with the 3xFP16 opt-in
  ShapeFlags shape;          // `show` by shape
  // `explain`: the precision, and the machine identity to explain for (default: this one's)
  std::string precision = "fp32", arch, gpu, code_hash;
  int driver = -1, nvrtc = -1;
  IntFlags ints;
};

cache::Key CurrentKey(const Environment& env) {
  cache::Key k;
  k.arch = env.arch;
  k.gpu_name = env.gpu_name;
  k.driver_version = env.driver_version;
  k.nvrtc_version = env.nvrtc_version;
  k.code_hash = env.code_hash;
  return k;
}

// The vendor tag of this machine's arbitrated entries (src/vendor.h), "" without cuDNN.
std::string VendorTag(const Environment& env) {
  return env.cudnn_version > 0 ? vendor::KeyTag(env.cudnn_version) : "";
}

// Every code hash an engine of this build may key its entries by here (src/key_tags.h): with
// and without cuDNN arbitration (where cuDNN loads), each with and without the 3xFP16 opt-in.
std::vector<std::string> CodeHashesHere(const Environment& env) {
  std::vector<std::string> vendor_tags{""};
  if (env.cudnn_version > 0) vendor_tags.push_back(VendorTag(env));
  std::vector<std::string> out;
  for (const std::string& vendor_tag : vendor_tags)
    for (const bool fp16_split : {false, true})
      out.push_back(keytag::Tagged(env.code_hash, vendor_tag, fp16_split));
  return out;
}

// Why an entry would not be used on this machine, "" when it would. Without a GPU the
// machine-specific fields cannot be compared, so only NVRTC and the code hash are. A tagged
// entry matches when its tags are ones an engine here gives (CodeHashesHere): this machine's
// cuDNN, the 3xFP16 opt-in; each serves the engines with those settings, the others use theirs.
std::string Mismatch(const cache::Key& e, const Environment& env) {
  cache::Key cur = CurrentKey(env);
  cur.problem = e.problem;
  const std::vector<std::string> here = CodeHashesHere(env);
  if (std::find(here.begin(), here.end(), e.code_hash) != here.end()) cur.code_hash = e.code_hash;
  const bool gpu = env.driver_error.empty();
  if (!gpu) {
    cur.arch = e.arch;
    cur.gpu_name = e.gpu_name;
    cur.driver_version = e.driver_version;
  }
  std::string why = cache::Store::ExplainMismatch(e, cur);
  if (!gpu) why += std::string(why.empty() ? "" : "; ") + "no GPU here to compare arch/gpu/driver";
  return why;
}

const char* MatchWord(const cache::Key& e, const Environment& env) {
  const std::string m = Mismatch(e, env);
  if (m.empty()) return "yes";
  // Only the missing GPU stands in the way: the entry might be valid, we cannot tell.
  if (!env.driver_error.empty() && m.find(';') == std::string::npos) return "?";
  return "no";
}

// The cache's entries, or kExitFailure after saying why there are none to show.
std::optional<std::vector<cache::Entry>> ListOrFail(cache::Store& store) {
  auto entries = store.List();
  if (!entries.ok()) {
    Error("cannot list " + store.path() + ": " + entries.status().ToString());
    return std::nullopt;
  }
  return std::move(entries).value();
}

// A cell of `cache list`: the stored text can be anything a damaged or hand-made file holds.
std::string Cell(const std::string& s) { return Printable(s, 120); }

// Cut to `width` characters with "..." at the end: `cache list` rows fit a terminal unless --wide.
std::string Short(const std::string& s, size_t width) {
  return s.size() <= width ? s : s.substr(0, width - 3) + "...";
}

OJson EntryJson(const cache::Entry& e, const Environment& env) {
  OJson j;
  j["problem"] = e.key.problem;
  j["arch"] = e.key.arch;
  j["gpu"] = e.key.gpu_name;
  j["driver_version"] = e.key.driver_version;
  j["nvrtc_version"] = e.key.nvrtc_version;
  j["code_hash"] = e.key.code_hash;
  j["winner"] = e.winner.candidate;
  j["ms"] = e.winner.median_ms;
  j["rel_err"] = e.winner.rel_err;
  j["cubin_bytes"] = e.cubin_bytes;
  j["tuned_at"] = e.winner.tuned_at;
  j["here"] = e.damage.empty() ? MatchWord(e.key, env) : "no";
  j["why_not"] = e.damage.empty() ? Mismatch(e.key, env) : "damaged: " + e.damage;
  return j;
}

int CacheList(const CacheArgs& a) {
  auto store = OpenStoreReadOnly(ResolveCachePath(a.cache));
  if (!store->persistent()) return kExitFailure;  // the warning said why; nothing to list
  auto entries = ListOrFail(*store);
  if (!entries) return kExitFailure;
  const Environment env = DescribeEnvironment();
  int damaged = 0;
  for (const cache::Entry& e : *entries) damaged += e.damage.empty() ? 0 : 1;
  if (damaged > 0) {
    Warn(StrCat(damaged, " damaged entries are never used; 'convt3d cache check' names them"));
  }
  if (a.json) {
    OJson out;
    out["cache"] = store->path();
    out["exists"] = store->exists();
    out["entries"] = OJson::array();
    for (const cache::Entry& e : *entries) out["entries"].push_back(EntryJson(e, env));
    // Stored text may hold any bytes: replace what is not UTF-8 rather than throw.
    std::cout << out.dump(2, ' ', false, OJson::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  std::cout << "cache: " << Printable(store->path(), 4000) << " ("
            << (store->exists() ? "" : "no file yet, ") << entries->size() << " entries)\n";
  if (entries->empty()) return kExitOk;
  if (!a.wide) {
    TextTable t({"problem", "arch", "winner", "ms", "rel_err", "here"}, "lllrrl");
    for (const cache::Entry& e : *entries) {
      t.Add({Short(Cell(e.key.problem), 40), Short(Cell(e.key.arch), 8),
             Short(Cell(e.winner.candidate), 28), Ms(e.winner.median_ms), RelErr(e.winner.rel_err),
             e.damage.empty() ? MatchWord(e.key, env) : "no (damaged)"});
    }
    std::cout << "\n"
              << t.ToString()
              << "\nNames cut with '...'; --wide: all columns, in full; --json: all fields.\n";
    return kExitOk;
  }
  TextTable t({"problem", "arch", "gpu", "driver", "nvrtc", "winner", "ms", "rel_err", "cubin",
               "tuned_at", "here", "why not"},
              "llllllrrrlll");
  for (const cache::Entry& e : *entries) {
    const std::string why = e.damage.empty() ? Mismatch(e.key, env) : "damaged: " + e.damage;
    t.Add({Cell(e.key.problem), Cell(e.key.arch), Cell(e.key.gpu_name),
           VersionString(e.key.driver_version), VersionString(e.key.nvrtc_version),
           Cell(e.winner.candidate), Ms(e.winner.median_ms), RelErr(e.winner.rel_err),
           std::to_string(e.cubin_bytes), Cell(e.winner.tuned_at),
           e.damage.empty() ? MatchWord(e.key, env) : "no", Printable(why, 200)});
  }
  std::cout << "\n" << t.ToString();
  return kExitOk;
}

// --problem, else the signature of the shape flags (a usage error when neither is usable).
StatusOr<std::string> SignatureToShow(const CacheArgs& a) {
  if (!a.signature.empty()) return a.signature;
  if (a.shape.input.empty())
    return InvalidArgument(
        "cache show needs --problem SIGNATURE or a shape (--input, --out-channels, ...)");
  CONVT3D_ASSIGN_OR_RETURN(io::NamedProblem np, ProblemFromFlags(a.shape));
  Status st = Validate(np.problem);
  if (!st.ok()) return InvalidArgument("invalid problem: " + st.message());
  return np.problem.Signature();
}

// One entry: its key, winner and whether it matches this machine, then its trial log. Stored
// text is printed through Printable() (cut unless --full).
int ShowEntry(cache::Store& store, const cache::Entry& e, const Environment& env, bool full) {
  const size_t width = full ? std::string::npos : 200;
  auto p = [&](const std::string& s) { return Printable(s, width); };
  const std::string why = Mismatch(e.key, env);
  std::cout << "problem:    " << p(e.key.problem) << "\n"
            << "arch:       " << p(e.key.arch) << "\n"
            << "gpu:        " << p(e.key.gpu_name) << "\n"
            << "driver:     " << VersionString(e.key.driver_version) << " (" << e.key.driver_version
            << ")\n"
            << "nvrtc:      " << VersionString(e.key.nvrtc_version) << " (" << e.key.nvrtc_version
            << ")\n"
            << "code hash:  " << p(e.key.code_hash) << "\n"
            << "winner:     " << p(e.winner.candidate) << "  " << Ms(e.winner.median_ms)
            << " ms  rel_err " << RelErr(e.winner.rel_err) << "\n"
            << "symbol:     " << p(e.winner.kernel_symbol) << "\n"
            << "cubin:      " << e.cubin_bytes << " bytes\n"
            << "tuned at:   " << p(e.winner.tuned_at) << "\n"
            << "this host:  " << MatchWord(e.key, env) << (why.empty() ? "" : " (" + p(why) + ")")
            << "\n";
  if (auto note = store.ReadNote(e.key); note.ok() && note.value())
    std::cout << "origin:     " << p(note.value()->origin.empty() ? "-" : note.value()->origin)
              << " (kernel source " << p(note.value()->source_hash) << ")\n";
  if (!e.damage.empty()) std::cout << "damaged:    " << p(e.damage) << " (never used)\n";
  if (full) std::cout << "params:     " << p(e.winner.params_json) << "\n";
  auto trials = store.Trials(e.key);
  if (!trials.ok()) {
    Error("cannot read the trial log: " + trials.status().ToString());
    return kExitFailure;
  }
  std::cout << "trials:     " << trials->size() << "\n\n";
  TextTable t({"candidate", "outcome", "median ms", "min ms", "rel err", "compile ms", "message"},
              "llrrrrl");
  for (const cache::Trial& tr : *trials) {
    t.Add({p(tr.candidate), p(tr.outcome), Ms(tr.median_ms), Ms(tr.min_ms), RelErr(tr.rel_err),
           tr.compile_ms >= 0 ? StrFormat("%.0f", tr.compile_ms) : "-",
           // OneLine first: a multi-line NVRTC log shows its first line, not escaped newlines.
           full ? p(tr.message) : Printable(OneLine(tr.message, 80), 80)});
  }
  std::cout << t.ToString();
  return kExitOk;
}

int CacheShow(const CacheArgs& a) {
  StatusOr<std::string> sig = SignatureToShow(a);
  if (!sig.ok()) {
    Error(sig.status().message());
    return kExitUsage;
  }
  auto store = OpenStoreReadOnly(ResolveCachePath(a.cache));
  if (!store->persistent()) return kExitFailure;
  auto entries = ListOrFail(*store);
  if (!entries) return kExitFailure;
  const Environment env = DescribeEnvironment();
  int shown = 0;
  for (const cache::Entry& e : *entries) {
    if (e.key.problem != *sig) continue;
    if (shown++ > 0) std::cout << "\n";
    if (ShowEntry(*store, e, env, a.full) != kExitOk) return kExitFailure;
  }
  if (shown == 0) {
    Error("no cache entry for " + *sig + " in " + store->path() +
          (store->exists() ? "" : " (no such file)"));
    return kExitFailure;
  }
  return kExitOk;
}

// What the engine would do for one problem from the cache (and $CONVT3D_CACHE_SHARED's layers)
// on this machine, or the machine the identity flags describe: each lookup tier's option or
// miss, in the order the engine tries them (src/tiers.h). Needs no GPU: without one, and without
// --gpu, the identity is a compile-only one (no GPU name, sm_90 unless --arch).
int CacheExplain(const CacheArgs& a) {
  if (const auto bad = a.ints.Parse(); !bad.empty()) {
    for (const std::string& line : bad) Error(line);
    return kExitUsage;
  }
  ShapeFlags shape = a.shape;
  StatusOr<io::NamedProblem> np = InvalidArgument("");
  if (!a.signature.empty()) {
    auto parsed = tiers::ParseSignature(a.signature);
    if (parsed.ok()) {
      io::NamedProblem named;
      named.name = "cli";
      named.problem = parsed.value();
      np = named;
    } else {
      np = parsed.status();
    }
  } else if (a.shape.input.empty()) {
    np = InvalidArgument(
        "cache explain needs --problem SIGNATURE or a shape (--input, --out-channels, ...)");
  } else {
    np = ProblemFromFlags(shape);
    if (np.ok()) {
      auto pr = io::ParsePrecision(a.precision);
      if (!pr.ok()) {
        np = pr.status();
      } else {
        np->problem.precision = pr.value();
      }
    }
  }
  if (np.ok()) {
    Status st = Validate(np->problem);
    if (!st.ok()) np = InvalidArgument("invalid problem: " + st.message());
  }
  if (!np.ok()) {
    Error(np.status().message());
    return kExitUsage;
  }
  const Problem& p = np->problem;
  const Environment env = DescribeEnvironment();
  cache::Key want = CurrentKey(env);
  want.problem = p.Signature();
  const bool here = env.driver_error.empty();
  if (!here && want.arch.empty()) want.arch = "sm_90";
  if (!a.arch.empty()) want.arch = a.arch;
  if (!a.gpu.empty()) want.gpu_name = a.gpu;
  if (a.driver >= 0) want.driver_version = a.driver;
  if (a.nvrtc >= 0) want.nvrtc_version = a.nvrtc;
  // An engine arbitrates with cuDNN wherever it loads (Options::vendor_candidates), and lists
  // the 3xFP16 tiles by opt-in (--fp32x3-fp16, its variable, or the tag of --code-hash): its
  // fp32x3 keys carry the tags (src/key_tags.h). --code-hash is taken as given, plus the
  // opt-in's tag where the opt-in comes from elsewhere.
  const bool fp16_split = tuner::Fp16SplitOptIn(a.fp32x3_fp16) || keytag::HasFp16Split(a.code_hash);
  if (a.code_hash.empty()) {
    want.code_hash =
        keytag::KeyCodeHash(env.code_hash, a.no_cudnn ? "" : VendorTag(env), p, fp16_split);
  } else {
    want.code_hash = keytag::HasFp16Split(a.code_hash)
                         ? a.code_hash
                         : keytag::KeyCodeHash(a.code_hash, "", p, fp16_split);
  }
  auto store = OpenStoreReadOnly(ResolveCachePath(a.cache));
  std::vector<std::unique_ptr<cache::Store>> shared =
      cache::OpenShared(cache::SharedPathsFromEnv());
  std::vector<cache::Store*> layers{store.get()};
  for (const auto& s : shared) layers.push_back(s.get());
  gen::DeviceLimits limits;  // sm_90's, as compile-only work prunes
  limits.wgmma = gen::HasWgmma(want.arch);
  limits.fp16_split = fp16_split;  // as the engine lists candidates
  auto found = tiers::Find(layers, want, p, limits, 3);
  if (!found.ok()) {
    Error("cannot read " + store->path() + ": " + found.status().ToString());
    return kExitFailure;
  }
  std::cout << "problem:  " << DisplayName(want.problem) << "\n"
            << "machine:  "
            << (want.gpu_name.empty() ? "(no GPU name)" : DisplayName(want.gpu_name)) << ", "
            << DisplayName(want.arch) << ", driver " << want.driver_version << ", NVRTC "
            << want.nvrtc_version << ", code " << DisplayName(want.code_hash)
            << (here ? "" : "  (no GPU here: " + Printable(env.driver_error, 100) + ")") << "\n"
            << "cache:    " << store->path() << (store->exists() ? "" : " (no such file)");
  for (const auto& s : shared) std::cout << ", shared " << s->path();
  std::cout << "\n\n";
  int n = 0;
  for (const tiers::Option& o : found->options) {
    const int t = static_cast<int>(o.tier);
    std::cout << (n++ == 0 ? "serves:   " : "else:     ") << "tier " << t << " "
              << tiers::TierName(o.tier) << ": " << Printable(o.what, 300)
              << (o.tier == tiers::Tier::kExact
                      ? (vendor::IsVendorJson(o.winner.params_json)
                             ? " -- runs cuDNN where it loads, else the next tier"
                             : " -- loads the stored cubin, no compile")
                  : o.tier == tiers::Tier::kNearest
                      ? " -- compiles it for this problem (a stand-in)"
                      : " -- recompiles it, re-checks it against fp64")
              << "\n";
  }
  std::cout << (n == 0 ? "serves:   " : "else:     ")
            << "tier 5 heuristic: " << gen::HeuristicPick(p, limits).Name() << "\n";
  // What each policy would take: its first option (if that re-check passes; else the next).
  std::cout << "\nby policy (an option that does not compile or, tiers 2-3, pass its re-check: the "
               "next):\n";
  const std::pair<TunePolicy, const char*> policies[] = {
      {TunePolicy::kTuneIfMissing, "tune_if_missing"},
      {TunePolicy::kCacheOrHeuristic, "cache_or_heuristic"},
      {TunePolicy::kBackground, "background"}};
  for (const auto& [policy, policy_name] : policies) {
    std::string what;
    for (const tiers::Option& o : found->options) {
      const tiers::Rule rule = tiers::RuleFor(policy, o.tier);
      if (!rule.serve) continue;
      what = StrCat("tier ", static_cast<int>(o.tier), " ", tiers::TierName(o.tier),
                    rule.record ? ", recorded as this key's entry" : "",
                    rule.background ? ", then tuned on the worker thread" : "");
      break;
    }
    if (what.empty()) {
      const tiers::Rule h = tiers::RuleFor(policy, tiers::Tier::kHeuristic);
      what = h.serve ? StrCat("tier 5 heuristic",
                              h.background ? ", then tuned on the worker thread" : "")
                     : "tunes now (tier 0)";
    }
    std::cout << "  " << policy_name << ": " << what << "\n";
  }
  if (!found->missed.empty()) std::cout << "\nmissed:\n";
  for (const std::string& m : found->missed) std::cout << "  " << Printable(m, 400) << "\n";
  return kExitOk;
}

// Every entry that reads back sound; the ones left out are named, and make the exit code 1 (the
// file is still written: exporting a damaged cache and importing it into a fresh file salvages
// what is left).
int CacheExport(const CacheArgs& a) {
  auto store = OpenStoreReadOnly(ResolveCachePath(a.cache));
  if (!store->persistent()) return kExitFailure;  // exporting the empty fallback would mislead
  if (!store->exists()) {
    Error("no cache file at " + store->path() + " (nothing to export)");
    return kExitFailure;
  }
  auto summary = store->Export();
  if (!summary.ok()) {
    Error("export failed: " + summary.status().ToString());
    return kExitFailure;
  }
  for (const std::string& why : summary->reasons) Warn("left out: " + why);
  if (a.file == "-") {
    std::cout << summary->json << "\n";
  } else if (!WriteFile(a.file, summary->json)) {
    Error("cannot write " + a.file + " (" + std::strerror(errno) + ")");
    return kExitFailure;
  } else {
    std::cout << "exported " << summary->exported << " entries from " << store->path() << " to "
              << a.file;
    if (summary->skipped > 0) std::cout << "; left out " << summary->skipped << " damaged";
    std::cout << "\n";
  }
  return summary->reasons.empty() ? kExitOk : kExitFailure;
}

// Valid entries are written, bad ones skipped and named: "imported N, skipped M", then one line
// per skipped entry. Exit 1 when any was skipped; a document that is not an export at all, or a
// damaged cache file, changes nothing.
int CacheImport(const CacheArgs& a) {
  std::optional<std::string> text =
      a.file == "-"
          ? std::optional<std::string>(std::string(std::istreambuf_iterator<char>(std::cin),
                                                   std::istreambuf_iterator<char>()))
          : ReadFile(a.file);
  if (!text) {
    Error("cannot read " + a.file + " (" + std::strerror(errno) + ")");
    return kExitUsage;
  }
  auto store = OpenStore(ResolveCachePath(a.cache));
  if (!store->persistent()) return kExitFailure;  // the import would vanish with the process
  auto summary = store->Import(*text);
  if (!summary.ok()) {
    Error("import of " + a.file + " failed: " + summary.status().ToString());
    return ExitCodeFor(summary.status());
  }
  std::cout << "imported " << summary->imported << ", skipped " << summary->skipped << " into "
            << store->path() << "\n";
  for (const std::string& why : summary->reasons)
    std::cout << "  skipped " << Printable(why, 300) << "\n";
  return summary->skipped == 0 ? kExitOk : kExitFailure;
}

int CachePrune(const CacheArgs& a) {
  const Environment env = DescribeEnvironment();
  if (!env.driver_error.empty() && !a.force) {
    // Every entry would look stale on a machine with no GPU; refuse rather than wipe the cache.
    Error("no usable GPU (" + env.driver_error +
          "), so no entry can match this machine; pass --force to prune anyway");
    return kExitUsage;
  }
  auto store = OpenStore(ResolveCachePath(a.cache));
  if (!store->persistent()) return kExitFailure;
  auto n = store->Prune(CurrentKey(env), CodeHashesHere(env));
  if (!n.ok()) {
    Error("prune failed: " + n.status().ToString());
    return kExitFailure;
  }
  std::cout << "pruned " << *n << " entries from " << store->path() << "\n";
  return kExitOk;
}

// One line per problem on stdout ("PATH: entry SIG (ARCH, GPU): what", "PATH: what"), then
// "PATH: ok (N entries)" or "PATH: N problems ...". Exit 1 when anything is wrong, or there is
// no file to check.
int CacheCheck(const CacheArgs& a) {
  // The damage found at open is among Check()'s findings: printed once, below.
  auto store = OpenStoreReadOnly(ResolveCachePath(a.cache), /*quiet_damage=*/true);
  if (!store->persistent()) return kExitFailure;
  const std::string path = Printable(store->path(), 4000);
  if (!store->exists()) {
    Error("no cache file at " + store->path() + " (nothing to check)");
    return kExitFailure;
  }
  auto report = store->Check();
  if (!report.ok()) {
    Error(store->path() + ": " + report.status().ToString());
    return kExitFailure;
  }
  int problems = 0;
  for (const cache::EntryCheck& e : report->entries) {
    if (e.ok()) continue;
    ++problems;
    std::cout << path << ": entry " << Printable(e.key.problem, 200) << " ("
              << Printable(e.key.arch, 40) << ", " << Printable(e.key.gpu_name, 80)
              << "): " << Printable(OneLine(e.problem, 4000), 400) << "\n";
  }
  for (const std::string& f : report->file_problems) {
    ++problems;
    std::cout << path << ": " << Printable(OneLine(f, 4000), 400) << "\n";
  }
  if (problems == 0) {
    std::cout << path << ": ok (" << report->entries.size() << " entries)\n";
    return kExitOk;
  }
  std::cout << path << ": " << problems << (problems == 1 ? " problem" : " problems") << " ("
            << report->damaged_entries() << " of " << report->entries.size()
            << " entries damaged)\n";
  return kExitFailure;
}

int CachePath(const CacheArgs& a) {
  std::cout << ResolveCachePath(a.cache) << "\n";
  return kExitOk;
}

}  // namespace

Command AddCache(CLI::App* cli) {
  auto a = std::make_shared<CacheArgs>();
  CLI::App* cmd = cli->add_subcommand("cache", "Inspect and maintain the tuning cache");
  cmd->require_subcommand(1);
  std::vector<std::pair<CLI::App*, int (*)(const CacheArgs&)>> subs;
  subs.emplace_back(cmd->add_subcommand("path", "Print the cache file in use"), CachePath);
  CLI::App* list = cmd->add_subcommand(
      "list", "One row per entry, and whether it matches this machine (--wide: and why not)");
  list->add_flag("--wide", a->wide, "Every column, nothing shortened");
  list->add_flag("--json", a->json, "Every field of every entry as JSON on stdout");
  subs.emplace_back(list, CacheList);
  CLI::App* show = cmd->add_subcommand(
      "show", "One problem's entries and trial logs (--problem SIGNATURE, or shape flags)");
  show->add_option("--problem", a->signature,
                   "Problem signature as printed by 'convt3d cache list'");
  AddShapeFlags(show, &a->shape);
  show->add_flag("--full", a->full, "Do not shorten messages; print the winner's parameters");
  subs.emplace_back(show, CacheShow);
  CLI::App* explain = cmd->add_subcommand(
      "explain",
      "Which lookup tier would serve one problem here, and why the better tiers miss (no GPU "
      "needed)");
  explain->add_option("--problem", a->signature,
                      "Problem signature as printed by 'convt3d cache list'");
  AddShapeFlags(explain, &a->shape);
  explain->add_option("--precision", a->precision, "fp32 (default), fp32x3 or tf32 (f32 shapes)");
  explain->add_option("--arch", a->arch, "Explain for this architecture, e.g. sm_90");
  explain->add_option("--gpu", a->gpu, "... this GPU model, e.g. 'NVIDIA H100 80GB HBM3'");
  a->ints.Add(explain, "--driver", &a->driver, "... this driver version, e.g. 13000", 0, 1 << 30);
  a->ints.Add(explain, "--nvrtc", &a->nvrtc, "... this NVRTC version, e.g. 13000", 0, 1 << 30);
  explain->add_option("--code-hash", a->code_hash,
                      "... this code hash (convt3d info; with cuDNN arbitration it ends in "
                      "'+cudnn<version>', then fp32x3 keys with the 3xFP16 opt-in in '+f16split')");
  explain->add_flag("--no-cudnn", a->no_cudnn,
                    "For an engine without cuDNN arbitration (tune --no-cudnn, "
                    "Options::vendor_candidates = false)");
  explain->add_flag("--fp32x3-fp16", a->fp32x3_fp16,
                    "For an engine with fp32x3's 3xFP16 opt-in (tune --fp32x3-fp16, "
                    "Options::fp32x3_fp16, $CONVT3D_FP32X3_FP16=1)");
  subs.emplace_back(explain, CacheExplain);
  CLI::App* exp = cmd->add_subcommand(
      "export", "Write the whole cache as JSON (damaged entries are left out, named, exit 1)");
  exp->add_option("FILE", a->file, "Output file ('-': stdout)")->required();
  subs.emplace_back(exp, CacheExport);
  CLI::App* imp = cmd->add_subcommand(
      "import", "Merge a JSON export in (equal keys are replaced; bad entries are skipped, named)");
  imp->add_option("FILE", a->file, "JSON written by 'convt3d cache export' ('-': stdin)")
      ->required();
  subs.emplace_back(imp, CacheImport);
  CLI::App* prune = cmd->add_subcommand("prune", "Remove entries that do not match this machine");
  prune->add_flag("--force", a->force, "Prune even without a GPU (removes every entry)");
  subs.emplace_back(prune, CachePrune);
  subs.emplace_back(
      cmd->add_subcommand("check",
                          "SQLite integrity check and cubin hash check, one line per problem "
                          "(exit 1 if any)"),
      CacheCheck);
  for (const auto& sub : subs) {
    sub.first->add_option("--cache", a->cache,
                          "SQLite cache file (default: $CONVT3D_CACHE, else "
                          "$XDG_CACHE_HOME/convt3d/cache.sqlite, else "
                          "~/.cache/convt3d/cache.sqlite)");
  }
  return {cmd, [a, subs] {
            for (const auto& [app, run] : subs)
              if (*app) return run(*a);
            Error("no command given (see 'convt3d --help')");
            return kExitUsage;
          }};
}

}  // namespace convt3d::cli
