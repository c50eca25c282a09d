// cache.cpp: the SQLite tuning cache: schema, migrations, records, lookups, JSON import/export.
#include "cache/cache.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <type_traits>

#include "base/hash.h"
#include "base/status.h"
#include "base/time.h"

namespace convt3d::cache {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "convt3d-cache";
// Marks our files so that another application's SQLite database is never mistaken for a cache
// and migrated into ("CT3D").
constexpr int kApplicationId = 0x43543344;
constexpr int kBusyRetries = 4;

// One step per schema version; step i migrates user_version i-1 to i. Only ever append.
constexpr const char* kMigrations[] = {
    // 1: entries keyed by six columns, deduplicated cubins, per-candidate trial logs.
    R"sql(
CREATE TABLE binaries(
  hash TEXT PRIMARY KEY,     -- Store::CubinHash(cubin)
  cubin BLOB NOT NULL
);
CREATE TABLE entries(
  id INTEGER PRIMARY KEY,
  problem TEXT NOT NULL,
  arch TEXT NOT NULL,
  gpu_name TEXT NOT NULL,
  driver_version INTEGER NOT NULL,
  nvrtc_version INTEGER NOT NULL,
  code_hash TEXT NOT NULL,
  candidate TEXT NOT NULL,
  params_json TEXT NOT NULL,
  kernel_symbol TEXT NOT NULL,
  median_ms REAL NOT NULL,
  rel_err REAL NOT NULL,
  tuned_at TEXT NOT NULL,
  cubin_hash TEXT NOT NULL REFERENCES binaries(hash),
  UNIQUE(problem, arch, gpu_name, driver_version, nvrtc_version, code_hash)
);
CREATE INDEX entries_cubin ON entries(cubin_hash);
CREATE TABLE trials(
  entry_id INTEGER NOT NULL REFERENCES entries(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  candidate TEXT NOT NULL,
  outcome TEXT NOT NULL,
  median_ms REAL NOT NULL,
  min_ms REAL NOT NULL,
  repeats INTEGER NOT NULL,
  rel_err REAL NOT NULL,
  max_abs_err REAL NOT NULL,
  compile_ms REAL NOT NULL,
  message TEXT NOT NULL,
  PRIMARY KEY(entry_id, seq)
);
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == Store::kSchemaVersion,
              "one migration per schema version");

// ---- SQLite wrappers ------------------------------------------------------------------------

// Busy/locked become kUnavailable so that write transactions know they may retry.
Status SqlError(sqlite3* db, int rc, const std::string& call, const std::string& sql = "") {
  std::string what = call;
  if (!sql.empty()) {
    std::string s = sql.size() > 70 ? sql.substr(0, 67) + "..." : sql;
    for (char& c : s) c = (c == '\n' ? ' ' : c);
    what = StrCat(call, "(\"", s, "\")");
  }
  std::string msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  int primary = rc & 0xff;
  // "unable to open database file" alone does not say whether it was permissions or a directory.
  int os_errno = db != nullptr ? sqlite3_system_errno(db) : 0;
  if ((primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR) && os_errno != 0) {
    msg += StrCat(": ", std::strerror(os_errno));
  }
  std::string text = StrCat("sqlite ", what, " failed: ", msg, " (code ", rc, ")");
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return Unavailable(std::move(text));
  return Internal(std::move(text));
}

struct Blob {
  const void* data;
  size_t size;
};

class Stmt {
 public:
  static StatusOr<Stmt> Prepare(sqlite3* db, const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    int rc = sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()) + 1, &st, nullptr);
    if (rc != SQLITE_OK) return SqlError(db, rc, "prepare", sql);
    return Stmt(db, st, sql);
  }
  Stmt(Stmt&& o) noexcept : db_(o.db_), st_(o.st_), sql_(std::move(o.sql_)) { o.st_ = nullptr; }
  Stmt& operator=(Stmt&&) = delete;
  Stmt(const Stmt&) = delete;
  ~Stmt() { sqlite3_finalize(st_); }

  // Binds the arguments to parameters 1..N in order.
  template <typename... Args>
  Status BindAll(const Args&... args) {
    int i = 0;
    Status s;
    ((s.ok() ? (s = BindOne(++i, args), 0) : 0), ...);
    return s;
  }
  // Binds one text to parameter i (1-based): for lists whose length only the caller knows.
  Status BindText(int i, const std::string& v) { return BindOne(i, v); }
  // true: a row is ready; false: done.
  StatusOr<bool> Step() {
    int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqlError(db_, rc, "step", sql_);
  }
  // Runs a statement that returns no rows.
  Status Run() {
    CONVT3D_ASSIGN_OR_RETURN(bool row, Step());
    if (row) return Internal(StrCat("sqlite statement returned a row unexpectedly: ", sql_));
    return Status();
  }
  Status Reset() {
    sqlite3_reset(st_);  // its code repeats the last step's error, already reported
    int rc = sqlite3_clear_bindings(st_);
    return rc == SQLITE_OK ? Status() : SqlError(db_, rc, "clear_bindings", sql_);
  }

  int64_t Int(int col) { return sqlite3_column_int64(st_, col); }
  double Real(int col) { return sqlite3_column_double(st_, col); }
  bool IsNull(int col) { return sqlite3_column_type(st_, col) == SQLITE_NULL; }
  std::string Text(int col) {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st_, col));
    return p ? std::string(p, sqlite3_column_bytes(st_, col)) : std::string();
  }
  std::vector<char> Bytes(int col) {
    auto* p = static_cast<const char*>(sqlite3_column_blob(st_, col));
    return p ? std::vector<char>(p, p + sqlite3_column_bytes(st_, col)) : std::vector<char>();
  }
  // Valid until the next Step/Reset; {"" , 0} for NULL or an empty blob.
  Blob BlobView(int col) {
    const void* p = sqlite3_column_blob(st_, col);
    size_t n = static_cast<size_t>(sqlite3_column_bytes(st_, col));
    return p ? Blob{p, n} : Blob{"", 0};
  }

 private:
  Stmt(sqlite3* db, sqlite3_stmt* st, std::string sql) : db_(db), st_(st), sql_(std::move(sql)) {}

  template <typename T>
  Status BindOne(int i, const T& v) {
    int rc;
    if constexpr (std::is_same_v<T, std::string>) {
      rc = sqlite3_bind_text64(st_, i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
    } else if constexpr (std::is_same_v<T, Blob>) {
      // A zero-length blob must still be a blob, not NULL: pass a non-null pointer.
      rc = sqlite3_bind_blob64(st_, i, v.size ? v.data : "", v.size, SQLITE_TRANSIENT);
    } else if constexpr (std::is_floating_point_v<T>) {
      rc = sqlite3_bind_double(st_, i, v);
    } else {
      static_assert(std::is_integral_v<T>, "unsupported bind type");
      rc = sqlite3_bind_int64(st_, i, static_cast<sqlite3_int64>(v));
    }
    return rc == SQLITE_OK ? Status() : SqlError(db_, rc, StrCat("bind #", i), sql_);
  }

  sqlite3* db_;
  sqlite3_stmt* st_;
  std::string sql_;
};

// Runs constant SQL (schema, pragmas, transaction control); never used with data.
Status Exec(sqlite3* db, const std::string& sql) {
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  return rc == SQLITE_OK ? Status() : SqlError(db, rc, "exec", sql);
}

StatusOr<int64_t> QueryInt(sqlite3* db, const std::string& sql) {
  CONVT3D_ASSIGN_OR_RETURN(Stmt st, Stmt::Prepare(db, sql));
  CONVT3D_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return Internal(StrCat("sqlite query returned no row: ", sql));
  return st.Int(0);
}

// Rolls back unless Commit() succeeded, so an early error return never leaves a half-written
// entry or a held write lock behind.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {}
  Transaction(const Transaction&) = delete;
  ~Transaction() {
    if (active_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);  // best effort
  }
  // IMMEDIATE takes the write lock up front: a deferred transaction that later upgrades can
  // fail with SQLITE_BUSY without waiting, which the busy timeout cannot fix.
  Status BeginWrite() { return Begin("BEGIN IMMEDIATE"); }
  Status BeginRead() { return Begin("BEGIN"); }
  Status Commit() {
    CONVT3D_RETURN_IF_ERROR(Exec(db_, "COMMIT"));
    active_ = false;
    return Status();
  }

 private:
  Status Begin(const char* sql) {
    CONVT3D_RETURN_IF_ERROR(Exec(db_, sql));
    active_ = true;
    return Status();
  }
  sqlite3* db_;
  bool active_ = false;
};

// The busy timeout already waits for the lock; this retries the few cases it does not cover
// (e.g. a lock held past the timeout by a long import, or WAL recovery in another process).
Status WithWriteTransaction(sqlite3* db, const std::function<Status()>& body,
                            int attempts = kBusyRetries) {
  Status last;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(25 * attempt));
    Transaction txn(db);
    Status s = txn.BeginWrite();
    if (s.ok()) s = body();
    if (s.ok()) s = txn.Commit();
    if (s.ok() || s.code() != Code::kUnavailable) return s;
    last = s;
  }
  return last;
}

// ---- Small codecs ---------------------------------------------------------------------------

// The offset basis is spelt out here, not taken from base/hash.h's default: cubin hashes are
// stored on disk, so this value is part of the file format (and base/hash.h's kFnvOffset, as of
// ef582b7, lacks the basis's last digit: 1469598103934665603 instead of 14695981039346656037).
constexpr uint64_t kCubinHashBasis = 0xcbf29ce484222325ull;

