#include "test/fuzz/socks5_fuzz_checks.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "source/common/socks5/wire.h"

namespace sluice::socks5::fuzz {
namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "socks5 fuzz invariant violated: %s\n", what);
    abort();
  }
}

bool inside(std::string_view view, std::string_view in) {
  return view.empty() ||
         (view.data() >= in.data() && view.data() + view.size() <= in.data() + in.size());
}

// Every proper prefix of a message that parsed Ok with `size` bytes is Incomplete, unless the
// parser could already tell it was an error (then it must stay an error). Checks a few lengths
// (the parsers are O(n); checking all would make the fuzzer quadratic).
template <class Parse>
void checkPrefixes(std::string_view in, size_t size, Parse parse) {
  const size_t probes[] = {0, 1, size / 2, size > 0 ? size - 1 : 0};
  for (size_t n : probes) {
    if (n >= size) continue;
    require(parse(in.substr(0, n)) == ParseStatus::Incomplete,
            "prefix of a message not Incomplete");
  }
}

void checkTarget(const Target& t, std::string_view in) {
  if (t.type == AddressType::Domain) {
    require(!t.domain.empty() && t.domain.size() <= 255, "domain length");
    require(inside(t.domain, in), "domain outside the input");
    return;
  }
  require(t.type == AddressType::IPv4 || t.type == AddressType::IPv6, "address type");
  const network::Address a = t.address();
  require(a.valid() && a.port() == t.port, "address of a literal target");
  char text[64];
  require(!t.hostText(text, sizeof(text)).empty(), "literal as text");
  // Written back as a UDP header, the address parses to the same target.
  uint8_t out[kMaxReplyBytes];
  const size_t n = writeUdpHeader(out, a);
  UdpHeader back;
  require(
      parseUdpHeader(std::string_view(reinterpret_cast<char*>(out), n), back) == ParseStatus::Ok,
      "written UDP header does not parse");
  // An IPv4-mapped IPv6 address is written as the IPv4 address it stands for.
  const bool mapped = a.family() == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&a.v6().sin6_addr);
  require(back.size == n &&
              (mapped ? back.target.type == AddressType::IPv4 : back.target.address() == a),
          "UDP header round trip");
  const size_t r = writeReply(out, Reply::Succeeded, a);
  require(r == n && out[0] == kVersion, "reply size");
}

}  // namespace

void checkSocks5(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);

  // As a datagram.
  UdpHeader udp;
  if (parseUdpHeader(in, udp) == ParseStatus::Ok) {
    require(udp.size <= in.size() && udp.size <= kMaxUdpHeaderBytes, "UDP header size");
    checkTarget(udp.target, in);
  }

  // As a stream: greeting, authentication, request.
  Greeting greeting;
  const ParseStatus g = parseGreeting(in, greeting);
  if (g != ParseStatus::Ok) return;
  require(greeting.size >= 3 && greeting.size <= in.size() && greeting.size <= kMaxGreetingBytes,
          "greeting size");
  checkPrefixes(in, greeting.size, [](std::string_view p) {
    Greeting x;
    return parseGreeting(p, x);
  });
  in.remove_prefix(greeting.size);

  UserPass up;
  if (parseUserPass(in, up) == ParseStatus::Ok) {
    require(up.size >= 3 && up.size <= in.size() && up.size <= kMaxAuthBytes, "auth size");
    require(up.user.size() + up.password.size() + 3 == up.size, "auth fields");
    require(inside(up.user, in) && inside(up.password, in), "auth views outside the input");
    checkPrefixes(in, up.size, [](std::string_view p) {
      UserPass x;
      return parseUserPass(p, x);
    });
    in.remove_prefix(up.size);
  }

  Request request;
  Reply reply = Reply::Succeeded;
  const ParseStatus r = parseRequest(in, request, reply);
  if (r == ParseStatus::Error) {
    require(reply == Reply::GeneralFailure || reply == Reply::AddressTypeNotSupported,
            "request error reply");
    return;
  }
  if (r != ParseStatus::Ok) return;
  require(request.size >= 7 && request.size <= in.size() && request.size <= kMaxRequestBytes,
          "request size");
  checkTarget(request.target, in);
  checkPrefixes(in, request.size, [](std::string_view p) {
    Request x;
    Reply e;
    return parseRequest(p, x, e);
  });
}

}  // namespace sluice::socks5::fuzz
