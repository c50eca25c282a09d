// test_cache_damage.cpp: the hostile-input tier of the cache (CPU only, each test well under a
// second or two): damaged files, leftovers of killed writers, a writer holding the lock in
// another process, and hostile exports, against every Store operation. What must hold: no crash,
// a warning or status that names the damage, no committed row lost where the file is intact,
// nothing written into a damaged file, nothing created by read-only opens.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "tests/cache_test_util.h"
#include "tests/temp_dir.h"

namespace convt3d::cache {
namespace {

namespace fs = std::filesystem;

constexpr int kEntries = 24;

Key EntryKey(int i) { return MakeKey("p" + std::to_string(i)); }

// Sizes vary so that some cubins spill onto overflow pages and some do not.
size_t CubinSize(int i) { return 1500 + 700 * (i % 5); }

// Entry p<i>'s winner, with a cubin of CubinSize(i) bytes.
Winner EntryWinner(int i) { return MakeWinner(i, CubinSize(i)); }

std::vector<Trial> MakeTrials(int i) {
  return {{"slow_" + std::to_string(i), "ok", 2.5, 2.25, 20, 1e-7, 1e-6, 120.0, ""},
          {"broken", "compile_failed", -1, -1, 0, -1, -1, 80.0, "error: too many registers"},
          {"fast", "ok", 0.5, 0.45, 20, 2e-7, 3e-6, 110.0, ""}};
}

std::vector<char> RandomBytes(std::mt19937& rng, size_t n) {
  std::vector<char> out(n);
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

// Words SQLite and the Store use when they notice damage.
bool NamesDamage(const std::string& m) {
  for (const char* w : {"damaged", "malformed", "corrupt", "not a database", "truncated", "missing",
                        "unreadable"}) {
    if (m.find(w) != std::string::npos) return true;
  }
  return false;
}

OpenOptions Rw(int busy_ms = 300) {
  OpenOptions o;
  o.busy_timeout_ms = busy_ms;
  return o;
}
OpenOptions Ro(int busy_ms = 300) {
  OpenOptions o = Rw(busy_ms);
  o.access = Access::kReadOnly;
  return o;
}

// An export of two entries no fixture holds, to import into a damaged or locked file.
std::string ForeignExport(const std::string& dir) {
  auto s = Store::Open(dir + "/foreign.sqlite");
  EXPECT_TRUE(s->Record(MakeKey("foreign0"), EntryWinner(100), MakeTrials(0)).ok());
  EXPECT_TRUE(s->Record(MakeKey("foreign1"), EntryWinner(101), MakeTrials(1)).ok());
  return s->ExportJson().value();
}

// Which entry p<i> a key names, or -1.
int EntryIndex(const Key& k) {
  if (k.problem.size() < 2 || k.problem[0] != 'p') return -1;
  for (size_t i = 1; i < k.problem.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(k.problem[i]))) return -1;
  }
  int i = std::atoi(k.problem.c_str() + 1);
  return i < kEntries && k == EntryKey(i) ? i : -1;
}

// Tallies over one store's operations; the test's assertions are made in Exercise().
struct Outcome {
  bool announced = false;  // the open's warning named the damage
  int served = 0;          // entries read back exactly as recorded
  int refused = 0;         // operations that returned a status naming the damage
  int silent = 0;          // wrong data with no word of damage: must stay 0
  std::vector<std::string> notes;
};

class CacheDamageTest : public test::TempDirTest {
 protected:
  // A closed cache holding p0..p<count-1>, checkpointed into the main file.
  std::vector<char> MakeCacheFile(const std::string& path, int count = kEntries) {
    {
      auto store = Store::Open(path);
      EXPECT_TRUE(store->persistent()) << store->warning();
      for (int i = 0; i < count; ++i) {
        EXPECT_TRUE(store->Record(EntryKey(i), EntryWinner(i), MakeTrials(i)).ok());
      }
    }
    EXPECT_FALSE(fs::exists(path + "-wal"));
    return ReadBytes(path);
  }

