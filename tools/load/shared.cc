#include "tools/load/shared.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>

#include <arpa/inet.h>
#include <netdb.h>

#include "tools/load/tls.h"
#include "tools/load/url.h"

namespace sluice {
namespace load {

bool resolve(const std::string& host, uint16_t port, sockaddr_storage& out, socklen_t& len,
             std::string& error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    error = "cannot resolve " + host + ": " + gai_strerror(rc);
    return false;
  }
  memcpy(&out, res->ai_addr, res->ai_addrlen);
  len = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

namespace {

// HTTP/2 to the proxy: the request's and CONNECT's header blocks; nghttp2 reads the strings in
// place (NO_COPY).
bool buildH2Headers(const Options& o, const std::string& auth, Shared& s, std::string& error) {
  auto& f = s.h2_fields;
  f.reserve(32 + o.headers.size());
  const size_t request_start = f.size();
  f.emplace_back(":method", o.method);
  f.emplace_back(":scheme", o.dst.scheme == "ws" ? "http" : o.dst.scheme);
  f.emplace_back(":authority", o.dst.authority());
  f.emplace_back(":path", o.dst.path);
  f.emplace_back("user-agent", "sluice-load");
  if (!auth.empty()) f.emplace_back("proxy-authorization", auth);
  if (o.body_bytes > 0) f.emplace_back("content-length", std::to_string(o.body_bytes));
  for (const std::string& h : o.headers) {
    const size_t colon = h.find(':');
    if (colon == std::string::npos) return error = "bad -H " + h, false;
    std::string name = h.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    size_t v = colon + 1;
    while (v < h.size() && (h[v] == ' ' || h[v] == '\t')) ++v;
    f.emplace_back(name, h.substr(v));
  }
  const size_t connect_start = f.size();
  f.emplace_back(":method", "CONNECT");
  f.emplace_back(":authority", o.dst.hostPort());
  f.emplace_back("user-agent", "sluice-load");
  if (!auth.empty()) f.emplace_back("proxy-authorization", auth);
  const auto nv = [&f](size_t i) {
    return nghttp2_nv{reinterpret_cast<uint8_t*>(f[i].first.data()),
                      reinterpret_cast<uint8_t*>(f[i].second.data()), f[i].first.size(),
                      f[i].second.size(),
                      NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
  };
  for (size_t i = request_start; i < connect_start; ++i) s.h2_request_nv.push_back(nv(i));
  for (size_t i = connect_start; i < f.size(); ++i) s.h2_connect_nv.push_back(nv(i));
  return true;
}

// ATYP and address: 1 and 4 bytes for IPv4, 4 and 16 bytes for IPv6.
void appendSocksAddress(std::string& out, int family, const void* addr) {
  const bool v4 = family == AF_INET;
  out += v4 ? '\x01' : '\x04';
  out.append(static_cast<const char*>(addr), v4 ? 4 : 16);
}

// SOCKS5: the greeting, the RFC 1929 sub-negotiation (with user:key@) and the CONNECT request.
bool buildSocks(const Options& o, Shared& s, std::string& error) {
  const bool auth = o.proxy.url.has_userinfo;
  s.socks_greeting = auth ? std::string("\x05\x02\x00\x02", 4) : std::string("\x05\x01\x00", 3);
  if (auth) {
    s.socks_auth = "\x01";
    s.socks_auth += static_cast<char>(o.proxy.url.user.size());
    s.socks_auth += o.proxy.url.user;
    s.socks_auth += static_cast<char>(o.proxy.url.password.size());
    s.socks_auth += o.proxy.url.password;
  }
  s.socks_connect = std::string("\x05\x01\x00", 3);
  in_addr a4;
  in6_addr a6;
  if (inet_pton(AF_INET, o.dst.host.c_str(), &a4) == 1) {
    appendSocksAddress(s.socks_connect, AF_INET, &a4);
  } else if (inet_pton(AF_INET6, o.dst.host.c_str(), &a6) == 1) {
    appendSocksAddress(s.socks_connect, AF_INET6, &a6);
  } else if (o.proxy.kind == ProxyKind::Socks5h) {
    if (o.dst.host.size() > 255) return error = "host name too long for SOCKS5", false;
    s.socks_connect += '\x03';
    s.socks_connect += static_cast<char>(o.dst.host.size());
    s.socks_connect += o.dst.host;
  } else {
    // socks5://: the client resolves (socks5h:// leaves it to the proxy).
    sockaddr_storage ss;
    socklen_t len;
    if (!resolve(o.dst.host, o.dst.port, ss, len, error)) return false;
    if (ss.ss_family == AF_INET) {
      appendSocksAddress(s.socks_connect, AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
    } else {
      appendSocksAddress(s.socks_connect, AF_INET6,
                         &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr);
    }
  }
  s.socks_connect += static_cast<char>(o.dst.port >> 8);
  s.socks_connect += static_cast<char>(o.dst.port & 0xff);
  return true;
}

// The upgrade request, and one masked binary frame, built once: a fixed mask is valid framing,
// and the server cannot tell. Payload bytes are the pattern, masked.
void buildWebSocket(const Options& o, bool absolute, const std::string& proxy_auth, Shared& s) {
  const std::string path = o.dst.path != "/" ? o.dst.path : o.ws_one_way ? "/ws/sink" : "/ws";
  const std::string ws_target = absolute ? "http://" + o.dst.authority() + path : path;
  s.ws_upgrade = "GET " + ws_target + " HTTP/1.1\r\nHost: " + o.dst.authority() +
                 "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
                 (absolute ? proxy_auth : "") + "\r\n";
  const uint8_t mask[4] = {0x12, 0x34, 0x56, 0x78};
  std::string& f = s.ws_frame;
  f += '\x82';
  if (o.ws_size < 126) {
    f += static_cast<char>(0x80 | o.ws_size);
  } else if (o.ws_size < 65536) {
    f += static_cast<char>(0x80 | 126);
    f += static_cast<char>(o.ws_size >> 8);
    f += static_cast<char>(o.ws_size & 0xff);
  } else {
    f += static_cast<char>(0x80 | 127);
    for (int k = 7; k >= 0; --k) f += static_cast<char>((o.ws_size >> (8 * k)) & 0xff);
  }
  f.append(reinterpret_cast<const char*>(mask), 4);
  // The masked pattern repeats every 52 bytes (26 letters, a 4-byte mask): write one period,
  // then double it. Only the first chunk is built; a longer message sends it again.
  const size_t head = f.size();
  const size_t size = static_cast<size_t>(std::min<uint64_t>(o.ws_size, Shared::kWsPayloadChunk));
  f.resize(head + size);
  char* payload = f.data() + head;
  const size_t period = std::min<size_t>(size, 52);
  for (size_t i = 0; i < period; ++i) payload[i] = static_cast<char>(('a' + i % 26) ^ mask[i % 4]);
  for (size_t done = period; done < size;) {
    const size_t n = std::min(done, size - done);
    memcpy(payload + done, payload, n);
    done += n;
  }
  s.ws_header_len = head;
}

// TLS contexts: to the destination, to an https:// proxy, or to an h2:// proxy (ALPN h2).
bool buildTls(const Options& o, Shared& s, std::string& error) {
  const bool cache = o.new_conn || o.workload == Workload::WebSocket;
  if (s.dst_tls && !(s.dst_ctx = makeCtx(o.ca, o.crt, o.key, cache, error))) return false;
  if (s.proxy_tls && !(s.proxy_ctx = makeCtx(o.proxy_ca, "", "", cache, error))) return false;
  if (s.h2_tls) {
    // Sessions to resume with go to the H2Session (with TLS 1.3 they come after the handshake).
    if (s.proxy_ctx != nullptr) SSL_CTX_free(s.proxy_ctx);
    if (!(s.proxy_ctx = makeCtx(o.proxy_ca, "", "", true, error))) return false;
    static const char kH2[] = "\x02h2";
    SSL_CTX_set_alpn_protos(s.proxy_ctx, reinterpret_cast<const uint8_t*>(kH2), sizeof(kH2) - 1);
  }
  return true;
}

}  // namespace

bool buildShared(const Options& o, Shared& s, std::string& error) {
  s.opts = &o;
  const bool via_proxy = o.proxy.kind != ProxyKind::Direct;
  s.socks = o.proxy.kind == ProxyKind::Socks5 || o.proxy.kind == ProxyKind::Socks5h;
  s.proxy_tls = o.proxy.kind == ProxyKind::Https;
  s.h2 = o.proxy.kind == ProxyKind::Http2 || o.proxy.kind == ProxyKind::Http2c;
  s.h2_tls = o.proxy.kind == ProxyKind::Http2;
  s.dst_tls = o.dst.tls();
  const bool raw = o.workload == Workload::TunnelUp || o.workload == Workload::TunnelDown ||
                   o.workload == Workload::Hold;
  // WebSocket over HTTP/2 would need extended CONNECT (RFC 8441): through an HTTP/2 proxy a
  // WebSocket goes inside a CONNECT tunnel.
  s.tunnel = s.socks || (via_proxy && (o.force_connect || s.dst_tls || raw ||
                                       (s.h2 && o.workload == Workload::WebSocket)));
  s.h2_new_conn = s.h2 && o.new_conn && !s.tunnel;
  if (s.h2_new_conn && o.h2_conns > 0) {
    return error = "--h2-conns shares connections among requests: not with --new-conn", false;
  }
  const Url& first_hop = via_proxy ? o.proxy.url : o.dst;
  if (!resolve(first_hop.host, first_hop.port, s.connect_addr, s.connect_len, error)) return false;

  // Credentials for an HTTP proxy (HTTP/1 header line, or the HTTP/2 field's value).
  const std::string basic = o.proxy.url.has_userinfo
                                ? "Basic " + base64(o.proxy.url.user + ":" + o.proxy.url.password)
                                : "";
  std::string proxy_auth;
  if (via_proxy && !s.socks && o.proxy.url.has_userinfo) {
    proxy_auth = "Proxy-Authorization: " + basic + "\r\n";
  }
  const bool absolute = via_proxy && !s.tunnel;
  const std::string target = absolute ? (o.dst.scheme == "ws" ? "http" : o.dst.scheme) + "://" +
                                            o.dst.authority() + o.dst.path
                                      : o.dst.path;
  std::string common = "Host: " + o.dst.authority() + "\r\nUser-Agent: sluice-load\r\n";
  for (const std::string& h : o.headers) common += h + "\r\n";
  if (absolute) common += proxy_auth;

  s.head_request = o.method == "HEAD";
  s.request = o.method + " " + target + " HTTP/1.1\r\n" + common;
  if (o.body_bytes > 0) s.request += "Content-Length: " + std::to_string(o.body_bytes) + "\r\n";
  s.request += "\r\n";
  if (o.body_bytes > 0) {
    static constexpr std::string_view kPattern =
        "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_";
    s.request.reserve(s.request.size() + o.body_bytes);
    for (uint64_t i = 0; i < o.body_bytes; ++i) s.request += kPattern[i % kPattern.size()];
    s.body = s.request.substr(s.request.size() - o.body_bytes);
  }
  if (s.h2 && !buildH2Headers(o, basic, s, error)) return false;
  if (s.tunnel && !s.socks) {
    s.connect_request = "CONNECT " + o.dst.hostPort() + " HTTP/1.1\r\nHost: " + o.dst.hostPort() +
                        "\r\nUser-Agent: sluice-load\r\n" + proxy_auth + "\r\n";
  }
  if (s.socks && !buildSocks(o, s, error)) return false;
  if (o.workload == Workload::WebSocket) buildWebSocket(o, absolute, proxy_auth, s);
  if (o.workload == Workload::TunnelUp || o.workload == Workload::TunnelDown) {
    s.tunnel_header = std::to_string(o.tunnel_bytes) + "\n";
    s.pattern.assign(64 * 1024, 'x');
  }
  return buildTls(o, s, error);
}

}  // namespace load
}  // namespace sluice