std::string HashHex(const void* data, size_t size) {
  return Hex64(Fnv1a64(data, size, kCubinHashBasis));
}

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64Encode(const std::vector<char>& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t n = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) n |= static_cast<unsigned char>(in[i + 1]) << 8;
    if (i + 2 < in.size()) n |= static_cast<unsigned char>(in[i + 2]);
    out += kB64[(n >> 18) & 63];
    out += kB64[(n >> 12) & 63];
    out += i + 1 < in.size() ? kB64[(n >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kB64[n & 63] : '=';
  }
  return out;
}

// Strict: padded, no whitespace, no characters outside the alphabet.
bool Base64Decode(const std::string& in, std::vector<char>* out) {
  if (in.size() % 4 != 0) return false;
  out->clear();
  out->reserve(in.size() / 4 * 3);
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  for (size_t i = 0; i < in.size(); i += 4) {
    bool last = i + 4 == in.size();
    int pad = (in[i + 3] == '=') + (in[i + 2] == '=');
    if (pad > 0 && (!last || (in[i + 2] == '=' && in[i + 3] != '='))) return false;
    uint32_t n = 0;
    for (int j = 0; j < 4 - pad; ++j) {
      int v = value(in[i + j]);
      if (v < 0) return false;
      n |= static_cast<uint32_t>(v) << (18 - 6 * j);
    }
    out->push_back(static_cast<char>(n >> 16));
    if (pad < 2) out->push_back(static_cast<char>((n >> 8) & 0xff));
    if (pad < 1) out->push_back(static_cast<char>(n & 0xff));
  }
  return true;
}

// SQLite stores NaN as NULL, which the NOT NULL columns reject; "unknown" is -1 everywhere.
double Finite(double v) { return std::isfinite(v) ? v : -1; }

// ---- Opening --------------------------------------------------------------------------------

// Detects a truncated file from its header before SQLite touches it (SQLite would report it only
// on a later read, after creating -wal/-shm files beside it). Skipped while a WAL holds newer
// pages, since then the main file may legitimately lag behind.
Status CheckHeader(const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec || size == 0) return Status();  // missing or empty: SQLite creates a fresh database
  auto wal_size = std::filesystem::file_size(path + "-wal", ec);
  if (!ec && wal_size > 0) return Status();
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status();  // SQLite will name the open error
  unsigned char h[100] = {};
  f.read(reinterpret_cast<char*>(h), sizeof(h));
  if (f.gcount() < 16 || std::memcmp(h, "SQLite format 3", 16) != 0) {
    return FailedPrecondition("file is not a database");
  }
  if (f.gcount() < 100) return FailedPrecondition(StrCat("file is truncated (", size, " bytes)"));
  auto be32 = [&](int o) {
    return uint32_t{h[o]} << 24 | uint32_t{h[o + 1]} << 16 | uint32_t{h[o + 2]} << 8 | h[o + 3];
  };
  uint64_t page_size = (uint32_t{h[16]} << 8 | h[17]) == 1 ? 65536 : (uint32_t{h[16]} << 8 | h[17]);
  uint64_t pages = be32(28);
  // The header's page count is only authoritative when its version stamp matches (file format).
  if (pages > 0 && be32(24) == be32(92) && pages * page_size > size) {
    return FailedPrecondition(StrCat("file is truncated (", size, " bytes, header says ", pages,
                                     " pages of ", page_size, ")"));
  }
  return Status();
}

Status MkdirParents(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return Status();
  std::error_code ec;
  if (std::filesystem::is_directory(parent, ec)) return Status();
  std::filesystem::create_directories(parent, ec);
  if (ec)
    return FailedPrecondition(
        StrCat("cannot create directory ", parent.string(), ": ", ec.message()));
  return Status();
}

// Whether a new file may be created beside `path`. SQLite, refused the create, retries the open
// read-only and reports that attempt's "No such file or directory"; this names the real reason
// (e.g. "Permission denied", "Read-only file system").
Status CheckCreatable(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (faccessat(AT_FDCWD, parent.c_str(), W_OK | X_OK, AT_EACCESS) == 0) return Status();
  return FailedPrecondition(
      StrCat("cannot create a file in ", parent.string(), ": ", std::strerror(errno)));
}

// Reads what identifies the file; the first read is also where SQLite notices garbage.
struct Identity {
  int64_t app_id = 0, user_version = 0, objects = 0;
};

StatusOr<Identity> ReadIdentity(sqlite3* db) {
  Identity id;
  CONVT3D_ASSIGN_OR_RETURN(id.objects, QueryInt(db, "SELECT count(*) FROM sqlite_master"));
  CONVT3D_ASSIGN_OR_RETURN(id.app_id, QueryInt(db, "PRAGMA application_id"));
  CONVT3D_ASSIGN_OR_RETURN(id.user_version, QueryInt(db, "PRAGMA user_version"));
  return id;
}

// Refuses anything we did not write, and any schema newer than ours.
Status CheckIdentity(const Identity& id) {
  if (id.user_version > Store::kSchemaVersion) {
    return FailedPrecondition(StrCat("schema version ", id.user_version,
                                     " is newer than this build's ", Store::kSchemaVersion));
  }
  if (id.app_id != 0 && id.app_id != kApplicationId) {
    return FailedPrecondition(StrCat("not a convt3d cache: application_id ", id.app_id));
  }
  if (id.app_id == 0 && id.objects > 0) {
    return FailedPrecondition("not a convt3d cache: an SQLite database of another application");
  }
  return Status();
}

bool NeedsMigration(const Identity& id) {
  return id.user_version != Store::kSchemaVersion || id.app_id != kApplicationId;
}

// Creates or upgrades the schema. Runs under the write lock and re-reads the version there, so
// that two processes opening a fresh file at once migrate it exactly once. One attempt: a file
// locked past the busy timeout at open time falls back to memory rather than stalling longer.
// Callers skip it when NeedsMigration() is false, so opening a current file writes nothing.
Status Migrate(sqlite3* db) {
  return WithWriteTransaction(
      db,
      [db]() -> Status {
        CONVT3D_ASSIGN_OR_RETURN(Identity id, ReadIdentity(db));
        CONVT3D_RETURN_IF_ERROR(CheckIdentity(id));
        for (int64_t v = id.user_version; v < Store::kSchemaVersion; ++v) {
          CONVT3D_RETURN_IF_ERROR(Exec(db, kMigrations[v]));
        }
        if (id.user_version != Store::kSchemaVersion) {
          // PRAGMAs take no bound parameters; both values are compile-time constants.
          CONVT3D_RETURN_IF_ERROR(
              Exec(db, StrCat("PRAGMA user_version = ", Store::kSchemaVersion)));
          CONVT3D_RETURN_IF_ERROR(Exec(db, StrCat("PRAGMA application_id = ", kApplicationId)));
        }
        return Status();
      },
      /*attempts=*/1);
}

Status Configure(sqlite3* db, int busy_timeout_ms) {
  int rc = sqlite3_extended_result_codes(db, 1);
  if (rc != SQLITE_OK) return SqlError(db, rc, "extended_result_codes");
  rc = sqlite3_busy_timeout(db, busy_timeout_ms);
  if (rc != SQLITE_OK) return SqlError(db, rc, "busy_timeout");
  CONVT3D_RETURN_IF_ERROR(Exec(db, "PRAGMA foreign_keys = ON"));
  // Extra sanity checks on each b-tree page as it is read: a damaged page becomes
  // SQLITE_CORRUPT at once rather than after SQLite has acted on its contents.
  return Exec(db, "PRAGMA cell_size_check = ON");
}

// The last connection to a WAL file checkpoints it into the main file when it closes. Off from
// the open until the file is known to be ours and sound (Store::Open turns it on last), so that
// closing a connection to a damaged or foreign file leaves that file, and its -wal, as they were.
Status CheckpointOnClose(sqlite3* db, bool on) {
  int rc = sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, on ? 0 : 1, nullptr);
  return rc == SQLITE_OK ? Status() : SqlError(db, rc, "db_config(NO_CKPT_ON_CLOSE)");
}

enum class OpenMode {
  kCreate,     // read-write, creating the file (read-only when SQLite finds it unwritable)
  kReadOnly,   // SQLITE_OPEN_READONLY: never creates or writes the database file
  kImmutable,  // read-only through a URI with immutable=1: no locks and no -shm either
};

// Opens `path` as `mode` says. *out gets the handle even on failure: the caller owns it at once.
Status OpenDb(const std::string& path, OpenMode mode, int busy_timeout_ms, sqlite3** out) {
  std::string name = path;
  int flags =
      mode == OpenMode::kCreate ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
  if (mode == OpenMode::kImmutable) {
    name = "file:";
    for (unsigned char c : path) {  // percent-encode all but unreserved URI characters
      if (std::isalnum(c) || std::strchr("/-._~", c) != nullptr) {
        name += static_cast<char>(c);
      } else {
        char hex[4];
        std::snprintf(hex, sizeof(hex), "%%%02X", c);
        name += hex;
      }
    }
    name += "?immutable=1";
    flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
  }
  *out = nullptr;
  int rc = sqlite3_open_v2(name.c_str(), out, flags, nullptr);
  if (rc != SQLITE_OK) return SqlError(*out, rc, "open");
  CONVT3D_RETURN_IF_ERROR(CheckpointOnClose(*out, false));
  return Configure(*out, busy_timeout_ms);
}

