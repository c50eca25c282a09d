// tiers.cpp: finds the stored results that may serve a problem, tier by tier (tiers.h).
#include "src/tiers.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "base/status.h"
#include "generator/source.h"
#include "src/key_tags.h"
#include "src/vendor.h"

namespace convt3d::tiers {
namespace {

constexpr DType kDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};
constexpr Precision kPrecisions[] = {Precision::kFp32, Precision::kFp32x3, Precision::kTf32};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == sep) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

bool ParseInt(const std::string& s, int64_t* v) {
  if (s.empty() || s.size() > 18 || !std::all_of(s.begin(), s.end(), ::isdigit)) return false;
  *v = std::strtoll(s.c_str(), nullptr, 10);
  return true;
}

bool ParseTriple(const std::string& s, Dim3* d) {
  const auto parts = Split(s, 'x');
  if (parts.size() != 3) return false;
  for (int i = 0; i < 3; ++i)
    if (!ParseInt(parts[i], &(*d)[i])) return false;
  return true;
}

double LogRatio(int64_t a, int64_t b) {
  return std::fabs(std::log(static_cast<double>(a) / static_cast<double>(b)));
}

std::string Where(const cache::Key& k) {
  return StrCat(k.gpu_name.empty() ? "no GPU (compile-only)" : k.gpu_name, ", driver ",
                k.driver_version, ", NVRTC ", k.nvrtc_version, ", code ", k.code_hash);
}

// Why an entry tuned among other candidates than the lookup's (the code hash's tags,
// src/key_tags.h) does not stand in for it: one clause per tag that differs, "" when none does.
std::string TagMismatch(const std::string& entry_hash, const std::string& want_hash) {
  std::string why;
  const std::string entry_vendor = vendor::TagOf(keytag::WithoutFp16Split(entry_hash));
  const std::string want_vendor = vendor::TagOf(keytag::WithoutFp16Split(want_hash));
  if (entry_vendor != want_vendor)
    why = StrCat(
        entry_vendor.empty() ? "without cuDNN arbitration" : "with " + entry_vendor.substr(1),
        ", this lookup is ",
        want_vendor.empty() ? std::string("without") : "with " + want_vendor.substr(1));
  const bool entry_f16 = keytag::HasFp16Split(entry_hash);
  if (entry_f16 != keytag::HasFp16Split(want_hash))
    why +=
        StrCat(why.empty() ? "" : "; and ", entry_f16 ? "with" : "without",
               " the fp32x3 3xFP16 opt-in, this lookup is ", entry_f16 ? "without" : "with", " it");
  return why;
}

}  // namespace

const char* TierName(Tier t) {
  switch (t) {
    case Tier::kTuned:
      return "tuned";
    case Tier::kExact:
      return "exact";
    case Tier::kSameGpu:
      return "same_gpu";
    case Tier::kSameArch:
      return "same_arch";
    case Tier::kNearest:
      return "nearest";
    case Tier::kHeuristic:
      return "heuristic";
  }
  return "?";
}

Rule RuleFor(TunePolicy policy, Tier tier) {
  const int t = static_cast<int>(tier);
  Rule r;
  switch (policy) {
    case TunePolicy::kNever:
      r.serve = tier == Tier::kHeuristic;
      break;
    case TunePolicy::kCacheOrHeuristic:
    case TunePolicy::kBackground:
      r.serve = t >= 1;
      break;
    case TunePolicy::kTuneIfMissing:
      r.serve = t >= 1 && t <= 3;
      break;
    case TunePolicy::kExhaustive:
      r.serve = false;
      break;
  }
  r.record = r.serve && (tier == Tier::kSameGpu ||
                         (tier == Tier::kSameArch && policy != TunePolicy::kBackground));
  r.background = r.serve && policy == TunePolicy::kBackground && t >= 3;
  return r;
}

