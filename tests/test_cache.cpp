// test_cache.cpp: the SQLite tuning cache: round trips, invalidation, concurrency, bad files.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache.h"
#include "tests/cache_test_util.h"
#include "tests/temp_dir.h"

namespace convt3d::cache {
namespace {

namespace fs = std::filesystem;

std::vector<Trial> MakeTrials() {
  std::vector<Trial> t(3);
  t[0] = {"slow", "ok", 2.5, 2.25, 20, 1e-7, 1e-6, 120.0, ""};
  t[1] = {"broken", "compile_failed", -1, -1, 0, -1, -1, 80.0, "error: too many registers"};
  t[2] = {"fast", "ok", 0.5, 0.45, 20, 2e-7, 3e-6, 110.0, ""};
  return t;
}

// "2025-01-31T12:34:56Z"
bool LooksLikeIsoUtc(const std::string& s) {
  const std::string shape = "dddd-dd-ddTdd:dd:ddZ";
  if (s.size() != shape.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (shape[i] == 'd' ? !std::isdigit(static_cast<unsigned char>(s[i])) : s[i] != shape[i]) {
      return false;
    }
  }
  return true;
}

// A raw connection for what the Store API must not offer: tampering and inspection.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
    sqlite3_busy_timeout(db_, 5000);
  }
  ~RawDb() { sqlite3_close(db_); }
  void Exec(const std::string& sql) {
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
        << sql << ": " << (err ? err : "");
    sqlite3_free(err);
  }
  std::string Query(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql;
    std::string out;
    if (st && sqlite3_step(st) == SQLITE_ROW) {
      auto* t = sqlite3_column_text(st, 0);
      out = t ? reinterpret_cast<const char*>(t) : "";
    }
    sqlite3_finalize(st);
    return out;
  }
  sqlite3* get() { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

class CacheTest : public test::TempDirTest {
 protected:
  // A closed, valid cache file holding `n` entries.
  void MakeCacheFile(const std::string& path, int n) {
    auto store = Store::Open(path);
    ASSERT_TRUE(store->persistent()) << store->warning();
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(
          store->Record(MakeKey("p" + std::to_string(i)), MakeWinner(i), MakeTrials()).ok());
    }
  }

  // The fallback contract: memory, one warning line naming the path, and a working store.
  void ExpectMemoryFallback(Store& store, const std::string& path, const std::string& reason) {
    EXPECT_FALSE(store.persistent());
    EXPECT_EQ(store.path(), ":memory:");
    EXPECT_NE(store.warning().find(path), std::string::npos) << store.warning();
    EXPECT_NE(store.warning().find(reason), std::string::npos) << store.warning();
    EXPECT_NE(store.warning().find("in-memory"), std::string::npos) << store.warning();
    EXPECT_EQ(store.warning().find('\n'), std::string::npos) << store.warning();
    Key k = MakeKey();
    ASSERT_TRUE(store.Record(k, MakeWinner(7), MakeTrials()).ok());
    auto hit = store.Lookup(k);
    ASSERT_TRUE(hit.ok()) << hit.status().message();
    ASSERT_TRUE(hit->has_value());
    EXPECT_EQ((*hit)->cubin, MakeCubin(7));
  }
};

TEST_F(CacheTest, RoundTripPersistsWinnerAndTrials) {
  Key key = MakeKey();
  Winner w = MakeWinner(1);
  {
    auto store = Store::Open(Path());
    ASSERT_TRUE(store->persistent());
    EXPECT_EQ(store->warning(), "");
    EXPECT_EQ(store->path(), Path());
    ASSERT_TRUE(store->Record(key, w, MakeTrials()).ok());
  }
  auto store = Store::Open(Path());  // a fresh connection: the data is on disk
  auto hit = store->Lookup(key);
  ASSERT_TRUE(hit.ok()) << hit.status().message();
  ASSERT_TRUE(hit->has_value());
  const Winner& got = **hit;
  EXPECT_EQ(got.candidate, w.candidate);
  EXPECT_EQ(got.params_json, w.params_json);
  EXPECT_EQ(got.kernel_symbol, w.kernel_symbol);
  EXPECT_EQ(got.cubin, w.cubin);
  EXPECT_DOUBLE_EQ(got.median_ms, w.median_ms);
  EXPECT_DOUBLE_EQ(got.rel_err, w.rel_err);
  EXPECT_TRUE(LooksLikeIsoUtc(got.tuned_at)) << got.tuned_at;

  auto trials = store->Trials(key);
  ASSERT_TRUE(trials.ok()) << trials.status().message();
  ASSERT_EQ(trials->size(), 3u);
  EXPECT_EQ((*trials)[0].candidate, "fast");  // fastest first, untimed last
  EXPECT_EQ((*trials)[1].candidate, "slow");
  EXPECT_EQ((*trials)[2].candidate, "broken");
  EXPECT_EQ((*trials)[2].outcome, "compile_failed");
  EXPECT_EQ((*trials)[2].message, "error: too many registers");
  EXPECT_DOUBLE_EQ((*trials)[0].min_ms, 0.45);
  EXPECT_EQ((*trials)[0].repeats, 20);
  EXPECT_DOUBLE_EQ((*trials)[0].max_abs_err, 3e-6);
  EXPECT_DOUBLE_EQ((*trials)[0].compile_ms, 110.0);

  RawDb raw(Path());
  EXPECT_EQ(raw.Query("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.Query("PRAGMA user_version"), std::to_string(Store::kSchemaVersion));
  EXPECT_TRUE(store->CheckIntegrity().ok());
}

TEST_F(CacheTest, ChangingAnyKeyFieldIsAMiss) {
  auto store = Store::Open(Path());
  Key key = MakeKey();
  ASSERT_TRUE(store->Record(key, MakeWinner(1), {}).ok());
  std::vector<Key> variants(6, key);
  variants[0].problem += "x";
  variants[1].arch = "sm_80";
  variants[2].gpu_name = "NVIDIA H100";
  variants[3].driver_version = 12080;
  variants[4].nvrtc_version = 12090;
  variants[5].code_hash = "fedcba9876543210";
  for (const Key& v : variants) {
    auto r = store->Lookup(v);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_FALSE(r->has_value()) << Store::ExplainMismatch(key, v);
    EXPECT_NE(Store::ExplainMismatch(key, v), "");
  }
  auto hit = store->Lookup(key);
  ASSERT_TRUE(hit.ok());
  EXPECT_TRUE(hit->has_value());
}

TEST_F(CacheTest, ReRecordReplacesEntryTrialsAndOrphanedCubin) {
  auto store = Store::Open(Path());
  Key key = MakeKey();
  ASSERT_TRUE(store->Record(key, MakeWinner(1), MakeTrials()).ok());
  std::vector<Trial> one = {{"only", "ok", 1.0, 0.9, 5, 0, 0, 10, ""}};
  ASSERT_TRUE(store->Record(key, MakeWinner(2), one).ok());

  auto hit = store->Lookup(key);
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->candidate, MakeWinner(2).candidate);
  EXPECT_EQ((*hit)->cubin, MakeCubin(2));
  auto trials = store->Trials(key);
  ASSERT_TRUE(trials.ok());
  ASSERT_EQ(trials->size(), 1u);
  EXPECT_EQ((*trials)[0].candidate, "only");
  auto list = store->List();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 1u);
  RawDb raw(Path());
  EXPECT_EQ(raw.Query("SELECT count(*) FROM binaries"), "1");
  EXPECT_EQ(raw.Query("SELECT count(*) FROM trials"), "1");
}

TEST_F(CacheTest, IdenticalCubinsAreStoredOnce) {
  auto store = Store::Open(Path());
  ASSERT_TRUE(store->Record(MakeKey("a"), MakeWinner(3), {}).ok());
  ASSERT_TRUE(store->Record(MakeKey("b"), MakeWinner(3), {}).ok());
  RawDb raw(Path());
  EXPECT_EQ(raw.Query("SELECT count(*) FROM binaries"), "1");
  EXPECT_EQ(raw.Query("SELECT count(*) FROM entries"), "2");
}

TEST_F(CacheTest, ListAndTrials) {
  auto store = Store::Open(Path());
  ASSERT_TRUE(store->Record(MakeKey("c"), MakeWinner(3, 30), {}).ok());
  ASSERT_TRUE(store->Record(MakeKey("a"), MakeWinner(1, 10), MakeTrials()).ok());
  ASSERT_TRUE(store->Record(MakeKey("b"), MakeWinner(2, 20), {MakeTrials()[0]}).ok());
  auto list = store->List();
  ASSERT_TRUE(list.ok()) << list.status().message();
  ASSERT_EQ(list->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const Entry& e = (*list)[i];
    EXPECT_EQ(e.key, MakeKey(std::string(1, static_cast<char>('a' + i))));
    EXPECT_EQ(e.winner.candidate, MakeWinner(i + 1).candidate);
    EXPECT_TRUE(e.winner.cubin.empty());
    EXPECT_EQ(e.cubin_bytes, 10 * (i + 1));
    EXPECT_EQ(e.trials, i == 0 ? 3 : i == 1 ? 1 : 0);
  }
  auto none = store->Trials(MakeKey("zzz"));
  EXPECT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kNotFound);
}

