#include "test/fuzz/proxy_protocol_fuzz_checks.h"

#include <cstdlib>
#include <string_view>

#include "source/common/network/proxy_protocol.h"

namespace sluice::network::fuzz {

namespace {

constexpr size_t kMax = 1040;

void require(bool ok) {
  if (!ok) abort();
}

}  // namespace

void checkProxyHeader(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  ProxyHeader header;
  std::string_view error;
  const ProxyParse result = parseProxyHeader(input, kMax, header, error);
  switch (result) {
    case ProxyParse::Header: {
      require(header.length > 0 && header.length <= size && header.length <= kMax);
      if (input[0] == 'P') require(header.length <= kProxyV1MaxBytes);
      if (!header.local) {
        require(header.source.valid() && header.destination.valid());
        require(header.source.family() == header.destination.family());
      }
      // Every shorter prefix waits for more.
      for (size_t n = 0; n < header.length; ++n) {
        ProxyHeader partial;
        std::string_view e;
        const ProxyParse p = parseProxyHeader(input.substr(0, n), kMax, partial, e);
        require(p == ProxyParse::Incomplete);
      }
      // What follows the header does not change it.
      ProxyHeader again;
      require(parseProxyHeader(input.substr(0, header.length), kMax, again, error) ==
              ProxyParse::Header);
      require(again.length == header.length && again.local == header.local);
      break;
    }
    case ProxyParse::NotProxy:
      require(size > 0 && input.substr(0, 6) != "PROXY " &&
              input.substr(0, 12) != std::string_view("\r\n\r\n\0\r\nQUIT\n", 12));
      break;
    case ProxyParse::Malformed:
      require(!error.empty());
      break;
    case ProxyParse::Incomplete:
      require(size < kMax);
      break;
  }
}

}  // namespace sluice::network::fuzz