StatusOr<Problem> ParseSignature(const std::string& signature) {
  std::vector<std::string> parts = Split(signature, '_');
  Problem p;
  size_t i = 0;
  const auto bad = [&](const std::string& what) {
    return InvalidArgument(StrCat("signature '", signature, "': ", what));
  };
  if (parts.empty()) return bad("empty");
  bool dtype_ok = false;
  for (DType t : kDTypes)
    if (parts[0] == DTypeName(t)) p.dtype = t, dtype_ok = true;
  if (!dtype_ok) return bad(StrCat("'", parts[0], "' is not a dtype"));
  ++i;
  for (Precision q : kPrecisions)
    if (q != Precision::kFp32 && i < parts.size() && parts[i] == PrecisionName(q))
      p.precision = q, ++i;
  struct Part {
    const char* prefix;
    int64_t* value;
    Dim3* triple;
  };
  int64_t bias = 0;
  const Part order[] = {{"n", &p.n, nullptr},        {"ci", &p.c_in, nullptr},
                        {"co", &p.c_out, nullptr},   {"i", nullptr, &p.in},
                        {"k", nullptr, &p.kernel},   {"s", nullptr, &p.stride},
                        {"p", nullptr, &p.padding},  {"op", nullptr, &p.output_padding},
                        {"d", nullptr, &p.dilation}, {"g", &p.groups, nullptr},
                        {"b", &bias, nullptr}};
  for (const Part& part : order) {
    if (i >= parts.size()) return bad(StrCat("ends before its '", part.prefix, "' part"));
    const std::string& s = parts[i++];
    const std::string prefix = part.prefix;
    if (s.compare(0, prefix.size(), prefix) != 0)
      return bad(StrCat("part '", s, "' should start with '", prefix, "'"));
    const std::string rest = s.substr(prefix.size());
    const bool ok = part.value ? ParseInt(rest, part.value) : ParseTriple(rest, part.triple);
    if (!ok)
      return bad(StrCat("part '", s, "' does not read as ", part.value ? "a number" : "AxBxC"));
  }
  if (i != parts.size()) return bad(StrCat("unexpected part '", parts[i], "'"));
  if (bias > 1) return bad("b must be 0 or 1");
  p.bias = bias == 1;
  if (p.Signature() != signature) return bad(StrCat("reads back as '", p.Signature(), "'"));
  return p;
}

bool SameClass(const Problem& a, const Problem& b) {
  return a.kernel == b.kernel && a.stride == b.stride && a.dilation == b.dilation &&
         a.groups == b.groups && a.dtype == b.dtype && a.precision == b.precision;
}

double ShapeDistance(const Problem& a, const Problem& b) {
  double d = LogRatio(a.n, b.n) + LogRatio(a.c_in, b.c_in) + LogRatio(a.c_out, b.c_out);
  for (int i = 0; i < 3; ++i) d += LogRatio(a.in[i], b.in[i]);
  d += (a.padding != b.padding) + (a.output_padding != b.output_padding) + (a.bias != b.bias);
  return d;
}