TEST_F(CacheTest, RecordRejectsIncompleteInput) {
  auto store = Store::Open(Path());
  Winner empty = MakeWinner(1);
  empty.cubin.clear();
  EXPECT_EQ(store->Record(MakeKey(), empty, {}).code(), Code::kInvalidArgument);
  Key no_problem = MakeKey("");
  EXPECT_EQ(store->Record(no_problem, MakeWinner(1), {}).code(), Code::kInvalidArgument);
}

TEST_F(CacheTest, ExportImportRoundTrip) {
  auto a = Store::Open(Path("a.sqlite"));
  // Cubin sizes 1..5 cover every base64 padding case.
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(a->Record(MakeKey("p" + std::to_string(i)), MakeWinner(i, i), MakeTrials()).ok());
  }
  ASSERT_TRUE(a->Record(MakeKey("big"), MakeWinner(9, 100000), {}).ok());
  auto json = a->ExportJson();
  ASSERT_TRUE(json.ok()) << json.status().message();
  EXPECT_NE(json->find("\"format\""), std::string::npos);
  EXPECT_NE(json->find("\"schema_version\""), std::string::npos);

  auto b = Store::Open(Path("sub/b.sqlite"));
  ASSERT_TRUE(b->persistent()) << b->warning();
  auto n = b->ImportJson(*json);
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(*n, 6);
  auto la = a->List(), lb = b->List();
  ASSERT_TRUE(la.ok() && lb.ok());
  ASSERT_EQ(la->size(), lb->size());
  for (size_t i = 0; i < la->size(); ++i) {
    const Entry &ea = (*la)[i], &eb = (*lb)[i];
    EXPECT_EQ(ea.key, eb.key);
    EXPECT_EQ(ea.winner.tuned_at, eb.winner.tuned_at);
    EXPECT_EQ(ea.winner.params_json, eb.winner.params_json);
    EXPECT_EQ(ea.cubin_bytes, eb.cubin_bytes);
    EXPECT_EQ(ea.trials, eb.trials);
    auto wa = a->Lookup(ea.key), wb = b->Lookup(eb.key);
    ASSERT_TRUE(wa.ok() && wb.ok() && wa->has_value() && wb->has_value());
    EXPECT_EQ((*wa)->cubin, (*wb)->cubin);
    auto ta = a->Trials(ea.key), tb = b->Trials(eb.key);
    ASSERT_TRUE(ta.ok() && tb.ok());
    ASSERT_EQ(ta->size(), tb->size());
    for (size_t j = 0; j < ta->size(); ++j) {
      EXPECT_EQ((*ta)[j].candidate, (*tb)[j].candidate);
      EXPECT_EQ((*ta)[j].message, (*tb)[j].message);
      EXPECT_DOUBLE_EQ((*ta)[j].median_ms, (*tb)[j].median_ms);
    }
  }
  // Importing again replaces rather than duplicates.
  ASSERT_TRUE(b->ImportJson(*json).ok());
  EXPECT_EQ(b->List()->size(), 6u);
  EXPECT_TRUE(b->CheckIntegrity().ok());
}

