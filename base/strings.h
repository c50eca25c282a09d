// strings.h: string building shared by every room: StrCat and printf-style StrFormat.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <sstream>
#include <string>

namespace convt3d {

// Concatenates streamable values: StrCat("stride[", i, "]=", v).
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// printf-style formatting into a std::string (numbers in tables and messages).
inline std::string StrFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string StrFormat(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char buf[512];
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < static_cast<int>(sizeof buf)) return buf;
  std::string big(n + 1, '\0');
  va_start(ap, fmt);
  std::vsnprintf(big.data(), big.size(), fmt, ap);
  va_end(ap);
  big.resize(n);
  return big;
}

}  // namespace convt3d
