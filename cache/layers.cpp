// layers.cpp: lookups that fall through the user's cache to the shared read-only ones.
#include "cache/layers.h"

#include <algorithm>
#include <cstdlib>

namespace convt3d::cache {

std::vector<std::string> SplitPathList(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(':', start), list.size());
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<std::string> SharedPathsFromEnv() {
  const char* list = std::getenv("CONVT3D_CACHE_SHARED");
  return list != nullptr ? SplitPathList(list) : std::vector<std::string>();
}

std::vector<std::unique_ptr<Store>> OpenShared(const std::vector<std::string>& paths) {
  std::vector<std::unique_ptr<Store>> out;
  for (const std::string& p : paths) out.push_back(Store::OpenReadOnly(p));
  return out;
}

StatusOr<std::optional<Winner>> LookupLayered(Store& user,
                                              const std::vector<std::unique_ptr<Store>>& shared,
                                              const Key& key, std::string* served_by) {
  Status first_error;
  auto serve = [&](Store& store) -> std::optional<Winner> {
    StatusOr<std::optional<Winner>> hit = store.Lookup(key);
    if (!hit.ok()) {
      if (first_error.ok()) first_error = hit.status();
      return std::nullopt;
    }
    if (hit.value() && served_by != nullptr) *served_by = store.path();
    return std::move(hit.value());
  };
  if (auto w = serve(user)) return w;
  for (const auto& s : shared)
    if (auto w = serve(*s)) return w;
  if (!first_error.ok()) return first_error;
  return std::optional<Winner>();
}

}  // namespace convt3d::cache
