#include "source/common/upstream/failure.h"

#include <cerrno>

namespace sluice {
namespace upstream {

FailureKind kindForConnectError(int error) {
  switch (error) {
    case ECONNREFUSED:
      return FailureKind::Refused;
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ENETDOWN:
    case EHOSTDOWN:
    case EADDRNOTAVAIL:
      return FailureKind::Unreachable;
    case ETIMEDOUT:
      return FailureKind::Timeout;
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
      return FailureKind::Local;
    default:
      return FailureKind::Reset;
  }
}

const char* failureName(FailureKind kind) {
  switch (kind) {
    case FailureKind::None:
      return "none";
    case FailureKind::DnsFailure:
      return "dns_failure";
    case FailureKind::Refused:
      return "refused";
    case FailureKind::Unreachable:
      return "unreachable";
    case FailureKind::Timeout:
      return "timeout";
    case FailureKind::Reset:
      return "reset";
    case FailureKind::ProtocolError:
      return "protocol_error";
    case FailureKind::Local:
      return "local";
    case FailureKind::ParentRefused:
      return "parent_refused";
    case FailureKind::EgressBind:
      return "egress_bind";
    case FailureKind::TlsCertificate:
      return "tls_certificate";
    case FailureKind::TlsProtocol:
      return "tls_protocol";
  }
  return "none";
}

FailureKind failureKind(ExchangeError error) {
  switch (error) {
    case ExchangeError::BadResponse:
      return FailureKind::ProtocolError;
    case ExchangeError::OriginClosed:
      return FailureKind::Reset;
    case ExchangeError::ResponseTimeout:
      return FailureKind::Timeout;
    case ExchangeError::BodyTimeout:
    case ExchangeError::ClientStalled:
      return FailureKind::None;
  }
  return FailureKind::None;
}

}  // namespace upstream
}  // namespace sluice
