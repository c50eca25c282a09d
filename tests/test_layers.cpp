// test_layers.cpp: the user's writable cache over read-only shared ones (cache/layers.h).
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "cache/layers.h"
#include "convt3d/convt3d.h"
#include "tests/cache_test_util.h"
#include "tests/cli_helpers.h"
#include "tests/status_matchers.h"
#include "tests/temp_dir.h"

namespace convt3d::cache {
namespace {

namespace fs = std::filesystem;
using LayersTest = test::TempDirTest;

// A cache at `path` holding `winners[i]` under MakeKey(problems[i]); closed on return.
void MakeCache(const std::string& path, const std::vector<std::string>& problems, int seed) {
  auto store = Store::Open(path);
  ASSERT_TRUE(store->warning().empty()) << store->warning();
  for (const std::string& p : problems) ASSERT_OK(store->Record(MakeKey(p), MakeWinner(seed), {}));
}

struct FileState {
  std::vector<char> bytes;
  fs::file_time_type mtime;
  bool operator==(const FileState& o) const { return bytes == o.bytes && mtime == o.mtime; }
};
FileState StateOf(const std::string& path) { return {ReadBytes(path), fs::last_write_time(path)}; }

TEST(Layers, PathListsSplitAtColons) {
  EXPECT_EQ(SplitPathList("/a/x.sqlite::/b/y.sqlite:"),
            (std::vector<std::string>{"/a/x.sqlite", "/b/y.sqlite"}));
  EXPECT_TRUE(SplitPathList("").empty());
  setenv("CONVT3D_CACHE_SHARED", "/s1:/s2", 1);
  EXPECT_EQ(SharedPathsFromEnv(), (std::vector<std::string>{"/s1", "/s2"}));
  unsetenv("CONVT3D_CACHE_SHARED");
  EXPECT_TRUE(SharedPathsFromEnv().empty());
}

TEST_F(LayersTest, LookupsFallThroughInOrderAndWritesGoToTheUsers) {
  ASSERT_NO_FATAL_FAILURE(MakeCache(Path("team.sqlite"), {"a", "b"}, 1));
  ASSERT_NO_FATAL_FAILURE(MakeCache(Path("site.sqlite"), {"b", "c"}, 2));
  ASSERT_NO_FATAL_FAILURE(MakeCache(Path("user.sqlite"), {"a"}, 3));
  // The shared files read-only on disk, in a folder nobody may write (a mounted pre-tuned cache).
  fs::create_directories(Path("ro"));
  fs::rename(Path("team.sqlite"), Path("ro/team.sqlite"));
  fs::rename(Path("site.sqlite"), Path("ro/site.sqlite"));
  chmod(Path("ro/team.sqlite").c_str(), 0444);
  chmod(Path("ro/site.sqlite").c_str(), 0444);
  chmod(Path("ro").c_str(), 0555);
  const FileState team = StateOf(Path("ro/team.sqlite")), site = StateOf(Path("ro/site.sqlite"));
  {
    auto user = Store::Open(Path("user.sqlite"));
    auto shared = OpenShared({Path("ro/team.sqlite"), Path("ro/site.sqlite")});
    for (const auto& s : shared) EXPECT_TRUE(s->warning().empty()) << s->warning();
    const struct {
      const char* problem;
      int seed;
      std::string from;
    } cases[] = {{"a", 3, Path("user.sqlite")},
                 {"b", 1, Path("ro/team.sqlite")},
                 {"c", 2, Path("ro/site.sqlite")}};
    for (const auto& c : cases) {
      std::string from;
      ASSERT_OK_AND_ASSIGN(auto hit, LookupLayered(*user, shared, MakeKey(c.problem), &from));
      ASSERT_TRUE(hit.has_value()) << c.problem;
      EXPECT_EQ(hit->candidate, MakeWinner(c.seed).candidate) << c.problem;
      EXPECT_EQ(hit->cubin, MakeWinner(c.seed).cubin) << c.problem;
      EXPECT_EQ(from, c.from) << c.problem;
    }
    ASSERT_OK_AND_ASSIGN(auto miss, LookupLayered(*user, shared, MakeKey("d")));
    EXPECT_FALSE(miss.has_value());
    // A result is written to the user's file, and served from there first.
    ASSERT_OK(user->Record(MakeKey("c"), MakeWinner(4), {}));
    std::string from;
    ASSERT_OK_AND_ASSIGN(auto hit, LookupLayered(*user, shared, MakeKey("c"), &from));
    EXPECT_EQ(hit->candidate, MakeWinner(4).candidate);
    EXPECT_EQ(from, Path("user.sqlite"));
    for (const auto& s : shared) EXPECT_FALSE(s->Record(MakeKey("e"), MakeWinner(5), {}).ok());
  }
  EXPECT_TRUE(StateOf(Path("ro/team.sqlite")) == team);
  EXPECT_TRUE(StateOf(Path("ro/site.sqlite")) == site);
}

TEST_F(LayersTest, SharedFilesAreNeverOpenedForWriting) {
  // Writable on disk this time: still untouched (no lock, no WAL switch, no lease table).
  ASSERT_NO_FATAL_FAILURE(MakeCache(Path("team.sqlite"), {"a"}, 1));
  const FileState before = StateOf(Path("team.sqlite"));
  {
    auto user = Store::Open(Path("user.sqlite"));
    auto shared = OpenShared({Path("team.sqlite")});
    EXPECT_TRUE(shared[0]->read_only());
    ASSERT_OK_AND_ASSIGN(auto hit, LookupLayered(*user, shared, MakeKey("a")));
    EXPECT_TRUE(hit.has_value());
    EXPECT_FALSE(shared[0]->ClaimLease(MakeKey("b"), Lease{"me", "h", 1, 1e12}, 0).ok());
  }
  EXPECT_TRUE(StateOf(Path("team.sqlite")) == before);
}

TEST_F(LayersTest, DamagedOrMissingLayersCostOnlyAMiss) {
  ASSERT_NO_FATAL_FAILURE(MakeCache(Path("user.sqlite"), {"a"}, 3));
  ASSERT_NO_FATAL_FAILURE(MakeCache(Path("team.sqlite"), {"a"}, 1));
  WriteBytes(Path("junk.sqlite"), std::vector<char>(4096, 'x'));
  // The user's entry for "a" is damaged (its cubin no longer matches its hash).
  {
    auto raw = Store::Open(Path("user.sqlite"));
    ASSERT_TRUE(raw->warning().empty());
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(Path("user.sqlite").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE binaries SET cubin = x'00'", nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  const FileState junk = StateOf(Path("junk.sqlite"));
  auto user = Store::Open(Path("user.sqlite"));
  auto shared = OpenShared({Path("none/missing.sqlite"), Path("junk.sqlite"), Path("team.sqlite")});
  EXPECT_TRUE(shared[0]->warning().empty()) << shared[0]->warning();
  EXPECT_NE(shared[1]->warning().find("junk.sqlite"), std::string::npos) << shared[1]->warning();
  std::string from;
  ASSERT_OK_AND_ASSIGN(auto hit, LookupLayered(*user, shared, MakeKey("a"), &from));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(from, Path("team.sqlite"));
  // With no layer to serve it, the damage is the answer.
  EXPECT_THAT(LookupLayered(*user, {}, MakeKey("a")),
              test::StatusIs(Code::kInternal, ::testing::HasSubstr("cubin")));
  EXPECT_FALSE(fs::exists(Path("none")));
  EXPECT_TRUE(StateOf(Path("junk.sqlite")) == junk);
}

TEST_F(LayersTest, EngineOpensSharedCachesFromTheEnvironment) {
  // Engine::Create needs no GPU; a broken shared cache is one warning through Options::log.
  WriteBytes(Path("junk.sqlite"), std::vector<char>(4096, 'x'));
  setenv("CONVT3D_CACHE_SHARED", (Path("junk.sqlite") + ":" + Path("none.sqlite")).c_str(), 1);
  Options o;
  o.cache_path = Path("user.sqlite");
  std::vector<std::string> lines;
  o.log = [&](LogLevel, const std::string& line) { lines.push_back(line); };
  auto engine = Engine::Create(o);
  unsetenv("CONVT3D_CACHE_SHARED");
  ASSERT_OK(engine.status());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("junk.sqlite"), std::string::npos) << lines[0];
  EXPECT_FALSE(fs::exists(Path("none.sqlite")));
}

TEST_F(LayersTest, InfoListsSharedCachesInOrderAndCreatesNothing) {
  ASSERT_NO_FATAL_FAILURE(MakeCache(Path("team.sqlite"), {"a", "b"}, 1));
  const FileState team = StateOf(Path("team.sqlite"));
  const test::CliResult r = test::RunCli(
      "info --cache '" + Path("user.sqlite") + "'",
      "CONVT3D_CACHE_SHARED='" + Path("team.sqlite") + ":" + Path("none/x.sqlite") + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("shared     " + Path("team.sqlite") + " (opens, 2 entries)\nshared     " +
                       Path("none/x.sqlite") + " (no file; not used)"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(Path("none")));
  EXPECT_FALSE(fs::exists(Path("user.sqlite")));
  EXPECT_TRUE(StateOf(Path("team.sqlite")) == team);
}

}  // namespace
}  // namespace convt3d::cache
