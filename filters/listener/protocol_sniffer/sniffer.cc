#include "filters/listener/protocol_sniffer/sniffer.h"

#include "source/common/tls/client_hello.h"

namespace sluice {
namespace filters {
namespace protocol_sniffer {

namespace {

constexpr std::string_view kH2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr uint8_t kSocks5Version = 0x05;
// Longer than any registered method ("UPDATEREDIRECTREF" is 17): a longer token is noise.
constexpr size_t kMaxMethodLength = 24;

bool isTokenChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '_' || c == '.' || c == '!' || c == '#' || c == '$' || c == '%' ||
         c == '&' || c == '\'' || c == '*' || c == '+' || c == '^' || c == '`' || c == '|' ||
         c == '~';
}

// An HTTP/1 request starts with a method token and a space. Leading CRLFs are tolerated (RFC
// 9112 §2.2) and left for the codec.
Verdict classifyHttp1(std::string_view peeked) {
  size_t i = 0;
  while (i < peeked.size() && (peeked[i] == '\r' || peeked[i] == '\n')) ++i;
  size_t start = i;
  while (i < peeked.size() && i - start <= kMaxMethodLength && isTokenChar(peeked[i])) ++i;
  if (i - start > kMaxMethodLength) return Verdict::Unknown;
  if (i == peeked.size()) return Verdict::NeedMore;
  return (i > start && peeked[i] == ' ') ? Verdict::Http1 : Verdict::Unknown;
}

}  // namespace

Verdict classify(std::string_view peeked, bool& offers_h2) {
  offers_h2 = false;
  if (peeked.empty()) return Verdict::NeedMore;
  const auto first = static_cast<uint8_t>(peeked[0]);
  if (first == 0x16) {
    tls::ClientHelloInfo info;
    switch (tls::parseClientHello(peeked, info)) {
      case tls::ClientHelloResult::NeedMore:
        return Verdict::NeedMore;
      case tls::ClientHelloResult::Parsed:
        offers_h2 = info.offers_h2;
        return Verdict::Tls;
      case tls::ClientHelloResult::NotTls:
      case tls::ClientHelloResult::Malformed:
        return Verdict::Unknown;
    }
  }
  if (first == kSocks5Version) return Verdict::Socks5;
  // The HTTP/2 preface starts like an HTTP/1 request ("PRI * HTTP/2.0"): compare it whole.
  const size_t n = std::min(peeked.size(), kH2Preface.size());
  if (peeked.substr(0, n) == kH2Preface.substr(0, n)) {
    return n == kH2Preface.size() ? Verdict::H2c : Verdict::NeedMore;
  }
  return classifyHttp1(peeked);
}

size_t ProtocolSnifferFilter::maxReadBytes() const {
  // A whole ClientHello record when TLS is accepted; a request line's start otherwise.
  return config_->allowed(Protocol::Tls) ? tls::kMaxClientHelloRecord : 64;
}

network::FilterStatus ProtocolSnifferFilter::onData(std::string_view peeked,
                                                    network::ListenerFilterCallbacks& callbacks) {
  bool offers_h2 = false;
  Verdict verdict = classify(peeked, offers_h2);
  if (verdict == Verdict::NeedMore) return network::FilterStatus::StopIteration;
  const SnifferStats& stats = config_->stats;
  network::SocketFacts& facts = callbacks.facts();
  Protocol protocol;
  switch (verdict) {
    case Verdict::Tls:
      protocol = Protocol::Tls;
      facts.transport_protocol = "tls";
      facts.application_protocol = offers_h2 ? "h2" : "http/1.1";
      break;
    case Verdict::H2c:
      protocol = Protocol::H2c;
      facts.application_protocol = "h2";
      break;
    case Verdict::Socks5:
      protocol = Protocol::Socks5;
      facts.application_protocol = "socks5";
      break;
    case Verdict::Http1:
      protocol = Protocol::Http1;
      facts.application_protocol = "http/1.1";
      break;
    default:
      stats.unknown.inc();
      callbacks.continueFilterChain(false);
      return network::FilterStatus::StopIteration;
  }
  if (!config_->allowed(protocol)) {
    stats.not_allowed.inc();
    callbacks.continueFilterChain(false);
    return network::FilterStatus::StopIteration;
  }
  const stats::Counter* counters[] = {&stats.tls, &stats.h2c, &stats.socks5, &stats.http1};
  counters[static_cast<int>(protocol)]->inc();
  return network::FilterStatus::Continue;
}

}  // namespace protocol_sniffer
}  // namespace filters
}  // namespace sluice
