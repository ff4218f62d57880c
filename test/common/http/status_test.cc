#include "source/common/http/status.h"

#include "gtest/gtest.h"

namespace sluice {
namespace http {
namespace {

TEST(DenialStatus, EveryRefusalHasItsStatus) {
  EXPECT_EQ(denialStatus(proxy::Denial::BadRequest), 400);
  EXPECT_EQ(denialStatus(proxy::Denial::Unauthorized), 407);
  EXPECT_EQ(denialStatus(proxy::Denial::Forbidden), 403);
  EXPECT_EQ(denialStatus(proxy::Denial::BadGateway), 502);
  EXPECT_EQ(denialStatus(proxy::Denial::GatewayTimeout), 504);
  EXPECT_EQ(denialStatus(proxy::Denial::ServiceUnavailable), 503);
  EXPECT_EQ(denialStatus(proxy::Denial::TooManyRequests), 429);
  EXPECT_STREQ(statusText(429), "Too Many Requests");
}

TEST(ExchangeErrorStatus, TimeoutsAreTheirOwnAndTheRestIsABadGateway) {
  EXPECT_EQ(exchangeErrorStatus(upstream::ExchangeError::BodyTimeout), 408);
  EXPECT_EQ(exchangeErrorStatus(upstream::ExchangeError::ResponseTimeout), 504);
  EXPECT_EQ(exchangeErrorStatus(upstream::ExchangeError::BadResponse), 502);
  EXPECT_EQ(exchangeErrorStatus(upstream::ExchangeError::OriginClosed), 502);
}

TEST(ExchangeErrorStatus, AClientThatTakesNothingIsNotAnswered) {
  EXPECT_FALSE(exchangeErrorAnswered(upstream::ExchangeError::ClientStalled));
  for (auto e : {upstream::ExchangeError::BodyTimeout, upstream::ExchangeError::ResponseTimeout,
                 upstream::ExchangeError::BadResponse, upstream::ExchangeError::OriginClosed}) {
    EXPECT_TRUE(exchangeErrorAnswered(e));
  }
  EXPECT_EQ(upstream::failureKind(upstream::ExchangeError::ClientStalled),
            upstream::FailureKind::None);
}

TEST(ExchangeErrorFailureKind, MapsToTheUpstreamLayersKinds) {
  EXPECT_EQ(upstream::failureKind(upstream::ExchangeError::BadResponse),
            upstream::FailureKind::ProtocolError);
  EXPECT_EQ(upstream::failureKind(upstream::ExchangeError::OriginClosed),
            upstream::FailureKind::Reset);
  EXPECT_EQ(upstream::failureKind(upstream::ExchangeError::ResponseTimeout),
            upstream::FailureKind::Timeout);
  EXPECT_EQ(upstream::failureKind(upstream::ExchangeError::BodyTimeout),
            upstream::FailureKind::None);
}

}  // namespace
}  // namespace http
}  // namespace sluice
