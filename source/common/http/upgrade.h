#pragma once

#include <cstdint>
#include <string_view>

#include "source/common/buffer/buffer.h"
#include "source/common/http/h1_parser.h"

// The HTTP/1.1 side of a protocol upgrade (RFC 9110 §7.8) as the proxy relays it to an origin:
// which requests ask for one, how the request head to the origin is written, and which origin
// answers accept it. Only WebSocket (RFC 6455) is relayed. Kept apart from the HTTP/1 codec so
// that another front end (an HTTP/2 extended CONNECT stream, RFC 8441) can bridge into the same
// "send an Upgrade request, expect 101" exchange with an HTTP/1.1 origin.
namespace sluice::http {

inline constexpr std::string_view kWebSocket = "websocket";

enum class UpgradeRequestKind : uint8_t {
  None,       // no upgrade asked for (no Upgrade header, or Connection does not list it)
  WebSocket,  // Upgrade lists "websocket" and Connection lists "upgrade"
  Other,      // an upgrade to something else (h2c, TLS/1.0, ...): not relayed
};

// What upgrade an HTTP/1.1 request head asks for. HTTP/1.0 requests never upgrade (RFC 9110
// §7.8: Upgrade in a 1.0 message is ignored).
UpgradeRequestKind upgradeRequestKind(const http1::RequestHead& head);

// Why a WebSocket upgrade request cannot be relayed, or nullptr when it can: only a body-less
// GET (RFC 6455 §4.1), since the bytes after the head belong to the upgraded connection and
// must not reach the origin before it switched.
const char* checkWebSocketRequest(const http1::RequestHead& head);

// Writes the HTTP/1.1 request that asks an origin to switch to `protocol`:
//   GET <path> HTTP/1.1, the end-to-end headers given through header(), then
//   "Upgrade: <protocol>", "Connection: Upgrade" and the empty line.
// header() drops the fields that are the proxy's to write (hop-by-hop ones, the framing ones:
// the request has no body) so a caller can pass a whole header list through it.
class UpgradeRequestEncoder {
 public:
  UpgradeRequestEncoder(buffer::Buffer& out, std::string_view path,
                        std::string_view protocol = kWebSocket);
  void header(std::string_view name, std::string_view value);
  // Writes the upgrade fields and the end of the head. Call once.
  void finish();

 private:
  buffer::Buffer& out_;
  std::string_view protocol_;
};

// Is this the origin's acceptance of an upgrade to `protocol`: a 101 whose Upgrade lists the
// protocol and whose Connection lists "upgrade"? A 101 that is not (another protocol, missing
// fields) must not be relayed: the client would take the connection for switched.
bool acceptsUpgrade(const http1::ResponseHead& head, std::string_view protocol = kWebSocket);

// True for a field the proxy writes itself on an upgrade request or its 101 (and so drops
// from what it relays): Connection, Upgrade, the other hop-by-hop fields, Content-Length and
// Transfer-Encoding.
bool isUpgradeControlledField(std::string_view name);

}  // namespace sluice::http
