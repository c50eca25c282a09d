// lease.h: single-flight tuning: one tuner per key across the threads and processes of a cache.
//
// The first that needs a missing key claims its lease in the cache file (cache::Store's leases);
// a guard renews it every third of its lifetime while the holder tunes and releases it when the
// holder is done. Others see kHeld and run a stand-in (or wait) and find the winner stored later.
// A holder that dies stops renewing: its lease expires and the next claim takes it over.
#pragma once

#include <chrono>
#include <memory>

#include "cache/cache.h"

namespace convt3d::cache {

constexpr std::chrono::milliseconds kDefaultLeaseTtl{30000};

// Holds a lease: renews it on its own thread every ttl/3 and releases it when destroyed. Renewal
// errors are kept, not printed: lost() tells whether another owner took the lease over.
class LeaseGuard {
 public:
  LeaseGuard(Store& store, Key key, Lease lease, std::chrono::milliseconds ttl);
  ~LeaseGuard();
  LeaseGuard(const LeaseGuard&) = delete;
  LeaseGuard& operator=(const LeaseGuard&) = delete;
  const Lease& lease() const;
  bool lost() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

struct Claimed {
  ClaimResult result;
  std::unique_ptr<LeaseGuard> guard;  // set exactly when result.claim == Claim::kAcquired
};

// Claims the lease on `key` for this thread with a new owner token ("host:pid:n") and the wall
// clock. Errors: the store cannot coordinate (read-only, damaged, missing file, locked past its
// busy timeout); the caller then works alone, as before single flight.
StatusOr<Claimed> ClaimTuning(Store& store, const Key& key,
                              std::chrono::milliseconds ttl = kDefaultLeaseTtl);

// ClaimTuning until the result is not kHeld or `max_wait` has passed (then the last kHeld), polling
// every `poll`: the holder's winner gets stored (kStored), or its lease expires and is taken over
// (kAcquired).
StatusOr<Claimed> WaitForTuning(Store& store, const Key& key, std::chrono::milliseconds max_wait,
                                std::chrono::milliseconds ttl = kDefaultLeaseTtl,
                                std::chrono::milliseconds poll = std::chrono::milliseconds(100));

}  // namespace convt3d::cache