  // Runs every Store operation against `path` opened as `options` says, and records what each
  // gave. Whatever the damage: no crash; every status and warning is one line; nothing that is
  // not exactly what was recorded is served without a word of damage.
  Outcome Exercise(const std::string& path, const OpenOptions& options,
                   const std::string& foreign_export) {
    Outcome o;
    auto store = Store::Open(path, options);
    const std::string& warning = store->warning();
    EXPECT_EQ(warning.find('\n'), std::string::npos) << warning;
    o.announced = NamesDamage(warning);
    if (!store->damage().empty()) {
      EXPECT_TRUE(store->read_only());
      EXPECT_NE(warning.find(path), std::string::npos) << warning;
    }
    auto note = [&](const std::string& what, const Status& s) {
      EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
      if (NamesDamage(s.message())) {
        ++o.refused;
      } else {
        o.notes.push_back(what + ": " + s.ToString());
      }
    };

    // list
    auto list = store->List();
    if (list.ok()) {
      for (const Entry& e : *list) {
        int i = EntryIndex(e.key);
        if (!e.damage.empty()) {
          EXPECT_TRUE(NamesDamage(e.damage)) << e.damage;
          ++o.refused;
        } else if (i < 0 || e.winner.candidate != EntryWinner(i).candidate ||
                   e.winner.params_json != EntryWinner(i).params_json ||
                   e.winner.kernel_symbol != EntryWinner(i).kernel_symbol ||
                   e.cubin_bytes != static_cast<int64_t>(CubinSize(i))) {
          ++o.silent;
          o.notes.push_back("list served a changed entry: " + e.key.problem);
        }
      }
    } else {
      note("list", list.status());
    }
    // the lookup tiers' listing (no cubins read) and notes: one-line errors, damage named
    auto arch = store->ListArch(EntryKey(0).arch);
    if (arch.ok()) {
      for (const Entry& e : *arch) {
        if (!e.damage.empty()) {
          EXPECT_TRUE(NamesDamage(e.damage)) << e.damage;
          EXPECT_EQ(e.damage.find('\n'), std::string::npos) << e.damage;
        }
      }
    } else {
      note("list arch", arch.status());
    }
    auto read_note = store->ReadNote(EntryKey(0));
    if (!read_note.ok()) note("read note", read_note.status());
    // lookup, each entry
    for (int i = 0; i < kEntries; ++i) {
      auto hit = store->Lookup(EntryKey(i));
      if (!hit.ok()) {
        note("lookup p" + std::to_string(i), hit.status());
      } else if (!hit->has_value()) {
        // A row lost to damage is a miss (the engine re-tunes); without a warning it is silent.
        if (!o.announced && store->persistent()) {
          ++o.silent;
          o.notes.push_back("lookup p" + std::to_string(i) + " missed without a warning");
        }
      } else if ((*hit)->cubin != EntryWinner(i).cubin ||
                 (*hit)->params_json != EntryWinner(i).params_json ||
                 (*hit)->kernel_symbol != EntryWinner(i).kernel_symbol) {
        ++o.silent;
        o.notes.push_back("lookup p" + std::to_string(i) + " served changed data");
      } else {
        ++o.served;
      }
    }
    // trials of one entry
    auto trials = store->Trials(EntryKey(3));
    if (!trials.ok() && trials.status().code() != Code::kNotFound) note("trials", trials.status());
    // export, strict and salvaging
    auto exported = store->ExportJson();
    if (!exported.ok()) note("export", exported.status());
    auto salvage = store->Export();
    if (salvage.ok()) {
      for (const std::string& r : salvage->reasons) {
        EXPECT_TRUE(NamesDamage(r)) << r;
        EXPECT_EQ(r.find('\n'), std::string::npos) << r;
      }
      auto doc = nlohmann::json::parse(salvage->json, nullptr, false);
      EXPECT_FALSE(doc.is_discarded());
      if (!doc.is_discarded()) {
        for (const auto& e : doc["entries"]) {
          Key k = MakeKey(e["key"]["problem"].get<std::string>());
          int i = EntryIndex(k);
          if (i < 0 || e["winner"]["candidate"] != EntryWinner(i).candidate) {
            ++o.silent;
            o.notes.push_back("export wrote a changed entry: " + k.problem);
          }
        }
      }
    } else {
      note("export (salvage)", salvage.status());
    }
    // check
    auto check = store->Check();
    EXPECT_TRUE(check.ok()) << check.status().ToString();
    if (check.ok()) {
      for (const std::string& line : check->file_problems) {
        EXPECT_EQ(line.find('\n'), std::string::npos) << line;
      }
      for (const EntryCheck& e : check->entries) {
        EXPECT_EQ(e.problem.find('\n'), std::string::npos) << e.problem;
      }
      // A file SQLite found damaged at open is found damaged by the full check too.
      if (!store->damage().empty()) {
        EXPECT_FALSE(check->ok());
      }
    }
    // store and import: a damaged file refuses, naming itself and the damage
    Status rec = store->Record(MakeKey("new"), EntryWinner(50), MakeTrials(50));
    auto imp = store->Import(foreign_export);
    if (!store->damage().empty()) {
      EXPECT_EQ(rec.code(), Code::kFailedPrecondition) << rec.ToString();
      EXPECT_EQ(imp.status().code(), Code::kFailedPrecondition) << imp.status().ToString();
      EXPECT_NE(imp.status().message().find(path), std::string::npos);
      EXPECT_NE(imp.status().message().find("damaged"), std::string::npos);
    }
    if (!rec.ok()) note("record", rec);
    if (!imp.ok()) note("import", imp.status());
    return o;
  }
};

// ---- Damage the open must notice -------------------------------------------------------------

// Whole pages overwritten with random bytes: the structure breaks, quick_check sees it at open,
// the store goes read-only with one warning, and the file is never written.
TEST_F(CacheDamageTest, RandomPagesOverwritten) {
  const std::string foreign = ForeignExport(dir_);
  const std::vector<char> good = MakeCacheFile(Path());
  const size_t page = 4096, pages = good.size() / page;
  ASSERT_GE(pages, 8u);
  std::mt19937 rng(12345);
  for (int round = 0; round < 6; ++round) {
    std::vector<char> bad = good;
    for (int k = 0; k < 1 + round % 3; ++k) {
      size_t p = 1 + rng() % (pages - 1);  // page 1 (the header) is the truncation tests' part
      std::vector<char> noise = RandomBytes(rng, page);
      std::copy(noise.begin(), noise.end(), bad.begin() + p * page);
    }
    for (const OpenOptions& mode : {Rw(), Ro()}) {
      WriteBytes(Path(), bad);
      Outcome o = Exercise(Path(), mode, foreign);
      EXPECT_TRUE(o.announced) << "round " << round;
      EXPECT_EQ(o.silent, 0) << "round " << round << ": " << ::testing::PrintToString(o.notes);
      EXPECT_EQ(ReadBytes(Path()), bad) << "round " << round << ": a damaged file was written";
      EXPECT_FALSE(fs::exists(Path() + "-journal"));
    }
  }
}

// A run of bytes overwritten in the middle of the file: whether it lands on structure (seen by
// quick_check) or inside a cubin (seen by its hash on every read), it is named, never served.
TEST_F(CacheDamageTest, MidFileOverwrite) {
  const std::string foreign = ForeignExport(dir_);
  const std::vector<char> good = MakeCacheFile(Path());
  std::mt19937 rng(777);
  for (size_t len : {size_t{64}, size_t{700}}) {
    std::vector<char> bad = good;
    std::vector<char> noise = RandomBytes(rng, len);
    std::copy(noise.begin(), noise.end(), bad.begin() + bad.size() / 2);
    WriteBytes(Path(), bad);
    Outcome o = Exercise(Path(), Rw(), foreign);
    EXPECT_EQ(o.silent, 0) << len << ": " << ::testing::PrintToString(o.notes);
    EXPECT_GT(o.refused, 0) << len << ": the damage went unnoticed";
  }
}

// Runs of 16 to 200 random bytes at 100 random offsets: each one is named where it is read, or
// lands where nothing reads it (free space in a page, a timing number); no key, winner text or
// cubin that differs from what was recorded is ever served. (Trial-log text and the numbers in
// a row carry no checksum, so the sweep does not compare them.)
TEST_F(CacheDamageTest, OverwriteSweep) {
  const std::string foreign = ForeignExport(dir_);
  const std::vector<char> good = MakeCacheFile(Path());
  std::mt19937 rng(2024);
  int noticed = 0;
  for (int round = 0; round < 100; ++round) {
    size_t len = 16 + rng() % 185;
    size_t off = 100 + rng() % (good.size() - 100 - len);
    std::vector<char> bad = good;
    std::vector<char> noise = RandomBytes(rng, len);
    std::copy(noise.begin(), noise.end(), bad.begin() + off);
    WriteBytes(Path(), bad);
    Outcome o = Exercise(Path(), Ro(), foreign);
    EXPECT_EQ(o.silent, 0) << len << " bytes at " << off << ": "
                           << ::testing::PrintToString(o.notes);
    noticed += o.announced || o.refused > 2;  // a read-only store refuses record and import
  }
  EXPECT_GT(noticed, 30);
}

// A cubin's bytes changed in place (structure intact): quick_check passes, so the open is
// clean, but every read of that entry names it and the rest is served.
TEST_F(CacheDamageTest, CubinBytesChangedInPlace) {
  const std::string foreign = ForeignExport(dir_);
  std::vector<char> bytes = MakeCacheFile(Path());
  std::vector<char> cubin = EntryWinner(5).cubin;
  auto at = std::search(bytes.begin(), bytes.end(), cubin.begin() + 100, cubin.begin() + 140);
  ASSERT_NE(at, bytes.end());
  for (int i = 0; i < 40; ++i) at[i] = static_cast<char>(~at[i]);
  WriteBytes(Path(), bytes);

  Outcome o = Exercise(Path(), Ro(), foreign);
  EXPECT_FALSE(o.announced);
  EXPECT_EQ(o.silent, 0) << ::testing::PrintToString(o.notes);
  EXPECT_EQ(o.served, kEntries - 1);

  auto store = Store::OpenReadOnly(Path());
  auto check = store->Check();
  ASSERT_TRUE(check.ok());
  EXPECT_TRUE(check->file_problems.empty()) << ::testing::PrintToString(check->file_problems);
  ASSERT_EQ(check->entries.size(), static_cast<size_t>(kEntries));
  EXPECT_EQ(check->damaged_entries(), 1);
  for (const EntryCheck& e : check->entries) {
    EXPECT_EQ(e.ok(), e.key.problem != "p5") << e.key.problem << ": " << e.problem;
  }
  // Salvage: export the rest, import it into a fresh file.
  auto salvage = store->Export();
  ASSERT_TRUE(salvage.ok());
  EXPECT_EQ(salvage->exported, kEntries - 1);
  EXPECT_EQ(salvage->skipped, 1);
  ASSERT_EQ(salvage->reasons.size(), 1u);
  EXPECT_NE(salvage->reasons[0].find("p5"), std::string::npos) << salvage->reasons[0];
  auto fresh = Store::Open(Path("fresh.sqlite"));
  auto imported = fresh->Import(salvage->json);
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(imported->imported, kEntries - 1);
  EXPECT_TRUE(fresh->CheckIntegrity().ok());
}

// A key changed inside the entries table's unique index (its pages still well formed): lookups
// would miss that entry, and a re-tune would store a duplicate row. The open checks the entries
// table against its indexes, so this is announced, not silent.
TEST_F(CacheDamageTest, IndexKeyChangedInPlace) {
  const std::string foreign = ForeignExport(dir_);
  std::vector<char> bytes = MakeCacheFile(Path());
  int root = 0;
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(Path().c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db,
                                 "SELECT rootpage FROM sqlite_master WHERE type = 'index' AND "
                                 "tbl_name = 'entries' AND sql IS NULL",
                                 -1, &st, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
    root = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  ASSERT_GT(root, 1);
  auto page = bytes.begin() + (root - 1) * 4096;
  const std::string key = "p11";
  auto at = std::search(page, page + 4096, key.begin(), key.end());
  ASSERT_NE(at, page + 4096) << "p11 not in the index's root page " << root;
  *at = 'q';
  WriteBytes(Path(), bytes);
  for (const OpenOptions& mode : {Rw(), Ro()}) {
    Outcome o = Exercise(Path(), mode, foreign);
    EXPECT_TRUE(o.announced);
    EXPECT_EQ(o.silent, 0) << ::testing::PrintToString(o.notes);
    EXPECT_EQ(ReadBytes(Path()), bytes);
  }
  auto store = Store::Open(Path(), {Access::kReadOnly});
  EXPECT_NE(store->damage().find("integrity_check(entries)"), std::string::npos) << store->damage();
}

TEST_F(CacheDamageTest, TruncatedFile) {
  const std::string foreign = ForeignExport(dir_);
  const std::vector<char> good = MakeCacheFile(Path());
  for (size_t size : {good.size() - 4096, good.size() * 3 / 5 + 123, size_t{4096}, size_t{60}}) {
    std::vector<char> cut(good.begin(), good.begin() + size);
    for (const OpenOptions& mode : {Rw(), Ro()}) {
      WriteBytes(Path(), cut);
      Outcome o = Exercise(Path(), mode, foreign);
      EXPECT_TRUE(o.announced) << size;
      EXPECT_EQ(o.silent, 0) << size << ": " << ::testing::PrintToString(o.notes);
      EXPECT_EQ(ReadBytes(Path()), cut) << size;
    }
  }
}

// Above the quick_check size limit the open does not check, but a damaged page is still named
// by whichever read reaches it, and import checks under the write lock whatever the size.
TEST_F(CacheDamageTest, LargeFileSkipsOpenCheckButNeverServesOrWritesDamage) {
  const std::string foreign = ForeignExport(dir_);
  const std::vector<char> good = MakeCacheFile(Path());
  std::vector<char> bad = good;
  std::mt19937 rng(99);
  const size_t page = 4096, pages = good.size() / page;
  for (size_t p : {pages / 3, pages / 2, pages - 2}) {
    std::vector<char> noise = RandomBytes(rng, page);
    std::copy(noise.begin(), noise.end(), bad.begin() + p * page);
  }
  WriteBytes(Path(), bad);
  OpenOptions no_check = Rw();
  no_check.quick_check_max_bytes = 0;
  {
    auto store = Store::Open(Path(), no_check);
    EXPECT_TRUE(store->damage().empty());
    EXPECT_TRUE(store->persistent()) << store->warning();
    auto imp = store->Import(foreign);
    ASSERT_FALSE(imp.ok());
    EXPECT_EQ(imp.status().code(), Code::kFailedPrecondition);
    EXPECT_NE(imp.status().message().find(Path()), std::string::npos);
    EXPECT_NE(imp.status().message().find("damaged"), std::string::npos);
    auto check = store->Check();
    ASSERT_TRUE(check.ok());
    EXPECT_FALSE(check->ok());
  }
  EXPECT_EQ(ReadBytes(Path()), bad);
  Outcome o = Exercise(Path(), no_check, foreign);
  EXPECT_EQ(o.silent, 0) << ::testing::PrintToString(o.notes);
}

TEST_F(CacheDamageTest, NotADatabaseAndEmptyFiles) {
  const std::string foreign = ForeignExport(dir_);
  std::mt19937 rng(5);
  WriteBytes(Path(), RandomBytes(rng, 20000));
  for (const OpenOptions& mode : {Rw(), Ro()}) {
    auto store = Store::Open(Path(), mode);
    EXPECT_FALSE(store->persistent());
    EXPECT_NE(store->warning().find("not a database"), std::string::npos) << store->warning();
  }
  // A device is no cache file: SQLite would read it as an empty database and write beside it.
  for (const OpenOptions& mode : {Rw(), Ro()}) {
    auto store = Store::Open("/dev/null", mode);
    EXPECT_FALSE(store->persistent());
    EXPECT_NE(store->warning().find("not a regular file"), std::string::npos) << store->warning();
    EXPECT_FALSE(fs::exists("/dev/null-wal"));
  }
  // An empty file opened read-only is an empty cache; nothing initialises it.
  WriteBytes(Path("empty.sqlite"), {});
  auto ro = Store::OpenReadOnly(Path("empty.sqlite"));
  EXPECT_EQ(ro->warning(), "");
  EXPECT_TRUE(ro->exists());
  EXPECT_TRUE(ro->List()->empty());
  EXPECT_EQ(fs::file_size(Path("empty.sqlite")), 0u);
  EXPECT_FALSE(fs::exists(Path("empty.sqlite-wal")));
}

// ---- Leftovers of other processes: the file is intact, nothing committed may be lost ---------

// A writer killed before closing leaves committed frames in -wal (and its -shm): readers and
// writers that open afterwards see every committed row.
TEST_F(CacheDamageTest, KilledWriterLeavesWalWithCommittedRows) {
  const std::string foreign = ForeignExport(dir_);
  MakeCacheFile(Path(), kEntries - 1);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto store = Store::Open(Path());
    const int last = kEntries - 1;
    bool ok = store->Record(EntryKey(last), EntryWinner(last), MakeTrials(last)).ok();
    std::_Exit(ok ? 0 : 1);  // no destructor: no checkpoint, the last entry stays in -wal
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(fs::exists(Path() + "-wal"));
  ASSERT_GT(fs::file_size(Path() + "-wal"), 0u);
  const std::vector<char> main = ReadBytes(Path()), wal = ReadBytes(Path() + "-wal"),
                          shm = ReadBytes(Path() + "-shm");
  for (bool keep_shm : {true, false}) {
    for (const OpenOptions& mode : {Ro(), Rw()}) {
      WriteBytes(Path(), main);
      WriteBytes(Path() + "-wal", wal);
      fs::remove(Path() + "-shm");
      if (keep_shm) WriteBytes(Path() + "-shm", shm);
      Outcome o = Exercise(Path(), mode, foreign);
      EXPECT_FALSE(o.announced);
      EXPECT_EQ(o.silent, 0) << ::testing::PrintToString(o.notes);
      EXPECT_EQ(o.served, kEntries) << ::testing::PrintToString(o.notes);
    }
  }
}

// A damaged main file with a killed writer's -wal beside it: the store that notices the damage
// closes without checkpointing, so neither the file nor its -wal is touched.
TEST_F(CacheDamageTest, DamagedFileWithWalIsLeftAsItWas) {
  MakeCacheFile(Path(), kEntries - 1);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto store = Store::Open(Path());
    bool ok = store->Record(EntryKey(kEntries - 1), EntryWinner(kEntries - 1), {}).ok();
    std::_Exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::vector<char> main = ReadBytes(Path()), wal = ReadBytes(Path() + "-wal");
  ASSERT_FALSE(wal.empty());
  std::mt19937 rng(8);
  int announced = 0;
  for (int round = 0; round < 6; ++round) {
    std::vector<char> bad = main;
    size_t p = 1 + rng() % (bad.size() / 4096 - 1);
    std::vector<char> noise = RandomBytes(rng, 4096);
    std::copy(noise.begin(), noise.end(), bad.begin() + p * 4096);
    WriteBytes(Path(), bad);
    WriteBytes(Path() + "-wal", wal);
    fs::remove(Path() + "-shm");
    bool damaged;
    {
      auto store = Store::Open(Path(), Rw());
      damaged = !store->damage().empty();
      EXPECT_TRUE(damaged || store->List().ok()) << store->warning();
    }
    if (!damaged) continue;  // the page was one the -wal holds a newer copy of
    ++announced;
    EXPECT_EQ(ReadBytes(Path()), bad) << "round " << round;
    EXPECT_EQ(ReadBytes(Path() + "-wal"), wal) << "round " << round;
  }
  EXPECT_GT(announced, 2);
}

// Garbage where -wal and -shm belong (no process has the file open): SQLite's checksums reject
// them, and every row of the intact main file is served.
TEST_F(CacheDamageTest, GarbageWalAndShmLeftovers) {
  const std::string foreign = ForeignExport(dir_);
  const std::vector<char> good = MakeCacheFile(Path());
  std::mt19937 rng(31);
  struct Case {
    size_t wal, shm;
  };
  for (Case c : {Case{0, 32768}, Case{5000, 0}, Case{5000, 32768}, Case{32, 7}}) {
    for (const OpenOptions& mode : {Ro(), Rw()}) {
      WriteBytes(Path(), good);
      fs::remove(Path() + "-wal");
      fs::remove(Path() + "-shm");
      if (c.wal) WriteBytes(Path() + "-wal", RandomBytes(rng, c.wal));
      if (c.shm) WriteBytes(Path() + "-shm", RandomBytes(rng, c.shm));
      Outcome o = Exercise(Path(), mode, foreign);
      EXPECT_FALSE(o.announced) << c.wal << "/" << c.shm;
      EXPECT_EQ(o.silent, 0) << ::testing::PrintToString(o.notes);
      EXPECT_EQ(o.served, kEntries)
          << c.wal << "/" << c.shm << ": " << ::testing::PrintToString(o.notes);
    }
  }
}

// ---- A writer holding the lock in another process ------------------------------------------

// The child takes the write lock (BEGIN IMMEDIATE plus an uncommitted write) and holds it until
// the parent closes the pipe. Returns the child's pid, or -1.
pid_t HoldWriteLock(const std::string& path, int* release_fd) {
  int ready[2], release[2];
  if (pipe(ready) != 0 || pipe(release) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(ready[0]);
    close(release[1]);
    sqlite3* db = nullptr;
    char ok = 0;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK &&
        sqlite3_exec(db, "BEGIN IMMEDIATE; DELETE FROM trials;", nullptr, nullptr, nullptr) ==
            SQLITE_OK) {
      ok = 1;
    }
    if (write(ready[1], &ok, 1) != 1) std::_Exit(2);
    char c;
    while (read(release[0], &c, 1) > 0) {
    }
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(db);
    std::_Exit(ok ? 0 : 1);
  }
  close(ready[1]);
  close(release[0]);
  char ok = 0;
  bool got = read(ready[0], &ok, 1) == 1;
  close(ready[0]);
  *release_fd = release[1];
  return got && ok ? pid : -1;
}

TEST_F(CacheDamageTest, WriterHoldingTheLockInAnotherProcess) {
  const std::string foreign = ForeignExport(dir_);
  MakeCacheFile(Path());
  int release = -1;
  pid_t child = HoldWriteLock(Path(), &release);
  ASSERT_GT(child, 0);

  // Readers: the read-only open, list and export neither wait nor fall back.
  auto start = std::chrono::steady_clock::now();
  auto ro = Store::Open(Path(), Ro(100));
  EXPECT_EQ(ro->warning(), "");
  EXPECT_TRUE(ro->persistent());
  auto list = ro->List();
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->size(), static_cast<size_t>(kEntries));
  for (const Entry& e : *list) EXPECT_EQ(e.trials, 3);  // the holder's delete is not visible
  EXPECT_TRUE(ro->ExportJson().ok());
  auto check = ro->Check();
  ASSERT_TRUE(check.ok());
  EXPECT_TRUE(check->ok()) << ::testing::PrintToString(check->file_problems);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);

  // A writer whose schema is current opens without writing, so it does not fall back either;
  // its writes wait out the busy timeout and then say the file is locked.
  auto rw = Store::Open(Path(), Rw(100));
  EXPECT_EQ(rw->warning(), "");
  EXPECT_TRUE(rw->persistent());
  EXPECT_FALSE(rw->read_only());
  auto hit = rw->Lookup(EntryKey(7));
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->cubin, EntryWinner(7).cubin);
  Status rec = rw->Record(MakeKey("new"), EntryWinner(50), MakeTrials(50));
  EXPECT_EQ(rec.code(), Code::kUnavailable) << rec.ToString();
  EXPECT_NE(rec.message().find("locked"), std::string::npos) << rec.message();
  auto imp = rw->Import(foreign);
  EXPECT_EQ(imp.status().code(), Code::kUnavailable) << imp.status().ToString();

  close(release);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // Nothing was lost, and writes go through once the lock is gone.
  ASSERT_TRUE(rw->Record(MakeKey("new"), EntryWinner(50), MakeTrials(50)).ok());
  EXPECT_EQ(rw->List()->size(), static_cast<size_t>(kEntries + 1));
  EXPECT_TRUE(rw->CheckIntegrity().ok());
}

