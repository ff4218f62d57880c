#include "test/fuzz/client_hello_fuzz_checks.h"

#include <cstdlib>
#include <string_view>

#include "filters/listener/protocol_sniffer/sniffer.h"
#include "source/common/tls/client_hello.h"

namespace sluice::filters::protocol_sniffer::fuzz {

namespace {

void require(bool ok) {
  if (!ok) abort();
}

void checkOne(std::string_view input) {
  tls::ClientHelloInfo info;
  tls::ClientHelloResult result = tls::parseClientHello(input, info);
  if (!info.server_name.empty()) {
    require(info.server_name.data() >= input.data() &&
            info.server_name.data() + info.server_name.size() <= input.data() + input.size());
  }
  if (info.offers_h2 || info.offers_http11) require(info.has_alpn);
  if (result == tls::ClientHelloResult::NeedMore) {
    // Only a prefix of one record can need more: never more than a record's worth of bytes.
    require(input.size() < tls::kMaxClientHelloRecord);
  }
  bool offers_h2 = false;
  Verdict verdict = classify(input, offers_h2);
  if (!input.empty() && static_cast<uint8_t>(input[0]) == 0x16) {
    switch (result) {
      case tls::ClientHelloResult::Parsed:
        require(verdict == Verdict::Tls && offers_h2 == info.offers_h2);
        break;
      case tls::ClientHelloResult::NeedMore:
        require(verdict == Verdict::NeedMore);
        break;
      default:
        require(verdict == Verdict::Unknown);
    }
  }
  if (verdict != Verdict::Tls) require(!offers_h2);
}

}  // namespace

void checkClientHello(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  checkOne(input);
  // What a peek would have seen earlier: a verdict, once reached, must not change.
  bool h2 = false;
  Verdict whole = classify(input, h2);
  for (size_t cut : {size_t{1}, size_t{5}, size / 2, size > 0 ? size - 1 : 0}) {
    if (cut >= size) continue;
    checkOne(input.substr(0, cut));
    bool prefix_h2 = false;
    Verdict early = classify(input.substr(0, cut), prefix_h2);
    if (early != Verdict::NeedMore && early != Verdict::Tls) require(early == whole);
  }
}

}  // namespace sluice::filters::protocol_sniffer::fuzz
