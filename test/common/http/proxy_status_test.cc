#include "source/common/http/proxy_status.h"

#include <cerrno>
#include <string>

#include "gtest/gtest.h"

namespace sluice {
namespace http {
namespace {

using proxy::Denial;
using proxy::DenialCause;
using upstream::Failure;
using upstream::FailureKind;

std::string denied(Denial denial, DenialCause cause = DenialCause::Unspecified,
                   Failure failure = {}) {
  return proxyErrorName(denialError(denial, cause, failure));
}

TEST(DenialError, PolicyRefusalsAreDenials) {
  EXPECT_EQ(denied(Denial::Unauthorized), "http_request_denied");  // 407, no or a wrong key
  EXPECT_EQ(denied(Denial::Forbidden), "http_request_denied");     // a ban, a port
  EXPECT_EQ(denied(Denial::BadRequest), "http_request_error");
  // 429: a rate or concurrency limit of the key's policy group.
  EXPECT_EQ(denied(Denial::TooManyRequests), "http_request_denied");
}

TEST(DenialError, TheDestinationGuardsAddressRefusalsNameTheAddress) {
  EXPECT_EQ(denied(Denial::Forbidden, DenialCause::DestinationAddress),
            "destination_ip_prohibited");
}

TEST(DenialError, UpstreamBudgetAndDescriptorReserveAreConnectionLimits) {
  EXPECT_EQ(denied(Denial::ServiceUnavailable, DenialCause::ConnectionLimit),
            "connection_limit_reached");
  // Even after an earlier address of the destination refused the connect.
  EXPECT_EQ(denied(Denial::ServiceUnavailable, DenialCause::ConnectionLimit,
                   {FailureKind::Refused, ECONNREFUSED}),
            "connection_limit_reached");
  EXPECT_EQ(denied(Denial::ServiceUnavailable), "proxy_internal_error");
}

TEST(DenialError, ChainWithoutARouterIsAConfigurationError) {
  EXPECT_EQ(denied(Denial::BadGateway, DenialCause::NoRoute), "proxy_configuration_error");
}

TEST(DenialError, FailuresOnTheWayToTheDestination) {
  EXPECT_EQ(denied(Denial::BadGateway, DenialCause::Unspecified, upstream::dnsFailure(false)),
            "dns_error");
  EXPECT_EQ(denied(Denial::BadGateway, DenialCause::Unspecified, upstream::dnsFailure(true)),
            "dns_timeout");
  EXPECT_EQ(
      denied(Denial::BadGateway, DenialCause::Unspecified, {FailureKind::Refused, ECONNREFUSED}),
      "connection_refused");
  EXPECT_EQ(
      denied(Denial::BadGateway, DenialCause::Unspecified, {FailureKind::Unreachable, ENETUNREACH}),
      "destination_ip_unroutable");
  EXPECT_EQ(denied(Denial::BadGateway, DenialCause::Unspecified, {FailureKind::Reset, 0}),
            "connection_terminated");
  EXPECT_EQ(denied(Denial::BadGateway, DenialCause::Unspecified, {FailureKind::Local, ENOBUFS}),
            "proxy_internal_error");
  EXPECT_EQ(denied(Denial::GatewayTimeout, DenialCause::Unspecified, {FailureKind::Timeout, 0}),
            "connection_timeout");
  EXPECT_EQ(denied(Denial::GatewayTimeout), "connection_timeout");
  EXPECT_EQ(denied(Denial::BadGateway), "proxy_internal_error");
  // An https parent's TLS: its certificate, or no handshake at all.
  EXPECT_EQ(denied(Denial::BadGateway, DenialCause::Unspecified, {FailureKind::TlsCertificate, 0}),
            "tls_certificate_error");
  EXPECT_EQ(denied(Denial::BadGateway, DenialCause::Unspecified, {FailureKind::TlsProtocol, 0}),
            "tls_protocol_error");
}

TEST(ExchangeError, EachFailedExchangeHasItsType) {
  using upstream::ExchangeError;
  EXPECT_STREQ(proxyErrorName(exchangeError(ExchangeError::BadResponse, true)),
               "http_protocol_error");
  EXPECT_STREQ(proxyErrorName(exchangeError(ExchangeError::OriginClosed, false)),
               "connection_terminated");
  EXPECT_STREQ(proxyErrorName(exchangeError(ExchangeError::OriginClosed, true)),
               "http_response_incomplete");
  EXPECT_STREQ(proxyErrorName(exchangeError(ExchangeError::ResponseTimeout, false)),
               "http_response_timeout");
  EXPECT_STREQ(proxyErrorName(exchangeError(ExchangeError::BodyTimeout, false)),
               "http_request_error");
}

std::string sfString(std::string_view text) {
  std::string out;
  appendSfString(out, text);
  return out;
}

TEST(SfString, QuotesAndEscapesQuoteAndBackslash) {
  EXPECT_EQ(sfString("destination is a private address"), "\"destination is a private address\"");
  EXPECT_EQ(sfString("origin said \"no\" \\ twice"), "\"origin said \\\"no\\\" \\\\ twice\"");
  EXPECT_EQ(sfString(""), "\"\"");
}

TEST(SfString, KeepsOnlyPrintableAscii) {
  EXPECT_EQ(sfString(std::string_view("a\r\nb\tc\0d\x7f"
                                      "e\xc3\xa9"
                                      "f",
                                      13)),
            "\"abcdef\"");
}

TEST(SfString, BoundsItsLength) {
  const std::string out = sfString(std::string(1000, '"'));
  // Each kept character is escaped: two bytes, plus the quotes.
  EXPECT_EQ(out.size(), 2 * kMaxProxyStatusDetails + 2);
  EXPECT_EQ(sfString(std::string(1000, 'x')).size(), kMaxProxyStatusDetails + 2);
}

TEST(ProxyStatusValue, NamesSluiceTheErrorAndTheDetails) {
  EXPECT_EQ(
      proxyStatusValue(ProxyError::DestinationIpProhibited, "destination is a private address"),
      "sluice; error=destination_ip_prohibited; details=\"destination is a private "
      "address\"");
}

TEST(ProxyErrorName, EveryTypeHasItsRfc9209Name) {
  const ProxyError all[] = {
      ProxyError::DnsTimeout,
      ProxyError::DnsError,
      ProxyError::DestinationIpProhibited,
      ProxyError::DestinationIpUnroutable,
      ProxyError::ConnectionRefused,
      ProxyError::ConnectionTerminated,
      ProxyError::ConnectionTimeout,
      ProxyError::ConnectionLimitReached,
      ProxyError::HttpRequestError,
      ProxyError::HttpRequestDenied,
      ProxyError::HttpResponseIncomplete,
      ProxyError::HttpResponseTimeout,
      ProxyError::HttpProtocolError,
      ProxyError::ProxyInternalError,
      ProxyError::ProxyConfigurationError,
      ProxyError::TlsProtocolError,
      ProxyError::TlsCertificateError,
  };
  const char* names[] = {
      "dns_timeout",
      "dns_error",
      "destination_ip_prohibited",
      "destination_ip_unroutable",
      "connection_refused",
      "connection_terminated",
      "connection_timeout",
      "connection_limit_reached",
      "http_request_error",
      "http_request_denied",
      "http_response_incomplete",
      "http_response_timeout",
      "http_protocol_error",
      "proxy_internal_error",
      "proxy_configuration_error",
      "tls_protocol_error",
      "tls_certificate_error",
  };
  static_assert(sizeof(all) / sizeof(all[0]) == sizeof(names) / sizeof(names[0]));
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) {
    EXPECT_STREQ(proxyErrorName(all[i]), names[i]);
  }
}

}  // namespace
}  // namespace http
}  // namespace sluice