TEST_F(CacheTest, ImportNamesTheBadFieldAndWritesNothing) {
  auto a = Store::Open(Path("a.sqlite"));
  ASSERT_TRUE(a->Record(MakeKey("p0"), MakeWinner(1), MakeTrials()).ok());
  ASSERT_TRUE(a->Record(MakeKey("p1"), MakeWinner(2), MakeTrials()).ok());
  std::string good = a->ExportJson().value();
  auto b = Store::Open(Path("b.sqlite"));

  struct Case {
    std::string from, to, expect;
  };
  std::vector<Case> cases = {
      {"\"driver_version\": 13000", "\"driver_version\": \"x\"", "entries[0].key.driver_version"},
      {"\"outcome\": \"ok\"", "\"outcome\": 1", "entries[0].trials[0].outcome"},
      {"\"format\": \"convt3d-cache\"", "\"format\": \"other\"", "format"},
      {"\"cubin_base64\": \"", "\"cubin_base64\": \"!", "cubin_base64"},
      {"\"cubin_hash\": \"", "\"cubin_hash\": \"0", "cubin_hash"},
      {"\"schema_version\": 1", "\"schema_version\": 99", "schema_version"},
      {"\"kernel_symbol\"", "\"kernel_symbolx\"", "entries[0].winner.kernel_symbol: missing"},
  };
  for (const Case& c : cases) {
    std::string doc = good;
    auto pos = doc.find(c.from);
    ASSERT_NE(pos, std::string::npos) << c.from;
    doc.replace(pos, c.from.size(), c.to);
    auto r = b->ImportJson(doc);
    ASSERT_FALSE(r.ok()) << c.to;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
  // A bad second entry must not leave the first one behind.
  std::string doc = good;
  auto pos = doc.rfind("\"arch\": \"sm_90\"");
  doc.replace(pos, 15, "\"arch\": 90");
  auto r = b->ImportJson(doc);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("entries[1].key.arch"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(b->ImportJson("{not json").ok());
  EXPECT_FALSE(b->ImportJson("[]").ok());
  EXPECT_TRUE(b->List()->empty());
}

TEST_F(CacheTest, PruneRemovesOnlyMismatchedEntries) {
  auto store = Store::Open(Path());
  Key current = MakeKey("current");
  ASSERT_TRUE(store->Record(MakeKey("p1"), MakeWinner(1), MakeTrials()).ok());
  ASSERT_TRUE(store->Record(MakeKey("p2"), MakeWinner(2), {}).ok());
  std::vector<Key> stale(5, MakeKey("stale"));
  stale[0].arch = "sm_80";
  stale[1].gpu_name = "NVIDIA A100";
  stale[2].driver_version = 12000;
  stale[3].nvrtc_version = 12000;
  stale[4].code_hash = "old";
  for (size_t i = 0; i < stale.size(); ++i) {
    ASSERT_TRUE(store->Record(stale[i], MakeWinner(10 + i), MakeTrials()).ok());
  }
  auto removed = store->Prune(current);
  ASSERT_TRUE(removed.ok()) << removed.status().message();
  EXPECT_EQ(*removed, 5);
  auto list = store->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].key.problem, "p1");
  EXPECT_EQ((*list)[1].key.problem, "p2");
  RawDb raw(Path());
  EXPECT_EQ(raw.Query("SELECT count(*) FROM binaries"), "2");  // orphans gone
  EXPECT_EQ(raw.Query("SELECT count(*) FROM trials"), "3");    // cascaded
  EXPECT_EQ(store->Prune(current).value(), 0);
}