StatusOr<Found> Find(const std::vector<cache::Store*>& layers, const cache::Key& want,
                     const Problem& p, const gen::DeviceLimits& limits, int max_nearest) {
  std::set<std::string> valid;  // the names of p's candidates on this device
  for (const gen::Config& c : gen::Candidates(p, limits)) valid.insert(c.Name());
  Found out;
  std::vector<Option> by_tier[5];  // index = tier 1..4
  int same_class = 0;
  for (size_t li = 0; li < layers.size(); ++li) {
    cache::Store& store = *layers[li];
    StatusOr<std::vector<cache::Entry>> entries = store.ListArch(want.arch);
    if (!entries.ok()) {
      if (li == 0) return entries.status();
      out.missed.push_back(
          StrCat("layer ", store.path(), " unreadable: ", entries.status().message()));
      continue;
    }
    for (cache::Entry& e : entries.value()) {
      if (e.key.arch != want.arch) continue;
      const bool same_problem = e.key.problem == want.problem;
      Tier tier = Tier::kNearest;
      if (same_problem) {
        tier = e.key == want                     ? Tier::kExact
               : e.key.gpu_name == want.gpu_name ? Tier::kSameGpu
                                                 : Tier::kSameArch;
      }
      const std::string label = StrCat("tier ", static_cast<int>(tier), " ", TierName(tier));
      Option o{tier, e.key, std::move(e.winner), store.path(), 0, ""};
      if (!e.damage.empty()) {
        if (same_problem)
          out.missed.push_back(
              StrCat(label, ": entry on ", Where(e.key), " is damaged: ", e.damage));
        continue;
      }
      Problem q = p;
      if (!same_problem) {
        StatusOr<Problem> parsed = ParseSignature(e.key.problem);
        if (!parsed.ok() || !SameClass(p, parsed.value())) continue;
        q = parsed.value();
        ++same_class;
      }
      // Entries tuned with and without cuDNN arbitration, or under another cuDNN, or with and
      // without the 3xFP16 opt-in (the code hash's tags, src/key_tags.h), saw other
      // candidates: one never stands in for the other.
      if (same_problem && tier != Tier::kExact &&
          vendor::TagOf(e.key.code_hash) != vendor::TagOf(want.code_hash)) {
        out.missed.push_back(StrCat(label, ": entry on ", Where(e.key), " was tuned ",
                                    TagMismatch(e.key.code_hash, want.code_hash)));
        continue;
      }
      // A cuDNN winner serves its exact key only (the engine loads it; nothing to recompile).
      if (vendor::IsVendorJson(o.winner.params_json)) {
        if (tier == Tier::kExact) {
          o.what = StrCat(o.winner.candidate, " (exact key, ", store.path(), "; runs cuDNN)");
          by_tier[static_cast<int>(tier)].push_back(std::move(o));
        } else if (same_problem) {
          out.missed.push_back(StrCat(label, ": winner ", o.winner.candidate, " on ", Where(e.key),
                                      " runs cuDNN, which serves its exact key only"));
        }
        continue;
      }
      StatusOr<gen::Config> config = gen::Config::FromJson(o.winner.params_json);
      if (!config.ok() || valid.count(config->Name()) == 0) {
        if (same_problem)
          out.missed.push_back(
              StrCat(label, ": winner ", o.winner.candidate, " on ", Where(e.key),
                     " is not a candidate of this build: ",
                     config.ok() ? "no longer generated" : config.status().message()));
        continue;
      }
      if (tier == Tier::kSameGpu || tier == Tier::kSameArch) {
        StatusOr<std::optional<cache::Note>> note = store.ReadNote(e.key);
        const std::string then =
            note.ok() && note.value() ? note.value()->source_hash : std::string();
        const std::string now = gen::SourceHash(p, config.value());
        if (!then.empty() && then != now) {
          out.missed.push_back(StrCat(label, ": winner ", o.winner.candidate, " on ", Where(e.key),
                                      ": its kernel source changed since tuning (", config->family,
                                      " family; source ", then, " -> ", now, "): re-tune"));
          continue;
        }
      }
      if (tier == Tier::kNearest) {
        o.distance = ShapeDistance(p, q);
        o.what = StrCat(o.winner.candidate, " of ", e.key.problem, " (distance ",
                        StrFormat("%.2f", o.distance), ") on ", Where(e.key));
      } else if (tier == Tier::kExact) {
        StatusOr<std::optional<cache::Note>> note = store.ReadNote(e.key);
        const std::string by = note.ok() && note.value() ? note.value()->origin : "";
        o.what = StrCat(o.winner.candidate, " (exact key, ", store.path(),
                        by.empty() ? "" : StrCat("; recorded by ", by), ")");
      } else {
        o.what = StrCat(o.winner.candidate, " tuned ", o.winner.tuned_at, " on ", Where(e.key),
                        " (", cache::Store::ExplainMismatch(e.key, want), ")");
      }
      by_tier[static_cast<int>(tier)].push_back(std::move(o));
    }
  }
  // Newest first within tiers 1-3 (layer order breaks ties: stable); tier 4 by distance, this
  // GPU model first, then newest, one option per (problem, winner).
  const auto newer = [](const Option& a, const Option& b) {
    return a.winner.tuned_at > b.winner.tuned_at;
  };
  for (int t = 1; t <= 3; ++t) std::stable_sort(by_tier[t].begin(), by_tier[t].end(), newer);
  std::vector<Option>& near = by_tier[4];
  std::stable_sort(near.begin(), near.end(), [&](const Option& a, const Option& b) {
    if (a.distance != b.distance) return a.distance < b.distance;
    const bool ga = a.key.gpu_name == want.gpu_name, gb = b.key.gpu_name == want.gpu_name;
    if (ga != gb) return ga;
    return a.winner.tuned_at > b.winner.tuned_at;
  });
  std::set<std::pair<std::string, std::string>> seen;
  std::vector<Option> kept;
  for (Option& o : near) {
    if (static_cast<int>(kept.size()) >= max_nearest) break;
    if (seen.insert({o.key.problem, o.winner.candidate}).second) kept.push_back(std::move(o));
  }
  near = std::move(kept);

  const std::string gpu = want.gpu_name.empty() ? "(no GPU name)" : want.gpu_name;
  const std::string none[5] = {
      "", "no entry for this exact key",
      StrCat("no usable entry of this problem on ", gpu, " under another driver, NVRTC or code"),
      StrCat("no usable entry of this problem on another ", want.arch, " GPU"),
      same_class == 0
          ? StrCat("no tuned shape of this kernel, stride, dilation, groups, dtype and precision "
                   "on ",
                   want.arch)
          : StrCat(same_class,
                   " tuned shapes of this class, none whose winner is a candidate "
                   "of this problem")};
  for (int t = 1; t <= 4; ++t) {
    if (by_tier[t].empty())
      out.missed.push_back(StrCat("tier ", t, " ", TierName(static_cast<Tier>(t)), ": ", none[t]));
    for (Option& o : by_tier[t]) out.options.push_back(std::move(o));
  }
  std::stable_sort(out.missed.begin(), out.missed.end(),
                   [](const std::string& a, const std::string& b) {
                     const auto rank = [](const std::string& s) {
                       return s.rfind("tier ", 0) == 0 && s.size() > 5 ? s[5] : '9';
                     };
                     return rank(a) < rank(b);
                   });
  return out;
}

}  // namespace convt3d::tiers
