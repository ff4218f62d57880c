#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "source/common/proxy/request.h"
#include "source/common/upstream/failure.h"

namespace sluice {
namespace http {

// The reason phrase sluice sends with a status it produces itself ("Error" for others).
const char* statusText(uint16_t status);

// The status a refusal by the request filters becomes (HTTP/1.1 and HTTP/2 alike).
uint16_t denialStatus(proxy::Denial denial);

// The status an HTTP codec answers a failed origin exchange with, while no response head went
// out: 408 (the client's body stalled), 504 (the origin was silent), 502 (anything else).
uint16_t exchangeErrorStatus(upstream::ExchangeError error);

// Whether a failed exchange is answered with a reply while no response head went out: not when
// the client stopped taking what it is sent (ClientStalled: its connection's or stream's queue is
// full), which nothing more would reach. The codec cuts the connection or resets the stream.
bool exchangeErrorAnswered(upstream::ExchangeError error);

// The text/plain body of a reply made by the proxy itself: "<status> <text>: <detail>\n".
std::string localReplyBody(uint16_t status, std::string_view detail);

}  // namespace http
}  // namespace sluice