TEST_F(CacheTest, IntegrityCheckDetectsTamperedCubin) {
  Key key = MakeKey();
  auto store = Store::Open(Path());
  ASSERT_TRUE(store->Record(key, MakeWinner(1), {}).ok());
  ASSERT_TRUE(store->CheckIntegrity().ok());
  {
    RawDb raw(Path());
    std::vector<char> bad = MakeCubin(1);
    bad[100] ^= 0x5a;
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw.get(), "UPDATE binaries SET cubin = ?", -1, &st, nullptr),
              SQLITE_OK);
    sqlite3_bind_blob(st, 1, bad.data(), static_cast<int>(bad.size()), SQLITE_TRANSIENT);
    EXPECT_EQ(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
  }
  Status check = store->CheckIntegrity();
  EXPECT_FALSE(check.ok());
  EXPECT_NE(check.message().find("corrupt"), std::string::npos) << check.message();
  auto hit = store->Lookup(key);  // never hands out the corrupt binary
  EXPECT_FALSE(hit.ok());
  EXPECT_NE(hit.status().message().find("corrupt"), std::string::npos);
  EXPECT_FALSE(store->ExportJson().ok());
  // Re-tuning and recording the same cubin repairs the row.
  ASSERT_TRUE(store->Record(key, MakeWinner(1), {}).ok());
  EXPECT_TRUE(store->CheckIntegrity().ok());
  hit = store->Lookup(key);
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->cubin, MakeCubin(1));
}

// Writer `w` records keys w_0 .. w_{n-1} through its own Store.
bool RecordMany(const std::string& path, int w, int n) {
  auto store = Store::Open(path);
  if (!store->persistent()) return false;
  for (int i = 0; i < n; ++i) {
    Key k = MakeKey("w" + std::to_string(w) + "_" + std::to_string(i));
    if (!store->Record(k, MakeWinner(w * 1000 + i), MakeTrials()).ok()) return false;
  }
  return true;
}

void ExpectAllPresent(const std::string& path, int writers, int n) {
  auto store = Store::Open(path);
  ASSERT_TRUE(store->persistent()) << store->warning();
  auto list = store->List();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), static_cast<size_t>(writers * n));
  for (int w = 0; w < writers; ++w) {
    for (int i = 0; i < n; ++i) {
      auto hit = store->Lookup(MakeKey("w" + std::to_string(w) + "_" + std::to_string(i)));
      ASSERT_TRUE(hit.ok() && hit->has_value()) << w << " " << i;
      EXPECT_EQ((*hit)->cubin, MakeCubin(w * 1000 + i));
    }
  }
  EXPECT_TRUE(store->CheckIntegrity().ok());
}

TEST_F(CacheTest, TwoProcessesWriteConcurrently) {
  // Both children also race to create the schema of the fresh file.
  std::vector<pid_t> kids;
  for (int w = 0; w < 2; ++w) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(RecordMany(Path(), w, 50) ? 0 : 1);
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  ExpectAllPresent(Path(), 2, 50);
}

TEST_F(CacheTest, TwoThreadsWithOwnStoresWriteConcurrently) {
  bool ok[2] = {false, false};
  std::thread t0([&] { ok[0] = RecordMany(Path(), 0, 50); });
  std::thread t1([&] { ok[1] = RecordMany(Path(), 1, 50); });
  t0.join();
  t1.join();
  EXPECT_TRUE(ok[0] && ok[1]);
  ExpectAllPresent(Path(), 2, 50);
}

