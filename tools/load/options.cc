#include "tools/load/options.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

namespace sluice {
namespace load {

bool parseCount(const char* text, uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  double v = strtod(text, &end);
  if (errno != 0 || end == text || v < 0) return false;
  std::string_view suffix(end);
  if (suffix == "k" || suffix == "K") {
    v *= 1e3;
  } else if (suffix == "m" || suffix == "M") {
    v *= 1e6;
  } else if (suffix == "KiB") {
    v *= 1024;
  } else if (suffix == "MiB") {
    v *= 1024 * 1024;
  } else if (suffix == "GiB") {
    v *= 1024.0 * 1024 * 1024;
  } else if (!suffix.empty()) {
    return false;
  }
  if (v > 1e18) return false;
  out = static_cast<uint64_t>(v);
  return true;
}

bool parseDuration(const char* text, double& out) {
  char* end = nullptr;
  double v = strtod(text, &end);
  if (end == text || v < 0) return false;
  std::string_view suffix(end);
  if (suffix.empty() || suffix == "s") {
    out = v;
  } else if (suffix == "ms") {
    out = v / 1000;
  } else if (suffix == "m") {
    out = v * 60;
  } else if (suffix == "h") {
    out = v * 3600;
  } else {
    return false;
  }
  return true;
}

const char kUsage[] =
    "usage: sluice-load --dst URL [options]\n"
    "  -c, --connections N    concurrent connections (default 1)\n"
    "  -n, --requests N       total requests (default: run for -d)\n"
    "  -d, --duration T       run time: 10s, 500ms, 2m (default 10s when -n is not given)\n"
    "  -t, --threads N        event-loop threads (default 1)\n"
    "  --rate R               open loop: R requests/s in total, latency corrected for\n"
    "                         coordinated omission (default: closed loop)\n"
    "  --dst URL              http://, https://, ws://, wss:// or tcp://host:port (tunnels)\n"
    "  --proxy URL            direct | host:port (SOCKS5) | http:// | https:// | h2:// |\n"
    "                         h2c:// | socks5:// | socks5h://, each with optional user:key@\n"
    "  --proxy-http2          with an https:// proxy: HTTP/2 (same as h2://)\n"
    "  --h2-conns N           HTTP/2 to the proxy: connections per thread that the -c\n"
    "                         streams share (default 1; not with --new-conn)\n"
    "  --connect              through an http(s) proxy, tunnel with CONNECT even for http\n"
    "  --new-conn             a new connection per request (HTTP/2 to the proxy: plain\n"
    "                         requests each on a new connection, CONNECT a new stream)\n"
    "  --no-resume            with --new-conn and TLS: full handshakes, no session resumption\n"
    "  -m, --method M         request method (default GET, POST with a body)\n"
    "  -H, --header 'N: V'    extra request header (repeatable)\n"
    "  --body-bytes N         request body of N bytes (Content-Length)\n"
    "  --ca FILE              verify the destination's certificate against FILE\n"
    "  --crt FILE --key FILE  client certificate for TLS to the destination\n"
    "  --proxy-ca FILE        verify an https:// proxy's certificate against FILE\n"
    "  --ws                   WebSocket echo: each request is one message\n"
    "  --ws-size N            message size (default 128)\n"
    "  --ws-count N           messages per connection before reconnecting (default: no limit)\n"
    "  --ws-one-way           each message is answered by an empty one, not echoed (the\n"
    "                         destination's path is then sluice-origin's /ws/sink)\n"
    "  --tunnel-bytes N       raw tunnel throughput: each request moves N bytes\n"
    "  --tunnel-dir up|down   up: to sluice-origin's sink (default); down: from its source\n"
    "  --hold N               open N tunnels and hold them idle for -d (memory tests)\n"
    "  --hold-window W        with --hold: at most W tunnels opening at a time, in total\n"
    "                         (default: all at once)\n"
    "  --timeout T            per request and per connection setup (default 10s)\n"
    "  --json                 the report as JSON on stdout\n"
    "  -q, --quiet            no progress line\n";

bool parseArgs(int raw_argc, char** raw_argv, Options& o, std::string& error) {
  // wrk-style attached short options (-c64, -t2, -d5s) become two arguments.
  std::vector<std::string> split;
  split.emplace_back(raw_argv[0]);
  for (int i = 1; i < raw_argc; ++i) {
    std::string_view a = raw_argv[i];
    if (a.size() > 2 && a[0] == '-' && a[1] != '-' && strchr("cndtmHx", a[1]) != nullptr) {
      split.emplace_back(a.substr(0, 2));
      split.emplace_back(a.substr(2));
    } else {
      split.emplace_back(a);
    }
  }
  std::vector<char*> ptrs;
  for (std::string& x : split) ptrs.push_back(x.data());
  const int argc = static_cast<int>(ptrs.size());
  char** argv = ptrs.data();
  std::string dst_text, proxy_text;
  bool have_duration = false;
  std::string tunnel_dir = "up";
  bool ws = false;
  // The options whose value is kept as it is.
  const std::pair<std::string_view, std::string*> kText[] = {
      {"--dst", &dst_text},     {"--url", &dst_text},
      {"--proxy", &proxy_text}, {"-x", &proxy_text},
      {"-m", &o.method},        {"--method", &o.method},
      {"--ca", &o.ca},          {"--crt", &o.crt},
      {"--key", &o.key},        {"--proxy-ca", &o.proxy_ca},
  };
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&](const char*& out) {
      if (i + 1 >= argc) {
        error = std::string("missing value for ") + argv[i];
        return false;
      }
      out = argv[++i];
      return true;
    };
    const char* v = nullptr;
    uint64_t n = 0;
    std::string* text = nullptr;
    for (const auto& t : kText) {
      if (a == t.first) text = t.second;
    }
    if (text != nullptr) {
      if (!value(v)) return false;
      *text = v;
    } else if (a == "-c" || a == "--connections") {
      if (!value(v) || !parseCount(v, n) || n < 1 || n > 1000000) return error = "bad -c", false;
      o.connections = static_cast<int>(n);
    } else if (a == "-n" || a == "--requests") {
      if (!value(v) || !parseCount(v, n) || n < 1) return error = "bad -n", false;
      o.requests = n;
    } else if (a == "-d" || a == "--duration") {
      if (!value(v) || !parseDuration(v, o.duration_s) || o.duration_s <= 0)
        return error = "bad -d", false;
      have_duration = true;
    } else if (a == "-t" || a == "--threads") {
      if (!value(v) || !parseCount(v, n) || n < 1 || n > 256) return error = "bad -t", false;
      o.threads = static_cast<int>(n);
    } else if (a == "--rate") {
      if (!value(v) || !parseCount(v, n) || n < 1) return error = "bad --rate", false;
      o.rate = static_cast<double>(n);
    } else if (a == "--timeout") {
      if (!value(v) || !parseDuration(v, o.timeout_s) || o.timeout_s <= 0)
        return error = "bad --timeout", false;
    } else if (a == "--proxy-http2") {
      o.proxy.kind = ProxyKind::Http2;
    } else if (a == "--h2-conns") {
      if (!value(v) || !parseCount(v, n) || n < 1 || n > 10000)
        return error = "bad --h2-conns", false;
      o.h2_conns = static_cast<int>(n);
    } else if (a == "--connect") {
      o.force_connect = true;
    } else if (a == "--new-conn") {
      o.new_conn = true;
    } else if (a == "--no-resume") {
      o.no_resume = true;
    } else if (a == "-H" || a == "--header") {
      if (!value(v)) return false;
      o.headers.emplace_back(v);
    } else if (a == "--body-bytes") {
      if (!value(v) || !parseCount(v, o.body_bytes) || o.body_bytes > (uint64_t{1} << 30))
        return error = "bad --body-bytes (at most 1 GiB)", false;
    } else if (a == "--ws") {
      ws = true;
    } else if (a == "--ws-size") {
      if (!value(v) || !parseCount(v, o.ws_size) || o.ws_size > (uint64_t{1} << 30))
        return error = "bad --ws-size", false;
    } else if (a == "--ws-one-way") {
      ws = true;
      o.ws_one_way = true;
    } else if (a == "--ws-count") {
      if (!value(v) || !parseCount(v, o.ws_count)) return error = "bad --ws-count", false;
    } else if (a == "--tunnel-bytes") {
      if (!value(v) || !parseCount(v, o.tunnel_bytes) || o.tunnel_bytes < 1)
        return error = "bad --tunnel-bytes", false;
    } else if (a == "--tunnel-dir") {
      if (!value(v)) return false;
      tunnel_dir = v;
      if (tunnel_dir != "up" && tunnel_dir != "down") return error = "bad --tunnel-dir", false;
    } else if (a == "--hold") {
      if (!value(v) || !parseCount(v, o.hold) || o.hold < 1 || o.hold > 1000000)
        return error = "bad --hold", false;
    } else if (a == "--hold-window") {
      if (!value(v) || !parseCount(v, o.hold_window) || o.hold_window < 1 ||
          o.hold_window > 1000000)
        return error = "bad --hold-window", false;
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "-q" || a == "--quiet") {
      o.quiet = true;
    } else if (a == "-h" || a == "--help") {
      error = "";
      return false;
    } else if (!a.empty() && a[0] != '-' && dst_text.empty()) {
      dst_text = std::string(a);  // wrk-style positional URL
    } else {
      error = "unknown option " + std::string(a);
      return false;
    }
  }
  if (dst_text.empty()) return error = "--dst URL is required", false;
  std::string_view dt = dst_text;
  std::string tmp;
  if (dt.substr(0, 6) == "tcp://") {
    // A raw TCP destination (tunnel workloads): parse as http for host and port.
    tmp = "http://" + std::string(dt.substr(6));
    dt = tmp;
  }
  if (!parseUrl(dt, o.dst, error)) return error = "--dst: " + error, false;
  if (!tmp.empty()) {
    if (o.dst.path != "/") return error = "--dst tcp://host:port has no path", false;
    o.dst.scheme = "tcp";
    o.dst.path.clear();
  }
  if (o.dst.scheme == "socks5" || o.dst.scheme == "socks5h" || o.dst.scheme == "h2" ||
      o.dst.scheme == "h2c")
    return error = "--dst must be http(s)://, ws(s):// or tcp://", false;
  const bool kind_was_h2 = o.proxy.kind == ProxyKind::Http2;
  if (!proxy_text.empty()) {
    if (!parseProxy(proxy_text, o.proxy, error)) return error = "--proxy: " + error, false;
    if (kind_was_h2) {
      if (o.proxy.kind != ProxyKind::Https && o.proxy.kind != ProxyKind::Http2)
        return error = "--proxy-http2 goes with an https:// proxy", false;
      o.proxy.kind = ProxyKind::Http2;
    }
  } else if (kind_was_h2) {
    return error = "--proxy-http2 needs --proxy https://host:port", false;
  }
  if (o.dst.scheme == "ws" || o.dst.scheme == "wss") ws = true;
  if (ws) o.workload = Workload::WebSocket;
  if (o.tunnel_bytes > 0)
    o.workload = tunnel_dir == "up" ? Workload::TunnelUp : Workload::TunnelDown;
  if (o.hold > 0) {
    o.workload = Workload::Hold;
    o.connections = static_cast<int>(o.hold);
    if (o.requests > 0) return error = "--hold runs for -d, not -n", false;
  }
  if (o.hold_window > 0 && o.hold == 0) return error = "--hold-window goes with --hold", false;
  if ((o.workload == Workload::TunnelUp || o.workload == Workload::TunnelDown) && o.dst.tls())
    return error = "--tunnel-bytes moves raw bytes: use tcp://host:port", false;
  if (o.requests == 0 && !have_duration) o.duration_s = 10;
  if (o.requests > 0 && !have_duration) o.duration_s = 0;
  if (o.method.empty()) o.method = o.body_bytes > 0 ? "POST" : "GET";
  if (o.threads > o.connections) o.threads = o.connections;
  // The window is split over the threads like the tunnels: every thread gets at least one.
  if (o.hold_window > 0 && static_cast<uint64_t>(o.threads) > o.hold_window)
    o.threads = static_cast<int>(o.hold_window);
  // Every thread gets at least one request (a quota of 0 would mean "no limit").
  if (o.requests > 0 && static_cast<uint64_t>(o.threads) > o.requests)
    o.threads = static_cast<int>(o.requests);
  if (!o.crt.empty() != !o.key.empty()) return error = "--crt and --key go together", false;
  return true;
}

}  // namespace load
}  // namespace sluice
