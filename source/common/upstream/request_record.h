#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "source/common/event/dispatcher.h"
#include "source/common/network/address.h"
#include "source/common/policy/limits.h"
#include "source/common/proxy/request.h"
#include "source/common/stats/stats.h"
#include "source/common/upstream/failure.h"

namespace sluice {
namespace upstream {

// The end of one request, tunnel or SOCKS5 command, the same for every protocol: what the
// access log and per-key quotas consume. Views are valid during emitRecord() only.
struct RequestRecord {
  proxy::Protocol protocol = proxy::Protocol::Http1;
  std::string_view listener;
  std::string_view key;  // the authenticated key's name (never the key); empty when none
  network::Address client;
  std::string_view method;  // the HTTP method, or the SOCKS5 command ("connect", "bind", ...)
  std::string_view host;    // the target as the client named it
  uint16_t port = 0;
  std::string_view path;  // an HTTP request's path (empty for tunnels and SOCKS5)
  // The HTTP status sent to the client (0: none, the client left first), or the SOCKS5 reply.
  uint16_t status = 0;
  uint64_t bytes_to_origin = 0;    // bytes written to the destination (heads included)
  uint64_t bytes_from_origin = 0;  // bytes read from it
  // -1: that step did not happen (a pooled connection needs no connect, a literal no lookup).
  std::chrono::microseconds resolve{-1};
  std::chrono::microseconds connect{-1};
  std::chrono::microseconds first_byte{-1};  // from the start to the destination's first byte
  std::chrono::microseconds total{0};
  network::Address upstream;  // the address connected to (unset: none)
  std::string_view denial;    // why the request was refused or failed; empty when served
  FailureKind failure = FailureKind::None;
  // The RFC 9209 error type of an answer sluice made itself (its Proxy-Status: "dns_error",
  // "http_request_denied", ...); empty for an origin's answer, a tunnel and SOCKS5.
  std::string_view proxy_status_error;
  // The policy rule that refused the request, or (policy_report_only) would have in a
  // report-only group, which served it; for a UDP association, the first of its destinations'.
  // Empty when no rule refused.
  std::string_view policy_rule;
  bool policy_report_only = false;
};

// "http1", "http2", "socks5": a record's protocol as the debug line and the access log write it.
const char* protocolName(proxy::Protocol protocol);

// The duration of a listener's requests of one protocol, from their start to their record:
// "request.<listener>.<protocol>.duration_seconds", in Prometheus
// sluice_request_duration_seconds{listener, protocol}. Config time; same names, same handle.
stats::Histogram requestDurationHistogram(std::string_view listener, proxy::Protocol protocol);

// Emits one record: counts it (request_record.total, .denied, .bytes_to_origin,
// .bytes_from_origin) and, at log level debug, writes it as one line.
void emitRecord(const RequestRecord& record);
// The record as one "name=value" line (values with spaces quoted).
std::string formatRecord(const RequestRecord& record);

// What a codec keeps of one request from its start to its end, to emit its record once. The
// codec calls begin() when a request starts, the setters as things happen, and end() wherever
// the request can end (every path: served, refused, failed, the client gone); only the first
// end() after a begin() emits. Strings are copied into storage that keeps its capacity, so a
// connection's requests allocate nothing in steady state. The trace also holds the request's
// place under its key's limits (limitSlot(), given to the request filters through
// ProxyRequest::limit_slot): what the request becomes (a tunnel) keeps it, and end() gives it
// back, so it is released exactly once whatever ends the request.
class RequestTrace {
 public:
  RequestTrace() = default;
  // The request in flight moves with everything it holds, its place under its limits included
  // (the connection became a tunnel and its codec goes); the trace moved from is left closed.
  RequestTrace(RequestTrace&& other) noexcept = default;
  RequestTrace& operator=(RequestTrace&&) = delete;