TEST_F(CacheTest, ThreadsShareOneStore) {
  auto store = Store::Open(Path());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 20; ++i) {
        Key k = MakeKey("w" + std::to_string(w) + "_" + std::to_string(i));
        if (!store->Record(k, MakeWinner(w * 1000 + i), MakeTrials()).ok()) ++failures;
        auto hit = store->Lookup(k);
        if (!hit.ok() || !hit->has_value()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  store.reset();
  ExpectAllPresent(Path(), 4, 20);
}

TEST_F(CacheTest, GarbageFileFallsBackToMemoryUntouched) {
  std::vector<char> garbage(5000);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 7 + 3);
  WriteBytes(Path(), garbage);
  auto store = Store::Open(Path());
  ExpectMemoryFallback(*store, Path(), "not a database");
  EXPECT_EQ(ReadBytes(Path()), garbage);
  EXPECT_FALSE(fs::exists(Path() + "-wal"));
  EXPECT_FALSE(fs::exists(Path() + "-shm"));
}

TEST_F(CacheTest, TruncatedCacheFallsBackToMemoryUntouched) {
  MakeCacheFile(Path(), 20);
  std::vector<char> full = ReadBytes(Path());
  ASSERT_GT(full.size(), 8192u);
  for (size_t size : {full.size() / 2, size_t{4096}, size_t{50}}) {
    std::vector<char> cut(full.begin(), full.begin() + size);
    WriteBytes(Path(), cut);
    auto store = Store::Open(Path());
    ExpectMemoryFallback(*store, Path(), "truncated");
    EXPECT_EQ(ReadBytes(Path()), cut);
  }
}

TEST_F(CacheTest, UnwritableLocationFallsBackToMemory) {
  // Root ignores permission bits, so make the parent "directory" a regular file instead.
  WriteBytes(Path("afile"), {'x'});
  std::string path = Path("afile") + "/cache.sqlite";
  auto store = Store::Open(path);
  ExpectMemoryFallback(*store, path, "cannot create directory");
  EXPECT_EQ(ReadBytes(Path("afile")), std::vector<char>{'x'});

  auto dir_as_file = Store::Open(dir_);  // the path is a directory
  ExpectMemoryFallback(*dir_as_file, dir_, "is a directory");

  if (geteuid() != 0) {
    fs::create_directory(Path("ro"));
    ASSERT_EQ(chmod(Path("ro").c_str(), 0555), 0);
    std::string ro = Path("ro") + "/cache.sqlite";
    auto ro_store = Store::Open(ro);
    // Store::Open checks the folder before SQLite tries, so the reason names the folder.
    ExpectMemoryFallback(*ro_store, ro,
                         "cannot create a file in " + Path("ro") + ": Permission denied");
    EXPECT_FALSE(fs::exists(ro));
  }
}

