#pragma once

// Command-line URLs of sluice-load: the destination (--dst) and the proxy (--proxy).

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice {
namespace load {

struct Url {
  std::string scheme;  // lowercased: http, https, ws, wss, socks5, socks5h, h2, h2c
  std::string user;    // percent-decoded userinfo
  std::string password;
  bool has_userinfo = false;
  std::string host;  // no brackets for IPv6 literals
  uint16_t port = 0;
  std::string path;  // path + query, "/" when absent
  // host or [host] and ":port" when the port is not the scheme's default: for Host headers.
  std::string authority() const;
  // Always with the port ("[::1]:80"): for CONNECT and absolute-form targets.
  std::string hostPort() const;
  bool tls() const { return scheme == "https" || scheme == "wss" || scheme == "h2"; }
};

// Parses scheme://[user[:password]@]host[:port][/path]. Default ports: http/ws 80, https/wss/h2
// 443, socks5/socks5h 1080. Returns false with a reason in error.
bool parseUrl(std::string_view text, Url& out, std::string& error);

// Http2: HTTP/2 over TLS (ALPN h2); Http2c: HTTP/2 over plain TCP with prior knowledge.
enum class ProxyKind { Direct, Http, Https, Http2, Http2c, Socks5, Socks5h };

struct Proxy {
  ProxyKind kind = ProxyKind::Direct;
  Url url;
};

// "" or "direct" -> Direct; "host:port" (gosst's form) -> SOCKS5; else a URL whose scheme
// picks the kind: http, https, h2, h2c, socks5, socks5h.
bool parseProxy(std::string_view text, Proxy& out, std::string& error);

const char* proxyKindName(ProxyKind kind);

// RFC 4648 base64, for Proxy-Authorization and WebSocket keys.
std::string base64(std::string_view in);

}  // namespace load
}  // namespace sluice
