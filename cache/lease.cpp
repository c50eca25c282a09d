// lease.cpp: claim, renew and release of tuning leases on the wall clock (see lease.h).
#include "cache/lease.h"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "base/status.h"

namespace convt3d::cache {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double Seconds(std::chrono::milliseconds d) { return std::chrono::duration<double>(d).count(); }

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// A fresh owner token per claim, so two threads of one process never share a lease.
Lease NewLease(std::chrono::milliseconds ttl) {
  static std::atomic<int64_t> next{0};
  Lease l;
  l.host = HostName();
  l.pid = getpid();
  l.owner = StrCat(l.host, ":", l.pid, ":", next++);
  l.expires_at = Now() + Seconds(ttl);
  return l;
}

}  // namespace

struct LeaseGuard::State {
  State(Store& s, Key k, Lease l, std::chrono::milliseconds t)
      : store(s), key(std::move(k)), lease(std::move(l)), ttl(t) {}
  Store& store;
  Key key;
  Lease lease;
  std::chrono::milliseconds ttl;
  std::mutex mu;
  std::condition_variable wake;
  bool stop = false;
  std::atomic<bool> lost{false};
  std::thread renewer;
};

LeaseGuard::LeaseGuard(Store& store, Key key, Lease lease, std::chrono::milliseconds ttl)
    : state_(std::make_unique<State>(store, std::move(key), std::move(lease), ttl)) {
  State* s = state_.get();
  s->renewer = std::thread([s] {
    std::unique_lock<std::mutex> lock(s->mu);
    while (!s->wake.wait_for(lock, s->ttl / 3, [s] { return s->stop; })) {
      // kFailedPrecondition: taken over. Other errors (a lock held past the busy timeout) are
      // retried at the next tick, within the lease's lifetime.
      Status r = s->store.RenewLease(s->key, s->lease.owner, Now() + Seconds(s->ttl));
      if (r.code() == Code::kFailedPrecondition) s->lost = true;
    }
  });
}

LeaseGuard::~LeaseGuard() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->wake.notify_all();
  state_->renewer.join();
  // Best effort: a lease that cannot be deleted expires by itself.
  (void)state_->store.ReleaseLease(state_->key, state_->lease.owner);
}

const Lease& LeaseGuard::lease() const { return state_->lease; }
bool LeaseGuard::lost() const { return state_->lost; }

StatusOr<Claimed> ClaimTuning(Store& store, const Key& key, std::chrono::milliseconds ttl) {
  const Lease mine = NewLease(ttl);
  CONVT3D_ASSIGN_OR_RETURN(ClaimResult r, store.ClaimLease(key, mine, Now()));
  Claimed out{r, nullptr};
  if (r.claim == Claim::kAcquired) out.guard = std::make_unique<LeaseGuard>(store, key, mine, ttl);
  return out;
}

StatusOr<Claimed> WaitForTuning(Store& store, const Key& key, std::chrono::milliseconds max_wait,
                                std::chrono::milliseconds ttl, std::chrono::milliseconds poll) {
  const auto deadline = std::chrono::steady_clock::now() + max_wait;
  while (true) {
    CONVT3D_ASSIGN_OR_RETURN(Claimed c, ClaimTuning(store, key, ttl));
    if (c.result.claim != Claim::kHeld || std::chrono::steady_clock::now() >= deadline) return c;
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace convt3d::cache