TEST_F(CacheTest, ReadOnlyValidCacheServesLookups) {
  MakeCacheFile(Path(), 3);
  // First only the file is read-only; then the directory too (no -shm can be created, as on a
  // read-only mount).
  auto checks = [&] {
    ASSERT_EQ(chmod(Path().c_str(), 0444), 0);
    for (bool dir_read_only : {false, true}) {
      if (dir_read_only) {
        ASSERT_EQ(chmod(dir_.c_str(), 0555), 0);
      }
      std::vector<char> before = ReadBytes(Path());
      for (bool asked : {false, true}) {  // found unwritable, or opened read-only on purpose
        auto store = asked ? Store::OpenReadOnly(Path()) : Store::Open(Path());
        ASSERT_TRUE(store->persistent()) << store->warning();
        EXPECT_TRUE(store->read_only());
        if (asked) {
          EXPECT_EQ(store->warning(), "");
        } else {
          EXPECT_NE(store->warning().find("read-only"), std::string::npos);
        }
        auto hit = store->Lookup(MakeKey("p1"));
        ASSERT_TRUE(hit.ok()) << hit.status().message();
        ASSERT_TRUE(hit->has_value());
        EXPECT_EQ((*hit)->cubin, MakeCubin(1));
        EXPECT_EQ(store->List()->size(), 3u);
        EXPECT_TRUE(store->Check()->ok());
        EXPECT_EQ(store->Record(MakeKey("new"), MakeWinner(5), {}).code(), Code::kUnavailable);
        EXPECT_EQ(store->Prune(MakeKey()).status().code(), Code::kUnavailable);
        EXPECT_EQ(store->ImportJson("{}").status().code(), Code::kUnavailable);
        store.reset();
        EXPECT_EQ(ReadBytes(Path()), before);
      }
    }
  };
  if (geteuid() != 0) {
    checks();
  } else {
    // Root ignores file permissions (CI runs as root), so the checks run in a child process
    // that has dropped to the unprivileged user nobody (65534), which owns the test files.
    for (const std::string& f : {dir_, Path()}) ASSERT_EQ(chown(f.c_str(), 65534, 65534), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
      checks();
      _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the read-only checks failed in the unprivileged child (see its output above)";
  }
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
}

TEST_F(CacheTest, NewerSchemaIsRefusedAndLeftAlone) {
  MakeCacheFile(Path(), 2);
  {
    RawDb raw(Path());
    raw.Exec("PRAGMA user_version = " + std::to_string(Store::kSchemaVersion + 1));
  }
  std::vector<char> before = ReadBytes(Path());
  auto store = Store::Open(Path());
  ExpectMemoryFallback(*store, Path(), "newer");
  store.reset();
  EXPECT_EQ(ReadBytes(Path()), before);
  RawDb raw(Path());
  EXPECT_EQ(raw.Query("PRAGMA user_version"), std::to_string(Store::kSchemaVersion + 1));
}

TEST_F(CacheTest, ForeignSqliteDatabaseIsLeftAlone) {
  {
    RawDb raw(Path());
    raw.Exec("CREATE TABLE notes(text TEXT); INSERT INTO notes VALUES('mine')");
  }
  std::vector<char> before = ReadBytes(Path());
  auto store = Store::Open(Path());
  ExpectMemoryFallback(*store, Path(), "not a convt3d cache");
  store.reset();
  EXPECT_EQ(ReadBytes(Path()), before);
}

TEST_F(CacheTest, LockedFileFallsBackAfterTimeout) {
  MakeCacheFile(Path(), 1);
  RawDb holder(Path());
  holder.Exec("PRAGMA locking_mode = EXCLUSIVE");
  holder.Exec("BEGIN EXCLUSIVE");
  auto start = std::chrono::steady_clock::now();
  auto store = Store::Open(Path(), 200);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ExpectMemoryFallback(*store, Path(), "locked");
  EXPECT_LT(s, 5.0);
  holder.Exec("ROLLBACK");
}

// Opening a file whose schema is current writes nothing, so it needs no write lock: an outside
// writer holding a transaction does not turn the open into an in-memory fallback.
TEST_F(CacheTest, CurrentSchemaOpensWithoutTheWriteLock) {
  MakeCacheFile(Path(), 2);
  RawDb holder(Path());
  holder.Exec("BEGIN IMMEDIATE");
  holder.Exec("DELETE FROM trials");
  for (bool read_only : {false, true}) {
    OpenOptions o;
    o.busy_timeout_ms = 100;
    o.access = read_only ? Access::kReadOnly : Access::kReadWrite;
    auto store = Store::Open(Path(), o);
    EXPECT_TRUE(store->persistent()) << store->warning();
    EXPECT_EQ(store->warning(), "");
    EXPECT_EQ(store->read_only(), read_only);
    auto list = store->List();
    ASSERT_TRUE(list.ok()) << list.status().message();
    ASSERT_EQ(list->size(), 2u);
    EXPECT_EQ((*list)[0].trials, 3);  // the holder's uncommitted delete is not seen
  }
  holder.Exec("ROLLBACK");
}

// A fresh file, and an empty SQLite file someone else created, are migrated once, by the first
// writer; a read-only open of the empty file leaves it empty.
TEST_F(CacheTest, WriterMigratesAnEmptyFileOnce) {
  { RawDb raw(Path()); }  // sqlite3_open creates a zero-byte file
  ASSERT_TRUE(fs::exists(Path()));
  auto ro = Store::OpenReadOnly(Path());
  EXPECT_TRUE(ro->exists());
  EXPECT_EQ(ro->warning(), "");
  EXPECT_TRUE(ro->List()->empty());
  ro.reset();
  EXPECT_EQ(fs::file_size(Path()), 0u);
  auto rw = Store::Open(Path());
  EXPECT_EQ(rw->warning(), "");
  ASSERT_TRUE(rw->Record(MakeKey(), MakeWinner(1), {}).ok());
  RawDb raw(Path());
  EXPECT_EQ(raw.Query("PRAGMA user_version"), std::to_string(Store::kSchemaVersion));
  EXPECT_EQ(raw.Query("PRAGMA journal_mode"), "wal");
}

TEST_F(CacheTest, ReadOnlyOpenOfMissingFileIsAnEmptyViewAndCreatesNothing) {
  const std::string path = Path("x/y/cache.sqlite");
  auto store = Store::OpenReadOnly(path);
  EXPECT_FALSE(store->exists());
  EXPECT_TRUE(store->persistent());
  EXPECT_TRUE(store->read_only());
  EXPECT_EQ(store->warning(), "");
  EXPECT_EQ(store->path(), path);
  EXPECT_TRUE(store->List()->empty());
  EXPECT_FALSE(store->Lookup(MakeKey())->has_value());
  EXPECT_EQ(store->Record(MakeKey(), MakeWinner(1), {}).code(), Code::kUnavailable);
  EXPECT_FALSE(fs::exists(Path("x")));
}

TEST_F(CacheTest, ImportCountsDistinctKeys) {
  auto a = Store::Open(Path("a.sqlite"));
  ASSERT_TRUE(a->Record(MakeKey("p0"), MakeWinner(1), MakeTrials()).ok());
  auto doc = nlohmann::json::parse(a->ExportJson().value());
  nlohmann::json twice = doc["entries"][0];
  twice["winner"]["candidate"] = "second";
  doc["entries"].push_back(twice);  // the same key again: the later entry wins
  auto b = Store::Open(Path("b.sqlite"));
  auto strict = b->ImportJson(doc.dump());
  ASSERT_TRUE(strict.ok()) << strict.status().message();
  EXPECT_EQ(*strict, 1);
  auto lenient = b->Import(doc.dump());
  ASSERT_TRUE(lenient.ok());
  EXPECT_EQ(lenient->imported, 1);
  EXPECT_EQ(lenient->skipped, 0);
  auto list = b->List();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].winner.candidate, "second");
}

