// status_util.h: internal helpers to build and propagate convt3d::Status.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <sstream>
#include <string>

#include "convt3d/convt3d.h"

namespace convt3d {

inline Status InvalidArgument(std::string m) {
  return Status(Code::kInvalidArgument, std::move(m));
}
inline Status FailedPrecondition(std::string m) {
  return Status(Code::kFailedPrecondition, std::move(m));
}
inline Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
inline Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
inline Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }

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

#define CONVT3D_CONCAT_INNER(a, b) a##b
#define CONVT3D_CONCAT(a, b) CONVT3D_CONCAT_INNER(a, b)

#define CONVT3D_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::convt3d::Status convt3d_status_ = (expr);        \
    if (!convt3d_status_.ok()) return convt3d_status_; \
  } while (0)

// CONVT3D_ASSIGN_OR_RETURN(auto x, MakeX()); returns the error status if MakeX() failed.
#define CONVT3D_ASSIGN_OR_RETURN(lhs, expr) \
  CONVT3D_ASSIGN_OR_RETURN_IMPL(CONVT3D_CONCAT(convt3d_sor_, __LINE__), lhs, expr)
#define CONVT3D_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
