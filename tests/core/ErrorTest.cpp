#include "framework/core/Error.h"
#include "framework/core/Logging.h"

#include <gtest/gtest.h>

namespace {

int checkedDivide(int a, int b) {
  APS_CHECK(b != 0, "cannot divide {} by zero", a);
  return a / b;
}

// The message a user sees is theirs alone; aps's source location is kept apart for debug logs.
TEST(Error, CheckThrowsTheFormattedMessageAndKeepsTheSourceLocationApart) {
  EXPECT_EQ(checkedDivide(6, 3), 2);
  try {
    checkedDivide(7, 0);
    FAIL() << "expected aps::Error";
  } catch (const aps::Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot divide 7 by zero");
    EXPECT_TRUE(e.where().starts_with("tests/core/ErrorTest.cpp:")) << e.where();
  }
}

TEST(Error, CheckWithoutMessageNamesTheCondition) {
  try {
    APS_CHECK(1 + 1 == 3);
    FAIL() << "expected aps::Error";
  } catch (const aps::Error& e) {
    EXPECT_NE(std::string(e.what()).find("check failed: 1 + 1 == 3"), std::string::npos) << e.what();
  }
}

TEST(Error, FailAlwaysThrows) { EXPECT_THROW(APS_FAIL("bad value {}", 3), aps::Error); }

TEST(ErrorDeathTest, AssertAborts) { EXPECT_DEATH(APS_ASSERT(false), "internal error"); }

TEST(Logging, ParsesLevelsAndRejectsUnknownNames) {
  EXPECT_EQ(aps::parseLogLevel("debug"), spdlog::level::debug);
  EXPECT_EQ(aps::parseLogLevel("off"), spdlog::level::off);
  EXPECT_THROW(aps::parseLogLevel("loud"), aps::Error);
}

TEST(Logging, OnlyRankZeroLogsUnlessAllRanks) {
  aps::initLogging(3, false);
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::off);
  aps::initLogging(0, false);
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::info);
  aps::initLogging(5, true, spdlog::level::warn);
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::warn);
}

}  // namespace

namespace {
TEST(Logging, CanBeInitialisedAgain) {
  aps::initLogging(0, false);
  EXPECT_NO_THROW(aps::initLogging(0, false));
  EXPECT_NO_THROW(aps::initLogging(0, true));
}
}  // namespace
