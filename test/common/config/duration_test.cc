#include "source/common/config/duration.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice {
namespace config {
namespace {

using ::testing::HasSubstr;

google::protobuf::Duration parsed(const std::string& text) {
  google::protobuf::Duration d;
  absl::Status status = parseDuration(text, d);
  EXPECT_TRUE(status.ok()) << text << ": " << status.message();
  return d;
}

std::string error(const std::string& text) {
  google::protobuf::Duration d;
  absl::Status status = parseDuration(text, d);
  return status.ok() ? "" : std::string(status.message());
}

TEST(DurationTest, ParsesUnits) {
  EXPECT_EQ(parsed("10s").seconds(), 10);
  EXPECT_EQ(parsed("1.5s").seconds(), 1);
  EXPECT_EQ(parsed("1.5s").nanos(), 500000000);
  EXPECT_EQ(parsed("500ms").seconds(), 0);
  EXPECT_EQ(parsed("500ms").nanos(), 500000000);
  EXPECT_EQ(parsed("2m").seconds(), 120);
  EXPECT_EQ(parsed("1h").seconds(), 3600);
  EXPECT_EQ(parsed("1h30m").seconds(), 5400);
  EXPECT_EQ(parsed("250us").nanos(), 250000);
  EXPECT_EQ(parsed("7ns").nanos(), 7);
  EXPECT_EQ(parsed("0").seconds(), 0);
  EXPECT_EQ(parsed("0s").nanos(), 0);
  EXPECT_EQ(parsed("0.000000001s").nanos(), 1);
  EXPECT_EQ(parsed("1.25m").seconds(), 75);
  EXPECT_EQ(parsed("315576000000s").seconds(), 315576000000);
  // Digits past a nanosecond are dropped, not an error.
  EXPECT_EQ(parsed("0.0000000019s").nanos(), 1);
  EXPECT_EQ(parsed("1.0000000000000000000000001s").seconds(), 1);
}

TEST(DurationTest, RejectsJunk) {
  EXPECT_THAT(error("10"), HasSubstr("lacks a unit"));
  EXPECT_THAT(error("1.5"), HasSubstr("lacks a unit"));
  EXPECT_THAT(error("1h30"), HasSubstr("lacks a unit"));
  EXPECT_THAT(error(""), HasSubstr("expected a duration"));
  EXPECT_THAT(error("s"), HasSubstr("expected a duration"));
  EXPECT_THAT(error(".5s"), HasSubstr("expected a duration"));
  EXPECT_THAT(error("1.s"), HasSubstr("expected a duration"));
  EXPECT_THAT(error("1s."), HasSubstr("expected a duration"));
  EXPECT_THAT(error("10sec"), HasSubstr("unknown duration unit \"sec\""));
  EXPECT_THAT(error("10S"), HasSubstr("unknown duration unit"));
  EXPECT_THAT(error("10 s"), HasSubstr("unknown duration unit"));
  EXPECT_THAT(error(" 10s"), HasSubstr("expected a duration"));
  EXPECT_THAT(error("1d"), HasSubstr("unknown duration unit \"d\""));
  EXPECT_THAT(error("-1s"), HasSubstr("negative"));
  EXPECT_THAT(error("+1s"), HasSubstr("expected a duration"));
  EXPECT_THAT(error("315576000001s"), HasSubstr("too large"));
  EXPECT_THAT(error("99999999999999999999999h"), HasSubstr("too large"));
  EXPECT_THAT(error("87660000h1s"), HasSubstr("too large"));
  EXPECT_THAT(error(std::string(100, '1') + "s"), HasSubstr("too long"));
}

TEST(DurationTest, FormatsAsSeconds) {
  EXPECT_EQ(formatDuration(10, 0), "10s");
  EXPECT_EQ(formatDuration(0, 0), "0s");
  EXPECT_EQ(formatDuration(1, 500000000), "1.5s");
  EXPECT_EQ(formatDuration(0, 1), "0.000000001s");
  EXPECT_EQ(formatDuration(300, 0), "300s");
  EXPECT_EQ(formatDuration(-2, -500000000), "-2.5s");
}

TEST(DurationTest, FormatParsesBack) {
  for (const auto& [s, n] : std::vector<std::pair<int64_t, int32_t>>{
           {0, 0}, {1, 1}, {59, 999999999}, {315576000000, 0}, {0, 120000}}) {
    google::protobuf::Duration d = parsed(formatDuration(s, n));
    EXPECT_EQ(d.seconds(), s);
    EXPECT_EQ(d.nanos(), n);
  }
}

}  // namespace
}  // namespace config
}  // namespace sluice