// An export with bad entries (an older or hand-edited one): the good entries are imported, each
// bad one is counted and named; the strict ImportJson refuses the whole document.
TEST_F(CacheTest, ImportSkipsBadEntriesAndNamesThem) {
  auto a = Store::Open(Path("a.sqlite"));
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(a->Record(MakeKey("p" + std::to_string(i)), MakeWinner(i), MakeTrials()).ok());
  }
  auto doc = nlohmann::json::parse(a->ExportJson().value());
  auto& e = doc["entries"];
  e[0]["winner"].erase("cubin_hash");
  e[2]["winner"]["cubin_base64"] = "!!!!";
  e[3]["winner"]["cubin_hash"] = "0000000000000000";
  auto b = Store::Open(Path("b.sqlite"));
  auto strict = b->ImportJson(doc.dump());
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("entries[0].winner.cubin_hash: missing"),
            std::string::npos)
      << strict.status().message();
  EXPECT_NE(strict.status().message().find("and 2 more"), std::string::npos);
  EXPECT_TRUE(b->List()->empty());

  auto r = b->Import(doc.dump());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->imported, 2);
  EXPECT_EQ(r->skipped, 3);
  ASSERT_EQ(r->reasons.size(), 3u);
  EXPECT_EQ(r->reasons[0], "entries[0].winner.cubin_hash: missing");
  EXPECT_EQ(r->reasons[1], "entries[2].winner.cubin_base64: not valid base64");
  EXPECT_EQ(r->reasons[2].rfind("entries[3].winner.cubin_hash: 0000000000000000 does not match", 0),
            0u)
      << r->reasons[2];
  auto list = b->List();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].key.problem, "p1");
  EXPECT_EQ((*list)[1].key.problem, "p4");
  EXPECT_TRUE(b->CheckIntegrity().ok());
}

// Damage inside a row leaves SQLite's structure intact: text no writer stores marks the entry
// damaged wherever it is read, and Record refuses such text in the first place.
TEST_F(CacheTest, DamagedRowTextIsRefusedOnRead) {
  auto store = Store::Open(Path());
  ASSERT_TRUE(store->Record(MakeKey("a"), MakeWinner(1), {}).ok());
  ASSERT_TRUE(store->Record(MakeKey("b"), MakeWinner(2), {}).ok());
  {
    RawDb raw(Path());
    raw.Exec("UPDATE entries SET params_json = '{\"tile\":[64,' WHERE problem = 'a'");
    raw.Exec("UPDATE entries SET kernel_symbol = 'k' || char(27) || '[2J' WHERE problem = 'b'");
  }
  auto a = store->Lookup(MakeKey("a"));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("params_json is not a JSON object"), std::string::npos)
      << a.status().message();
  auto b = store->Lookup(MakeKey("b"));
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("kernel_symbol"), std::string::npos);
  auto list = store->List();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_NE((*list)[0].damage.find("params_json"), std::string::npos);
  EXPECT_NE((*list)[1].damage.find("kernel_symbol"), std::string::npos);
  auto check = store->Check();
  ASSERT_TRUE(check.ok());
  EXPECT_EQ(check->damaged_entries(), 2);
  auto salvage = store->Export();
  ASSERT_TRUE(salvage.ok());
  EXPECT_EQ(salvage->exported, 0);
  EXPECT_EQ(salvage->skipped, 2);
  // Re-tuning replaces the damaged entry.
  ASSERT_TRUE(store->Record(MakeKey("a"), MakeWinner(1), {}).ok());
  EXPECT_TRUE(store->Lookup(MakeKey("a")).ok());

  Winner bad = MakeWinner(3);
  bad.params_json = "tile=64";
  EXPECT_EQ(store->Record(MakeKey("c"), bad, {}).code(), Code::kInvalidArgument);
  bad = MakeWinner(3);
  bad.candidate += "\n";
  EXPECT_EQ(store->Record(MakeKey("c"), bad, {}).code(), Code::kInvalidArgument);
  EXPECT_EQ(store->Record(MakeKey("c\x1b[31m"), MakeWinner(3), {}).code(), Code::kInvalidArgument);
}

