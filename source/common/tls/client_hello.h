#pragma once

#include <cstddef>
#include <string_view>

namespace sluice {
namespace tls {

// What a protocol sniffer learns from the first bytes of a TLS connection, without decrypting
// or consuming anything: enough to choose a filter chain before the handshake starts.
struct ClientHelloInfo {
  std::string_view server_name;  // SNI host name, pointing into the parsed bytes; may be empty
  bool offers_h2 = false;        // ALPN lists "h2"
  bool offers_http11 = false;    // ALPN lists "http/1.1"
  bool has_alpn = false;
};

enum class ClientHelloResult {
  NeedMore,   // a prefix of a TLS handshake record: peek again
  NotTls,     // the bytes cannot start a TLS connection
  Parsed,     // info is filled from the ClientHello
  Malformed,  // a TLS record that does not hold a well-formed ClientHello
};

// The largest record a ClientHello can arrive in (TLS plaintext limit plus the header).
inline constexpr size_t kMaxClientHelloRecord = 5 + 16384;

// Parses the ClientHello carried by the first TLS record of `data`. A ClientHello split over
// several records (larger than 16 KiB) yields Parsed with what the first record holds.
ClientHelloResult parseClientHello(std::string_view data, ClientHelloInfo& info);

}  // namespace tls
}  // namespace sluice