  // `client` is the client connection's own address (or null): it is read when the record is
  // emitted, and every codec ends its requests' records before its connection goes away.
  // `now` is the dispatcher's (the turn's reading of the clock): the request started when the
  // wait that brought it returned, and ends when the one that brought its end did.
  void begin(event::MonotonicTime now, proxy::Protocol protocol, std::string_view method,
             std::string_view host, uint16_t port, const network::Address* client,
             std::string_view path = {});
  bool open() const { return open_.value; }
  // What the request filters found: the key's name, the lookup and connect times, where the
  // router connected.
  void routed(const proxy::ProxyRequest& request);
  // The key the request authenticated with (a command that no router served: a SOCKS5 BIND).
  // The record names it by its grant (sluice.auth gives every key one, named as the key).
  void authenticated(const proxy::ProxyRequest& request) { grant_ = request.grant; }
  void setStatus(uint16_t status) { status_ = status; }
  // Whether a reload revoked the key the request (or, once it ended, the connection's last
  // request) authenticated with.
  bool revoked() const { return grant_ != nullptr && grant_->revoked(); }
  // The RFC 9209 error type of the answer sluice made itself (a static string).
  void setProxyStatusError(const char* error) { proxy_status_error_ = error; }
  // A policy rule (config-owned) refused, or in report-only would have refused, the request or
  // one of its destinations; the first one counts (routed() takes the request's).
  void setPolicyRule(std::string_view rule, bool report_only) {
    if (policy_rule_len_ != 0 || rule.empty()) return;
    rule = rule.substr(0, UINT16_MAX);
    policy_rule_ = rule.data();
    policy_rule_len_ = static_cast<uint16_t>(rule.size());
    policy_report_only_ = report_only;
  }
  // The request was refused or failed (the reason is copied).
  void fail(std::string_view reason, FailureKind kind = FailureKind::None);
  void addBytes(uint64_t to_origin, uint64_t from_origin) {
    to_origin_ += to_origin;
    from_origin_ += from_origin;
  }
  // The destination's first byte (only the first call counts; a default time is none).
  void firstByte(event::MonotonicTime at);
  bool hasFirstByte() const { return has_first_byte_; }
  // Emits the record and adds its total time to `duration` (the codec's
  // requestDurationHistogram()).
  void end(event::MonotonicTime now, std::string_view listener, stats::Histogram duration = {});
  // The record as it stands (its views point into this trace), ended at `now`.
  RequestRecord record(std::string_view listener, event::MonotonicTime now) const;
  // Where the request in flight holds its place under its limits (released by end(), and by a
  // begin() that finds one still held).
  policy::LimitSlot* limitSlot() { return &limit_slot_; }

 private:
  // The host, the path, then the denial reason (one string, its capacity kept across requests);
  // the method points at a static name when it is a known one, else into text_ after the path.
  std::string text_;
  const proxy::KeyGrant* grant_ = nullptr;
  // A known method's static name (its length in static_method_len_), or null: it is in text_.
  const char* static_method_ = nullptr;
  const char* proxy_status_error_ = nullptr;  // a static name, or null
  const char* policy_rule_ = nullptr;         // config-owned, policy_rule_len_ bytes
  const network::Address* client_ = nullptr;  // the client connection's (see begin())
  event::MonotonicTime start_{};
  event::MonotonicTime first_byte_{};
  int32_t resolve_us_ = -1;  // -1: no lookup
  int32_t connect_us_ = -1;  // -1: no connect
  uint64_t to_origin_ = 0;
  uint64_t from_origin_ = 0;
  policy::LimitSlot limit_slot_;
  network::Address upstream_;
  uint16_t method_len_ = 0;  // of a method copied into text_ (0: static_method_)
  uint16_t host_len_ = 0;
  uint16_t path_len_ = 0;
  uint16_t policy_rule_len_ = 0;
  uint16_t port_ = 0;
  uint16_t status_ = 0;
  uint8_t static_method_len_ = 0;
  proxy::Protocol protocol_ = proxy::Protocol::Http1;
  FailureKind failure_ = FailureKind::None;
  // Whether begin() came without an end() yet; a move takes it along (the source is closed).
  struct OpenFlag {
    bool value = false;
    OpenFlag() = default;
    OpenFlag(OpenFlag&& other) noexcept : value(std::exchange(other.value, false)) {}
  };
  OpenFlag open_;
  bool has_first_byte_ = false;
  bool policy_report_only_ = false;

  // The longest path a record keeps (a longer one is cut).
  static constexpr size_t kMaxPathBytes = 2048;
  size_t prefixLength() const { return size_t{host_len_} + path_len_ + method_len_; }
};

}  // namespace upstream
}  // namespace sluice