// Check() gives one line per problem: per entry, and for the file.
TEST_F(CacheTest, CheckReportsOneLinePerProblem) {
  auto store = Store::Open(Path());
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(store->Record(MakeKey("p" + std::to_string(i)), MakeWinner(i), MakeTrials()).ok());
  }
  auto clean = store->Check();
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE(clean->ok());
  EXPECT_EQ(clean->entries.size(), 4u);
  {
    RawDb raw(Path());
    raw.Exec("PRAGMA foreign_keys = OFF");
    // p1's cubin changes, p2's is gone.
    raw.Exec(
        "UPDATE binaries SET cubin = zeroblob(10) WHERE hash = (SELECT cubin_hash FROM "
        "entries WHERE problem = 'p1')");
    raw.Exec(
        "DELETE FROM binaries WHERE hash = (SELECT cubin_hash FROM entries WHERE problem "
        "= 'p2')");
  }
  auto report = store->Check();
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_FALSE(report->ok());
  ASSERT_EQ(report->entries.size(), 4u);
  EXPECT_EQ(report->damaged_entries(), 2);
  EXPECT_TRUE(report->entries[0].ok());
  EXPECT_NE(report->entries[1].problem.find("cubin is corrupt"), std::string::npos)
      << report->entries[1].problem;
  EXPECT_NE(report->entries[2].problem.find("is missing"), std::string::npos)
      << report->entries[2].problem;
  EXPECT_TRUE(report->entries[3].ok());
  ASSERT_EQ(report->file_problems.size(), 1u);  // the dangling reference
  EXPECT_NE(report->file_problems[0].find("references a missing binaries row"), std::string::npos)
      << report->file_problems[0];
  for (const auto& e : report->entries) EXPECT_EQ(e.problem.find('\n'), std::string::npos);
  Status st = store->CheckIntegrity();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("and 2 more"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos);
  auto list = store->List();
  ASSERT_TRUE(list.ok());
  EXPECT_FALSE((*list)[1].damage.empty());
  EXPECT_FALSE((*list)[2].damage.empty());
  EXPECT_TRUE((*list)[3].damage.empty());
}

TEST_F(CacheTest, CreatesMissingParentDirectories) {
  std::string path = Path("a/b/c/cache.sqlite");
  auto store = Store::Open(path);
  EXPECT_TRUE(store->persistent()) << store->warning();
  EXPECT_TRUE(fs::exists(path));
}

TEST_F(CacheTest, MemoryStoreWorksWithoutWarning) {
  auto store = Store::Open(":memory:");
  EXPECT_FALSE(store->persistent());
  EXPECT_EQ(store->warning(), "");
  ASSERT_TRUE(store->Record(MakeKey(), MakeWinner(4), MakeTrials()).ok());
  auto hit = store->Lookup(MakeKey());
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->cubin, MakeCubin(4));
}

TEST(CacheStatic, DefaultPathFollowsEnvironment) {
  auto saved = [](const char* n) {
    const char* v = std::getenv(n);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  auto cache = saved("CONVT3D_CACHE"), xdg = saved("XDG_CACHE_HOME"), home = saved("HOME");
  setenv("CONVT3D_CACHE", "/x/explicit.sqlite", 1);
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(Store::DefaultPath(), "/x/explicit.sqlite");
  unsetenv("CONVT3D_CACHE");
  EXPECT_EQ(Store::DefaultPath(), "/xdg/convt3d/cache.sqlite");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(Store::DefaultPath(), "/home/u/.cache/convt3d/cache.sqlite");
  auto restore = [](const char* n, const std::optional<std::string>& v) {
    v ? setenv(n, v->c_str(), 1) : unsetenv(n);
  };
  restore("CONVT3D_CACHE", cache);
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
}

TEST(CacheStatic, ExplainMismatchNamesEachDifference) {
  Key a = MakeKey(), b = MakeKey();
  EXPECT_EQ(Store::ExplainMismatch(a, b), "");
  a.driver_version = 12080;
  a.code_hash = "abc";
  b.code_hash = "def";
  EXPECT_EQ(Store::ExplainMismatch(a, b), "driver 12080 != 13000; code_hash 'abc' != 'def'");
  b.gpu_name = "NVIDIA H100";
  EXPECT_NE(Store::ExplainMismatch(a, b).find("gpu 'NVIDIA H200' != 'NVIDIA H100'"),
            std::string::npos);
}

TEST(CacheStatic, CubinHashIsFnv1a64) {
  EXPECT_EQ(Store::CubinHash({}), "cbf29ce484222325");
  EXPECT_EQ(Store::CubinHash({'a'}), "af63dc4c8601ec8c");
}

}  // namespace
}  // namespace convt3d::cache
