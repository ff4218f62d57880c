#include "source/common/network/address.h"

#include <cstring>

#include <arpa/inet.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace sluice {
namespace network {

Address Address::fromSockaddr(const sockaddr* sa, socklen_t len) {
  Address a;
  if (len > 0 && len <= static_cast<socklen_t>(sizeof(a.storage_)) &&
      (sa->sa_family == AF_INET || sa->sa_family == AF_INET6)) {
    memcpy(&a.storage_, sa, len);
  }
  return a;
}

Address Address::ipv4(uint32_t host_order_ip, uint16_t port) {
  Address a;
  sockaddr_in* in = &a.storage_.v4;
  memset(in, 0, sizeof(*in));
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(host_order_ip);
  in->sin_port = htons(port);
  return a;
}

absl::StatusOr<Address> Address::parseIp(std::string_view ip, uint16_t port) {
  char buf[INET6_ADDRSTRLEN + 1];
  if (ip.empty() || ip.size() >= sizeof(buf) || ip.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat("not an IP address: '%s'", ip));
  }
  memcpy(buf, ip.data(), ip.size());
  buf[ip.size()] = '\0';
  Address a;
  memset(&a.storage_, 0, sizeof(a.storage_));
  sockaddr_in* in4 = &a.storage_.v4;
  sockaddr_in6* in6 = &a.storage_.v6;
  if (inet_pton(AF_INET, buf, &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons(port);
    return a;
  }
  if (inet_pton(AF_INET6, buf, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    return a;
  }
  return absl::InvalidArgumentError(absl::StrFormat("not an IP address: '%s'", ip));
}

absl::Status splitHostPort(std::string_view text, uint16_t default_port, std::string_view& host,
                           uint16_t& port) {
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrFormat("unclosed '[' in '%s'", text));
    }
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return absl::InvalidArgumentError(absl::StrFormat("junk after ']' in '%s'", text));
      }
      port_text = rest.substr(1);
      if (port_text.empty()) {
        return absl::InvalidArgumentError(absl::StrFormat("empty port in '%s'", text));
      }
    }
  } else {
    size_t colon = text.rfind(':');
    if (colon != std::string_view::npos) {
      if (text.find(':') != colon) {
        return absl::InvalidArgumentError(
            absl::StrFormat("IPv6 addresses need brackets: '%s'", text));
      }
      host = text.substr(0, colon);
      port_text = text.substr(colon + 1);
      if (port_text.empty()) {
        return absl::InvalidArgumentError(absl::StrFormat("empty port in '%s'", text));
      }
    } else {
      host = text;
    }
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("empty host in '%s'", text));
  }
  if (port_text.empty()) {
    port = default_port;
  } else {
    uint32_t p = 0;
    for (char c : port_text) {
      if (c < '0' || c > '9') {
        return absl::InvalidArgumentError(absl::StrFormat("bad port in '%s'", text));
      }
      p = p * 10 + static_cast<uint32_t>(c - '0');
      if (p > 65535) {
        return absl::InvalidArgumentError(absl::StrFormat("port out of range in '%s'", text));
      }
    }
    port = static_cast<uint16_t>(p);
  }
  if (port == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("port 0 in '%s'", text));
  }
  return absl::OkStatus();
}

absl::StatusOr<Address> Address::parseHostPort(std::string_view text) {
  std::string_view host;
  uint16_t port = 0;
  absl::Status s = splitHostPort(text, 0, host, port);
  if (!s.ok()) return s;
  return parseIp(host, port);
}

uint16_t Address::port() const {
  if (family() == AF_INET) return ntohs(v4().sin_port);
  if (family() == AF_INET6) return ntohs(v6().sin6_port);
  return 0;
}

void Address::setPort(uint16_t port) {
  if (family() == AF_INET) {
    storage_.v4.sin_port = htons(port);
  } else if (family() == AF_INET6) {
    storage_.v6.sin6_port = htons(port);
  }
}

socklen_t Address::length() const {
  if (family() == AF_INET) return sizeof(sockaddr_in);
  if (family() == AF_INET6) return sizeof(sockaddr_in6);
  return 0;
}

std::string Address::ipString() const {
  char buf[INET6_ADDRSTRLEN];
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &v4().sin_addr, buf, sizeof(buf));
    return buf;
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &v6().sin6_addr, buf, sizeof(buf));
    return buf;
  }
  return "unspecified";
}

std::string Address::asString() const {
  if (family() == AF_INET6) return absl::StrFormat("[%s]:%d", ipString(), port());
  return absl::StrFormat("%s:%d", ipString(), port());
}

bool Address::operator==(const Address& other) const {
  if (family() != other.family()) return false;
  if (family() == AF_INET) {
    return v4().sin_addr.s_addr == other.v4().sin_addr.s_addr &&
           v4().sin_port == other.v4().sin_port;
  }
  if (family() == AF_INET6) {
    return memcmp(&v6().sin6_addr, &other.v6().sin6_addr, 16) == 0 &&
           v6().sin6_port == other.v6().sin6_port;
  }
  return true;
}

}  // namespace network
}  // namespace sluice
