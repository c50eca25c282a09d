// cache.h: the SQLite store of tuning results, trial logs and winners' cubins.
//
// One file holds every tuned problem. Each key field is its own column so that `convt3d cache`
// can say why an entry does not match this machine. A cache that cannot be opened (corrupt,
// not SQLite, read-only, locked) falls back to an in-memory database with one warning; callers
// never crash because of the cache.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "convt3d/convt3d.h"

struct sqlite3;

namespace convt3d::cache {

// Everything that invalidates a tuning result. Two keys match only if all fields are equal.
struct Key {
  std::string problem;     // Problem::Signature()
  std::string arch;        // "sm_90"
  std::string gpu_name;    // "NVIDIA H200" ("" for compile-only work)
  int driver_version = 0;  // cuDriverGetVersion, e.g. 13000
  int nvrtc_version = 0;   // major*1000 + minor*10, e.g. 13000
  std::string code_hash;   // hash of the template sources + generator version
};
inline bool operator==(const Key& a, const Key& b) {
  return a.problem == b.problem && a.arch == b.arch && a.gpu_name == b.gpu_name &&
         a.driver_version == b.driver_version && a.nvrtc_version == b.nvrtc_version &&
         a.code_hash == b.code_hash;
}
inline bool operator!=(const Key& a, const Key& b) { return !(a == b); }

// One candidate's outcome in a tuning run.
struct Trial {
  std::string candidate;  // stable candidate name, e.g. "direct_phase_f32_x64y2_o2_c4"
  std::string outcome;    // "ok", "invalid", "compile_failed", "launch_failed", "wrong_result"
  double median_ms = -1;  // -1 when not timed
  double min_ms = -1;
  int repeats = 0;
  double rel_err = -1;  // ||out-ref||/||ref||, -1 when not checked
  double max_abs_err = -1;
  double compile_ms = -1;
  std::string message;  // why it failed (NVRTC log excerpt, driver error), else ""
};

// The chosen kernel, enough to launch it without NVRTC.
struct Winner {
  std::string candidate;      // name (also the __global__ symbol's base)
  std::string params_json;    // the generator's serialised config, to rebuild launch geometry
  std::string kernel_symbol;  // lowered name to pass to cuModuleGetFunction
  std::vector<char> cubin;
  double median_ms = -1;
  double rel_err = -1;
  std::string tuned_at;  // ISO-8601 UTC, filled by the store
};

// A row of `cache list`.
struct Entry {
  Key key;
  Winner winner;  // cubin left empty by List(); size in cubin_bytes
  int64_t cubin_bytes = 0;
  int trials = 0;
};

// All methods are thread-safe (one mutex per Store); several Stores, in one process or many, may
// share a file.
class Store {
 public:
  static constexpr int kSchemaVersion = 1;  // PRAGMA user_version this build reads and writes
  static constexpr int kDefaultBusyTimeoutMs = 10000;

  // Opens (creating if needed) the SQLite file at `path` in WAL mode with a busy timeout, and
  // migrates the schema. On any failure it opens ":memory:" instead and sets warning().
  // Never returns null. An empty path means DefaultPath(). A valid cache that is not writable
  // is opened read-only: Lookup/List work, Record/Prune/ImportJson return kUnavailable, and
  // warning() says so. A file that is not a convt3d cache is never modified.
  static std::unique_ptr<Store> Open(const std::string& path);
  // Same, with an explicit busy timeout (tests use a short one to exercise a locked file).
  static std::unique_ptr<Store> Open(const std::string& path, int busy_timeout_ms);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }  // ":memory:" after a fallback
  const std::string& warning() const { return warning_; }
  bool persistent() const { return path_ != ":memory:"; }
  bool read_only() const { return read_only_; }

  // Stores the winner and the whole trial log for `key` in one transaction, replacing any
  // earlier result for the same key. Safe against concurrent writers (other processes).
  Status Record(const Key& key, const Winner& winner, const std::vector<Trial>& trials);
  // The winner for exactly this key, with its cubin; nullopt on a miss. An error means the entry
  // exists but is unusable (e.g. its cubin fails the hash check): treat it as a miss, re-tune and
  // Record, which replaces it. A corrupt cubin is never returned.
  StatusOr<std::optional<Winner>> Lookup(const Key& key);
  // Every entry (cubins not loaded), ordered by problem.
  StatusOr<std::vector<Entry>> List();
  // The trial log recorded with the entry of `key`, fastest first (untimed trials last);
  // kNotFound when there is no entry for `key`.
  StatusOr<std::vector<Trial>> Trials(const Key& key);
  // Removes entries whose arch/gpu/driver/nvrtc/code_hash differ from `current`'s (the problem
  // field of `current` is ignored). Returns how many were removed.
  StatusOr<int> Prune(const Key& current);
  // Whole cache as JSON (cubins base64) and back. Import replaces entries with equal keys,
  // validates everything before writing, writes in one transaction and returns the number of
  // entries imported; a bad document names the entry and field, and changes nothing.
  StatusOr<std::string> ExportJson();
  StatusOr<int> ImportJson(const std::string& json);
  // PRAGMA integrity_check plus a check that each stored cubin's hash matches.
  Status CheckIntegrity();

  // Default file: $CONVT3D_CACHE, else $XDG_CACHE_HOME/convt3d/cache.sqlite, else
  // $HOME/.cache/convt3d/cache.sqlite.
  static std::string DefaultPath();

  // Why an entry stored under `stored` does not serve `current`: "" when the keys are equal, else
  // the differing fields, e.g. "driver 12080 != 13000; code_hash 'abc' != 'def'".
  static std::string ExplainMismatch(const Key& stored, const Key& current);
  // The integrity hash stored with each cubin: FNV-1a 64 as 16 lowercase hex digits.
  static std::string CubinHash(const std::vector<char>& cubin);

 private:
  Store() = default;
  struct DbCloser {
    void operator()(sqlite3* db) const;
  };
  std::unique_ptr<sqlite3, DbCloser> db_;
  std::string path_, warning_;
  bool read_only_ = false;
  std::mutex mu_;  // one connection must not interleave transactions of several threads
};

}  // namespace convt3d::cache
