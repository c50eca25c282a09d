// cache.h: the SQLite store of tuning results, trial logs and winners' cubins.
//
// One file holds every tuned problem. Each key field is its own column so that `convt3d cache`
// can say why an entry does not match this machine. A cache that cannot be opened (not SQLite,
// truncated, unreadable, locked) falls back to an in-memory database with one warning; a damaged
// one (see Open) is used read-only with one warning; callers never crash because of the cache,
// and nothing here ever writes into a damaged file or a file that is not a convt3d cache.
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
  // "" when the entry reads back sound: its text is what a writer stores (see Record) and its
  // cubin matches its stored hash. Else one line saying what is wrong, e.g. "cubin is corrupt
  // (hash ..., expected ...)" or "row is damaged: winner.params_json is not a JSON object".
  // Lookup refuses such an entry; List, Export and Check name it.
  std::string damage;
};

// How to open a Store.
enum class Access {
  kReadWrite,  // create the file (and its folders) if needed, migrate, take write locks to write
  kReadOnly,   // SQLITE_OPEN_READONLY: no migration, no write lock, nothing created or changed
};
struct OpenOptions {
  Access access = Access::kReadWrite;
  int busy_timeout_ms = 10000;
  // Files up to this size (bytes, main file) get the damage check at open (see Store::Open);
  // 0 never checks. 64 MiB takes about 50 ms with the pages in the OS cache.
  int64_t quick_check_max_bytes = int64_t{64} << 20;
};

// What Check() found: one line per problem, so a caller prints one line each.
struct EntryCheck {
  Key key;
  std::string problem;  // "" when the entry is intact, else one line: what is wrong with it
  bool ok() const { return problem.empty(); }
};
struct CheckReport {
  std::vector<EntryCheck> entries;  // every entry that could be read, in List() order
  // Problems not tied to one entry, one line each: SQLite's integrity_check findings, dangling
  // references, corrupt cubins no entry uses, a table that could not be read to its end.
  std::vector<std::string> file_problems;
  int damaged_entries() const;
  bool ok() const { return file_problems.empty() && damaged_entries() == 0; }
};

// What Import() did. `imported` counts distinct keys written (a key given twice in one document
// counts once: the later entry wins); each skipped entry has one line in `reasons` naming it and
// the field at fault, e.g. "entries[3].winner.cubin_hash: missing".
struct ImportSummary {
  int imported = 0;
  int skipped = 0;
  std::vector<std::string> reasons;
};

// What Export() wrote and what it left out: one line in `reasons` per skipped entry, plus one
// (not counted in `skipped`) when a damaged table stopped the scan before its end.
struct ExportSummary {
  std::string json;
  int exported = 0;
  int skipped = 0;
  std::vector<std::string> reasons;
};

// Who is tuning a key now (single-flight tuning, see cache/lease.h): one row per key, in a table
// of its own that a writer creates on first use. It is transient coordination, not results: no
// schema version covers it, readers of any version ignore it, and Export leaves it out.
struct Lease {
  std::string owner;      // the claim's token, unique per claim: "host:pid:n"
  std::string host;       // gethostname()
  int64_t pid = 0;        // the holder's process
  double expires_at = 0;  // seconds since the Unix epoch; renewed while the holder works
};
enum class Claim {
  kAcquired,  // the caller holds the lease now (a fresh one, or one whose holder let it expire)
  kHeld,      // another owner holds an unexpired lease: `lease` is theirs
  kStored,    // an entry for the key is stored already: look it up, do not tune
};
struct ClaimResult {
  Claim claim = Claim::kAcquired;
  Lease lease;  // ours (kAcquired), the holder's (kHeld), empty (kStored)
};

// Where an entry came from and what its winner's kernel source was (the tiered lookup,
// src/tiers.h): one row per key in a side table `notes` that the first Record with a note
// creates. Like leases it is outside the schema version (builds of any version share a file and
// older ones ignore it) and Export/Import leave it out: an entry without a note reads as origin
// "" (tuned, by an older build or imported) with an unknown source hash.
struct Note {
  std::string origin;       // "tuned", or the tier that served it, e.g. "tier 2 (same_gpu) ..."
  std::string source_hash;  // gen::SourceHash of the winner on its problem when recorded; ""
};

