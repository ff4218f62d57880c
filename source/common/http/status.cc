#include "source/common/http/status.h"

#include "absl/strings/str_format.h"

namespace sluice {
namespace http {

const char* statusText(uint16_t status) {
  switch (status) {
    case 101:
      return "Switching Protocols";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 407:
      return "Proxy Authentication Required";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 421:
      return "Misdirected Request";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

uint16_t denialStatus(proxy::Denial denial) {
  switch (denial) {
    case proxy::Denial::BadRequest:
      return 400;
    case proxy::Denial::Unauthorized:
      return 407;
    case proxy::Denial::Forbidden:
      return 403;
    case proxy::Denial::BadGateway:
      return 502;
    case proxy::Denial::GatewayTimeout:
      return 504;
    case proxy::Denial::ServiceUnavailable:
      return 503;
    case proxy::Denial::TooManyRequests:
      return 429;
  }
  return 500;
}

std::string localReplyBody(uint16_t status, std::string_view detail) {
  return absl::StrFormat("%d %s: %s\n", status, statusText(status), detail);
}

bool exchangeErrorAnswered(upstream::ExchangeError error) {
  return error != upstream::ExchangeError::ClientStalled;
}

uint16_t exchangeErrorStatus(upstream::ExchangeError error) {
  switch (error) {
    case upstream::ExchangeError::BodyTimeout:
    case upstream::ExchangeError::ClientStalled:  // never answered (exchangeErrorAnswered)
      return 408;
    case upstream::ExchangeError::ResponseTimeout:
      return 504;
    case upstream::ExchangeError::BadResponse:
    case upstream::ExchangeError::OriginClosed:
      return 502;
  }
  return 502;
}

}  // namespace http
}  // namespace sluice
