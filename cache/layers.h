// layers.h: the user's writable cache over read-only shared ones ($CONVT3D_CACHE_SHARED).
//
// A team ships or mounts a pre-tuned cache; each user's own file sits on top. Lookups try the
// user's file first, then each shared one in order; results are written to the user's only. The
// shared files are opened with Store::OpenReadOnly: never written, locked for writing, migrated
// or created.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache.h"

namespace convt3d::cache {

// The paths of a colon-separated list ($CONVT3D_CACHE_SHARED's form), empty parts dropped.
std::vector<std::string> SplitPathList(const std::string& list);
// SplitPathList($CONVT3D_CACHE_SHARED); empty when unset.
std::vector<std::string> SharedPathsFromEnv();

// Each path opened read-only; a missing one is an empty view, a broken one an in-memory view
// with its warning (see Store::Open), so a bad shared cache costs lookups nothing but a miss.
std::vector<std::unique_ptr<Store>> OpenShared(const std::vector<std::string>& paths);

// The winner for `key` from the first layer with a sound entry: `user`, then `shared` in order.
// `*served_by` (when given) gets that store's path. An unusable entry in one layer falls through
// to the next; when no layer serves the key, the first such error is returned, else nullopt.
StatusOr<std::optional<Winner>> LookupLayered(Store& user,
                                              const std::vector<std::unique_ptr<Store>>& shared,
                                              const Key& key, std::string* served_by = nullptr);

}  // namespace convt3d::cache