// All methods are thread-safe (one mutex per Store); several Stores, in one process or many, may
// share a file.
class Store {
 public:
  static constexpr int kSchemaVersion = 1;  // PRAGMA user_version this build reads and writes
  static constexpr int kDefaultBusyTimeoutMs = 10000;

  static constexpr int64_t kDefaultQuickCheckMaxBytes = int64_t{64} << 20;

  // Opens (creating if needed) the SQLite file at `path` in WAL mode with a busy timeout, and
  // migrates the schema if its version is older (in one write transaction; a current file is
  // opened without any write). On any failure it opens ":memory:" instead and sets warning().
  // Never returns null. An empty path means DefaultPath(). A valid cache that is not writable
  // is opened read-only: Lookup/List work, Record/Prune/Import return kUnavailable, and
  // warning() says so. A file that is not a convt3d cache is never modified.
  //
  // Damage: files up to options.quick_check_max_bytes get SQLite's PRAGMA quick_check (the
  // structure of every table and index) and integrity_check(entries) (the small entries table
  // against its key index) at open. A file that fails is reopened read-only with one warning and
  // damage() set: reads go on, while Record/Prune/Import refuse with kFailedPrecondition naming
  // the file and the damage. Whatever the file size, every read of an entry checks it: its cubin
  // against the stored hash, its text against what a writer stores, and (Lookup, Trials) that
  // the key index led to the row of the key asked for; a failing entry is never served. Not
  // covered: the numbers of a row (median_ms, rel_err) and the trial log's text carry no
  // checksum, so bytes changed in place there go unnoticed (a full check notices only broken
  // structure).
  static std::unique_ptr<Store> Open(const std::string& path);
  // Same, with an explicit busy timeout (tests use a short one to exercise a locked file).
  static std::unique_ptr<Store> Open(const std::string& path, int busy_timeout_ms);
  static std::unique_ptr<Store> Open(const std::string& path, const OpenOptions& options);
  // Open(path, {Access::kReadOnly}): for commands that only read (list, show, export, check,
  // info). It opens the file with SQLITE_OPEN_READONLY and takes no write lock, so a writer
  // holding a transaction in another process does not block it; it runs no migration (a file
  // whose schema is older than this build's falls back to memory with a warning) and creates no
  // file or folder. A path with no file gives an empty read-only view: exists() is false, no
  // warning, path() is the path asked for, List() is empty, Lookup() misses, Check() is ok (an
  // empty file reads the same, with exists() true). SQLite may leave -wal/-shm files beside an
  // existing WAL file, as any reader of it does. Writes return kUnavailable.
  static std::unique_ptr<Store> OpenReadOnly(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }  // ":memory:" after a fallback
  const std::string& warning() const { return warning_; }
  bool persistent() const { return path_ != ":memory:"; }
  bool read_only() const { return read_only_; }
  // false only for a read-only open of a path where no file exists (nothing was created).
  bool exists() const { return exists_; }
  // "" unless the check at open found the file damaged (then read_only() and warning() too):
  // one line, e.g. "quick_check: Page 32: btreeInitPage() returns error code 11 (and 1 more)".
  const std::string& damage() const { return damage_; }

