#include "source/common/upstream/request_record.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "source/common/common/logger.h"
#include "source/common/stats/stats.h"
#include "source/common/upstream/access_log.h"

namespace sluice {
namespace upstream {

namespace {

struct RecordStats {
  stats::Counter total = stats::Store::get().counter(
      "request_record.total",
      "Requests, tunnels and SOCKS5 commands ended (end-of-request records).");
  stats::Counter denied =
      stats::Store::get().counter("request_record.denied", "Ended requests that were denied.");
  stats::Counter bytes_to_origin = stats::Store::get().counter(
      "request_record.bytes_to_origin", "Bytes sent to origins, over every ended request.");
  stats::Counter bytes_from_origin = stats::Store::get().counter(
      "request_record.bytes_from_origin", "Bytes received from origins, over every ended request.");
};

const RecordStats& recordStats() {
  static const RecordStats s;
  return s;
}

void addField(std::string& out, std::string_view name, std::string_view value) {
  out.push_back(' ');
  out.append(name);
  out.push_back('=');
  if (value.empty() || value.find_first_of(" \"") != std::string_view::npos) {
    out.push_back('"');
    for (char c : value) {
      if (c == '"' || c == '\\') out.push_back('\\');
      out.push_back(c);
    }
    out.push_back('"');
  } else {
    out.append(value);
  }
}

// The method names a record usually carries, so that a trace need not copy them.
std::string_view staticMethod(std::string_view method) {
  static constexpr std::string_view kNames[] = {
      "GET",   "HEAD",    "POST", "PUT",  "DELETE", "CONNECT",       "OPTIONS", "TRACE",
      "PATCH", "connect", "bind", "auth", "-",      "udp_associate", "unknown"};
  for (std::string_view n : kNames) {
    if (n == method) return n;
  }
  return {};
}

// A lookup's or a connect's time as a trace keeps it: -1 (none) or at most about 35 minutes.
int32_t clampMicros(std::chrono::microseconds d) {
  if (d.count() < 0) return -1;
  return static_cast<int32_t>(std::min<int64_t>(d.count(), INT32_MAX));
}

std::string micros(std::chrono::microseconds d) {
  return d.count() < 0 ? std::string("-") : std::to_string(d.count());
}

}  // namespace

const char* protocolName(proxy::Protocol p) {
  switch (p) {
    case proxy::Protocol::Http1:
      return "http1";
    case proxy::Protocol::Http2:
      return "http2";
    case proxy::Protocol::Socks5:
      return "socks5";
  }
  return "unknown";
}

std::string formatRecord(const RequestRecord& r) {
  std::string out = "request";
  addField(out, "protocol", protocolName(r.protocol));
  addField(out, "listener", r.listener);
  addField(out, "key", r.key.empty() ? std::string_view("-") : r.key);
  addField(out, "client", r.client.valid() ? r.client.asString() : "-");
  addField(out, "method", r.method);
  std::string target = r.host.find(':') != std::string_view::npos ? "[" + std::string(r.host) + "]"
                                                                  : std::string(r.host);
  target += ":" + std::to_string(r.port);
  addField(out, "target", r.host.empty() ? std::string_view("-") : std::string_view(target));
  addField(out, "status", std::to_string(r.status));
  addField(out, "bytes_to_origin", std::to_string(r.bytes_to_origin));
  addField(out, "bytes_from_origin", std::to_string(r.bytes_from_origin));
  addField(out, "resolve_us", micros(r.resolve));
  addField(out, "connect_us", micros(r.connect));
  addField(out, "first_byte_us", micros(r.first_byte));
  addField(out, "total_us", micros(r.total));
  addField(out, "upstream", r.upstream.valid() ? r.upstream.asString() : "-");
  addField(out, "failure", failureName(r.failure));
  addField(out, "denial", r.denial.empty() ? std::string_view("-") : r.denial);
  if (!r.path.empty()) addField(out, "path", r.path);
  if (!r.proxy_status_error.empty()) addField(out, "proxy_status", r.proxy_status_error);
  if (!r.policy_rule.empty()) {
    addField(out, r.policy_report_only ? "report_only_rule" : "policy_rule", r.policy_rule);
  }
  return out;
}

stats::Histogram requestDurationHistogram(std::string_view listener, proxy::Protocol protocol) {
  const std::string name = protocolName(protocol);
  return stats::Scope("request", "listener", listener)
      .histogram(name + ".duration_seconds", "duration_seconds", stats::Label{"protocol", name},
                 "Requests, tunnels and SOCKS5 commands, from their start to their end-of-request "
                 "record.",
                 stats::requestBuckets());
}

void emitRecord(const RequestRecord& r) {
  const RecordStats& s = recordStats();
  s.total.inc();
  if (!r.denial.empty()) s.denied.inc();
  s.bytes_to_origin.add(r.bytes_to_origin);
  s.bytes_from_origin.add(r.bytes_from_origin);
  if (logger::enabled(LogLevel::Debug)) logger::write(LogLevel::Debug, formatRecord(r));
  logRecord(r);
}

void RequestTrace::begin(event::MonotonicTime now, proxy::Protocol protocol,
                         std::string_view method, std::string_view host, uint16_t port,
                         const network::Address* client, std::string_view path) {
  limit_slot_.release();
  protocol_ = protocol;
  host = host.substr(0, 1024);
  path = path.substr(0, kMaxPathBytes);
  text_.assign(host);
  text_.append(path);
  host_len_ = static_cast<uint16_t>(host.size());
  path_len_ = static_cast<uint16_t>(path.size());
  const std::string_view known = staticMethod(method);
  static_method_ = known.empty() ? nullptr : known.data();
  static_method_len_ = static_cast<uint8_t>(known.size());
  method_len_ = 0;
  if (known.empty()) {
    method = method.substr(0, 255);  // a token
    text_.append(method);
    method_len_ = static_cast<uint16_t>(method.size());
  }
  grant_ = nullptr;
  port_ = port;
  client_ = client;
  upstream_ = network::Address();
  start_ = now;
  resolve_us_ = connect_us_ = -1;
  to_origin_ = from_origin_ = 0;
  status_ = 0;
  proxy_status_error_ = nullptr;
  policy_rule_ = nullptr;
  policy_rule_len_ = 0;
  policy_report_only_ = false;
  failure_ = FailureKind::None;
  has_first_byte_ = false;
  open_.value = true;
}

void RequestTrace::routed(const proxy::ProxyRequest& request) {
  authenticated(request);
  resolve_us_ = clampMicros(request.resolve_time);
  connect_us_ = clampMicros(request.connect_time);
  upstream_ = request.upstream_address;
  setPolicyRule(request.policy_rule, request.policy_report_only);
}

void RequestTrace::fail(std::string_view reason, FailureKind kind) {
  if (!open_.value || text_.size() > prefixLength()) return;  // the first one counts
  text_.append(reason.empty() ? std::string_view("refused") : reason);
  failure_ = kind;
}

void RequestTrace::firstByte(event::MonotonicTime at) {
  if (has_first_byte_ || at == event::MonotonicTime{}) return;
  has_first_byte_ = true;
  first_byte_ = at;
}

void RequestTrace::end(event::MonotonicTime now, std::string_view listener,
                       stats::Histogram duration) {
  limit_slot_.release();
  if (!open_.value) return;
  open_.value = false;
  const RequestRecord r = record(listener, now);
  duration.record(r.total);
  emitRecord(r);
}

RequestRecord RequestTrace::record(std::string_view listener, event::MonotonicTime now) const {
  RequestRecord r;
  r.protocol = protocol_;
  r.listener = listener;
  if (grant_ != nullptr) r.key = grant_->name();
  if (client_ != nullptr) r.client = *client_;
  const std::string_view text = text_;
  r.host = text.substr(0, host_len_);
  r.path = text.substr(host_len_, path_len_);
  r.method = method_len_ == 0 ? std::string_view(static_method_, static_method_len_)
                              : text.substr(size_t{host_len_} + path_len_, method_len_);
  r.port = port_;
  r.status = status_;
  r.bytes_to_origin = to_origin_;
  r.bytes_from_origin = from_origin_;
  r.resolve = std::chrono::microseconds(resolve_us_);
  r.connect = std::chrono::microseconds(connect_us_);
  if (has_first_byte_) {
    r.first_byte = std::chrono::duration_cast<std::chrono::microseconds>(first_byte_ - start_);
  }
  r.total = std::chrono::duration_cast<std::chrono::microseconds>(now - start_);
  r.upstream = upstream_;
  r.denial = text.substr(prefixLength());
  r.failure = failure_;
  if (proxy_status_error_ != nullptr) r.proxy_status_error = proxy_status_error_;
  if (policy_rule_len_ != 0) r.policy_rule = std::string_view(policy_rule_, policy_rule_len_);
  r.policy_report_only = policy_report_only_;
  return r;
}

}  // namespace upstream
}  // namespace sluice
