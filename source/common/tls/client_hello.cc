#include "source/common/tls/client_hello.h"

#include <cstdint>

#include "openssl/bytestring.h"

namespace sluice {
namespace tls {

namespace {

constexpr uint8_t kHandshakeRecord = 0x16;
constexpr uint8_t kClientHello = 0x01;
constexpr uint16_t kExtServerName = 0;
constexpr uint16_t kExtAlpn = 16;

bool parseServerName(CBS ext, ClientHelloInfo& info) {
  CBS list;
  if (!CBS_get_u16_length_prefixed(&ext, &list) || CBS_len(&ext) != 0) return false;
  while (CBS_len(&list) > 0) {
    uint8_t type;
    CBS name;
    if (!CBS_get_u8(&list, &type) || !CBS_get_u16_length_prefixed(&list, &name)) return false;
    if (type == 0 && info.server_name.empty()) {
      info.server_name = {reinterpret_cast<const char*>(CBS_data(&name)), CBS_len(&name)};
    }
  }
  return true;
}

bool parseAlpn(CBS ext, ClientHelloInfo& info) {
  CBS list;
  if (!CBS_get_u16_length_prefixed(&ext, &list) || CBS_len(&ext) != 0) return false;
  info.has_alpn = true;
  while (CBS_len(&list) > 0) {
    CBS proto;
    if (!CBS_get_u8_length_prefixed(&list, &proto) || CBS_len(&proto) == 0) return false;
    std::string_view p(reinterpret_cast<const char*>(CBS_data(&proto)), CBS_len(&proto));
    if (p == "h2") info.offers_h2 = true;
    if (p == "http/1.1") info.offers_http11 = true;
  }
  return true;
}

}  // namespace

ClientHelloResult parseClientHello(std::string_view data, ClientHelloInfo& info) {
  info = ClientHelloInfo();
  const auto* bytes = reinterpret_cast<const uint8_t*>(data.data());
  // Record header: type, version 3.x, length. Decide "not TLS" from as few bytes as possible.
  if (data.empty()) return ClientHelloResult::NeedMore;
  if (bytes[0] != kHandshakeRecord) return ClientHelloResult::NotTls;
  if (data.size() < 2) return ClientHelloResult::NeedMore;
  if (bytes[1] != 0x03) return ClientHelloResult::NotTls;
  if (data.size() < 5) return ClientHelloResult::NeedMore;
  size_t record_len = (size_t{bytes[3]} << 8) | bytes[4];
  if (record_len == 0 || record_len > kMaxClientHelloRecord - 5) {
    return ClientHelloResult::Malformed;
  }
  if (data.size() < 5 + record_len) return ClientHelloResult::NeedMore;

  CBS record;
  CBS_init(&record, bytes + 5, record_len);
  uint8_t msg_type;
  uint32_t msg_len;
  if (!CBS_get_u8(&record, &msg_type) || msg_type != kClientHello ||
      !CBS_get_u24(&record, &msg_len)) {
    return ClientHelloResult::Malformed;
  }
  // A ClientHello continued in a later record: read what this one holds.
  const bool truncated = msg_len > CBS_len(&record);
  CBS hello;
  CBS_init(&hello, CBS_data(&record), truncated ? CBS_len(&record) : msg_len);

  uint16_t version;
  CBS random, session_id, ciphers, compression, extensions;
  if (!CBS_get_u16(&hello, &version) || !CBS_get_bytes(&hello, &random, 32) ||
      !CBS_get_u8_length_prefixed(&hello, &session_id) ||
      !CBS_get_u16_length_prefixed(&hello, &ciphers) ||
      !CBS_get_u8_length_prefixed(&hello, &compression)) {
    return truncated ? ClientHelloResult::Parsed : ClientHelloResult::Malformed;
  }
  if (CBS_len(&hello) == 0) return ClientHelloResult::Parsed;  // no extensions at all
  if (!CBS_get_u16_length_prefixed(&hello, &extensions)) {
    return truncated ? ClientHelloResult::Parsed : ClientHelloResult::Malformed;
  }
  while (CBS_len(&extensions) > 0) {
    uint16_t type;
    CBS body;
    if (!CBS_get_u16(&extensions, &type) || !CBS_get_u16_length_prefixed(&extensions, &body)) {
      return truncated ? ClientHelloResult::Parsed : ClientHelloResult::Malformed;
    }
    bool ok = true;
    if (type == kExtServerName) ok = parseServerName(body, info);
    if (type == kExtAlpn) ok = parseAlpn(body, info);
    if (!ok) return ClientHelloResult::Malformed;
  }
  return ClientHelloResult::Parsed;
}

}  // namespace tls
}  // namespace sluice
