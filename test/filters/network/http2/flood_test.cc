#include "filters/network/http2/flood.h"

#include "gtest/gtest.h"

namespace sluice {
namespace filters {
namespace http2 {
namespace {

using std::chrono::milliseconds;
using Time = WindowCounter::Time;

FrameInfo frame(FrameType type, uint8_t flags = 0, uint32_t payload = 0) {
  FrameInfo f;
  f.type = type;
  f.flags = flags;
  f.payload = payload;
  f.length = payload;
  return f;
}

TEST(WindowCounter, CountsWithinAWindowAndStartsOver) {
  WindowCounter c;
  Time t0{};
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(c.add(t0 + milliseconds(i), milliseconds(100), 3));
  EXPECT_TRUE(c.add(t0 + milliseconds(50), milliseconds(100), 3));
  // A new window: the count starts over.
  EXPECT_FALSE(c.add(t0 + milliseconds(200), milliseconds(100), 3));
  EXPECT_EQ(c.count(), 1u);
}

TEST(WindowCounter, ZeroLimitDisables) {
  WindowCounter c;
  for (int i = 0; i < 10000; ++i) EXPECT_FALSE(c.add(Time{}, milliseconds(100), 0));
}

TEST(FloodGuard, RapidReset) {
  FloodLimits limits;
  limits.max_rapid_resets = 5;
  FloodGuard g(limits);
  Time t{};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(g.onStreamReset(t), Flood::None);
  EXPECT_EQ(g.onStreamReset(t), Flood::RapidReset);
  // Slow resets spread over windows never trip it.
  FloodGuard slow(limits);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(slow.onStreamReset(t + milliseconds(3000) * i), Flood::None);
  }
}

TEST(FloodGuard, ControlFrames) {
  FloodLimits limits;
  limits.max_control_frames = 10;
  FloodGuard g(limits);
  Time t{};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(g.onFrameHeader(frame(FrameType::Ping), t), Flood::None);
    EXPECT_EQ(g.onFrameHeader(frame(FrameType::Settings), t), Flood::None);
  }
  EXPECT_EQ(g.onFrameHeader(frame(FrameType::Priority), t), Flood::None);
  EXPECT_EQ(g.onFrameHeader(frame(FrameType::Priority), t), Flood::None);
  EXPECT_EQ(g.onFrameHeader(frame(FrameType::Ping), t), Flood::Control);
  // Window updates and data are not control-flood material.
  FloodGuard h(limits);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(h.onFrameHeader(frame(FrameType::WindowUpdate), t), Flood::None);
    EXPECT_EQ(h.onFrameHeader(frame(FrameType::Data, 0, 10), t), Flood::None);
  }
}

TEST(FloodGuard, EmptyData) {
  FloodLimits limits;
  limits.max_empty_data_frames = 3;
  FloodGuard g(limits);
  Time t{};
  // END_STREAM without payload is how a body ends: not counted.
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(g.onFrame(frame(FrameType::Data, kFlagEndStream, 0), t), Flood::None);
    EXPECT_EQ(g.onFrame(frame(FrameType::Data, 0, 1), t), Flood::None);
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(g.onFrame(frame(FrameType::Data), t), Flood::None);
  EXPECT_EQ(g.onFrame(frame(FrameType::Data), t), Flood::EmptyData);
}

TEST(FloodGuard, ContinuationsPerHeaderBlock) {
  FloodLimits limits;
  limits.max_continuation_frames = 2;
  FloodGuard g(limits);
  Time t{};
  for (int block = 0; block < 5; ++block) {
    EXPECT_EQ(g.onFrameHeader(frame(FrameType::Headers), t), Flood::None);
    EXPECT_EQ(g.onFrameHeader(frame(FrameType::Continuation), t), Flood::None);
    EXPECT_EQ(g.onFrameHeader(frame(FrameType::Continuation), t), Flood::None);
  }
  EXPECT_EQ(g.onFrameHeader(frame(FrameType::Continuation), t), Flood::Continuation);
}

TEST(FloodGuard, ProtocolErrors) {
  FloodLimits limits;
  limits.max_protocol_errors = 2;
  FloodGuard g(limits);
  EXPECT_EQ(g.onProtocolError(Time{}), Flood::None);
  EXPECT_EQ(g.onProtocolError(Time{}), Flood::None);
  EXPECT_EQ(g.onProtocolError(Time{}), Flood::ProtocolErrors);
}

}  // namespace
}  // namespace http2
}  // namespace filters
}  // namespace sluice
