#include "source/common/http/proxy_status.h"

#include <cerrno>

namespace sluice {
namespace http {

const char* proxyErrorName(ProxyError error) {
  switch (error) {
    case ProxyError::DnsTimeout:
      return "dns_timeout";
    case ProxyError::DnsError:
      return "dns_error";
    case ProxyError::DestinationIpProhibited:
      return "destination_ip_prohibited";
    case ProxyError::DestinationIpUnroutable:
      return "destination_ip_unroutable";
    case ProxyError::ConnectionRefused:
      return "connection_refused";
    case ProxyError::ConnectionTerminated:
      return "connection_terminated";
    case ProxyError::ConnectionTimeout:
      return "connection_timeout";
    case ProxyError::ConnectionLimitReached:
      return "connection_limit_reached";
    case ProxyError::HttpRequestError:
      return "http_request_error";
    case ProxyError::HttpRequestDenied:
      return "http_request_denied";
    case ProxyError::HttpResponseIncomplete:
      return "http_response_incomplete";
    case ProxyError::HttpResponseTimeout:
      return "http_response_timeout";
    case ProxyError::HttpProtocolError:
      return "http_protocol_error";
    case ProxyError::ProxyInternalError:
      return "proxy_internal_error";
    case ProxyError::ProxyConfigurationError:
      return "proxy_configuration_error";
    case ProxyError::TlsProtocolError:
      return "tls_protocol_error";
    case ProxyError::TlsCertificateError:
      return "tls_certificate_error";
  }
  return "proxy_internal_error";
}

namespace {

// The error type of a failure on the way to the destination (lookup, connect).
ProxyError failureError(upstream::Failure failure) {
  switch (failure.kind) {
    case upstream::FailureKind::DnsFailure:
      return failure.error == ETIMEDOUT ? ProxyError::DnsTimeout : ProxyError::DnsError;
    case upstream::FailureKind::Refused:
      return ProxyError::ConnectionRefused;
    case upstream::FailureKind::Unreachable:
      return ProxyError::DestinationIpUnroutable;
    case upstream::FailureKind::Timeout:
      return ProxyError::ConnectionTimeout;
    case upstream::FailureKind::Reset:
      return ProxyError::ConnectionTerminated;
    case upstream::FailureKind::ProtocolError:
      return ProxyError::HttpProtocolError;
    case upstream::FailureKind::ParentRefused:
      // The parent's refusal, or of sluice's credentials for it: a matter of sluice's routes.
      return ProxyError::ProxyConfigurationError;
    case upstream::FailureKind::EgressBind:
      // The configured source address is not one this host can send from.
      return ProxyError::ProxyConfigurationError;
    case upstream::FailureKind::TlsCertificate:
      return ProxyError::TlsCertificateError;
    case upstream::FailureKind::TlsProtocol:
      return ProxyError::TlsProtocolError;
    case upstream::FailureKind::Local:
    case upstream::FailureKind::None:
      break;
  }
  return ProxyError::ProxyInternalError;
}

}  // namespace

ProxyError denialError(proxy::Denial denial, proxy::DenialCause cause, upstream::Failure failure) {
  // The cause comes first: a refusal may follow a failure it does not stem from (the next
  // address of a destination finds the descriptors gone after the first one refused).
  switch (cause) {
    case proxy::DenialCause::DestinationAddress:
      return ProxyError::DestinationIpProhibited;
    case proxy::DenialCause::ConnectionLimit:
      return ProxyError::ConnectionLimitReached;
    case proxy::DenialCause::NoRoute:
      return ProxyError::ProxyConfigurationError;
    case proxy::DenialCause::Unspecified:
      break;
  }
  switch (denial) {
    case proxy::Denial::BadRequest:
      return ProxyError::HttpRequestError;
    case proxy::Denial::Unauthorized:
    case proxy::Denial::Forbidden:
    case proxy::Denial::TooManyRequests:
      return ProxyError::HttpRequestDenied;
    case proxy::Denial::BadGateway:
      return failureError(failure);
    case proxy::Denial::GatewayTimeout:
      return failure ? failureError(failure) : ProxyError::ConnectionTimeout;
    case proxy::Denial::ServiceUnavailable:
      return ProxyError::ProxyInternalError;
  }
  return ProxyError::ProxyInternalError;
}

ProxyError exchangeError(upstream::ExchangeError error, bool origin_answered) {
  switch (error) {
    case upstream::ExchangeError::BadResponse:
      return ProxyError::HttpProtocolError;
    case upstream::ExchangeError::OriginClosed:
      return origin_answered ? ProxyError::HttpResponseIncomplete
                             : ProxyError::ConnectionTerminated;
    case upstream::ExchangeError::ResponseTimeout:
      return ProxyError::HttpResponseTimeout;
    case upstream::ExchangeError::BodyTimeout:
      return ProxyError::HttpRequestError;
    case upstream::ExchangeError::ClientStalled:  // never answered (exchangeErrorAnswered)
      return ProxyError::ConnectionTerminated;
  }
  return ProxyError::ProxyInternalError;
}

void appendSfString(std::string& out, std::string_view text) {
  out += '"';
  size_t kept = 0;
  for (char c : text) {
    if (kept == kMaxProxyStatusDetails) break;
    if (c < 0x20 || c > 0x7e) continue;
    if (c == '"' || c == '\\') out += '\\';
    out += c;
    ++kept;
  }
  out += '"';
}

std::string proxyStatusValue(ProxyError error, std::string_view details) {
  std::string value = "sluice; error=";
  value += proxyErrorName(error);
  value += "; details=";
  appendSfString(value, details);
  return value;
}

}  // namespace http
}  // namespace sluice