  // Stores the winner and the whole trial log for `key` in one transaction, replacing any
  // earlier result for the same key. Safe against concurrent writers (other processes).
  // kInvalidArgument for an empty problem, arch, candidate or cubin, key or winner text that is
  // not printable ASCII, or params_json that is not a JSON object (what reads take as damage).
  Status Record(const Key& key, const Winner& winner, const std::vector<Trial>& trials);
  // Record, and `note` for the key in the same transaction (Record alone drops an older note).
  Status Record(const Key& key, const Winner& winner, const std::vector<Trial>& trials,
                const Note& note);
  // The note recorded with the entry of `key`; nullopt when there is none.
  StatusOr<std::optional<Note>> ReadNote(const Key& key);
  // The winner for exactly this key, with its cubin; nullopt on a miss. An error means the entry
  // exists but is unusable (e.g. its cubin fails the hash check): treat it as a miss, re-tune and
  // Record, which replaces it. A corrupt cubin is never returned.
  StatusOr<std::optional<Winner>> Lookup(const Key& key);
  // Every entry (cubins not loaded), ordered by problem.
  StatusOr<std::vector<Entry>> List();
  // The entries of one architecture with their winners' text, for lookups that rebuild a winner
  // from its params_json (the lookup tiers): no cubin is read or hash-checked, so this stays
  // cheap on a large cache. `damage` is set, and the entry is still listed, when its text is not
  // what a writer stores; cubin damage shows only in List, Lookup and Check.
  StatusOr<std::vector<Entry>> ListArch(const std::string& arch);
  // The trial log recorded with the entry of `key`, fastest first (untimed trials last);
  // kNotFound when there is no entry for `key`.
  StatusOr<std::vector<Trial>> Trials(const Key& key);
  // Removes entries whose arch/gpu/driver/nvrtc/code_hash differ from `current`'s (the problem
  // field of `current` is ignored); an entry whose code_hash is one of `also_code_hashes` (e.g.
  // the same hash with the tags of src/key_tags.h) is kept too. Returns how many were removed.
  StatusOr<int> Prune(const Key& current, const std::vector<std::string>& also_code_hashes = {});
  // Whole cache as JSON (cubins base64). Every entry whose cubin matches its hash and whose rows
  // read back is exported; the others are counted and named in the summary (a damaged cache can
  // be salvaged this way: export, then import into a fresh file). An error only when nothing
  // can be read at all.
  StatusOr<ExportSummary> Export();
  // Strict: the JSON of Export() when it skipped nothing, else an error naming the first entry
  // left out (and how many more).
  StatusOr<std::string> ExportJson();
  // Merges an export in: entries with equal keys are replaced. The document's own shape (JSON,
  // format, schema_version, an entries array) must be right or nothing is written; each entry
  // is then validated on its own (fields, base64, cubin hash): valid entries are written in one
  // transaction, bad ones are skipped and named in the summary. Refuses (kFailedPrecondition,
  // naming the file and the damage) to write into a damaged file: the check at open runs again
  // under the write lock, whatever the file size.
  StatusOr<ImportSummary> Import(const std::string& json);
  // Strict: all or nothing. A document with any bad entry names it (and how many more) and
  // changes nothing; else returns Import()'s `imported` (distinct keys written).
  StatusOr<int> ImportJson(const std::string& json);
  // PRAGMA integrity_check, the foreign-key check, and each entry's cubin against its hash,
  // one line per problem. An error only when the store is not open.
  StatusOr<CheckReport> Check();
  // Check() in one status: OK, or kInternal with the first problem and how many more.
  Status CheckIntegrity();

  // Leases (single flight; the clock is the caller's `now`, seconds since the Unix epoch, so
  // tests can move it). ClaimLease, in one write transaction: kStored if an entry for `key`
  // exists, else kHeld if another owner's lease has expires_at > now, else writes `mine` (taking
  // over an expired lease) and returns kAcquired. kUnavailable from a store that cannot be
  // written (read-only, damaged, missing): the caller cannot coordinate and works alone.
  StatusOr<ClaimResult> ClaimLease(const Key& key, const Lease& mine, double now);
  // Moves the expiry of `owner`'s lease on `key`; kFailedPrecondition when the lease is no longer
  // `owner`'s (it expired and another process took it over, or it was released).
  Status RenewLease(const Key& key, const std::string& owner, double expires_at);
  // Deletes `owner`'s lease on `key`; nothing when it is not theirs.
  Status ReleaseLease(const Key& key, const std::string& owner);
  // The lease on `key`, expired or not; nullopt when there is none.
  StatusOr<std::optional<Lease>> ReadLease(const Key& key);

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
  StatusOr<ImportSummary> ImportImpl(const std::string& json, bool strict);
  Status RecordImpl(const Key& key, const Winner& winner, const std::vector<Trial>& trials,
                    const Note* note);
  std::unique_ptr<sqlite3, DbCloser> db_;
  std::string path_, warning_, damage_;
  bool read_only_ = false;
  bool exists_ = true;
  std::mutex mu_;  // one connection must not interleave transactions of several threads
};

static_assert(OpenOptions{}.busy_timeout_ms == Store::kDefaultBusyTimeoutMs);
static_assert(OpenOptions{}.quick_check_max_bytes == Store::kDefaultQuickCheckMaxBytes);

}  // namespace convt3d::cache
