// status.h: builders of convt3d::Status by code, and the macros that propagate errors.
#pragma once

#include <string>

#include "base/strings.h"
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