// WAL lets readers run alongside one writer; NORMAL sync is durable enough under WAL for a cache
// (a power cut may lose the last result, never corrupt the file).
Status EnableWal(sqlite3* db, int busy_timeout_ms) {
  // Already WAL (every file this build has opened): reading the mode takes no lock to write.
  {
    CONVT3D_ASSIGN_OR_RETURN(Stmt now, Stmt::Prepare(db, "PRAGMA journal_mode"));
    CONVT3D_ASSIGN_OR_RETURN(bool row, now.Step());
    if (row && now.Text(0) == "wal") return Exec(db, "PRAGMA synchronous = NORMAL");
  }
  // Switching a fresh file to WAL needs an exclusive lock. Two openers that both hold a shared
  // lock and want it would deadlock, so SQLite answers SQLITE_BUSY at once without calling the
  // busy handler: retry here, with jitter, until the busy timeout is spent.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms);
  unsigned jitter = static_cast<unsigned>(reinterpret_cast<uintptr_t>(db) >> 4) ^ getpid();
  while (true) {
    StatusOr<std::string> mode = [&]() -> StatusOr<std::string> {
      CONVT3D_ASSIGN_OR_RETURN(Stmt wal, Stmt::Prepare(db, "PRAGMA journal_mode = WAL"));
      CONVT3D_ASSIGN_OR_RETURN(bool row, wal.Step());
      return row ? wal.Text(0) : std::string("?");
    }();
    if (mode.ok()) {
      if (mode.value() != "wal") {
        return FailedPrecondition(StrCat("cannot enable WAL (journal_mode is ", mode.value(), ")"));
      }
      break;
    }
    if (mode.status().code() != Code::kUnavailable ||
        std::chrono::steady_clock::now() >= deadline) {
      return mode.status();
    }
    jitter = jitter * 1103515245u + 12345u;
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + (jitter >> 16) % 20));
  }
  return Exec(db, "PRAGMA synchronous = NORMAL");
}

// A one-line reason from a failed open step: SQLite's own words, without our call decoration.
std::string Reason(const Status& s) {
  std::string m = s.message();
  auto pos = m.find(" failed: ");
  if (m.rfind("sqlite ", 0) == 0 && pos != std::string::npos) {
    m = m.substr(pos + 9);
    auto code = m.rfind(" (code ");
    if (code != std::string::npos) m.resize(code);
  }
  for (char& c : m) c = (c == '\n' || c == '\r') ? ' ' : c;
  return m;
}

// One printable line of at most `max` bytes: control characters (terminal escapes included)
// become '?', so that text read from a damaged file or a hostile export is safe to print.
std::string OneLine(const std::string& text, size_t max = 400) {
  std::string out;
  out.reserve(std::min(text.size(), max));
  for (char c : text) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    unsigned char u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? '?' : c;
  }
  return out;
}

// First of several problem lines, and how many more.
std::string FirstAndCount(const std::vector<std::string>& lines) {
  if (lines.empty()) return "";
  std::string out = lines[0];
  if (lines.size() > 1) out += StrCat(" (and ", lines.size() - 1, " more)");
  return out;
}

// Runs an integrity pragma (quick_check, integrity_check, ...) and appends each problem it
// reports as its own line: SQLite packs several lines into one row under a "*** in database
// main ***" heading. Returns the pragma's own failure, if any.
Status PragmaProblems(sqlite3* db, const std::string& sql, std::vector<std::string>* lines,
                      const std::string& prefix = "") {
  CONVT3D_ASSIGN_OR_RETURN(Stmt st, Stmt::Prepare(db, sql));
  while (true) {
    CONVT3D_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) return Status();
    std::string text = st.Text(0);
    if (text == "ok") continue;
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = std::min(text.find('\n', start), text.size());
      std::string line = text.substr(start, end - start);
      if (!line.empty() && line.rfind("*** in database ", 0) != 0) {
        lines->push_back(prefix + OneLine(line, 200));
      }
      start = end + 1;
    }
  }
}

// The check at open: PRAGMA quick_check (the b-tree structure of every table and index, in time
// linear in the file size) and the full integrity_check of the entries table alone (its rows
// against its indexes: damage there would make lookups miss rows that are there; the table has
// one row per tuned problem, so this is cheap). "" when the file passes, else one line saying
// what is damaged. Busy/locked is an error (the check did not run), any other failure is damage.
StatusOr<std::string> OpenCheck(sqlite3* db, bool has_schema) {
  for (const char* pragma : {"quick_check", "integrity_check(entries)"}) {
    if (!has_schema && pragma[0] == 'i') break;  // no entries table yet (being migrated)
    std::vector<std::string> problems;
    Status s = PragmaProblems(db, StrCat("PRAGMA ", pragma), &problems);
    if (!s.ok()) {
      if (s.code() == Code::kUnavailable) return s;
      problems.push_back(Reason(s));
    }
    if (!problems.empty()) return StrCat(pragma, ": ", FirstAndCount(problems));
  }
  return std::string();
}

// ---- Entries --------------------------------------------------------------------------------

constexpr const char* kKeyWhere =
    "problem = ? AND arch = ? AND gpu_name = ? AND driver_version = ? AND nvrtc_version = ? AND "
    "code_hash = ?";
// The row of a key, found through the key's index but then read from the table by its id: the
// caller compares the key it reads back, so that a damaged index cannot hand out another
// entry's row (entries are read from the table, never from an index's copy of the key).
constexpr const char* kIdOfKey =
    "e.id = (SELECT id FROM entries WHERE problem = ? AND arch = ? AND gpu_name = ? AND "
    "driver_version = ? AND nvrtc_version = ? AND code_hash = ?)";
constexpr const char* kIndexDamage =
    "the key's index points at another entry's row (damaged index)";

template <typename... More>
Status BindKey(Stmt& st, const Key& k, const More&... more) {
  return st.BindAll(k.problem, k.arch, k.gpu_name, k.driver_version, k.nvrtc_version, k.code_hash,
                    more...);
}

std::string Describe(const Key& k) {
  return StrCat(k.problem, " [", k.arch, ", '", k.gpu_name, "', driver ", k.driver_version,
                ", nvrtc ", k.nvrtc_version, ", code ", k.code_hash, "]");
}

// Stores the cubin once per content. Equal hashes with different bytes is either a corrupt row
// (repaired here with the good bytes) or a genuine FNV collision (refused, never mixed up).
Status PutBinary(sqlite3* db, const std::string& hash, const std::vector<char>& cubin) {
  CONVT3D_ASSIGN_OR_RETURN(Stmt get,
                           Stmt::Prepare(db, "SELECT cubin FROM binaries WHERE hash = ?"));
  CONVT3D_RETURN_IF_ERROR(get.BindAll(hash));
  CONVT3D_ASSIGN_OR_RETURN(bool found, get.Step());
  if (!found) {
    CONVT3D_ASSIGN_OR_RETURN(Stmt ins,
                             Stmt::Prepare(db, "INSERT INTO binaries(hash, cubin) VALUES(?, ?)"));
    CONVT3D_RETURN_IF_ERROR(ins.BindAll(hash, Blob{cubin.data(), cubin.size()}));
    return ins.Run();
  }
  std::vector<char> stored = get.Bytes(0);
  if (stored == cubin) return Status();
  if (HashHex(stored.data(), stored.size()) == hash) {
    return FailedPrecondition(StrCat("cubin hash collision on ", hash, "; not stored"));
  }
  CONVT3D_ASSIGN_OR_RETURN(Stmt upd,
                           Stmt::Prepare(db, "UPDATE binaries SET cubin = ? WHERE hash = ?"));
  CONVT3D_RETURN_IF_ERROR(upd.BindAll(Blob{cubin.data(), cubin.size()}, hash));
  return upd.Run();
}

// What no writer stores in an entry's text: anything but printable ASCII in the key and winner
// fields, and params_json that is not a JSON object. Record and Import refuse it, so on read it
// means the row's bytes were changed on disk (damage inside a row leaves SQLite's structure,
// and so quick_check, intact). "" when the fields are plausible, else which field is not.
std::string TextProblem(const Key& k, const Winner& w) {
  auto printable = [](const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  };
  const std::pair<const char*, const std::string*> fields[] = {
      {"key.problem", &k.problem},        {"key.arch", &k.arch},
      {"key.gpu_name", &k.gpu_name},      {"key.code_hash", &k.code_hash},
      {"winner.candidate", &w.candidate}, {"winner.kernel_symbol", &w.kernel_symbol},
      {"winner.tuned_at", &w.tuned_at},   {"winner.params_json", &w.params_json}};
  for (const auto& [name, value] : fields) {
    if (!printable(*value)) return StrCat(name, " holds characters other than printable ASCII");
  }
  if (w.params_json.empty() || w.params_json.front() != '{' || !json::accept(w.params_json)) {
    return "winner.params_json is not a JSON object";
  }
  return "";
}

Status ValidateRecord(const Key& key, const Winner& w) {
  if (key.problem.empty()) return InvalidArgument("cache key: problem is empty");
  if (key.arch.empty()) return InvalidArgument("cache key: arch is empty");
  if (w.candidate.empty()) return InvalidArgument("cache winner: candidate is empty");
  if (w.cubin.empty()) return InvalidArgument("cache winner: cubin is empty");
  std::string text = TextProblem(key, w);
  if (!text.empty()) return InvalidArgument(StrCat("cache entry: ", text));
  return Status();
}

