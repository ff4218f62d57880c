// What every thread reads and nobody writes: the first hop's address, the request, handshake
// and WebSocket bytes and the HTTP/2 header blocks (each built once at start-up), and the TLS
// contexts.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include "tools/load/options.h"

namespace sluice {
namespace load {

struct Shared {
  Shared() = default;
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  ~Shared() {
    if (dst_ctx != nullptr) SSL_CTX_free(dst_ctx);
    if (proxy_ctx != nullptr) SSL_CTX_free(proxy_ctx);
  }
  const Options* opts = nullptr;
  sockaddr_storage connect_addr{};  // the proxy, or the destination when direct
  socklen_t connect_len = 0;
  std::string request;          // the whole HTTP request, body included
  std::string connect_request;  // CONNECT, when tunnelling through an http(s) proxy
  std::string socks_greeting, socks_auth, socks_connect;
  std::string ws_upgrade;
  // One masked message: its header and the first kWsPayloadChunk bytes of its payload (all of
  // it when shorter). The payload repeats every 52 bytes, and the chunk is a whole number of
  // periods, so a longer message goes on by sending the chunk again (wsPayload()).
  static constexpr size_t kWsPayloadChunk = 52 * 1260;  // 65,520 bytes
  std::string ws_frame;
  size_t ws_header_len = 0;
  std::string_view wsPayload() const { return std::string_view(ws_frame).substr(ws_header_len); }
  std::string tunnel_header;  // "N\n"
  std::string pattern;        // 64 KiB of filler for tunnel uploads
  bool tunnel = false;        // CONNECT or SOCKS5 before the destination protocol
  bool socks = false;
  bool proxy_tls = false;
  bool dst_tls = false;
  bool head_request = false;
  SSL_CTX* dst_ctx = nullptr;
  SSL_CTX* proxy_ctx = nullptr;
  // HTTP/2 to the proxy: the request's (or CONNECT's) header block, built once.
  bool h2 = false;
  bool h2_tls = false;
  // --new-conn with plain requests over HTTP/2: each request on a new connection of its own
  // (TCP, TLS, one stream, GOAWAY, close). CONNECT streams share connections either way.
  bool h2_new_conn = false;
  std::vector<std::pair<std::string, std::string>> h2_fields;
  std::vector<nghttp2_nv> h2_request_nv, h2_connect_nv;
  std::string body;  // the request body alone (HTTP/2 sends it in DATA frames)
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;  // stop issuing at this time; 0 = by count
};

// Resolves host (the first address getaddrinfo gives).
bool resolve(const std::string& host, uint16_t port, sockaddr_storage& out, socklen_t& len,
             std::string& error);

// Builds s from o; false with a message in error.
bool buildShared(const Options& o, Shared& s, std::string& error);

}  // namespace load
}  // namespace sluice