// ---- Read-only opens create nothing ---------------------------------------------------------

TEST_F(CacheDamageTest, ReadOnlyOpenOfMissingPathCreatesNothing) {
  const std::string foreign = ForeignExport(dir_);
  for (const std::string& path : {Path("absent.sqlite"), Path("no/such/dir/cache.sqlite")}) {
    auto before = std::distance(fs::directory_iterator(dir_), fs::directory_iterator());
    auto store = Store::OpenReadOnly(path);
    EXPECT_EQ(store->warning(), "");
    EXPECT_FALSE(store->exists());
    EXPECT_TRUE(store->read_only());
    EXPECT_EQ(store->path(), path);
    auto list = store->List();
    ASSERT_TRUE(list.ok());
    EXPECT_TRUE(list->empty());
    auto hit = store->Lookup(EntryKey(0));
    ASSERT_TRUE(hit.ok());
    EXPECT_FALSE(hit->has_value());
    EXPECT_EQ(store->Trials(EntryKey(0)).status().code(), Code::kNotFound);
    auto exported = store->Export();
    ASSERT_TRUE(exported.ok());
    EXPECT_EQ(exported->exported, 0);
    auto check = store->Check();
    ASSERT_TRUE(check.ok());
    EXPECT_TRUE(check->ok());
    EXPECT_EQ(store->Record(EntryKey(0), EntryWinner(0), {}).code(), Code::kUnavailable);
    auto imp = store->Import(foreign);
    EXPECT_EQ(imp.status().code(), Code::kUnavailable);
    EXPECT_NE(imp.status().message().find("does not exist"), std::string::npos);
    EXPECT_EQ(store->Prune(EntryKey(0)).status().code(), Code::kUnavailable);
    store.reset();
    EXPECT_FALSE(fs::exists(path));
    EXPECT_FALSE(fs::exists(Path("no")));
    EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), before);
  }
  // A directory or an unreadable path is a warning and an in-memory view, and is left alone.
  auto dir = Store::OpenReadOnly(dir_);
  EXPECT_FALSE(dir->persistent());
  EXPECT_NE(dir->warning().find("directory"), std::string::npos) << dir->warning();
  WriteBytes(Path("afile"), {'x'});
  auto under_file = Store::OpenReadOnly(Path("afile") + "/cache.sqlite");
  EXPECT_FALSE(under_file->persistent());
  EXPECT_NE(under_file->warning().find("Not a directory"), std::string::npos)
      << under_file->warning();
}