// Delete + insert of one entry; the caller holds the write transaction.
Status InsertEntry(sqlite3* db, const Key& key, const Winner& w, const std::vector<Trial>& trials,
                   const std::string& tuned_at) {
  std::string old_hash;
  {
    CONVT3D_ASSIGN_OR_RETURN(
        Stmt old, Stmt::Prepare(db, StrCat("SELECT cubin_hash FROM entries WHERE ", kKeyWhere)));
    CONVT3D_RETURN_IF_ERROR(BindKey(old, key));
    CONVT3D_ASSIGN_OR_RETURN(bool found, old.Step());
    if (found) old_hash = old.Text(0);
  }
  if (!old_hash.empty()) {  // ON DELETE CASCADE removes its trials
    CONVT3D_ASSIGN_OR_RETURN(Stmt del,
                             Stmt::Prepare(db, StrCat("DELETE FROM entries WHERE ", kKeyWhere)));
    CONVT3D_RETURN_IF_ERROR(BindKey(del, key));
    CONVT3D_RETURN_IF_ERROR(del.Run());
  }
  std::string hash = HashHex(w.cubin.data(), w.cubin.size());
  CONVT3D_RETURN_IF_ERROR(PutBinary(db, hash, w.cubin));
  CONVT3D_ASSIGN_OR_RETURN(
      Stmt ins, Stmt::Prepare(db,
                              "INSERT INTO entries(problem, arch, gpu_name, driver_version, "
                              "nvrtc_version, code_hash, candidate, params_json, kernel_symbol, "
                              "median_ms, rel_err, tuned_at, cubin_hash) "
                              "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  CONVT3D_RETURN_IF_ERROR(BindKey(ins, key, w.candidate, w.params_json, w.kernel_symbol,
                                  Finite(w.median_ms), Finite(w.rel_err), tuned_at, hash));
  CONVT3D_RETURN_IF_ERROR(ins.Run());
  int64_t id = sqlite3_last_insert_rowid(db);

  CONVT3D_ASSIGN_OR_RETURN(
      Stmt tr, Stmt::Prepare(db,
                             "INSERT INTO trials(entry_id, seq, candidate, outcome, median_ms, "
                             "min_ms, repeats, rel_err, max_abs_err, compile_ms, message) "
                             "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
  for (size_t i = 0; i < trials.size(); ++i) {
    const Trial& t = trials[i];
    CONVT3D_RETURN_IF_ERROR(tr.BindAll(id, i, t.candidate, t.outcome, Finite(t.median_ms),
                                       Finite(t.min_ms), t.repeats, Finite(t.rel_err),
                                       Finite(t.max_abs_err), Finite(t.compile_ms), t.message));
    CONVT3D_RETURN_IF_ERROR(tr.Run());
    CONVT3D_RETURN_IF_ERROR(tr.Reset());
  }
  if (!old_hash.empty() && old_hash != hash) {
    CONVT3D_ASSIGN_OR_RETURN(Stmt gc,
                             Stmt::Prepare(db,
                                           "DELETE FROM binaries WHERE hash = ? AND NOT EXISTS "
                                           "(SELECT 1 FROM entries WHERE cubin_hash = ?)"));
    CONVT3D_RETURN_IF_ERROR(gc.BindAll(old_hash, old_hash));
    CONVT3D_RETURN_IF_ERROR(gc.Run());
  }
  return Status();
}

constexpr const char* kEntryColumns =
    "e.id, e.problem, e.arch, e.gpu_name, e.driver_version, e.nvrtc_version, e.code_hash, "
    "e.candidate, e.params_json, e.kernel_symbol, e.median_ms, e.rel_err, e.tuned_at, "
    "e.cubin_hash";

// Reads kEntryColumns from column 0 on; returns the entry id.
int64_t ReadEntry(Stmt& st, Key* k, Winner* w) {
  k->problem = st.Text(1);
  k->arch = st.Text(2);
  k->gpu_name = st.Text(3);
  k->driver_version = static_cast<int>(st.Int(4));
  k->nvrtc_version = static_cast<int>(st.Int(5));
  k->code_hash = st.Text(6);
  w->candidate = st.Text(7);
  w->params_json = st.Text(8);
  w->kernel_symbol = st.Text(9);
  w->median_ms = st.Real(10);
  w->rel_err = st.Real(11);
  w->tuned_at = st.Text(12);
  return st.Int(0);
}

StatusOr<std::vector<Trial>> ReadTrials(sqlite3* db, int64_t entry_id) {
  CONVT3D_ASSIGN_OR_RETURN(
      Stmt st, Stmt::Prepare(db,
                             "SELECT candidate, outcome, median_ms, min_ms, repeats, rel_err, "
                             "max_abs_err, compile_ms, message FROM trials WHERE entry_id = ? "
                             "ORDER BY median_ms < 0, median_ms, seq"));
  CONVT3D_RETURN_IF_ERROR(st.BindAll(entry_id));
  std::vector<Trial> out;
  while (true) {
    CONVT3D_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    Trial t;
    t.candidate = st.Text(0);
    t.outcome = st.Text(1);
    t.median_ms = st.Real(2);
    t.min_ms = st.Real(3);
    t.repeats = static_cast<int>(st.Int(4));
    t.rel_err = st.Real(5);
    t.max_abs_err = st.Real(6);
    t.compile_ms = st.Real(7);
    t.message = st.Text(8);
    out.push_back(std::move(t));
  }
  return out;
}

// ---- JSON import helpers --------------------------------------------------------------------

// Each reads obj[field] with a type check; errors name the JSON path, e.g.
// "entries[3].key.driver_version: expected an integer".
Status JsonField(const json& obj, const std::string& where, const char* field, const json** out) {
  auto it = obj.find(field);
  if (it == obj.end()) return InvalidArgument(StrCat("import: ", where, ".", field, ": missing"));
  *out = &*it;
  return Status();
}
Status JsonString(const json& obj, const std::string& where, const char* field, std::string* out) {
  const json* v;
  CONVT3D_RETURN_IF_ERROR(JsonField(obj, where, field, &v));
  if (!v->is_string()) {
    return InvalidArgument(StrCat("import: ", where, ".", field, ": expected a string"));
  }
  *out = v->get<std::string>();
  return Status();
}
Status JsonNumber(const json& obj, const std::string& where, const char* field, double* out) {
  const json* v;
  CONVT3D_RETURN_IF_ERROR(JsonField(obj, where, field, &v));
  if (!v->is_number()) {
    return InvalidArgument(StrCat("import: ", where, ".", field, ": expected a number"));
  }
  *out = v->get<double>();
  return Status();
}
Status JsonInt(const json& obj, const std::string& where, const char* field, int* out) {
  const json* v;
  CONVT3D_RETURN_IF_ERROR(JsonField(obj, where, field, &v));
  if (!v->is_number_integer() || v->get<int64_t>() < INT32_MIN || v->get<int64_t>() > INT32_MAX) {
    return InvalidArgument(StrCat("import: ", where, ".", field, ": expected an integer"));
  }
  *out = v->get<int>();
  return Status();
}
Status JsonObject(const json& obj, const std::string& where, const char* field, const json** out) {
  CONVT3D_RETURN_IF_ERROR(JsonField(obj, where, field, out));
  if (!(*out)->is_object()) {
    return InvalidArgument(StrCat("import: ", where, ".", field, ": expected an object"));
  }
  return Status();
}

struct ImportedEntry {
  Key key;
  Winner winner;
  std::vector<Trial> trials;
};

Status ParseEntry(const json& e, const std::string& where, ImportedEntry* out) {
  if (!e.is_object()) return InvalidArgument(StrCat("import: ", where, ": expected an object"));
  const json *k, *w, *ts;
  CONVT3D_RETURN_IF_ERROR(JsonObject(e, where, "key", &k));
  CONVT3D_RETURN_IF_ERROR(JsonObject(e, where, "winner", &w));
  std::string kw = where + ".key", ww = where + ".winner";
  Key& key = out->key;
  CONVT3D_RETURN_IF_ERROR(JsonString(*k, kw, "problem", &key.problem));
  CONVT3D_RETURN_IF_ERROR(JsonString(*k, kw, "arch", &key.arch));
  CONVT3D_RETURN_IF_ERROR(JsonString(*k, kw, "gpu_name", &key.gpu_name));
  CONVT3D_RETURN_IF_ERROR(JsonInt(*k, kw, "driver_version", &key.driver_version));
  CONVT3D_RETURN_IF_ERROR(JsonInt(*k, kw, "nvrtc_version", &key.nvrtc_version));
  CONVT3D_RETURN_IF_ERROR(JsonString(*k, kw, "code_hash", &key.code_hash));
  Winner& win = out->winner;
  std::string b64, hash;
  CONVT3D_RETURN_IF_ERROR(JsonString(*w, ww, "candidate", &win.candidate));
  CONVT3D_RETURN_IF_ERROR(JsonString(*w, ww, "params_json", &win.params_json));
  CONVT3D_RETURN_IF_ERROR(JsonString(*w, ww, "kernel_symbol", &win.kernel_symbol));
  CONVT3D_RETURN_IF_ERROR(JsonNumber(*w, ww, "median_ms", &win.median_ms));
  CONVT3D_RETURN_IF_ERROR(JsonNumber(*w, ww, "rel_err", &win.rel_err));
  CONVT3D_RETURN_IF_ERROR(JsonString(*w, ww, "tuned_at", &win.tuned_at));
  CONVT3D_RETURN_IF_ERROR(JsonString(*w, ww, "cubin_hash", &hash));
  CONVT3D_RETURN_IF_ERROR(JsonString(*w, ww, "cubin_base64", &b64));
  if (!Base64Decode(b64, &win.cubin)) {
    return InvalidArgument(StrCat("import: ", ww, ".cubin_base64: not valid base64"));
  }
  std::string actual = HashHex(win.cubin.data(), win.cubin.size());
  if (actual != hash) {
    return InvalidArgument(StrCat("import: ", ww, ".cubin_hash: ", hash,
                                  " does not match the decoded cubin (", actual, ")"));
  }
  Status valid = ValidateRecord(key, win);
  if (!valid.ok()) return InvalidArgument(StrCat("import: ", where, ": ", valid.message()));
  CONVT3D_RETURN_IF_ERROR(JsonField(e, where, "trials", &ts));
  if (!ts->is_array())
    return InvalidArgument(StrCat("import: ", where, ".trials: expected an array"));
  for (size_t i = 0; i < ts->size(); ++i) {
    const json& t = (*ts)[i];
    std::string tw = StrCat(where, ".trials[", i, "]");
    if (!t.is_object()) return InvalidArgument(StrCat("import: ", tw, ": expected an object"));
    Trial tr;
    CONVT3D_RETURN_IF_ERROR(JsonString(t, tw, "candidate", &tr.candidate));
    CONVT3D_RETURN_IF_ERROR(JsonString(t, tw, "outcome", &tr.outcome));
    CONVT3D_RETURN_IF_ERROR(JsonNumber(t, tw, "median_ms", &tr.median_ms));
    CONVT3D_RETURN_IF_ERROR(JsonNumber(t, tw, "min_ms", &tr.min_ms));
    CONVT3D_RETURN_IF_ERROR(JsonInt(t, tw, "repeats", &tr.repeats));
    CONVT3D_RETURN_IF_ERROR(JsonNumber(t, tw, "rel_err", &tr.rel_err));
    CONVT3D_RETURN_IF_ERROR(JsonNumber(t, tw, "max_abs_err", &tr.max_abs_err));
    CONVT3D_RETURN_IF_ERROR(JsonNumber(t, tw, "compile_ms", &tr.compile_ms));
    CONVT3D_RETURN_IF_ERROR(JsonString(t, tw, "message", &tr.message));
    out->trials.push_back(std::move(tr));
  }
  return Status();
}

}  // namespace

// ---- Store ----------------------------------------------------------------------------------

void Store::DbCloser::operator()(sqlite3* db) const {
  sqlite3_close_v2(db);  // also checkpoints the WAL when this is the last connection
}

int CheckReport::damaged_entries() const {
  return static_cast<int>(
      std::count_if(entries.begin(), entries.end(), [](const EntryCheck& e) { return !e.ok(); }));
}

std::unique_ptr<Store> Store::Open(const std::string& path) { return Open(path, OpenOptions{}); }

std::unique_ptr<Store> Store::Open(const std::string& path, int busy_timeout_ms) {
  OpenOptions options;
  options.busy_timeout_ms = busy_timeout_ms;
  return Open(path, options);
}

std::unique_ptr<Store> Store::OpenReadOnly(const std::string& path) {
  OpenOptions options;
  options.access = Access::kReadOnly;
  return Open(path, options);
}

std::unique_ptr<Store> Store::Open(const std::string& path, const OpenOptions& options) {
  std::unique_ptr<Store> store(new Store());
  store->path_ = path.empty() ? DefaultPath() : path;
  const bool read_only = options.access == Access::kReadOnly;
  const int timeout = options.busy_timeout_ms;
  // The view of a missing or empty file opened read-only: an empty in-memory schema.
  bool empty_view = false;

  // Every step that can fail; the first failure's reason goes into the one-line warning.
  auto open_file = [&]() -> Status {
    const std::string& file = store->path_;
    struct stat st;
    const bool found = stat(file.c_str(), &st) == 0;
    if (found) {
      // SQLite would take a device or a FIFO for an empty database, and write beside it.
      if (S_ISDIR(st.st_mode)) return FailedPrecondition("is a directory");
      if (!S_ISREG(st.st_mode)) return FailedPrecondition("not a regular file");
    } else if (read_only) {
      if (errno != ENOENT) return FailedPrecondition(std::strerror(errno));
      // Nothing may be created, so a missing file is an empty view, not an error.
      store->exists_ = false;
      empty_view = true;
      return Status();
    }
    if (!read_only) CONVT3D_RETURN_IF_ERROR(MkdirParents(file));  // it names what is wrong
    if (!read_only && !found) CONVT3D_RETURN_IF_ERROR(CheckCreatable(file));
    CONVT3D_RETURN_IF_ERROR(CheckHeader(file));
    sqlite3* db = nullptr;
    Status opened = OpenDb(file, read_only ? OpenMode::kReadOnly : OpenMode::kCreate, timeout, &db);
    store->db_.reset(db);
    CONVT3D_RETURN_IF_ERROR(opened);
    // Identify before anything writes (even journal_mode=WAL rewrites the header).
    StatusOr<Identity> read = ReadIdentity(db);
    std::error_code journal_ec;
    if (!read.ok() && (sqlite3_extended_errcode(db) & 0xff) == SQLITE_READONLY &&
        sqlite3_db_readonly(db, "main") == 1 &&
        !std::filesystem::exists(file + "-journal", journal_ec)) {
      // A WAL file in a directory we cannot write (e.g. a pre-tuned cache on a read-only mount):
      // SQLite cannot create the -shm file, so read it as immutable. Should another user write
      // it meanwhile, reads may fail, and a changed cubin still fails its hash check. (Not with a
      // rollback journal beside it: immutable would read a half-written file as if whole.)
      store->db_.reset();
      opened = OpenDb(file, OpenMode::kImmutable, timeout, &db);
      store->db_.reset(db);
      CONVT3D_RETURN_IF_ERROR(opened);
      read = ReadIdentity(db);
    }
    if (!read.ok()) return read.status();
    Identity id = read.value();
    CONVT3D_RETURN_IF_ERROR(CheckIdentity(id));
    const bool unwritable = sqlite3_db_readonly(db, "main") == 1;
    if (NeedsMigration(id) && (read_only || unwritable)) {
      if (id.objects == 0) {  // an empty file: nothing to read, and we may not initialise it
        store->db_.reset();
        empty_view = true;
        return Status();
      }
      return FailedPrecondition(StrCat("read-only, and schema version ", id.user_version,
                                       " needs a migration to ", kSchemaVersion));
    }

    // Damage: the structure of a file small enough to check quickly; cubins on every read.
    std::error_code ec;
    auto size = std::filesystem::file_size(file, ec);
    if (!ec && size > 0 && static_cast<int64_t>(size) <= options.quick_check_max_bytes) {
      CONVT3D_ASSIGN_OR_RETURN(store->damage_, OpenCheck(db, !NeedsMigration(id)));
    }
    if (!store->damage_.empty()) {
      if (!read_only && !unwritable) {
        // Reads only from here on, through a connection that cannot write either (not even a
        // checkpoint at close).
        store->db_.reset();
        opened = OpenDb(file, OpenMode::kReadOnly, timeout, &db);
        store->db_.reset(db);
        CONVT3D_RETURN_IF_ERROR(opened);
      }
      store->read_only_ = true;
      store->warning_ = StrCat("convt3d: cache ", file, " is damaged (", store->damage_,
                               "); reading it read-only: damaged entries are refused, new "
                               "results are not saved");
      return Status();
    }
    if (read_only) {  // asked for: no warning
      store->read_only_ = true;
      return Status();
    }
    // SQLite silently opens a file it may not write read-only. A current cache is still useful
    // for lookups then.
    if (unwritable) {
      store->read_only_ = true;
      store->warning_ = StrCat("convt3d: cache ", file,
                               " is read-only; lookups work but new tuning results are not saved");
      return Status();
    }
    CONVT3D_RETURN_IF_ERROR(EnableWal(db, timeout));
    if (NeedsMigration(id)) CONVT3D_RETURN_IF_ERROR(Migrate(db));
    return CheckpointOnClose(db, true);
  };

  if (store->path_ != ":memory:") {
    Status s = open_file();
    if (s.ok() && !empty_view) return store;
    if (!s.ok()) {
      store->damage_.clear();
      store->warning_ = StrCat("convt3d: cache ", store->path_, " unusable (", OneLine(Reason(s)),
                               "); using an in-memory cache for this process");
      store->path_ = ":memory:";
    }
  }
  store->db_.reset();
  store->read_only_ = read_only || empty_view;
  if (empty_view && !read_only) {  // an empty file we may not write
    store->warning_ = StrCat("convt3d: cache ", store->path_,
                             " is empty and read-only; new tuning results are not saved");
  }
  sqlite3* db = nullptr;
  Status mem = OpenDb(":memory:", OpenMode::kCreate, timeout, &db);
  store->db_.reset(db);
  if (mem.ok()) mem = Migrate(db);
  if (!mem.ok()) {  // only out of memory gets here; every method then reports kUnavailable
    store->db_.reset();
    store->warning_ += StrCat(store->warning_.empty() ? "convt3d: " : "; ",
                              "in-memory cache failed: ", Reason(mem));
  }
  return store;
}

Store::~Store() = default;

#define CONVT3D_CACHE_READY()                                                        \
  std::lock_guard<std::mutex> lock(mu_);                                             \
  if (!db_) return Unavailable(StrCat("cache ", path_, " is not open: ", warning_)); \
  sqlite3* db = db_.get()

// A damaged file is never written: SQLite would write into pages it cannot trust.
#define CONVT3D_CACHE_WRITABLE()                                              \
  CONVT3D_CACHE_READY();                                                      \
  if (!damage_.empty()) {                                                     \
    return FailedPrecondition(                                                \
        StrCat("cache ", path_, " is damaged (", damage_, "); not written")); \
  }                                                                           \
  if (!exists_) {                                                             \
    return Unavailable(StrCat("cache ", path_,                                \
                              " does not exist and was opened read-only; "    \
                              "not written"));                                \
  }                                                                           \
  if (read_only_) return Unavailable(StrCat("cache ", path_, " is read-only; not written"))

namespace {

// Notes (cache.h, Note): a side table created by the first Record with a note; not in
// kMigrations, like leases, so files stay readable by builds of any schema version.
constexpr const char* kNoteTable =
    "CREATE TABLE IF NOT EXISTS notes(key TEXT PRIMARY KEY, origin TEXT NOT NULL, "
    "source_hash TEXT NOT NULL)";

bool Printable(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

// The whole key as one text column (the leases' form): notes are looked up by equality only.
std::string NoteKey(const Key& k) {
  return StrCat(k.problem, "|", k.arch, "|", k.gpu_name, "|", k.driver_version, "|",
                k.nvrtc_version, "|", k.code_hash);
}

StatusOr<bool> HasNoteTable(sqlite3* db) {
  CONVT3D_ASSIGN_OR_RETURN(int64_t n,
                           QueryInt(db, "SELECT count(*) FROM sqlite_master WHERE name = 'notes'"));
  return n > 0;
}

// Replaces the note of `key` by `note`, or drops it when `note` is null; in the caller's
// transaction.
Status PutNote(sqlite3* db, const Key& key, const Note* note) {
  if (note) {
    CONVT3D_RETURN_IF_ERROR(Exec(db, kNoteTable));
    CONVT3D_ASSIGN_OR_RETURN(Stmt put,
                             Stmt::Prepare(db, "INSERT OR REPLACE INTO notes VALUES (?, ?, ?)"));
    CONVT3D_RETURN_IF_ERROR(put.BindAll(NoteKey(key), note->origin, note->source_hash));
    return put.Run();
  }
  CONVT3D_ASSIGN_OR_RETURN(bool table, HasNoteTable(db));
  if (!table) return Status();
  CONVT3D_ASSIGN_OR_RETURN(Stmt del, Stmt::Prepare(db, "DELETE FROM notes WHERE key = ?"));
  CONVT3D_RETURN_IF_ERROR(del.BindAll(NoteKey(key)));
  return del.Run();
}

StatusOr<std::optional<Note>> SelectNote(sqlite3* db, const Key& key) {
  CONVT3D_ASSIGN_OR_RETURN(bool table, HasNoteTable(db));
  if (!table) return std::optional<Note>();
  CONVT3D_ASSIGN_OR_RETURN(
      Stmt st, Stmt::Prepare(db, "SELECT origin, source_hash FROM notes WHERE key = ?"));
  CONVT3D_RETURN_IF_ERROR(st.BindAll(NoteKey(key)));
  CONVT3D_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<Note>();
  return std::optional<Note>(Note{st.Text(0), st.Text(1)});
}

}  // namespace

Status Store::Record(const Key& key, const Winner& winner, const std::vector<Trial>& trials) {
  return RecordImpl(key, winner, trials, nullptr);
}

Status Store::Record(const Key& key, const Winner& winner, const std::vector<Trial>& trials,
                     const Note& note) {
  return RecordImpl(key, winner, trials, &note);
}

Status Store::RecordImpl(const Key& key, const Winner& winner, const std::vector<Trial>& trials,
                         const Note* note) {
  CONVT3D_RETURN_IF_ERROR(ValidateRecord(key, winner));
  if (note && (!Printable(note->origin) || !Printable(note->source_hash)))
    return InvalidArgument("cache note: origin and source_hash must be printable ASCII");
  CONVT3D_CACHE_WRITABLE();
  std::string tuned_at = NowUtc();
  Status s = WithWriteTransaction(db, [&]() -> Status {
    CONVT3D_RETURN_IF_ERROR(InsertEntry(db, key, winner, trials, tuned_at));
    return PutNote(db, key, note);
  });
  if (!s.ok()) return Status(s.code(), StrCat("recording ", Describe(key), ": ", s.message()));
  return s;
}

StatusOr<std::optional<Note>> Store::ReadNote(const Key& key) {
  CONVT3D_CACHE_READY();
  return SelectNote(db, key);
}

namespace {

// Why the cubin in column `col` of `st` (joined on the entry's hash `want`) may not be used: ""
// when it is present and hashes to `want`.
std::string CubinDamage(Stmt& st, int col, const std::string& want);

// Why an entry read by ReadEntry() from `st` (its cubin in column 14) may not be used: its
// text, then its cubin. "" when both are sound.
std::string EntryDamage(Stmt& st, const Key& k, const Winner& w) {
  std::string text = TextProblem(k, w);
  if (!text.empty()) return StrCat("row is damaged: ", text);
  return CubinDamage(st, 14, st.Text(13));
}

std::string CubinDamage(Stmt& st, int col, const std::string& want) {
  if (st.IsNull(col)) return StrCat("cubin ", OneLine(want, 40), " is missing");
  Blob b = st.BlobView(col);
  std::string got = HashHex(b.data, b.size);
  if (got != want) {
    return StrCat("cubin is corrupt (hash ", got, ", expected ", OneLine(want, 40), ")");
  }
  return "";
}

}  // namespace

StatusOr<std::optional<Winner>> Store::Lookup(const Key& key) {
  CONVT3D_CACHE_READY();
  CONVT3D_ASSIGN_OR_RETURN(
      Stmt st, Stmt::Prepare(db, StrCat("SELECT ", kEntryColumns,
                                        ", b.cubin FROM entries e "
                                        "LEFT JOIN binaries b ON b.hash = e.cubin_hash WHERE ",
                                        kIdOfKey)));
  CONVT3D_RETURN_IF_ERROR(BindKey(st, key));
  CONVT3D_ASSIGN_OR_RETURN(bool found, st.Step());
  if (!found) return std::optional<Winner>();
  Key k;
  Winner w;
  ReadEntry(st, &k, &w);
  std::string damage = k == key ? EntryDamage(st, k, w) : kIndexDamage;
  if (!damage.empty()) {
    return Internal(
        StrCat("cache entry ", OneLine(Describe(key)), ": ", damage, "; treat as a miss"));
  }
  w.cubin = st.Bytes(14);
  return std::optional<Winner>(std::move(w));
}

StatusOr<std::vector<Entry>> Store::List() {
  CONVT3D_CACHE_READY();
  CONVT3D_ASSIGN_OR_RETURN(
      Stmt st, Stmt::Prepare(db, StrCat("SELECT ", kEntryColumns,
                                        ", b.cubin, "
                                        "(SELECT count(*) FROM trials t WHERE t.entry_id = e.id) "
                                        "FROM entries e NOT INDEXED "
                                        "LEFT JOIN binaries b ON b.hash = e.cubin_hash "
                                        "ORDER BY e.problem, e.arch, e.gpu_name, e.driver_version, "
                                        "e.nvrtc_version, e.code_hash")));
  std::vector<Entry> out;
  while (true) {
    CONVT3D_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    Entry e;
    ReadEntry(st, &e.key, &e.winner);
    e.cubin_bytes = static_cast<int64_t>(st.BlobView(14).size);
    e.damage = EntryDamage(st, e.key, e.winner);
    e.trials = static_cast<int>(st.Int(15));
    out.push_back(std::move(e));
  }
  return out;
}

StatusOr<std::vector<Entry>> Store::ListArch(const std::string& arch) {
  CONVT3D_CACHE_READY();
  CONVT3D_ASSIGN_OR_RETURN(
      Stmt st, Stmt::Prepare(db, StrCat("SELECT ", kEntryColumns,
                                        " FROM entries e NOT INDEXED WHERE e.arch = ? "
                                        "ORDER BY e.problem, e.gpu_name, e.driver_version, "
                                        "e.nvrtc_version, e.code_hash")));
  CONVT3D_RETURN_IF_ERROR(st.BindAll(arch));
  std::vector<Entry> out;
  while (true) {
    CONVT3D_ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    Entry e;
    ReadEntry(st, &e.key, &e.winner);
    if (std::string text = TextProblem(e.key, e.winner); !text.empty())
      e.damage = StrCat("row is damaged: ", text);
    out.push_back(std::move(e));
  }
  return out;
}

StatusOr<std::vector<Trial>> Store::Trials(const Key& key) {
  CONVT3D_CACHE_READY();
  Transaction txn(db);  // the id and its trials from one snapshot
  CONVT3D_RETURN_IF_ERROR(txn.BeginRead());
  CONVT3D_ASSIGN_OR_RETURN(Stmt st, Stmt::Prepare(db, StrCat("SELECT ", kEntryColumns,
                                                             " FROM entries e WHERE ", kIdOfKey)));
  CONVT3D_RETURN_IF_ERROR(BindKey(st, key));
  CONVT3D_ASSIGN_OR_RETURN(bool found, st.Step());
  if (!found) return NotFound(StrCat("no cache entry for ", OneLine(Describe(key))));
  Key k;
  Winner w;
  int64_t id = ReadEntry(st, &k, &w);
  if (k != key) {
    return Internal(StrCat("cache entry ", OneLine(Describe(key)), ": ", kIndexDamage));
  }
  return ReadTrials(db, id);
}

StatusOr<int> Store::Prune(const Key& current, const std::vector<std::string>& also_code_hashes) {
  CONVT3D_CACHE_WRITABLE();
  int removed = 0;
  std::vector<std::string> kept{current.code_hash};
  kept.insert(kept.end(), also_code_hashes.begin(), also_code_hashes.end());
  std::string marks;
  for (size_t i = 0; i < kept.size(); ++i) marks += i == 0 ? "?" : ", ?";
  Status s = WithWriteTransaction(db, [&]() -> Status {
    CONVT3D_ASSIGN_OR_RETURN(
        Stmt del,
        Stmt::Prepare(db, StrCat("DELETE FROM entries WHERE arch <> ? OR gpu_name <> ? OR "
                                 "driver_version <> ? OR nvrtc_version <> ? OR "
                                 "code_hash NOT IN (",
                                 marks, ")")));
    CONVT3D_RETURN_IF_ERROR(
        del.BindAll(current.arch, current.gpu_name, current.driver_version, current.nvrtc_version));
    for (size_t i = 0; i < kept.size(); ++i)
      CONVT3D_RETURN_IF_ERROR(del.BindText(static_cast<int>(5 + i), kept[i]));
    CONVT3D_RETURN_IF_ERROR(del.Run());
    removed = sqlite3_changes(db);
    return Exec(db, "DELETE FROM binaries WHERE hash NOT IN (SELECT cubin_hash FROM entries)");
  });
  if (!s.ok()) return s;
  return removed;
}

StatusOr<ExportSummary> Store::Export() {
  CONVT3D_CACHE_READY();
  ExportSummary out;
  try {
    Transaction txn(db);
    CONVT3D_RETURN_IF_ERROR(txn.BeginRead());
    CONVT3D_ASSIGN_OR_RETURN(
        Stmt st, Stmt::Prepare(db, StrCat("SELECT ", kEntryColumns,
                                          ", b.cubin FROM entries e "
                                          "LEFT JOIN binaries b ON b.hash = e.cubin_hash "
                                          "ORDER BY e.id")));
    json entries = json::array();
    while (true) {
      StatusOr<bool> row = st.Step();
      if (!row.ok()) {
        // A damaged table: what was read so far is kept, the rest is named as lost.
        if (out.exported == 0 && out.skipped == 0) {
          return Status(row.status().code(), StrCat("export: ", row.status().message()));
        }
        out.reasons.push_back(StrCat("the entries after the first ", out.exported + out.skipped,
                                     " could not be read: ", OneLine(Reason(row.status()))));
        break;
      }
      if (!*row) break;
      Key k;
      Winner w;
      int64_t id = ReadEntry(st, &k, &w);
      std::string hash = st.Text(13);
      std::string damage = EntryDamage(st, k, w);
      StatusOr<std::vector<Trial>> trials = std::vector<Trial>();
      if (damage.empty()) {
        trials = ReadTrials(db, id);
        if (!trials.ok()) damage = StrCat("trial log unreadable: ", Reason(trials.status()));
      }
      if (!damage.empty()) {
        ++out.skipped;
        out.reasons.push_back(StrCat("entry ", OneLine(Describe(k)), ": ", OneLine(damage)));
        continue;
      }
      w.cubin = st.Bytes(14);
      json tj = json::array();
      for (const Trial& t : *trials) {
        tj.push_back({{"candidate", t.candidate},
                      {"outcome", t.outcome},
                      {"median_ms", t.median_ms},
                      {"min_ms", t.min_ms},
                      {"repeats", t.repeats},
                      {"rel_err", t.rel_err},
                      {"max_abs_err", t.max_abs_err},
                      {"compile_ms", t.compile_ms},
                      {"message", t.message}});
      }
      entries.push_back({{"key",
                          {{"problem", k.problem},
                           {"arch", k.arch},
                           {"gpu_name", k.gpu_name},
                           {"driver_version", k.driver_version},
                           {"nvrtc_version", k.nvrtc_version},
                           {"code_hash", k.code_hash}}},
                         {"winner",
                          {{"candidate", w.candidate},
                           {"params_json", w.params_json},
                           {"kernel_symbol", w.kernel_symbol},
                           {"median_ms", w.median_ms},
                           {"rel_err", w.rel_err},
                           {"tuned_at", w.tuned_at},
                           {"cubin_hash", hash},
                           {"cubin_base64", Base64Encode(w.cubin)}}},
                         {"trials", std::move(tj)}});
      ++out.exported;
    }
    json doc = {{"format", kFormat}, {"schema_version", kSchemaVersion}, {"entries", entries}};
    // Compiler logs may hold invalid UTF-8: replace rather than throw.
    out.json = doc.dump(1, ' ', false, json::error_handler_t::replace);
    return out;
  } catch (const std::exception& e) {
    return Internal(StrCat("export: ", e.what()));
  }
}

StatusOr<std::string> Store::ExportJson() {
  CONVT3D_ASSIGN_OR_RETURN(ExportSummary summary, Export());
  if (!summary.reasons.empty()) {
    return Internal(StrCat("export of ", path_, ": ", FirstAndCount(summary.reasons),
                           "; run the integrity check"));
  }
  return std::move(summary.json);
}

StatusOr<ImportSummary> Store::ImportImpl(const std::string& text, bool strict) {
  CONVT3D_CACHE_WRITABLE();
  ImportSummary summary;
  std::vector<ImportedEntry> parsed;
  try {
    json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return InvalidArgument("import: not valid JSON");
    if (!doc.is_object()) return InvalidArgument("import: expected a JSON object");
    std::string format;
    int version = 0;
    CONVT3D_RETURN_IF_ERROR(JsonString(doc, "document", "format", &format));
    if (format != kFormat) {
      return InvalidArgument(
          StrCat("import: format is '", OneLine(format, 60), "', expected '", kFormat, "'"));
    }
    CONVT3D_RETURN_IF_ERROR(JsonInt(doc, "document", "schema_version", &version));
    if (version < 1 || version > kSchemaVersion) {
      return InvalidArgument(StrCat("import: schema_version ", version,
                                    " is not supported (this build reads 1..", kSchemaVersion,
                                    ")"));
    }
    const json* entries;
    CONVT3D_RETURN_IF_ERROR(JsonField(doc, "document", "entries", &entries));
    if (!entries->is_array()) return InvalidArgument("import: entries: expected an array");
    for (size_t i = 0; i < entries->size(); ++i) {
      ImportedEntry e;
      Status s = ParseEntry((*entries)[i], StrCat("entries[", i, "]"), &e);
      if (!s.ok()) {
        std::string why = s.message();
        if (why.rfind("import: ", 0) == 0) why = why.substr(8);
        ++summary.skipped;
        summary.reasons.push_back(OneLine(why));
        continue;
      }
      parsed.push_back(std::move(e));
    }
  } catch (const std::exception& e) {
    return InvalidArgument(StrCat("import: ", OneLine(e.what())));
  }
  if (strict && !summary.reasons.empty()) {
    return InvalidArgument(StrCat("import: ", FirstAndCount(summary.reasons)));
  }
  // One key given twice: the later entry wins, and the key counts once.
  std::vector<const ImportedEntry*> unique;
  {
    std::map<std::vector<std::string>, size_t> last;
    auto id = [](const Key& k) {
      return std::vector<std::string>{k.problem,
                                      k.arch,
                                      k.gpu_name,
                                      std::to_string(k.driver_version),
                                      std::to_string(k.nvrtc_version),
                                      k.code_hash};
    };
    for (size_t i = 0; i < parsed.size(); ++i) last[id(parsed[i].key)] = i;
    for (size_t i = 0; i < parsed.size(); ++i) {
      if (last[id(parsed[i].key)] == i) unique.push_back(&parsed[i]);
    }
  }
  const std::string path = path_;
  int written = 0;
  std::vector<std::string> refused;  // entries SQLite would not take (e.g. a hash collision)
  Status s = WithWriteTransaction(db, [&]() -> Status {
    written = 0;
    refused.clear();
    // Re-checked under the write lock, whatever the file size: never write into damage.
    CONVT3D_ASSIGN_OR_RETURN(std::string damage, OpenCheck(db, /*has_schema=*/true));
    if (!damage.empty()) {
      return FailedPrecondition(
          StrCat("import: cache ", path, " is damaged (", damage, "); nothing written"));
    }
    for (const ImportedEntry* e : unique) {
      CONVT3D_RETURN_IF_ERROR(Exec(db, "SAVEPOINT import_entry"));
      Status one = InsertEntry(db, e->key, e->winner, e->trials, e->winner.tuned_at);
      if (one.ok()) {
        ++written;
      } else if (one.code() == Code::kFailedPrecondition && !strict) {
        refused.push_back(
            StrCat("entry ", OneLine(Describe(e->key)), ": ", OneLine(one.message())));
        CONVT3D_RETURN_IF_ERROR(Exec(db, "ROLLBACK TO import_entry"));
      } else {
        return one;
      }
      CONVT3D_RETURN_IF_ERROR(Exec(db, "RELEASE import_entry"));
    }
    return Status();
  });
  if (!s.ok()) return s;
  summary.imported = written;
  summary.skipped += static_cast<int>(refused.size());
  summary.reasons.insert(summary.reasons.end(), refused.begin(), refused.end());
  return summary;
}

StatusOr<ImportSummary> Store::Import(const std::string& text) {
  return ImportImpl(text, /*strict=*/false);
}

StatusOr<int> Store::ImportJson(const std::string& text) {
  CONVT3D_ASSIGN_OR_RETURN(ImportSummary summary, ImportImpl(text, /*strict=*/true));
  return summary.imported;
}

StatusOr<CheckReport> Store::Check() {
  CONVT3D_CACHE_READY();
  CheckReport report;
  auto& lines = report.file_problems;
  Transaction txn(db);  // one snapshot for every part of the check
  CONVT3D_RETURN_IF_ERROR(txn.BeginRead());
  // Each part runs to its end or its first error; an error is one more problem line.
  auto part = [&](const char* what, const std::function<Status()>& body) {
    Status s = body();
    if (!s.ok()) lines.push_back(StrCat(what, ": ", OneLine(Reason(s))));
  };
  part("integrity_check",
       [&]() { return PragmaProblems(db, "PRAGMA integrity_check", &lines, "integrity_check: "); });
  part("foreign_key_check", [&]() -> Status {
    CONVT3D_ASSIGN_OR_RETURN(Stmt st, Stmt::Prepare(db, "PRAGMA foreign_key_check"));
    while (true) {
      CONVT3D_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) return Status();
      lines.push_back(StrCat("table ", OneLine(st.Text(0), 40), " row ", st.Int(1),
                             " references a missing ", OneLine(st.Text(2), 40), " row"));
    }
  });
  part("entries", [&]() -> Status {
    CONVT3D_ASSIGN_OR_RETURN(
        Stmt st, Stmt::Prepare(db, StrCat("SELECT ", kEntryColumns,
                                          ", b.cubin FROM entries e NOT INDEXED "
                                          "LEFT JOIN binaries b ON b.hash = e.cubin_hash "
                                          "ORDER BY e.problem, e.arch, e.gpu_name, "
                                          "e.driver_version, e.nvrtc_version, e.code_hash")));
    while (true) {
      CONVT3D_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) return Status();
      EntryCheck e;
      Winner w;
      int64_t id = ReadEntry(st, &e.key, &w);
      e.problem = EntryDamage(st, e.key, w);
      if (e.problem.empty()) {
        StatusOr<std::vector<Trial>> trials = ReadTrials(db, id);
        if (!trials.ok())
          e.problem = StrCat("trial log unreadable: ", OneLine(Reason(trials.status())));
      }
      report.entries.push_back(std::move(e));
    }
  });
  part("binaries", [&]() -> Status {  // cubins no entry uses: harmless unless corrupt
    CONVT3D_ASSIGN_OR_RETURN(Stmt st,
                             Stmt::Prepare(db,
                                           "SELECT hash, cubin FROM binaries WHERE hash NOT IN "
                                           "(SELECT cubin_hash FROM entries)"));
    while (true) {
      CONVT3D_ASSIGN_OR_RETURN(bool row, st.Step());
      if (!row) return Status();
      std::string damage = CubinDamage(st, 1, st.Text(0));
      if (!damage.empty()) lines.push_back(StrCat("unused ", damage));
    }
  });
  return report;
}

