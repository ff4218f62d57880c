#include "tools/load/report.h"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <string>
#include <utility>

#include "tools/load/url.h"

namespace sluice {
namespace load {
namespace {

// printf into a string (report only: never on the request path). Long URLs are not cut.
std::string strf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0) return std::string();
  if (static_cast<size_t>(n) < sizeof(buf)) return std::string(buf, static_cast<size_t>(n));
  std::string out(static_cast<size_t>(n) + 1, '\0');
  va_start(ap, fmt);
  vsnprintf(out.data(), out.size(), fmt, ap);
  va_end(ap);
  out.resize(static_cast<size_t>(n));
  return out;
}

double usOf(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

struct Pct {
  const char* label;
  double p;
};
constexpr Pct kPercentiles[] = {{"50%", 50},     {"75%", 75},       {"90%", 90},  {"99%", 99},
                                {"99.9%", 99.9}, {"99.99%", 99.99}, {"100%", 100}};

std::string modeName(const Options& o, const Shared& s) {
  if (o.proxy.kind == ProxyKind::Direct) return "direct";
  std::string m = proxyKindName(o.proxy.kind);
  m += "://" + o.proxy.url.hostPort();
  if (s.socks) {
    m += o.proxy.url.has_userinfo ? " (SOCKS5, username/password)" : " (SOCKS5, no auth)";
  } else {
    m += s.tunnel ? " (CONNECT)" : " (absolute-form)";
  }
  return m;
}

const char* workloadName(Workload w) {
  switch (w) {
    case Workload::Http:
      return "http";
    case Workload::WebSocket:
      return "websocket";
    case Workload::TunnelUp:
      return "tunnel-up";
    case Workload::TunnelDown:
      return "tunnel-down";
    case Workload::Hold:
      return "hold";
  }
  return "?";
}
}  // namespace

void printText(const Options& o, const Shared& s, const Results& r, double elapsed) {
  const uint64_t total = r.ok + r.failed;
  uint64_t non2xx = 0, errors = 0;
  for (int i = 0; i < 600; ++i)
    if (i < 200 || i >= 300) non2xx += r.status[i];
  for (uint64_t e : r.errors) errors += e;
  if (o.workload != Workload::Http) non2xx = 0;
  std::string out;
  if (o.workload == Workload::Hold) {
    out += strf(
        "Held %" PRIu64 " of %" PRIu64 " tunnels to %s for %.3f s%s\n\n", r.held, o.hold,
        o.dst.hostPort().c_str(), elapsed,
        o.hold_window > 0 ? strf(" (opened %" PRIu64 " at a time)", o.hold_window).c_str() : "");
  } else {
    out +=
        strf("Benchmark %" PRIu64 " %s to %s://%s%s by %d connections (%d threads, %s loop%s):\n\n",
             total, o.workload == Workload::Http ? "requests" : workloadName(o.workload),
             o.dst.scheme.c_str(), o.dst.authority().c_str(), o.dst.path.c_str(), o.connections,
             o.threads, o.rate > 0 ? "open" : "closed",
             o.rate > 0 ? strf(" at %.0f req/s", o.rate).c_str() : "");
  }
  out += strf("Server Address:         %s\n", o.dst.hostPort().c_str());
  out += strf("Api Path:               %s\n", o.dst.path.c_str());
  out += strf("Proxy:                  %s\n", modeName(o, s).c_str());
  out += strf("Workload:               %s%s\n", workloadName(o.workload),
              o.new_conn ? ", new connection per request" : ", keep-alive");
  out += strf("Total Concurrency:      %d\n", o.connections);
  out += strf("Total Requests:         %" PRIu64 "\n", total);
  out += strf("Failed Requests:        %" PRIu64 " (non-2xx %" PRIu64 ", errors %" PRIu64 ")\n",
              r.failed, non2xx, r.failed - non2xx);
  if (r.incomplete > 0)
    out += strf("Incomplete Requests:    %" PRIu64 " (in flight at the end, not counted)\n",
                r.incomplete);
  out += "\n";
  out += strf("Request per second:     %.2f [req/sec]\n", elapsed > 0 ? total / elapsed : 0.0);
  out += strf("Time per request:       %.1f us (mean latency)\n", usOf(r.latency.mean()));
  out += strf("Time taken for benchmark: %.6f s\n\n", elapsed);
  const auto rate = [&](uint64_t b) { return elapsed > 0 ? b / elapsed / 1e6 : 0.0; };
  out += strf("Total Sent:             %" PRIu64 " bytes (%.2f MB/s, measured on the sockets)\n",
              r.wire_tx, rate(r.wire_tx));
  out += strf("Total read:             %" PRIu64 " bytes (%.2f MB/s, measured on the sockets)\n",
              r.wire_rx, rate(r.wire_rx));
  out += strf("Destination bytes:      sent %" PRIu64 ", read %" PRIu64
              " (after the proxy handshake, inside TLS)\n",
              r.app_tx, r.app_rx);
  out += strf("Payload sent:           %" PRIu64
              " bytes (%.2f MB/s; request bodies, messages or "
              "tunnel data)\n",
              r.body_tx, rate(r.body_tx));
  out += strf("Payload read:           %" PRIu64
              " bytes (%.2f MB/s; response bodies, messages or "
              "tunnel data)\n",
              r.body_rx, rate(r.body_rx));
  out += strf("Connections opened:     %" PRIu64, r.connections);
  if (r.tls_full + r.tls_resumed > 0)
    out +=
        strf(" (TLS handshakes: %" PRIu64 " full, %" PRIu64 " resumed)", r.tls_full, r.tls_resumed);
  out += "\n\nStatus codes:          ";
  bool any = false;
  for (int i = 0; i < 600; ++i) {
    if (r.status[i] == 0) continue;
    out += strf(" %d: %" PRIu64, i, r.status[i]);
    any = true;
  }
  out += any ? "\n" : " none\n";
  out += "Errors:                ";
  any = false;
  for (int i = 0; i < static_cast<int>(ErrorKind::kCount); ++i) {
    if (r.errors[i] == 0) continue;
    out += strf(" %s: %" PRIu64, errorName(static_cast<ErrorKind>(i)), r.errors[i]);
    any = true;
  }
  out += any ? "\n" : " none\n";
  any = false;
  for (int i = 0; i < 600; ++i) {
    if (r.proxy_status[i] == 0) continue;
    if (!any) out += "Proxy refusals:        ";
    out += strf(" %d: %" PRIu64, i, r.proxy_status[i]);
    any = true;
  }
  if (any) out += "  (CONNECT status, SOCKS5 reply code or failed upgrade status)\n";

  out += "\nPercentage of the requests served within a certain time (us)\n";
  for (const Pct& p : kPercentiles) {
    out += strf("%-7s %12.1f%s\n", p.label, usOf(r.latency.percentile(p.p)),
                p.p == 100 ? " (longest request)" : "");
  }
  out += strf("\n%-22s %9s %11s %11s %11s %11s %11s\n", "Phase timings (us)", "count", "mean",
              "p50", "p90", "p99", "max");
  const auto row = [&](const char* name, const Histogram& h) {
    out += strf("  %-20s %9" PRIu64 " %11.1f %11.1f %11.1f %11.1f %11.1f\n", name, h.count(),
                usOf(h.mean()), usOf(h.percentile(50)), usOf(h.percentile(90)),
                usOf(h.percentile(99)), usOf(h.max()));
  };
  row("tcp connect", r.connect);
  row("proxy handshake", r.proxy_handshake);
  row("tls to destination", r.dst_tls);
  row("time to first byte", r.ttfb);
  fputs(out.c_str(), stdout);
}

std::string jsonHistogram(const Histogram& h) {
  std::string out = strf("{\"count\": %" PRIu64 ", \"mean_us\": %.3f, \"min_us\": %.3f", h.count(),
                         usOf(h.mean()), usOf(h.min()));
  static constexpr std::pair<const char*, double> kKeys[] = {
      {"p50_us", 50}, {"p75_us", 75},     {"p90_us", 90},
      {"p99_us", 99}, {"p99_9_us", 99.9}, {"p99_99_us", 99.99}};
  for (const auto& k : kKeys) out += strf(", \"%s\": %.3f", k.first, usOf(h.percentile(k.second)));
  out += strf(", \"max_us\": %.3f}", usOf(h.max()));
  return out;
}

std::string jsonEscape(const std::string& in) {
  std::string out;
  for (char c : in) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += strf("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out;
}

void printJson(const Options& o, const Shared& s, const Results& r, double elapsed) {
  const uint64_t total = r.ok + r.failed;
  std::string out = "{\n";
  out += strf("  \"destination\": \"%s\",\n",
              jsonEscape(o.dst.scheme + "://" + o.dst.authority() + o.dst.path).c_str());
  out += strf("  \"mode\": \"%s\",\n", jsonEscape(modeName(o, s)).c_str());
  out += strf("  \"proxy_kind\": \"%s\",\n  \"tunnel\": %s,\n", proxyKindName(o.proxy.kind),
              s.tunnel ? "true" : "false");
  out += strf("  \"workload\": \"%s\",\n  \"new_conn\": %s,\n", workloadName(o.workload),
              o.new_conn ? "true" : "false");
  out += strf("  \"threads\": %d,\n  \"connections\": %d,\n  \"rate\": %.3f,\n", o.threads,
              o.connections, o.rate);
  out += strf("  \"hold_window\": %" PRIu64 ",\n", o.hold_window);
  out += strf("  \"elapsed_s\": %.6f,\n", elapsed);
  out += strf("  \"requests\": %" PRIu64 ",\n  \"ok\": %" PRIu64 ",\n  \"failed\": %" PRIu64
              ",\n  \"incomplete\": %" PRIu64 ",\n",
              total, r.ok, r.failed, r.incomplete);
  out += strf("  \"requests_per_s\": %.3f,\n", elapsed > 0 ? total / elapsed : 0.0);
  out += strf("  \"bytes_sent\": %" PRIu64 ",\n  \"bytes_read\": %" PRIu64 ",\n", r.wire_tx,
              r.wire_rx);
  out += strf("  \"bytes_sent_per_s\": %.3f,\n  \"bytes_read_per_s\": %.3f,\n",
              elapsed > 0 ? r.wire_tx / elapsed : 0.0, elapsed > 0 ? r.wire_rx / elapsed : 0.0);
  out += strf("  \"destination_bytes_sent\": %" PRIu64 ",\n  \"destination_bytes_read\": %" PRIu64
              ",\n  \"payload_bytes_read\": %" PRIu64 ",\n  \"payload_bytes_sent\": %" PRIu64 ",\n",
              r.app_tx, r.app_rx, r.body_rx, r.body_tx);
  out += strf("  \"connections_opened\": %" PRIu64 ",\n  \"tls_full_handshakes\": %" PRIu64
              ",\n  \"tls_resumed_handshakes\": %" PRIu64 ",\n  \"held\": %" PRIu64 ",\n",
              r.connections, r.tls_full, r.tls_resumed, r.held);
  out += "  \"status\": {";
  bool first = true;
  for (int i = 0; i < 600; ++i) {
    if (r.status[i] == 0) continue;
    out += strf("%s\"%d\": %" PRIu64, first ? "" : ", ", i, r.status[i]);
    first = false;
  }
  out += "},\n  \"errors\": {";
  first = true;
  for (int i = 0; i < static_cast<int>(ErrorKind::kCount); ++i) {
    if (r.errors[i] == 0) continue;
    out += strf("%s\"%s\": %" PRIu64, first ? "" : ", ", errorName(static_cast<ErrorKind>(i)),
                r.errors[i]);
    first = false;
  }
  out += "},\n  \"proxy_refusals\": {";
  first = true;
  for (int i = 0; i < 600; ++i) {
    if (r.proxy_status[i] == 0) continue;
    out += strf("%s\"%d\": %" PRIu64, first ? "" : ", ", i, r.proxy_status[i]);
    first = false;
  }
  out += "},\n";
  out += "  \"latency\": " + jsonHistogram(r.latency) + ",\n";
  out += "  \"phases\": {\n";
  out += "    \"tcp_connect\": " + jsonHistogram(r.connect) + ",\n";
  out += "    \"proxy_handshake\": " + jsonHistogram(r.proxy_handshake) + ",\n";
  out += "    \"tls_destination\": " + jsonHistogram(r.dst_tls) + ",\n";
  out += "    \"first_byte\": " + jsonHistogram(r.ttfb) + "\n  }\n}\n";
  fputs(out.c_str(), stdout);
}

}  // namespace load
}  // namespace sluice
