// test_lease.cpp: single-flight tuning leases (cache/lease.h) between threads and forked processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>
#include <vector>

#include "cache/cache.h"
#include "cache/lease.h"
#include "tests/cache_test_util.h"
#include "tests/status_matchers.h"
#include "tests/temp_dir.h"

namespace convt3d::cache {
namespace {

using std::chrono::milliseconds;
using test::StatusIs;
using LeaseTest = test::TempDirTest;

Lease LeaseOf(const std::string& owner, double expires_at) {
  return Lease{owner, "host", 1, expires_at};
}

TEST_F(LeaseTest, ClaimHoldExpireTakeOverOnTheCallersClock) {
  auto store = Store::Open(Path());
  const Key key = MakeKey();
  ASSERT_OK_AND_ASSIGN(ClaimResult a, store->ClaimLease(key, LeaseOf("a", 110), 100));
  EXPECT_EQ(a.claim, Claim::kAcquired);
  // Another owner, before the expiry: held, and told by whom.
  ASSERT_OK_AND_ASSIGN(ClaimResult b, store->ClaimLease(key, LeaseOf("b", 120), 105));
  EXPECT_EQ(b.claim, Claim::kHeld);
  EXPECT_EQ(b.lease.owner, "a");
  EXPECT_EQ(b.lease.expires_at, 110);
  // The holder renews; a release by someone else changes nothing.
  EXPECT_OK(store->RenewLease(key, "a", 130));
  EXPECT_OK(store->ReleaseLease(key, "b"));
  ASSERT_OK_AND_ASSIGN(b, store->ClaimLease(key, LeaseOf("b", 140), 125));
  EXPECT_EQ(b.claim, Claim::kHeld);
  // Past the expiry it is taken over, and the old holder learns it lost the lease.
  ASSERT_OK_AND_ASSIGN(b, store->ClaimLease(key, LeaseOf("b", 150), 131));
  EXPECT_EQ(b.claim, Claim::kAcquired);
  EXPECT_THAT(store->RenewLease(key, "a", 160),
              StatusIs(Code::kFailedPrecondition, ::testing::HasSubstr("held by b")));
  // Another key is independent.
  ASSERT_OK_AND_ASSIGN(ClaimResult other, store->ClaimLease(MakeKey("sig2"), LeaseOf("a", 1), 0));
  EXPECT_EQ(other.claim, Claim::kAcquired);
  // Released, it is free at once.
  EXPECT_OK(store->ReleaseLease(key, "b"));
  ASSERT_OK_AND_ASSIGN(std::optional<Lease> none, store->ReadLease(key));
  EXPECT_FALSE(none.has_value());
  // A stored winner ends it: nobody tunes that key again.
  ASSERT_OK(store->Record(key, MakeWinner(1), {}));
  ASSERT_OK_AND_ASSIGN(ClaimResult c, store->ClaimLease(key, LeaseOf("c", 200), 190));
  EXPECT_EQ(c.claim, Claim::kStored);
}

TEST_F(LeaseTest, LeasesStayOutOfExportsAndReadersOfTheFile) {
  {
    auto store = Store::Open(Path());
    ASSERT_OK(store->Record(MakeKey(), MakeWinner(1), {}));
    ASSERT_OK(store->ClaimLease(MakeKey("sig2"), LeaseOf("a", 1e12), 0).status());
    ASSERT_OK_AND_ASSIGN(ExportSummary e, store->Export());
    EXPECT_EQ(e.exported, 1);
    EXPECT_EQ(e.json.find("lease"), std::string::npos);
  }
  // A reader sees a sound file and may read the lease, but may not claim one.
  auto ro = Store::OpenReadOnly(Path());
  EXPECT_TRUE(ro->warning().empty()) << ro->warning();
  ASSERT_OK_AND_ASSIGN(CheckReport report, ro->Check());
  EXPECT_TRUE(report.ok());
  ASSERT_OK_AND_ASSIGN(std::optional<Lease> held, ro->ReadLease(MakeKey("sig2")));
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(held->owner, "a");
  EXPECT_THAT(ro->ClaimLease(MakeKey("sig3"), LeaseOf("b", 1), 0),
              StatusIs(Code::kUnavailable, ::testing::HasSubstr("read-only")));
  // A file with no lease table yet reads no lease.
  auto fresh = Store::Open(Path("fresh.sqlite"));
  ASSERT_OK_AND_ASSIGN(std::optional<Lease> none, fresh->ReadLease(MakeKey()));
  EXPECT_FALSE(none.has_value());
}

TEST_F(LeaseTest, GuardRenewsWhileHeldAndReleasesAtTheEnd) {
  auto store = Store::Open(Path());
  auto other = Store::Open(Path());
  const Key key = MakeKey();
  {
    ASSERT_OK_AND_ASSIGN(Claimed mine, ClaimTuning(*store, key, milliseconds(300)));
    ASSERT_EQ(mine.result.claim, Claim::kAcquired);
    ASSERT_NE(mine.guard, nullptr);
    // Three lifetimes later it is still held: the guard renewed it.
    std::this_thread::sleep_for(milliseconds(900));
    ASSERT_OK_AND_ASSIGN(Claimed theirs, ClaimTuning(*other, key, milliseconds(300)));
    EXPECT_EQ(theirs.result.claim, Claim::kHeld);
    EXPECT_EQ(theirs.result.lease.owner, mine.guard->lease().owner);
    EXPECT_EQ(theirs.result.lease.pid, getpid());
    EXPECT_FALSE(mine.guard->lost());
  }
  ASSERT_OK_AND_ASSIGN(std::optional<Lease> none, store->ReadLease(key));
  EXPECT_FALSE(none.has_value());
}

TEST_F(LeaseTest, ThreadsOfOneProcessGetDistinctOwners) {
  auto store = Store::Open(Path());
  ASSERT_OK_AND_ASSIGN(Claimed first, ClaimTuning(*store, MakeKey()));
  ASSERT_OK_AND_ASSIGN(Claimed second, ClaimTuning(*store, MakeKey()));
  EXPECT_EQ(first.result.claim, Claim::kAcquired);
  EXPECT_EQ(second.result.claim, Claim::kHeld);
}

TEST_F(LeaseTest, StoresThatCannotCoordinateSaySo) {
  auto memory = Store::Open(":memory:");
  ASSERT_OK_AND_ASSIGN(Claimed c, ClaimTuning(*memory, MakeKey()));  // one process: still works
  EXPECT_EQ(c.result.claim, Claim::kAcquired);
  auto missing = Store::OpenReadOnly(Path("none.sqlite"));
  EXPECT_THAT(ClaimTuning(*missing, MakeKey()), StatusIs(Code::kUnavailable));
}

// Exit codes of a forked claimant.
enum : int { kExitTuned = 10, kExitStandIn = 11, kExitPickedUp = 12, kExitError = 20 };

// One process meeting the missing key: the lease holder "tunes" for 400 ms and stores a winner;
// the others either run a stand-in at once or (`wait`) wait for the winner.
int Claimant(const std::string& path, bool wait) {
  auto store = Store::Open(path);
  if (!store->warning().empty()) return kExitError;
  StatusOr<Claimed> c =
      wait ? WaitForTuning(*store, MakeKey(), milliseconds(20000)) : ClaimTuning(*store, MakeKey());
  if (!c.ok()) return kExitError;
  switch (c->result.claim) {
    case Claim::kAcquired:
      std::this_thread::sleep_for(milliseconds(400));
      return store->Record(MakeKey(), MakeWinner(7), {}).ok() ? kExitTuned : kExitError;
    case Claim::kHeld:
      return wait ? kExitError : kExitStandIn;
    case Claim::kStored: {
      auto hit = store->Lookup(MakeKey());
      return hit.ok() && hit->has_value() ? kExitPickedUp : kExitError;
    }
  }
  return kExitError;
}

TEST_F(LeaseTest, SixteenProcessesTuneOneMissingKeyOnce) {
  {
    auto init = Store::Open(Path());  // created and migrated before the race
    ASSERT_TRUE(init->warning().empty()) << init->warning();
  }
  std::vector<pid_t> kids;
  for (int i = 0; i < 16; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(Claimant(Path(), /*wait=*/i % 2 == 1));
    kids.push_back(pid);
  }
  int tuned = 0, stand_in = 0, picked_up = 0;
  for (size_t i = 0; i < kids.size(); ++i) {
    int status = 0;
    ASSERT_EQ(waitpid(kids[i], &status, 0), kids[i]);
    ASSERT_TRUE(WIFEXITED(status));
    const int code = WEXITSTATUS(status);
    tuned += code == kExitTuned;
    stand_in += code == kExitStandIn;
    picked_up += code == kExitPickedUp;
    EXPECT_NE(code, kExitError) << "claimant " << i;
    if (i % 2 == 1) {
      EXPECT_NE(code, kExitStandIn) << "a waiter ran a stand-in";
    }
  }
  std::cout << "tuned " << tuned << ", stand-in " << stand_in << ", picked up " << picked_up
            << "\n";
  EXPECT_EQ(tuned, 1);
  EXPECT_EQ(tuned + stand_in + picked_up, 16);
  auto store = Store::Open(Path());
  ASSERT_OK_AND_ASSIGN(std::vector<Entry> entries, store->List());
  EXPECT_EQ(entries.size(), 1u);
  ASSERT_OK_AND_ASSIGN(std::optional<Lease> none, store->ReadLease(MakeKey()));
  EXPECT_FALSE(none.has_value()) << "the holder released its lease";
}

TEST_F(LeaseTest, KilledHolderLeaseExpiresAndIsTakenOver) {
  { auto init = Store::Open(Path()); }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto store = Store::Open(Path());
    auto c = ClaimTuning(*store, MakeKey(), milliseconds(600));
    const char ok = c.ok() && c->result.claim == Claim::kAcquired ? 'y' : 'n';
    if (write(ready[1], &ok, 1) != 1) _exit(1);
    pause();  // "tuning" until killed
    _exit(0);
  }
  close(ready[1]);
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  close(ready[0]);
  ASSERT_EQ(ok, 'y');
  auto store = Store::Open(Path());
  ASSERT_OK_AND_ASSIGN(Claimed held, ClaimTuning(*store, MakeKey()));
  EXPECT_EQ(held.result.claim, Claim::kHeld);
  EXPECT_EQ(held.result.lease.pid, pid);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_OK_AND_ASSIGN(Claimed taken, WaitForTuning(*store, MakeKey(), milliseconds(10000)));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(taken.result.claim, Claim::kAcquired);
  EXPECT_LT(waited, 2.0) << "a dead holder's lease outlived its 600 ms lifetime";
}

}  // namespace
}  // namespace convt3d::cache