Status Store::CheckIntegrity() {
  CONVT3D_ASSIGN_OR_RETURN(CheckReport report, Check());
  if (report.ok()) return Status();
  std::vector<std::string> problems = report.file_problems;
  for (const EntryCheck& e : report.entries) {
    if (!e.ok()) problems.push_back(StrCat("entry ", OneLine(Describe(e.key)), ": ", e.problem));
  }
  return Internal(
      StrCat("cache ", path_, " failed its integrity check: ", FirstAndCount(problems)));
}

// ---- Leases --------------------------------------------------------------------------------

namespace {

// Created by the first claim in a file. Not in kMigrations: a lease is transient, and builds of
// any schema version may share a file (an older one ignores the table).
constexpr const char* kLeaseTable =
    "CREATE TABLE IF NOT EXISTS leases(key TEXT PRIMARY KEY, owner TEXT NOT NULL, host TEXT NOT "
    "NULL, pid INTEGER NOT NULL, expires_at REAL NOT NULL)";

// The whole key as one text column: leases are looked up by equality only.
std::string LeaseKey(const Key& k) {
  return StrCat(k.problem, "|", k.arch, "|", k.gpu_name, "|", k.driver_version, "|",
                k.nvrtc_version, "|", k.code_hash);
}

StatusOr<bool> HasLeaseTable(sqlite3* db) {
  CONVT3D_ASSIGN_OR_RETURN(
      int64_t n, QueryInt(db, "SELECT count(*) FROM sqlite_master WHERE name = 'leases'"));
  return n > 0;
}

StatusOr<std::optional<Lease>> SelectLease(sqlite3* db, const Key& key) {
  CONVT3D_ASSIGN_OR_RETURN(bool table, HasLeaseTable(db));
  if (!table) return std::optional<Lease>();
  CONVT3D_ASSIGN_OR_RETURN(
      Stmt st, Stmt::Prepare(db, "SELECT owner, host, pid, expires_at FROM leases WHERE key = ?"));
  CONVT3D_RETURN_IF_ERROR(st.BindAll(LeaseKey(key)));
  CONVT3D_ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<Lease>();
  return std::optional<Lease>(Lease{st.Text(0), st.Text(1), st.Int(2), st.Real(3)});
}

}  // namespace

