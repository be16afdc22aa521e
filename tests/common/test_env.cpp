// FLASHKIT_* environment variables: parsing, ranges, choices, and the one-time warning for values that do not parse.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/env.hpp"
#include "env_knob.hpp"

namespace {

namespace env = flashkit::env;


TEST(Env, FlagsAcceptTheUsualSpellingsAndWarnOnOthers) {
  const char* n = "FLASHKIT_TEST_FLAG";
  ::unsetenv(n);
  EXPECT_TRUE(env::flag(n, true));
  EXPECT_FALSE(env::flag(n, false));
  for (const char* on : {"1", "on", "TRUE", "Yes"}) {
    ScopedEnv e(n, on);
    EXPECT_TRUE(env::flag(n, false)) << on;
  }
  for (const char* off : {"0", "off", "False", "NO"}) {
    ScopedEnv e(n, off);
    EXPECT_FALSE(env::flag(n, true)) << off;
  }
  ScopedEnv e(n, "2");
  testing::internal::CaptureStderr();
  EXPECT_TRUE(env::flag(n, true));
  EXPECT_FALSE(env::flag(n, false));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("ignoring FLASHKIT_TEST_FLAG=2 (expected 0 or 1)"), std::string::npos) << err;
  EXPECT_EQ(err.find("ignoring", err.find("ignoring") + 1), std::string::npos) << "warned twice: " << err;
}

TEST(Env, IntegersMustParseAndFitTheRange) {
  const char* n = "FLASHKIT_TEST_INT";
  ::unsetenv(n);
  EXPECT_EQ(env::integer(n, 7, 1, 10), 7);
  {
    ScopedEnv e(n, "10");
    EXPECT_EQ(env::integer(n, 7, 1, 10), 10);
  }
  for (const char* bad : {"11", "0", "-3", "4x", "x", "99999999999999999999"}) {
    ScopedEnv e(n, bad);
    testing::internal::CaptureStderr();
    EXPECT_EQ(env::integer(n, 7, 1, 10), 7) << bad;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("an integer in [1, 10]"), std::string::npos) << bad << ": " << err;
  }
}

TEST(Env, PositiveNumbersAndChoices) {
  const char* n = "FLASHKIT_TEST_NUM";
  {
    ScopedEnv e(n, "2.5");
    EXPECT_DOUBLE_EQ(env::positive(n, 1.0), 2.5);
  }
  {
    ScopedEnv e(n, "-1");
    testing::internal::CaptureStderr();
    EXPECT_DOUBLE_EQ(env::positive(n, 1.0), 1.0);
    EXPECT_NE(testing::internal::GetCapturedStderr().find("a positive number"), std::string::npos);
  }
  const char* c = "FLASHKIT_TEST_CHOICE";
  ::unsetenv(c);
  EXPECT_EQ(env::choice(c, {"a", "b"}, 1), 1);
  {
    ScopedEnv e(c, "a");
    EXPECT_EQ(env::choice(c, {"a", "b"}, 1), 0);
  }
  {
    ScopedEnv e(c, "v3");
    testing::internal::CaptureStderr();
    EXPECT_EQ(env::choice(c, {"v1", "v2"}, 1), 1);
    EXPECT_NE(testing::internal::GetCapturedStderr().find("one of v1, v2"), std::string::npos);
  }
}

}  // namespace
