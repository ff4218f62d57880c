#include "source/common/http/upgrade.h"

#include "source/common/http/field_line.h"

namespace sluice::http {

namespace {

constexpr uint8_t kSkip = http1::HeaderField::kRemoved;

}  // namespace

UpgradeRequestKind upgradeRequestKind(const http1::RequestHead& head) {
  if (!head.upgrade || head.version_minor == 0) return UpgradeRequestKind::None;
  for (uint32_t i = 0; i < head.headers.size(); ++i) {
    const http1::HeaderField& h = head.headers[i];
    if ((h.flags & kSkip) != 0 || !http1::isFieldName(h.name, "upgrade")) continue;
    if (http1::headerHasToken(h.value, kWebSocket)) return UpgradeRequestKind::WebSocket;
  }
  return UpgradeRequestKind::Other;
}

const char* checkWebSocketRequest(const http1::RequestHead& head) {
  if (head.method != http1::Method::Get) return "websocket upgrade needs GET";
  // Content-Length: 0 is harmless; any body would sit where the upgraded bytes go, and the
  // origin might read it as either.
  if (head.framing == http1::BodyFraming::Chunked ||
      (head.framing == http1::BodyFraming::ContentLength && head.content_length != 0)) {
    return "websocket upgrade with a body";
  }
  return nullptr;
}

bool isUpgradeControlledField(std::string_view name) {
  switch (name.size()) {
    case 2:
      return http1::isFieldName(name, "te");
    case 7:
      return http1::isFieldName(name, "upgrade") || http1::isFieldName(name, "trailer");
    case 10:
      return http1::isFieldName(name, "connection") || http1::isFieldName(name, "keep-alive");
    case 14:
      return http1::isFieldName(name, "content-length");
    case 16:
      return http1::isFieldName(name, "proxy-connection");
    case 17:
      return http1::isFieldName(name, "transfer-encoding");
    case 18:
      return http1::isFieldName(name, "proxy-authenticate");
    case 19:
      return http1::isFieldName(name, "proxy-authorization");
    default:
      return false;
  }
}

UpgradeRequestEncoder::UpgradeRequestEncoder(buffer::Buffer& out, std::string_view path,
                                             std::string_view protocol)
    : out_(out), protocol_(protocol) {
  out_.add(std::string_view("GET "));
  out_.add(path);
  out_.add(std::string_view(" HTTP/1.1\r\n"));
}

void UpgradeRequestEncoder::header(std::string_view name, std::string_view value) {
  if (isUpgradeControlledField(name)) return;
  addFieldLine(out_, name, value);
}

void UpgradeRequestEncoder::finish() {
  out_.add(std::string_view("Upgrade: "));
  out_.add(protocol_);
  out_.add(std::string_view("\r\nConnection: Upgrade\r\n\r\n"));
}

bool acceptsUpgrade(const http1::ResponseHead& head, std::string_view protocol) {
  if (head.status != 101) return false;
  bool upgrade = false;
  bool connection = false;
  for (uint32_t i = 0; i < head.headers.size(); ++i) {
    const http1::HeaderField& h = head.headers[i];
    if ((h.flags & kSkip) != 0) continue;
    if (http1::isFieldName(h.name, "upgrade")) {
      // One protocol only: the origin switches to exactly one (RFC 9110 §7.8).
      if (upgrade || !http1::equalsIgnoreCase(h.value, protocol)) return false;
      upgrade = true;
    } else if (http1::isFieldName(h.name, "connection")) {
      connection |= http1::headerHasToken(h.value, "upgrade");
    }
  }
  return upgrade && connection;
}

}  // namespace sluice::http