StatusOr<ClaimResult> Store::ClaimLease(const Key& key, const Lease& mine, double now) {
  CONVT3D_CACHE_WRITABLE();
  ClaimResult out;
  Status s = WithWriteTransaction(db, [&]() -> Status {
    CONVT3D_ASSIGN_OR_RETURN(Stmt stored,
                             Stmt::Prepare(db, StrCat("SELECT 1 FROM entries e WHERE ", kIdOfKey)));
    CONVT3D_RETURN_IF_ERROR(BindKey(stored, key));
    CONVT3D_ASSIGN_OR_RETURN(bool have, stored.Step());
    if (have) {
      out = {Claim::kStored, Lease{}};
      return Status();
    }
    CONVT3D_RETURN_IF_ERROR(Exec(db, kLeaseTable));
    CONVT3D_ASSIGN_OR_RETURN(std::optional<Lease> held, SelectLease(db, key));
    if (held && held->owner != mine.owner && held->expires_at > now) {
      out = {Claim::kHeld, *held};
      return Status();
    }
    CONVT3D_ASSIGN_OR_RETURN(
        Stmt put, Stmt::Prepare(db, "INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?)"));
    CONVT3D_RETURN_IF_ERROR(
        put.BindAll(LeaseKey(key), mine.owner, mine.host, mine.pid, mine.expires_at));
    CONVT3D_RETURN_IF_ERROR(put.Run());
    out = {Claim::kAcquired, mine};
    return Status();
  });
  if (!s.ok()) return Status(s.code(), StrCat("lease on ", Describe(key), ": ", s.message()));
  return out;
}

