// time.h: wall-clock stamps shared by the cache and the bench.
#pragma once

#include <ctime>
#include <string>

namespace convt3d {

// The current UTC time as ISO 8601, e.g. "2026-11-26T05:38:58Z".
inline std::string NowUtc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace convt3d
