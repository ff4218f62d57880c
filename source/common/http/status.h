#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "source/common/proxy/request.h"

namespace sluice {
namespace http {

// The reason phrase sluice sends with a status it produces itself ("Error" for others).
const char* statusText(uint16_t status);

// The status a refusal by the request filters becomes (HTTP/1.1 and HTTP/2 alike).
uint16_t denialStatus(proxy::Denial denial);

// The text/plain body of a reply made by the proxy itself: "<status> <text>: <detail>\n".
std::string localReplyBody(uint16_t status, std::string_view detail);

}  // namespace http
}  // namespace sluice