Status Store::RenewLease(const Key& key, const std::string& owner, double expires_at) {
  CONVT3D_CACHE_WRITABLE();
  return WithWriteTransaction(db, [&]() -> Status {
    CONVT3D_ASSIGN_OR_RETURN(std::optional<Lease> held, SelectLease(db, key));
    if (!held || held->owner != owner) {
      return FailedPrecondition(StrCat("lease on ", Describe(key), " is no longer ", owner,
                                       held ? StrCat("'s (held by ", held->owner, ")") : "'s"));
    }
    CONVT3D_ASSIGN_OR_RETURN(Stmt st,
                             Stmt::Prepare(db, "UPDATE leases SET expires_at = ? WHERE key = ?"));
    CONVT3D_RETURN_IF_ERROR(st.BindAll(expires_at, LeaseKey(key)));
    return st.Run();
  });
}

Status Store::ReleaseLease(const Key& key, const std::string& owner) {
  CONVT3D_CACHE_WRITABLE();
  return WithWriteTransaction(db, [&]() -> Status {
    CONVT3D_ASSIGN_OR_RETURN(bool table, HasLeaseTable(db));
    if (!table) return Status();
    CONVT3D_ASSIGN_OR_RETURN(Stmt st,
                             Stmt::Prepare(db, "DELETE FROM leases WHERE key = ? AND owner = ?"));
    CONVT3D_RETURN_IF_ERROR(st.BindAll(LeaseKey(key), owner));
    return st.Run();
  });
}