// A read-only open leaves an intact file's bytes alone.
TEST_F(CacheDamageTest, ReadOnlyOpenNeverWritesTheFile) {
  const std::vector<char> good = MakeCacheFile(Path());
  {
    auto store = Store::OpenReadOnly(Path());
    EXPECT_EQ(store->warning(), "");
    EXPECT_TRUE(store->read_only());
    EXPECT_EQ(store->List()->size(), static_cast<size_t>(kEntries));
    EXPECT_TRUE(store->CheckIntegrity().ok());
  }
  EXPECT_EQ(ReadBytes(Path()), good);
}

// ---- Hostile exports ------------------------------------------------------------------------

TEST_F(CacheDamageTest, HostileImportDocuments) {
  auto store = Store::Open(Path());
  for (const char* doc :
       {"", "null", "[]", "{}", "{\"format\": 1}", "{\"format\": \"convt3d-cache\"}",
        "{\"format\": \"convt3d-cache\", \"schema_version\": 1}",
        "{\"format\": \"convt3d-cache\", \"schema_version\": 1, \"entries\": {}}",
        "{\"format\": \"convt3d-cache\", \"schema_version\": 1e99, \"entries\": []}",
        "{\"format\": \"convt3d-cache\", \"schema_version\": -1, \"entries\": []}",
        "{\"format\": \"\\u001b[31mred\", \"schema_version\": 1, \"entries\": []}"}) {
    auto r = store->Import(doc);
    ASSERT_FALSE(r.ok()) << doc;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << doc;
    EXPECT_EQ(r.status().message().find('\x1b'), std::string::npos) << r.status().message();
  }
  // Deep nesting: parsed without a crash, refused as an entry of the wrong shape.
  std::string deep = "{\"format\": \"convt3d-cache\", \"schema_version\": 1, \"entries\": [";
  deep += std::string(20000, '[') + std::string(20000, ']') + "]}";
  auto r = store->Import(deep);
  if (r.ok()) {
    EXPECT_EQ(r->imported, 0);
    EXPECT_EQ(r->skipped, 1);
  }
  // Entries of every wrong shape are skipped one by one, each named.
  nlohmann::json bad = nlohmann::json::parse(ForeignExport(dir_));
  nlohmann::json good_entry = bad["entries"][0];
  bad["entries"] = nlohmann::json::array(
      {1, "x", nullptr, nlohmann::json::array(), nlohmann::json::object(), good_entry});
  auto mixed = store->Import(bad.dump());
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  EXPECT_EQ(mixed->imported, 1);
  EXPECT_EQ(mixed->skipped, 5);
  ASSERT_EQ(mixed->reasons.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(mixed->reasons[i].rfind("entries[" + std::to_string(i) + "]", 0), 0u)
        << mixed->reasons[i];
  }
  EXPECT_TRUE(store->CheckIntegrity().ok());
}

}  // namespace
}  // namespace convt3d::cache
