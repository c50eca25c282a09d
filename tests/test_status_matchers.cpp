// test_status_matchers.cpp: the tests' Status matchers and macros pass and fail as they say.
#include <gtest/gtest-spi.h>

#include <memory>
#include <string>

#include "tests/status_matchers.h"

namespace convt3d {
namespace {

using test::IsOk;
using test::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

Status Bad() { return Status(Code::kInvalidArgument, "stride[2]=0 must be positive"); }
StatusOr<int> BadOr() { return Bad(); }
StatusOr<std::unique_ptr<int>> MoveOnly(bool ok) {
  if (!ok) return Status(Code::kNotFound, "no such entry");
  return std::make_unique<int>(7);
}

TEST(StatusMatchers, IsOkOnStatusAndStatusOr) {
  EXPECT_THAT(Status(), IsOk());
  EXPECT_THAT(StatusOr<int>(3), IsOk());
  EXPECT_THAT(MoveOnly(true), IsOk());
  EXPECT_THAT(Bad(), Not(IsOk()));
  EXPECT_THAT(BadOr(), Not(IsOk()));
  EXPECT_THAT(MoveOnly(false), Not(IsOk()));
}

TEST(StatusMatchers, StatusIsNeedsTheCodeAndTheMessage) {
  EXPECT_THAT(Bad(), StatusIs(Code::kInvalidArgument, HasSubstr("stride[2]=0")));
  EXPECT_THAT(BadOr(), StatusIs(Code::kInvalidArgument, "stride[2]=0 must be positive"));
  EXPECT_THAT(Bad(), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(MoveOnly(false), StatusIs(Code::kNotFound, HasSubstr("entry")));
  EXPECT_THAT(Bad(), Not(StatusIs(Code::kInternal, HasSubstr("stride"))));  // code differs
  EXPECT_THAT(Bad(), Not(StatusIs(Code::kInvalidArgument, HasSubstr("padding"))));
  EXPECT_THAT(Bad(), Not(StatusIs(Code::kInvalidArgument, "stride[2]=0")));  // equality
  EXPECT_THAT(Bad(), Not(StatusIs(Code::kInternal)));
  EXPECT_THAT(Status(), StatusIs(Code::kOk));
  EXPECT_THAT(StatusOr<int>(3), Not(StatusIs(Code::kInvalidArgument)));
}

TEST(StatusMatchers, DescriptionsAndExplanationsNameCodeAndMessage) {
  const ::testing::Matcher<const Status&> is =
      StatusIs(Code::kInvalidArgument, HasSubstr("padding"));
  EXPECT_EQ(::testing::DescribeMatcher<const Status&>(is),
            "has code INVALID_ARGUMENT and a message that has substring \"padding\"");
  ::testing::StringMatchResultListener why;
  EXPECT_FALSE(is.MatchAndExplain(Status(Code::kInternal, "x"), &why));
  EXPECT_EQ(why.str(), "whose code is INTERNAL");
  ::testing::StringMatchResultListener why_message;
  EXPECT_FALSE(is.MatchAndExplain(Bad(), &why_message));
  EXPECT_EQ(why_message.str(), "whose message \"stride[2]=0 must be positive\" does not match");
  const ::testing::Matcher<const StatusOr<int>&> ok = IsOk();
  EXPECT_EQ(::testing::DescribeMatcher<const StatusOr<int>&>(ok), "is OK");
  ::testing::StringMatchResultListener why_not_ok;
  EXPECT_FALSE(ok.MatchAndExplain(BadOr(), &why_not_ok));
  EXPECT_EQ(why_not_ok.str(), "which is INVALID_ARGUMENT: stride[2]=0 must be positive");
}

TEST(StatusMacros, FailuresPrintTheStatus) {
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(Bad()), "INVALID_ARGUMENT: stride[2]=0 must be positive");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(BadOr()) << "while checking", "while checking");
  EXPECT_FATAL_FAILURE(ASSERT_OK(MoveOnly(false)), "NOT_FOUND: no such entry");
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(Bad(), StatusIs(Code::kNotFound, HasSubstr("stride"))),
                          "whose code is INVALID_ARGUMENT");
}

TEST(StatusMacros, PassingChecksRecordNothing) {
  EXPECT_OK(Status());
  ASSERT_OK(StatusOr<int>(1));
  ASSERT_OK_AND_ASSIGN(auto p, MoveOnly(true));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
  int declared = 0;
  ASSERT_OK_AND_ASSIGN(declared, StatusOr<int>(5));  // into an existing variable
  EXPECT_EQ(declared, 5);
}

TEST(StatusMacros, AssignOrFailStopsTheTestAndNamesTheExpression) {
  EXPECT_FATAL_FAILURE(
      {
        ASSERT_OK_AND_ASSIGN(auto p, MoveOnly(false));
        (void)p;
      },
      "MoveOnly(false)");
  EXPECT_FATAL_FAILURE(
      {
        ASSERT_OK_AND_ASSIGN(const int v, BadOr());
        (void)v;
      },
      "INVALID_ARGUMENT: stride[2]=0");
}

}  // namespace
}  // namespace convt3d