StatusOr<std::optional<Lease>> Store::ReadLease(const Key& key) {
  CONVT3D_CACHE_READY();
  return SelectLease(db, key);
}

std::string Store::DefaultPath() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (std::string p = env("CONVT3D_CACHE"); !p.empty()) return p;
  if (std::string p = env("XDG_CACHE_HOME"); !p.empty()) return p + "/convt3d/cache.sqlite";
  if (std::string p = env("HOME"); !p.empty()) return p + "/.cache/convt3d/cache.sqlite";
  return ":memory:";  // no home to keep it in: results last for this process
}

std::string Store::ExplainMismatch(const Key& stored, const Key& current) {
  std::vector<std::string> parts;
  auto str = [&](const char* name, const std::string& a, const std::string& b) {
    if (a != b) parts.push_back(StrCat(name, " '", a, "' != '", b, "'"));
  };
  auto num = [&](const char* name, int a, int b) {
    if (a != b) parts.push_back(StrCat(name, " ", a, " != ", b));
  };
  str("problem", stored.problem, current.problem);
  str("arch", stored.arch, current.arch);
  str("gpu", stored.gpu_name, current.gpu_name);
  num("driver", stored.driver_version, current.driver_version);
  num("nvrtc", stored.nvrtc_version, current.nvrtc_version);
  str("code_hash", stored.code_hash, current.code_hash);
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

std::string Store::CubinHash(const std::vector<char>& cubin) {
  return HashHex(cubin.data(), cubin.size());
}

}  // namespace convt3d::cache
