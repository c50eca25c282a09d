// status_matchers.h: gMock matchers and gtest macros for convt3d::Status and StatusOr<T>.
//
//   EXPECT_THAT(Validate(p), IsOk());
//   EXPECT_THAT(engine->Plan(p), StatusIs(Code::kInvalidArgument, HasSubstr("stride[2]=0")));
//   EXPECT_THAT(Synchronize(), StatusIs(Code::kFailedPrecondition));   // any message
//   ASSERT_OK(buffer.Upload(data, bytes));     // on failure prints the code and the message
//   ASSERT_OK_AND_ASSIGN(auto plan, engine->Plan(p));
//
// Every matcher takes a Status or a StatusOr<T> of any T (move-only ones included); a failure
// prints the status as "INVALID_ARGUMENT: stride[2]=0 must be positive".
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <utility>

#include "convt3d/convt3d.h"

namespace convt3d {

// How gtest prints a Status, a StatusOr and a Code (found by argument-dependent lookup).
inline void PrintTo(const Status& s, std::ostream* os) { *os << s.ToString(); }
template <typename T>
void PrintTo(const StatusOr<T>& s, std::ostream* os) {
  *os << (s.ok() ? "OK (with a value)" : s.status().ToString());
}
inline void PrintTo(Code code, std::ostream* os) {
  static constexpr const char* kNames[] = {"OK",        "INVALID_ARGUMENT", "FAILED_PRECONDITION",
                                           "NOT_FOUND", "UNAVAILABLE",      "INTERNAL"};
  const int i = static_cast<int>(code);
  if (i >= 0 && i < static_cast<int>(sizeof kNames / sizeof kNames[0]))
    *os << kNames[i];
  else
    *os << "Code(" << i << ")";
}

namespace test {
namespace internal {

inline const Status& StatusOf(const Status& s) { return s; }
template <typename T>
Status StatusOf(const StatusOr<T>& s) {
  return s.status();
}

// IsOk(): the status is OK.
class IsOkMatcher {
 public:
  template <typename S>
  bool MatchAndExplain(const S& actual, ::testing::MatchResultListener* listener) const {
    const Status s = StatusOf(actual);
    if (!s.ok()) *listener << "which is " << s.ToString();
    return s.ok();
  }
  void DescribeTo(std::ostream* os) const { *os << "is OK"; }
  void DescribeNegationTo(std::ostream* os) const { *os << "is not OK"; }
};

// StatusIs(code, message): the status has that code and a message that matches.
class StatusIsMatcher {
 public:
  StatusIsMatcher(Code code, ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  template <typename S>
  bool MatchAndExplain(const S& actual, ::testing::MatchResultListener* listener) const {
    const Status s = StatusOf(actual);
    if (s.code() != code_) {
      *listener << "whose code is " << ::testing::PrintToString(s.code());
      return false;
    }
    ::testing::StringMatchResultListener message_listener;
    if (!message_.MatchAndExplain(s.message(), &message_listener)) {
      *listener << "whose message \"" << s.message() << "\" does not match";
      if (!message_listener.str().empty()) *listener << ", " << message_listener.str();
      return false;
    }
    return true;
  }
  void DescribeTo(std::ostream* os) const {
    *os << "has code " << ::testing::PrintToString(code_) << " and a message that ";
    message_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const {
    *os << "has a code other than " << ::testing::PrintToString(code_) << " or a message that ";
    message_.DescribeNegationTo(os);
  }

 private:
  Code code_;
  ::testing::Matcher<const std::string&> message_;
};

}  // namespace internal

// Matches an OK Status or a StatusOr<T> that holds a value.
inline ::testing::PolymorphicMatcher<internal::IsOkMatcher> IsOk() {
  return ::testing::MakePolymorphicMatcher(internal::IsOkMatcher());
}

// Matches a Status or StatusOr<T> whose code is `code` and whose message matches `message` (a
// string matcher such as HasSubstr("stride"), or a string for equality); any message without it.
template <typename MessageMatcher>
::testing::PolymorphicMatcher<internal::StatusIsMatcher> StatusIs(Code code,
                                                                  MessageMatcher&& message) {
  return ::testing::MakePolymorphicMatcher(internal::StatusIsMatcher(
      code, ::testing::MatcherCast<const std::string&>(std::forward<MessageMatcher>(message))));
}
inline ::testing::PolymorphicMatcher<internal::StatusIsMatcher> StatusIs(Code code) {
  return StatusIs(code, ::testing::_);
}

}  // namespace test
}  // namespace convt3d

// EXPECT_OK(expr) / ASSERT_OK(expr): expr (a Status or a StatusOr<T>) is OK; on failure the
// message shows the expression, its code and its message. More text may be streamed in (<<).
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::convt3d::test::IsOk())
#define ASSERT_OK(expr) ASSERT_THAT((expr), ::convt3d::test::IsOk())

// ASSERT_OK_AND_ASSIGN(lhs, expr): expr is a StatusOr<T>; asserts it holds a value and moves that
// value into lhs (which may declare a variable: `ASSERT_OK_AND_ASSIGN(auto x, MakeX());`).
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                                         \
  CONVT3D_TEST_ASSERT_OK_AND_ASSIGN_IMPL(CONVT3D_TEST_CONCAT(convt3d_statusor_, __LINE__), lhs, \
                                         expr)
#define CONVT3D_TEST_CONCAT_INNER(a, b) a##b
#define CONVT3D_TEST_CONCAT(a, b) CONVT3D_TEST_CONCAT_INNER(a, b)
#define CONVT3D_TEST_ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                           \
  ASSERT_THAT(tmp, ::convt3d::test::IsOk()) << #expr;          \
  lhs = std::move(tmp).value()
