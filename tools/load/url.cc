#include "tools/load/url.h"

#include <cctype>

namespace sluice {
namespace load {
namespace {

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool percentDecode(std::string_view in, std::string& out) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = hexValue(in[i + 1]);
    const int lo = hexValue(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

uint16_t defaultPort(const std::string& scheme) {
  if (scheme == "http" || scheme == "ws" || scheme == "h2c") return 80;
  if (scheme == "https" || scheme == "wss" || scheme == "h2") return 443;
  if (scheme == "socks5" || scheme == "socks5h") return 1080;
  return 0;
}

}  // namespace

std::string Url::authority() const {
  std::string a = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (port != defaultPort(scheme)) a += ":" + std::to_string(port);
  return a;
}

std::string Url::hostPort() const {
  std::string a = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return a + ":" + std::to_string(port);
}

bool parseUrl(std::string_view text, Url& out, std::string& error) {
  out = Url();
  const size_t sep = text.find("://");
  if (sep == std::string_view::npos || sep == 0) {
    error = "missing scheme://";
    return false;
  }
  for (char c : text.substr(0, sep)) out.scheme += static_cast<char>(std::tolower(c));
  const uint16_t def = defaultPort(out.scheme);
  if (def == 0) {
    error = "unsupported scheme " + out.scheme;
    return false;
  }
  std::string_view rest = text.substr(sep + 3);
  const size_t slash = rest.find_first_of("/?");
  std::string_view auth = rest.substr(0, slash);
  if (slash == std::string_view::npos) {
    out.path = "/";
  } else {
    out.path = std::string(rest.substr(slash));
    if (out.path[0] == '?') out.path.insert(0, "/");
  }
  const size_t at = auth.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view info = auth.substr(0, at);
    auth = auth.substr(at + 1);
    const size_t colon = info.find(':');
    if (!percentDecode(info.substr(0, colon), out.user) ||
        (colon != std::string_view::npos && !percentDecode(info.substr(colon + 1), out.password))) {
      error = "bad percent-encoding in userinfo";
      return false;
    }
    out.has_userinfo = true;
  }
  std::string_view port_text;
  if (!auth.empty() && auth[0] == '[') {
    const size_t close = auth.find(']');
    if (close == std::string_view::npos) {
      error = "unterminated [IPv6] host";
      return false;
    }
    out.host = std::string(auth.substr(1, close - 1));
    std::string_view after = auth.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') {
        error = "junk after ]";
        return false;
      }
      port_text = after.substr(1);
      if (port_text.empty()) {
        error = "empty port";
        return false;
      }
    }
  } else {
    const size_t colon = auth.rfind(':');
    out.host = std::string(auth.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = auth.substr(colon + 1);
      if (port_text.empty()) {
        error = "empty port";
        return false;
      }
    }
  }
  if (out.host.empty()) {
    error = "empty host";
    return false;
  }
  out.port = def;
  if (!port_text.empty()) {
    uint32_t p = 0;
    for (char c : port_text) {
      if (c < '0' || c > '9' || (p = p * 10 + static_cast<uint32_t>(c - '0')) > 65535) {
        error = "bad port";
        return false;
      }
    }
    if (p == 0) {
      error = "port 0";
      return false;
    }
    out.port = static_cast<uint16_t>(p);
  }
  return true;
}

bool parseProxy(std::string_view text, Proxy& out, std::string& error) {
  out = Proxy();
  if (text.empty() || text == "direct") return true;
  std::string with_scheme;
  if (text.find("://") == std::string_view::npos) {
    // gosst: a bare host:port is a SOCKS5 proxy.
    with_scheme = "socks5://" + std::string(text);
    text = with_scheme;
  }
  if (!parseUrl(text, out.url, error)) return false;
  const std::string& s = out.url.scheme;
  if (s == "http") {
    out.kind = ProxyKind::Http;
  } else if (s == "https") {
    out.kind = ProxyKind::Https;
  } else if (s == "h2") {
    out.kind = ProxyKind::Http2;
  } else if (s == "h2c") {
    out.kind = ProxyKind::Http2c;
  } else if (s == "socks5") {
    out.kind = ProxyKind::Socks5;
  } else if (s == "socks5h") {
    out.kind = ProxyKind::Socks5h;
  } else {
    error = "unsupported proxy scheme " + s;
    return false;
  }
  if ((out.kind == ProxyKind::Socks5 || out.kind == ProxyKind::Socks5h) &&
      (out.url.user.size() > 255 || out.url.password.size() > 255)) {
    error = "SOCKS5 username and password are at most 255 bytes each";
    return false;
  }
  if (out.url.path != "/") {
    error = "a proxy URL has no path";
    return false;
  }
  return true;
}

const char* proxyKindName(ProxyKind kind) {
  switch (kind) {
    case ProxyKind::Direct:
      return "direct";
    case ProxyKind::Http:
      return "http";
    case ProxyKind::Https:
      return "https";
    case ProxyKind::Http2:
      return "h2";
    case ProxyKind::Http2c:
      return "h2c";
    case ProxyKind::Socks5:
      return "socks5";
    case ProxyKind::Socks5h:
      return "socks5h";
  }
  return "?";
}

std::string base64(std::string_view in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (i + 1 < in.size()) v |= uint8_t(in[i + 1]) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace load
}  // namespace sluice
