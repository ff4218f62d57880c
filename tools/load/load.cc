// sluice-load: a proxy-aware HTTP load generator.
//
// One epoll loop per thread (-t), each owning its share of the -c connections. Every connection
// is a small state machine: TCP connect -> [TLS to the proxy] -> [SOCKS5 | CONNECT] -> [TLS to
// the destination] -> [WebSocket upgrade] -> requests. A request is one write of a request
// built once at start-up and, in the steady state, one read of the response, parsed in place
// and never stored. Counts and histograms are per thread and merged at the end.
//
// With HTTP/2 to the proxy, the connections of a thread are streams on a few shared sessions
// (H2Session, nghttp2): a plain request per stream, or a CONNECT stream whose bytes feed the
// same state machine (and BoringSSL, for TLS to the destination) through in-memory pipes.
//
// See docs/loadgen.md for the flags, the report and the coordinated-omission correction.

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "tools/load/histogram.h"
#include "tools/load/response_parser.h"
#include "tools/load/url.h"

namespace sluice {
namespace load {
namespace {

uint64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

std::atomic<bool> g_interrupted{false};

// ---------------------------------------------------------------------------------------------
// Options

enum class Workload { Http, WebSocket, TunnelUp, TunnelDown, Hold };

struct Options {
  int threads = 1;
  int connections = 1;
  uint64_t requests = 0;  // -n: total, 0 = by duration
  double duration_s = 0;  // -d
  double rate = 0;        // --rate: requests/s in total, 0 = closed loop
  double timeout_s = 10;  // per request (and per connection setup)
  bool new_conn = false;
  bool force_connect = false;
  bool no_resume = false;
  bool json = false;
  bool quiet = false;
  std::string method;  // default GET, or POST with a body
  std::vector<std::string> headers;
  uint64_t body_bytes = 0;
  Url dst;
  Proxy proxy;
  std::string ca, crt, key, proxy_ca;
  Workload workload = Workload::Http;
  uint64_t ws_size = 128;
  uint64_t ws_count = 0;  // messages per connection, 0 = no limit
  uint64_t tunnel_bytes = 0;
  uint64_t hold = 0;
  int h2_conns = 0;  // HTTP/2 to the proxy: connections per thread the streams share (0 = 1)
};

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

constexpr char kUsage[] =
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
    "                         streams share (default 1)\n"
    "  --connect              through an http(s) proxy, tunnel with CONNECT even for http\n"
    "  --new-conn             a new connection per request\n"
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
    "  --tunnel-bytes N       raw tunnel throughput: each request moves N bytes\n"
    "  --tunnel-dir up|down   up: to sluice-origin's sink (default); down: from its source\n"
    "  --hold N               open N tunnels and hold them idle for -d (memory tests)\n"
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
    if (a == "-c" || a == "--connections") {
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
    } else if (a == "--dst" || a == "--url") {
      if (!value(v)) return false;
      dst_text = v;
    } else if (a == "--proxy" || a == "-x") {
      if (!value(v)) return false;
      proxy_text = v;
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
    } else if (a == "-m" || a == "--method") {
      if (!value(v)) return false;
      o.method = v;
    } else if (a == "-H" || a == "--header") {
      if (!value(v)) return false;
      o.headers.emplace_back(v);
    } else if (a == "--body-bytes") {
      if (!value(v) || !parseCount(v, o.body_bytes) || o.body_bytes > (uint64_t{1} << 30))
        return error = "bad --body-bytes (at most 1 GiB)", false;
    } else if (a == "--ca") {
      if (!value(v)) return false;
      o.ca = v;
    } else if (a == "--crt") {
      if (!value(v)) return false;
      o.crt = v;
    } else if (a == "--key") {
      if (!value(v)) return false;
      o.key = v;
    } else if (a == "--proxy-ca") {
      if (!value(v)) return false;
      o.proxy_ca = v;
    } else if (a == "--ws") {
      ws = true;
    } else if (a == "--ws-size") {
      if (!value(v) || !parseCount(v, o.ws_size) || o.ws_size > (uint64_t{1} << 30))
        return error = "bad --ws-size", false;
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
  if ((o.workload == Workload::TunnelUp || o.workload == Workload::TunnelDown) && o.dst.tls())
    return error = "--tunnel-bytes moves raw bytes: use tcp://host:port", false;
  if (o.requests == 0 && !have_duration) o.duration_s = 10;
  if (o.requests > 0 && !have_duration) o.duration_s = 0;
  if (o.method.empty()) o.method = o.body_bytes > 0 ? "POST" : "GET";
  if (o.threads > o.connections) o.threads = o.connections;
  // Every thread gets at least one request (a quota of 0 would mean "no limit").
  if (o.requests > 0 && static_cast<uint64_t>(o.threads) > o.requests)
    o.threads = static_cast<int>(o.requests);
  if (!o.crt.empty() != !o.key.empty()) return error = "--crt and --key go together", false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Per-thread results

enum class ErrorKind : uint8_t {
  ConnectRefused,
  ConnectFailed,
  ProxyTls,
  ProxyStatus,  // CONNECT answered non-2xx
  SocksAuth,
  SocksReply,
  SocksProtocol,
  Tls,
  Reset,
  Closed,  // peer closed before the response was complete
  BadResponse,
  WebSocket,
  Timeout,
  Resolve,
  kCount,
};

const char* errorName(ErrorKind k) {
  static const char* const kNames[] = {
      "connect_refused", "connect_failed", "proxy_tls", "proxy_status", "socks_auth",
      "socks_reply",     "socks_protocol", "tls",       "reset",        "closed",
      "bad_response",    "websocket",      "timeout",   "resolve",
  };
  return kNames[static_cast<int>(k)];
}

struct Results {
  Histogram latency, connect, proxy_handshake, dst_tls, ttfb;
  uint64_t ok = 0;      // 2xx (101 for the WebSocket upgrade; echoed messages)
  uint64_t failed = 0;  // non-2xx and errors
  uint64_t incomplete = 0;
  uint64_t status[600] = {};
  uint64_t errors[static_cast<int>(ErrorKind::kCount)] = {};
  uint64_t proxy_status[600] = {};
  uint64_t wire_rx = 0, wire_tx = 0;  // socket bytes (TLS records included)
  uint64_t app_rx = 0, app_tx = 0;    // bytes to and from the destination's protocol
  uint64_t body_rx = 0;               // response body bytes (WebSocket/tunnel payload)
  uint64_t body_tx = 0;               // request body bytes (WebSocket/tunnel payload)
  uint64_t connections = 0;
  uint64_t tls_full = 0, tls_resumed = 0;
  uint64_t held = 0;
  uint64_t end_ns = 0;

  void merge(const Results& r) {
    latency.merge(r.latency);
    connect.merge(r.connect);
    proxy_handshake.merge(r.proxy_handshake);
    dst_tls.merge(r.dst_tls);
    ttfb.merge(r.ttfb);
    ok += r.ok;
    failed += r.failed;
    incomplete += r.incomplete;
    for (int i = 0; i < 600; ++i) status[i] += r.status[i], proxy_status[i] += r.proxy_status[i];
    for (int i = 0; i < static_cast<int>(ErrorKind::kCount); ++i) errors[i] += r.errors[i];
    wire_rx += r.wire_rx, wire_tx += r.wire_tx, app_rx += r.app_rx, app_tx += r.app_tx;
    body_rx += r.body_rx;
    body_tx += r.body_tx;
    connections += r.connections;
    tls_full += r.tls_full, tls_resumed += r.tls_resumed;
    held += r.held;
    end_ns = std::max(end_ns, r.end_ns);
  }
};

// ---------------------------------------------------------------------------------------------
// Shared, read-only state built at start-up

struct Shared {
  Shared() = default;
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  ~Shared() {
    if (dst_ctx != nullptr) SSL_CTX_free(dst_ctx);
    if (proxy_ctx != nullptr) SSL_CTX_free(proxy_ctx);
  }
  const Options* opts = nullptr;
  sockaddr_storage connect_addr{};  // the proxy, or the destination when direct
  socklen_t connect_len = 0;
  std::string request;          // the whole HTTP request, body included
  std::string connect_request;  // CONNECT, when tunnelling through an http(s) proxy
  std::string socks_greeting, socks_auth, socks_connect;
  std::string ws_upgrade;
  std::string ws_frame;       // one masked message
  std::string tunnel_header;  // "N\n"
  std::string pattern;        // 64 KiB of filler for tunnel uploads
  bool tunnel = false;        // CONNECT or SOCKS5 before the destination protocol
  bool socks = false;
  bool proxy_tls = false;
  bool dst_tls = false;
  bool head_request = false;
  SSL_CTX* dst_ctx = nullptr;
  SSL_CTX* proxy_ctx = nullptr;
  // HTTP/2 to the proxy: the request's (or CONNECT's) header block, built once.
  bool h2 = false;
  bool h2_tls = false;
  std::vector<std::pair<std::string, std::string>> h2_fields;
  std::vector<nghttp2_nv> h2_request_nv, h2_connect_nv;
  std::string body;  // the request body alone (HTTP/2 sends it in DATA frames)
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;  // stop issuing at this time; 0 = by count
};

// ---------------------------------------------------------------------------------------------
// Connections

class Worker;
class H2Session;

constexpr ssize_t kAgain = -1;
constexpr ssize_t kError = -2;

// What epoll hands back: a connection or an HTTP/2 session.
class Pollable {
 public:
  virtual ~Pollable() = default;
  virtual void onEvent(uint32_t events) = 0;
};

// Where TLS records go (the BIO below an SSL): a socket, or an HTTP/2 CONNECT stream.
class RawIo {
 public:
  virtual ~RawIo() = default;
  virtual ssize_t rawRead(char* buf, size_t len) = 0;
  virtual ssize_t rawWrite(const char* buf, size_t len) = 0;
};

class Conn : public Pollable, public RawIo {
 public:
  enum class State : uint8_t {
    Closed,
    Connecting,
    ProxyTls,
    SocksGreeting,
    SocksAuth,
    SocksConnect,
    HttpConnect,
    DstTls,
    WsUpgrade,
    Ready,
    Awaiting,
    Holding,
    H2Wait,     // the shared HTTP/2 session is connecting
    H2Connect,  // CONNECT stream opened, waiting for its response
  };

  Conn(Worker& w, int index, H2Session* h2) : w_(w), index_(index), h2_(h2) {}
  ~Conn() override {
    closeSocket();
    if (proxy_session_ != nullptr) SSL_SESSION_free(proxy_session_);
    if (dst_session_ != nullptr) SSL_SESSION_free(dst_session_);
  }

  void drive();
  void onEvent(uint32_t) override { drive(); }
  void onTimer() {
    timer_armed_ = false;
    drive();
  }
  // A request (or setup) is in progress: the thread must wait for it.
  bool busy() const {
    return has_ticket_ ||
           (state_ != State::Closed && state_ != State::Ready && state_ != State::Holding);
  }
  void checkTimeout(uint64_t now);
  void abandon();

  uint64_t next_intended = 0;  // open loop: this connection's next send time
  bool timer_armed_ = false;

  // TLS plumbing (called from the BIO methods).
  ssize_t rawRead(char* buf, size_t len) override;
  ssize_t rawWrite(const char* buf, size_t len) override;

  // HTTP/2 stream events (from the session's callbacks; progress happens in drive()).
  void h2Status(int status);
  void h2Headers(bool end_stream);
  void h2Data(const uint8_t* data, size_t len);
  void h2End() {
    stream_eof_ = true;
    markPending();
  }
  void h2Closed(uint32_t error) {
    stream_closed_ = true;
    stream_error_ = error;
    markPending();
  }
  ssize_t h2Read(int32_t stream_id, uint8_t* buf, size_t len, uint32_t* flags);
  // The session died: whatever this connection was doing failed with kind.
  void h2Lost(ErrorKind kind, bool during_setup);
  void h2SessionReady() { markPending(); }
  bool pending = false;
  SSL* proxySsl() { return proxy_ssl_; }
  void setWantWrite() { want_write_ = true; }
  void storeSession(SSL* ssl, SSL_SESSION* session);

 private:
  enum class Step { Continue, Block, Idle };
  Step step();
  Step stepClosed();
  Step stepConnecting();
  Step stepTls(SSL*& ssl, bool proxy);
  Step stepSocks();
  Step stepHttpConnect();
  Step stepWsUpgrade();
  Step stepReady();
  Step stepAwaiting();
  Step stepHolding();
  Step tunnelUp();  // the proxy handshake is done: next, TLS to the destination or requests
  Step destinationUp();
  Step h2Open();
  Step stepH2Connect();
  Step stepAwaitingH2();
  void markPending();

  bool acquire();
  void startSend(const char* data, size_t len);
  // Writes what is pending; false on would-block (or error: then state is Closed).
  bool flush();
  ssize_t ioRead(char* buf, size_t len);
  ssize_t ioWrite(const char* buf, size_t len);
  // Reads the handshake reply into hs_ until it holds `need` bytes.
  Step readHandshake(size_t need);
  Step fail(ErrorKind kind);
  void complete(int status);
  // graceful: an HTTP/2 tunnel ends with END_STREAM rather than RST_STREAM (proxies count
  // client resets: rapid-reset protection).
  void closeSocket(bool graceful = true);
  void updateEvents();
  SSL* newSsl(SSL_CTX* ctx, bool proxy);

  Worker& w_;
  int index_;
  int fd_ = -1;
  State state_ = State::Closed;
  uint32_t events_ = 0;
  bool want_write_ = false;
  bool has_ticket_ = false;
  bool counting_app_ = false;
  bool first_byte_ = false;
  uint8_t socks_stage_ = 0;
  uint64_t intended_ = 0;      // latency starts here
  uint64_t phase_start_ = 0;   // the current setup phase started here
  uint64_t sent_at_ = 0;       // request fully written (TTFB starts)
  uint64_t deadline_ = 0;      // 0 = none
  uint64_t messages_ = 0;      // on this connection (WebSocket, --ws-count)
  bool hold_started_ = false;  // --hold: this slot has made its one attempt
  uint64_t tunnel_left_ = 0;
  const char* wptr_ = nullptr;
  size_t wlen_ = 0;
  std::string hs_;  // handshake replies, accumulated
  SSL* proxy_ssl_ = nullptr;
  SSL* dst_ssl_ = nullptr;
  bool dst_tls_done_ = false;
  SSL_SESSION* proxy_session_ = nullptr;
  SSL_SESSION* dst_session_ = nullptr;
  ResponseParser parser_;
  // WebSocket frame reader
  uint8_t ws_hdr_[14];
  uint8_t ws_hdr_len_ = 0;
  uint8_t ws_hdr_need_ = 2;
  uint64_t ws_payload_left_ = 0;
  uint64_t ws_msg_bytes_ = 0;
  bool ws_in_payload_ = false;
  // Tunnel download: count so far; tunnel upload: the ack line.
  uint64_t tunnel_done_ = 0;
  // HTTP/2 to the proxy: this connection is one stream at a time on a shared session.
  H2Session* h2_;
  int32_t stream_ = -1;
  int h2_status_ = 0;
  bool h2_headers_ = false;
  bool stream_eof_ = false;
  bool stream_closed_ = false;
  bool pipe_blocked_ = false;
  uint32_t stream_error_ = 0;
  uint64_t h2_body_ = 0;  // response body bytes of the current plain request
  size_t body_off_ = 0;   // request body bytes handed to the session
  std::string in_pipe_;   // CONNECT stream: bytes received, not yet read
  size_t in_off_ = 0;
  std::string out_pipe_;  // CONNECT stream: bytes written, not yet framed
  size_t out_off_ = 0;
  static constexpr size_t kPipeLimit = 256 * 1024;
};

// One HTTP/2 connection to the proxy (TLS with ALPN h2, or cleartext with prior knowledge) that
// several Conns share, each using one stream at a time: a request, or a CONNECT tunnel.
class H2Session : public Pollable, public RawIo {
 public:
  explicit H2Session(Worker& w) : w_(w) { out_.reserve(64 * 1024); }
  ~H2Session() override {
    reset();
    if (session_ != nullptr) SSL_SESSION_free(session_);
  }

  // Ready for new streams: connected, and no GOAWAY received (a draining session finishes the
  // streams it has; new ones wait for the next connection).
  bool ready() const { return state_ == State::Ready && !goaway_; }
  bool connected() const { return state_ == State::Ready; }
  void onGoaway() { goaway_ = true; }
  void attach(Conn* c) { conns_.push_back(c); }
  // Starts connecting if idle.
  void ensure();
  void onEvent(uint32_t events) override;
  // Frames what nghttp2 has queued and writes it.
  void flush();
  int32_t submit(Conn* c, const std::vector<nghttp2_nv>& nv, bool with_data);
  void resume(int32_t id) {
    if (ngh_ != nullptr) nghttp2_session_resume_data(ngh_, id);
  }
  // The Conn is done with the stream: no more callbacks for it, and the proxy is told.
  void cancel(int32_t id, bool reset_stream);
  // The Conn is done with a tunnel: no more callbacks; END_STREAM goes out.
  void endStream(int32_t id) {
    if (ngh_ == nullptr) return;
    nghttp2_session_set_stream_user_data(ngh_, id, nullptr);
    nghttp2_session_resume_data(ngh_, id);
  }

  ssize_t rawRead(char* buf, size_t len) override;
  ssize_t rawWrite(const char* buf, size_t len) override;

 private:
  enum class State : uint8_t { Idle, Connecting, Tls, Ready };
  void becomeReady();
  void lost(ErrorKind kind);
  void reset();
  void updateEvents();
  bool writeOut();

  Worker& w_;
  State state_ = State::Idle;
  int fd_ = -1;
  SSL* ssl_ = nullptr;
  SSL_SESSION* session_ = nullptr;  // for resuming the next connection to the proxy
  nghttp2_session* ngh_ = nullptr;
  uint32_t events_ = 0;
  bool want_write_ = false;
  bool goaway_ = false;
  uint64_t phase_start_ = 0;
  std::string out_;
  size_t out_off_ = 0;
  std::vector<Conn*> conns_;
};

class Worker {
 public:
  Worker(const Shared& shared, int index, int first_conn, int conns, uint64_t quota)
      : shared_(shared), index_(index), quota_(quota) {
    const Options& o = *shared.opts;
    if (shared.h2) {
      // Held tunnels: proxies commonly allow 100 concurrent streams per connection.
      const int fallback = o.workload == Workload::Hold ? (conns + 99) / 100 : 1;
      const int sessions = std::max(1, std::min(o.h2_conns > 0 ? o.h2_conns : fallback, conns));
      for (int i = 0; i < sessions; ++i) sessions_.push_back(std::make_unique<H2Session>(*this));
    }
    pending_.reserve(static_cast<size_t>(conns));
    draining_.reserve(static_cast<size_t>(conns));
    for (int i = 0; i < conns; ++i) {
      H2Session* h2 = sessions_.empty() ? nullptr : sessions_[i % sessions_.size()].get();
      conns_.push_back(std::make_unique<Conn>(*this, first_conn + i, h2));
      if (h2 != nullptr) h2->attach(conns_.back().get());
    }
    if (o.rate > 0) {
      interval_ns_ = static_cast<uint64_t>(1e9 * o.connections / o.rate);
      for (int i = 0; i < conns; ++i) {
        conns_[i]->next_intended =
            shared.start_ns + static_cast<uint64_t>(1e9 * (first_conn + i) / o.rate);
      }
    }
    scratch_.resize(256 * 1024);
    std::vector<std::pair<uint64_t, Conn*>> storage;
    storage.reserve(static_cast<size_t>(conns) + 16);
    timers_ = TimerQueue(std::greater<>(), std::move(storage));
  }

  void run();
  const Shared& shared() const { return shared_; }
  const Options& opts() const { return *shared_.opts; }
  Results& results() { return results_; }
  char* scratch() { return scratch_.data(); }
  size_t scratchSize() const { return scratch_.size(); }
  int epollFd() const { return ep_; }
  bool stopping() const { return stopping_; }
  uint64_t intervalNs() const { return interval_ns_; }

  bool takeTicket() {
    if (stopping_) return false;
    if (quota_ > 0) {
      if (issued_ >= quota_) return false;
      ++issued_;
    }
    return true;
  }
  void schedule(Conn* c, uint64_t at) {
    if (c->timer_armed_) return;
    c->timer_armed_ = true;
    timers_.emplace(at, c);
  }
  void onDone() { completed_.store(results_.ok + results_.failed, std::memory_order_relaxed); }
  void addPending(Conn* c) { pending_.push_back(c); }
  // Drives the connections HTTP/2 events woke, then writes what the sessions framed.
  void runPending() {
    for (int round = 0; round < 8 && !pending_.empty(); ++round) {
      // Two lists swapped back and forth: driving may queue more, and nothing is allocated.
      draining_.swap(pending_);
      for (Conn* c : draining_) {
        c->pending = false;
        c->drive();
      }
      draining_.clear();
    }
    for (auto& h : sessions_) h->flush();
  }

  std::atomic<uint64_t> completed_{0};
  std::atomic<bool> finished_{false};

 private:
  using TimerQueue = std::priority_queue<std::pair<uint64_t, Conn*>,
                                         std::vector<std::pair<uint64_t, Conn*>>, std::greater<>>;
  const Shared& shared_;
  int index_;
  int ep_ = -1;
  uint64_t quota_;
  uint64_t issued_ = 0;
  uint64_t interval_ns_ = 0;
  bool stopping_ = false;
  std::vector<std::unique_ptr<H2Session>> sessions_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<Conn*> pending_;
  std::vector<Conn*> draining_;
  std::vector<char> scratch_;
  TimerQueue timers_;
  Results results_;
};

// -- BIO methods: TLS records go through Conn::rawRead/rawWrite (counted), and TLS to the
// destination through an https:// proxy goes through the proxy's TLS session.

int fdBioRead(BIO* b, char* out, int len) {
  BIO_clear_retry_flags(b);
  RawIo* c = static_cast<RawIo*>(BIO_get_data(b));
  const ssize_t n = c->rawRead(out, static_cast<size_t>(len));
  if (n == kAgain) {
    BIO_set_retry_read(b);
    return -1;
  }
  return n == kError ? -1 : static_cast<int>(n);
}

int fdBioWrite(BIO* b, const char* in, int len) {
  BIO_clear_retry_flags(b);
  RawIo* c = static_cast<RawIo*>(BIO_get_data(b));
  const ssize_t n = c->rawWrite(in, static_cast<size_t>(len));
  if (n == kAgain) {
    BIO_set_retry_write(b);
    return -1;
  }
  return n == kError ? -1 : static_cast<int>(n);
}

int sslBioRead(BIO* b, char* out, int len) {
  BIO_clear_retry_flags(b);
  Conn* c = static_cast<Conn*>(BIO_get_data(b));
  const int n = SSL_read(c->proxySsl(), out, len);
  if (n > 0) return n;
  const int err = SSL_get_error(c->proxySsl(), n);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    if (err == SSL_ERROR_WANT_WRITE) c->setWantWrite();
    BIO_set_retry_read(b);
    return -1;
  }
  return err == SSL_ERROR_ZERO_RETURN ? 0 : -1;
}

int sslBioWrite(BIO* b, const char* in, int len) {
  BIO_clear_retry_flags(b);
  Conn* c = static_cast<Conn*>(BIO_get_data(b));
  const int n = SSL_write(c->proxySsl(), in, len);
  if (n > 0) return n;
  const int err = SSL_get_error(c->proxySsl(), n);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    if (err == SSL_ERROR_WANT_WRITE) c->setWantWrite();
    BIO_set_retry_write(b);
    return -1;
  }
  return -1;
}

long bioCtrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

int bioCreate(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

BIO_METHOD* bioMethod(bool over_ssl) {
  static BIO_METHOD* fd_method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_TYPE_SOURCE_SINK, "sluice-load-fd");
    BIO_meth_set_read(m, fdBioRead);
    BIO_meth_set_write(m, fdBioWrite);
    BIO_meth_set_ctrl(m, bioCtrl);
    BIO_meth_set_create(m, bioCreate);
    return m;
  }();
  static BIO_METHOD* ssl_method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_TYPE_SOURCE_SINK, "sluice-load-tls-in-tls");
    BIO_meth_set_read(m, sslBioRead);
    BIO_meth_set_write(m, sslBioWrite);
    BIO_meth_set_ctrl(m, bioCtrl);
    BIO_meth_set_create(m, bioCreate);
    return m;
  }();
  return over_ssl ? ssl_method : fd_method;
}

int newSessionCallback(SSL* ssl, SSL_SESSION* session) {
  Conn* c = static_cast<Conn*>(SSL_get_app_data(ssl));
  if (c == nullptr) return 0;  // an HTTP/2 session's own TLS: nothing to resume per stream
  c->storeSession(ssl, session);
  return 1;  // we keep the reference
}

// -- Conn

ssize_t Conn::rawRead(char* buf, size_t len) {
  if (h2_ != nullptr) {
    // A CONNECT stream: what DATA frames brought.
    const size_t avail = in_pipe_.size() - in_off_;
    if (avail == 0) {
      if (stream_eof_ || stream_closed_) return stream_error_ == 0 ? 0 : kError;
      return kAgain;
    }
    const size_t n = std::min(avail, len);
    memcpy(buf, in_pipe_.data() + in_off_, n);
    in_off_ += n;
    if (in_off_ == in_pipe_.size()) {
      in_pipe_.clear();
      in_off_ = 0;
    }
    return static_cast<ssize_t>(n);
  }
  for (;;) {
    const ssize_t n = ::read(fd_, buf, len);
    if (n >= 0) {
      w_.results().wire_rx += static_cast<uint64_t>(n);
      return n;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return kAgain;
    return kError;
  }
}

ssize_t Conn::rawWrite(const char* buf, size_t len) {
  if (h2_ != nullptr) {
    if (stream_ < 0 || stream_closed_ || !h2_->ready()) return kError;
    if (out_pipe_.size() - out_off_ >= kPipeLimit) {
      pipe_blocked_ = true;  // h2Read() wakes us when the session has taken some
      return kAgain;
    }
    const size_t n = std::min(len, kPipeLimit);
    out_pipe_.append(buf, n);
    h2_->resume(stream_);
    return static_cast<ssize_t>(n);
  }
  for (;;) {
    const ssize_t n = ::send(fd_, buf, len, MSG_NOSIGNAL);
    if (n >= 0) {
      w_.results().wire_tx += static_cast<uint64_t>(n);
      return n;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      want_write_ = true;
      return kAgain;
    }
    return kError;
  }
}

ssize_t Conn::ioRead(char* buf, size_t len) {
  SSL* ssl = dst_tls_done_ ? dst_ssl_ : proxy_ssl_;
  ssize_t n;
  if (ssl == nullptr) {
    n = rawRead(buf, len);
  } else {
    const int r = SSL_read(ssl, buf, static_cast<int>(std::min<size_t>(len, INT32_MAX)));
    if (r > 0) {
      n = r;
    } else {
      const int err = SSL_get_error(ssl, r);
      if (err == SSL_ERROR_WANT_READ) return kAgain;
      if (err == SSL_ERROR_WANT_WRITE) {
        want_write_ = true;
        return kAgain;
      }
      // A close without close_notify is still an end of stream to a load generator.
      if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && ERR_peek_error() == 0)) {
        ERR_clear_error();
        return 0;
      }
      ERR_clear_error();
      return kError;
    }
  }
  if (n > 0 && counting_app_) w_.results().app_rx += static_cast<uint64_t>(n);
  return n;
}

ssize_t Conn::ioWrite(const char* buf, size_t len) {
  SSL* ssl = dst_tls_done_ ? dst_ssl_ : proxy_ssl_;
  ssize_t n;
  if (ssl == nullptr) {
    n = rawWrite(buf, len);
  } else {
    const int r = SSL_write(ssl, buf, static_cast<int>(std::min<size_t>(len, 1 << 30)));
    if (r > 0) {
      n = r;
    } else {
      const int err = SSL_get_error(ssl, r);
      if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
        if (err == SSL_ERROR_WANT_WRITE) want_write_ = true;
        return kAgain;
      }
      ERR_clear_error();
      return kError;
    }
  }
  if (n > 0 && counting_app_) w_.results().app_tx += static_cast<uint64_t>(n);
  return n;
}

void Conn::storeSession(SSL* ssl, SSL_SESSION* session) {
  SSL_SESSION*& slot = ssl == proxy_ssl_ ? proxy_session_ : dst_session_;
  if (slot != nullptr) SSL_SESSION_free(slot);
  slot = session;
}

SSL* Conn::newSsl(SSL_CTX* ctx, bool proxy) {
  SSL* ssl = SSL_new(ctx);
  const Options& o = w_.opts();
  const Url& peer = proxy ? o.proxy.url : o.dst;
  in6_addr ignored;
  const bool ip_literal = inet_pton(AF_INET, peer.host.c_str(), &ignored) == 1 ||
                          inet_pton(AF_INET6, peer.host.c_str(), &ignored) == 1;
  if (!ip_literal) SSL_set_tlsext_host_name(ssl, peer.host.c_str());
  const bool verify = proxy ? !o.proxy_ca.empty() : !o.ca.empty();
  if (verify) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    if (ip_literal) {
      X509_VERIFY_PARAM_set1_ip_asc(param, peer.host.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, peer.host.c_str(), peer.host.size());
    }
  }
  SSL_set_app_data(ssl, this);
  const bool over_ssl = !proxy && proxy_ssl_ != nullptr;
  BIO* bio = BIO_new(bioMethod(over_ssl));
  if (over_ssl) {
    BIO_set_data(bio, this);
  } else {
    BIO_set_data(bio, static_cast<RawIo*>(this));
  }
  SSL_set_bio(ssl, bio, bio);
  SSL_set_connect_state(ssl);
  SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_SESSION* session = proxy ? proxy_session_ : dst_session_;
  if (session != nullptr && !o.no_resume) SSL_set_session(ssl, session);
  return ssl;
}

void Conn::closeSocket(bool graceful) {
  if (h2_ != nullptr && stream_ >= 0) {
    const int32_t id = stream_;
    stream_ = -1;
    if (graceful && !stream_closed_ && w_.shared().tunnel) {
      h2_->endStream(id);
    } else {
      h2_->cancel(id, !stream_closed_);
    }
  }
  if (dst_ssl_ != nullptr) SSL_free(dst_ssl_);
  if (proxy_ssl_ != nullptr) SSL_free(proxy_ssl_);
  dst_ssl_ = proxy_ssl_ = nullptr;
  dst_tls_done_ = false;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  events_ = 0;
  state_ = State::Closed;
  counting_app_ = false;
  wlen_ = 0;
  messages_ = 0;
}

void Conn::updateEvents() {
  if (fd_ < 0) return;
  const uint32_t want =
      EPOLLIN |
      ((want_write_ || state_ == State::Connecting) ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  if (want == events_) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.ptr = static_cast<Pollable*>(this);
  epoll_ctl(w_.epollFd(), events_ == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd_, &ev);
  events_ = want;
}

void Conn::drive() {
  want_write_ = false;
  while (step() == Step::Continue) {
  }
  updateEvents();
}

Conn::Step Conn::step() {
  switch (state_) {
    case State::Closed:
      return stepClosed();
    case State::Connecting:
      return stepConnecting();
    case State::ProxyTls:
      return stepTls(proxy_ssl_, true);
    case State::SocksGreeting:
    case State::SocksAuth:
    case State::SocksConnect:
      return stepSocks();
    case State::HttpConnect:
      return stepHttpConnect();
    case State::DstTls:
      return stepTls(dst_ssl_, false);
    case State::WsUpgrade:
      return stepWsUpgrade();
    case State::Ready:
      return stepReady();
    case State::Awaiting:
      return stepAwaiting();
    case State::Holding:
      return stepHolding();
    case State::H2Wait:
      if (!h2_->ready()) return Step::Block;
      return h2Open();
    case State::H2Connect:
      return stepH2Connect();
  }
  return Step::Idle;
}

bool Conn::acquire() {
  if (has_ticket_) return true;
  if (w_.stopping()) return false;
  const Options& o = w_.opts();
  const uint64_t now = nowNs();
  if (o.rate > 0 && now < next_intended) {
    w_.schedule(this, next_intended);
    return false;
  }
  if (!w_.takeTicket()) return false;
  has_ticket_ = true;
  if (o.rate > 0) {
    // Open loop: latency counts from when the request should have gone out, so time spent
    // waiting behind a slow response is not hidden (coordinated omission).
    intended_ = next_intended;
    next_intended += w_.intervalNs();
  } else {
    intended_ = now;
  }
  deadline_ = now + static_cast<uint64_t>(o.timeout_s * 1e9);
  return true;
}

Conn::Step Conn::fail(ErrorKind kind) {
  Results& r = w_.results();
  if (state_ == State::Holding || (w_.opts().workload == Workload::Hold)) {
    ++r.errors[static_cast<int>(kind)];
  } else if (has_ticket_) {
    ++r.errors[static_cast<int>(kind)];
    ++r.failed;
    has_ticket_ = false;
    w_.onDone();
  } else {
    // Nothing was in flight (an idle keep-alive connection the peer closed): not a failure.
  }
  closeSocket(false);
  deadline_ = 0;
  if (w_.opts().workload == Workload::Hold) return Step::Idle;
  return Step::Continue;
}

void Conn::complete(int status) {
  Results& r = w_.results();
  const uint64_t now = nowNs();
  r.latency.record(now - intended_);
  if (status >= 0 && status < 600) ++r.status[status];
  const bool good = w_.opts().workload != Workload::Http || (status >= 200 && status < 300);
  if (good) {
    ++r.ok;
  } else {
    ++r.failed;
  }
  has_ticket_ = false;
  deadline_ = 0;
  w_.onDone();
}

void Conn::abandon() {
  if (has_ticket_) {
    ++w_.results().incomplete;
    has_ticket_ = false;
  }
  closeSocket();
}

void Conn::checkTimeout(uint64_t now) {
  if (deadline_ != 0 && now > deadline_ && busy()) {
    if (getenv("SLUICE_LOAD_DEBUG") != nullptr) {
      fprintf(stderr, "timeout: conn %d state %d stream %d closed %d eof %d headers %d status %d\n",
              index_, static_cast<int>(state_), stream_, stream_closed_, stream_eof_, h2_headers_,
              h2_status_);
    }
    want_write_ = false;
    fail(ErrorKind::Timeout);
    // Reconnect (or take the next request) on the next event-loop pass.
    drive();
  }
}

Conn::Step Conn::stepClosed() {
  const Options& o = w_.opts();
  if (o.workload == Workload::Hold) {
    if (hold_started_ || w_.stopping()) return Step::Idle;  // each hold slot connects once
    hold_started_ = true;
    deadline_ = nowNs() + static_cast<uint64_t>(o.timeout_s * 1e9);
    intended_ = nowNs();
  } else if (!acquire()) {
    return Step::Idle;
  }
  const Shared& s = w_.shared();
  if (h2_ != nullptr) {
    if (!h2_->ready()) {
      state_ = State::H2Wait;
      h2_->ensure();
      return Step::Block;
    }
    return h2Open();
  }
  fd_ = ::socket(s.connect_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return fail(ErrorKind::ConnectFailed);
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ++w_.results().connections;
  phase_start_ = nowNs();
  if (::connect(fd_, reinterpret_cast<const sockaddr*>(&s.connect_addr), s.connect_len) != 0 &&
      errno != EINPROGRESS) {
    const ErrorKind kind =
        errno == ECONNREFUSED ? ErrorKind::ConnectRefused : ErrorKind::ConnectFailed;
    return fail(kind);
  }
  state_ = State::Connecting;
  want_write_ = true;
  return Step::Block;
}

Conn::Step Conn::stepConnecting() {
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0)
    return fail(err == ECONNREFUSED ? ErrorKind::ConnectRefused : ErrorKind::ConnectFailed);
  // Still connecting: writable is what says it is done.
  sockaddr_storage peer;
  socklen_t plen = sizeof(peer);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) {
    if (errno == ENOTCONN) {
      want_write_ = true;
      return Step::Block;
    }
    return fail(ErrorKind::ConnectFailed);
  }
  const uint64_t now = nowNs();
  w_.results().connect.record(now - phase_start_);
  phase_start_ = now;
  const Shared& s = w_.shared();
  if (s.proxy_tls) {
    proxy_ssl_ = newSsl(s.proxy_ctx, true);
    state_ = State::ProxyTls;
    return Step::Continue;
  }
  return tunnelUp();
}

// After TCP (and TLS to the proxy): the proxy's own handshake, if any.
Conn::Step Conn::tunnelUp() {
  const Shared& s = w_.shared();
  hs_.clear();
  if (s.socks) {
    state_ = State::SocksGreeting;
    socks_stage_ = 0;
    return Step::Continue;
  }
  if (s.tunnel) {
    state_ = State::HttpConnect;
    socks_stage_ = 0;
    return Step::Continue;
  }
  if (w_.opts().proxy.kind != ProxyKind::Direct) {
    // Absolute-form: the proxy handshake is TLS to the proxy, if any.
    if (s.proxy_tls) w_.results().proxy_handshake.record(nowNs() - phase_start_);
  }
  return destinationUp();
}

// The path to the destination is open: TLS to it, then the WebSocket upgrade, then requests.
Conn::Step Conn::destinationUp() {
  const Shared& s = w_.shared();
  phase_start_ = nowNs();
  if (s.dst_tls && dst_ssl_ == nullptr) {
    dst_ssl_ = newSsl(s.dst_ctx, false);
    state_ = State::DstTls;
    return Step::Continue;
  }
  counting_app_ = true;
  const Options& o = w_.opts();
  if (o.workload == Workload::Hold) {
    ++w_.results().held;
    deadline_ = 0;
    state_ = State::Holding;
    return Step::Continue;
  }
  if (o.workload == Workload::WebSocket) {
    state_ = State::WsUpgrade;
    socks_stage_ = 0;
    parser_.reset(false);
    return Step::Continue;
  }
  state_ = State::Ready;
  return Step::Continue;
}

Conn::Step Conn::stepTls(SSL*& ssl, bool proxy) {
  const int r = SSL_do_handshake(ssl);
  if (r == 1) {
    Results& res = w_.results();
    if (SSL_session_reused(ssl)) {
      ++res.tls_resumed;
    } else {
      ++res.tls_full;
    }
    if (proxy) return tunnelUp();
    res.dst_tls.record(nowNs() - phase_start_);
    dst_tls_done_ = true;
    return destinationUp();
  }
  const int err = SSL_get_error(ssl, r);
  if (err == SSL_ERROR_WANT_READ) return Step::Block;
  if (err == SSL_ERROR_WANT_WRITE) {
    want_write_ = true;
    return Step::Block;
  }
  if (getenv("SLUICE_LOAD_DEBUG") != nullptr) ERR_print_errors_fp(stderr);
  ERR_clear_error();
  return fail(proxy ? ErrorKind::ProxyTls : ErrorKind::Tls);
}

void Conn::startSend(const char* data, size_t len) {
  wptr_ = data;
  wlen_ = len;
}

bool Conn::flush() {
  while (wlen_ > 0) {
    const ssize_t n = ioWrite(wptr_, wlen_);
    if (n == kAgain) return false;
    if (n <= 0) {
      fail(ErrorKind::Reset);
      return false;
    }
    wptr_ += n;
    wlen_ -= static_cast<size_t>(n);
  }
  return true;
}

Conn::Step Conn::readHandshake(size_t need) {
  char buf[512];
  while (hs_.size() < need) {
    // Never read past the reply: the bytes after it belong to the destination.
    const size_t want = std::min(sizeof(buf), need - hs_.size());
    const ssize_t n = ioRead(buf, want);
    if (n == kAgain) return Step::Block;
    if (n == 0) return fail(ErrorKind::Closed);
    if (n < 0) return fail(ErrorKind::Reset);
    hs_.append(buf, static_cast<size_t>(n));
  }
  return Step::Continue;
}

Conn::Step Conn::stepSocks() {
  const Shared& s = w_.shared();
  Results& r = w_.results();
  // socks_stage_: even = write the message, odd = read its reply.
  switch (state_) {
    case State::SocksGreeting:
      if (socks_stage_ == 0) {
        startSend(s.socks_greeting.data(), s.socks_greeting.size());
        socks_stage_ = 1;
      }
      if (!flush()) return state_ == State::Closed ? Step::Continue : Step::Block;
      if (Step st = readHandshake(2); st != Step::Continue) return st;
      if (static_cast<uint8_t>(hs_[0]) != 5) return fail(ErrorKind::SocksProtocol);
      if (static_cast<uint8_t>(hs_[1]) == 0x02 && !s.socks_auth.empty()) {
        state_ = State::SocksAuth;
      } else if (static_cast<uint8_t>(hs_[1]) == 0x00) {
        state_ = State::SocksConnect;
      } else {
        return fail(ErrorKind::SocksAuth);  // 0xFF: no acceptable method
      }
      socks_stage_ = 0;
      hs_.clear();
      return Step::Continue;
    case State::SocksAuth:
      if (socks_stage_ == 0) {
        startSend(s.socks_auth.data(), s.socks_auth.size());
        socks_stage_ = 1;
      }
      if (!flush()) return state_ == State::Closed ? Step::Continue : Step::Block;
      if (Step st = readHandshake(2); st != Step::Continue) return st;
      if (hs_[1] != 0) return fail(ErrorKind::SocksAuth);
      state_ = State::SocksConnect;
      socks_stage_ = 0;
      hs_.clear();
      return Step::Continue;
    default: {
      if (socks_stage_ == 0) {
        startSend(s.socks_connect.data(), s.socks_connect.size());
        socks_stage_ = 1;
      }
      if (!flush()) return state_ == State::Closed ? Step::Continue : Step::Block;
      if (Step st = readHandshake(5); st != Step::Continue) return st;
      if (static_cast<uint8_t>(hs_[0]) != 5) return fail(ErrorKind::SocksProtocol);
      if (hs_[1] != 0) {
        const uint8_t rep = static_cast<uint8_t>(hs_[1]);
        ++r.proxy_status[rep];
        return fail(ErrorKind::SocksReply);
      }
      // VER REP RSV ATYP BND.ADDR BND.PORT: ATYP 1 = 4 bytes, 4 = 16, 3 = length byte + name.
      size_t need;
      switch (static_cast<uint8_t>(hs_[3])) {
        case 1:
          need = 4 + 4 + 2;
          break;
        case 4:
          need = 4 + 16 + 2;
          break;
        case 3:
          need = 4 + 1 + static_cast<uint8_t>(hs_[4]) + 2;
          break;
        default:
          return fail(ErrorKind::SocksProtocol);
      }
      if (Step st = readHandshake(need); st != Step::Continue) return st;
      r.proxy_handshake.record(nowNs() - phase_start_);
      return destinationUp();
    }
  }
}

Conn::Step Conn::stepHttpConnect() {
  const Shared& s = w_.shared();
  if (socks_stage_ == 0) {
    startSend(s.connect_request.data(), s.connect_request.size());
    parser_.reset(true);
    socks_stage_ = 1;
  }
  if (!flush()) return state_ == State::Closed ? Step::Continue : Step::Block;
  // Read the reply a little at a time: bytes after it belong to the tunnel (a server-first
  // protocol or an early TLS record), so never read past its end.
  char buf[256];
  for (;;) {
    const ssize_t n = ioRead(buf, sizeof(buf));
    if (n == kAgain) return Step::Block;
    if (n == 0) return fail(ErrorKind::Closed);
    if (n < 0) return fail(ErrorKind::Reset);
    size_t used = 0;
    const ResponseParser::Result res = parser_.feed(buf, static_cast<size_t>(n), used);
    if (res == ResponseParser::Result::Error) return fail(ErrorKind::BadResponse);
    if (res == ResponseParser::Result::More) continue;
    const int st = parser_.status();
    if (st < 200 || st >= 300) {
      ++w_.results().proxy_status[st < 600 ? st : 599];
      return fail(ErrorKind::ProxyStatus);
    }
    if (used != static_cast<size_t>(n)) return fail(ErrorKind::BadResponse);
    w_.results().proxy_handshake.record(nowNs() - phase_start_);
    return destinationUp();
  }
}

Conn::Step Conn::stepWsUpgrade() {
  const Shared& s = w_.shared();
  if (socks_stage_ == 0) {
    startSend(s.ws_upgrade.data(), s.ws_upgrade.size());
    socks_stage_ = 1;
  }
  if (!flush()) return state_ == State::Closed ? Step::Continue : Step::Block;
  char* buf = w_.scratch();
  for (;;) {
    const ssize_t n = ioRead(buf, 4096);
    if (n == kAgain) return Step::Block;
    if (n == 0) return fail(ErrorKind::Closed);
    if (n < 0) return fail(ErrorKind::Reset);
    size_t used = 0;
    const ResponseParser::Result res = parser_.feed(buf, static_cast<size_t>(n), used);
    if (res == ResponseParser::Result::Error) return fail(ErrorKind::BadResponse);
    if (res == ResponseParser::Result::More) continue;
    if (parser_.status() != 101 || !parser_.websocketAccepted() || used != static_cast<size_t>(n)) {
      const int st = parser_.status();
      ++w_.results().proxy_status[st > 0 && st < 600 ? st : 599];
      return fail(ErrorKind::WebSocket);
    }
    w_.results().proxy_handshake.record(nowNs() - phase_start_);
    ws_hdr_len_ = 0;
    ws_hdr_need_ = 2;
    ws_in_payload_ = false;
    state_ = State::Ready;
    return Step::Continue;
  }
}

Conn::Step Conn::stepReady() {
  const Shared& s = w_.shared();
  const Options& o = w_.opts();
  if (!acquire()) {
    if (h2_ != nullptr && !s.tunnel) return Step::Idle;  // no stream open between requests
    // Idle keep-alive connection: anything readable now is the peer closing it.
    char buf[64];
    const ssize_t n = ioRead(buf, sizeof(buf));
    if (n == kAgain) return Step::Idle;
    closeSocket();
    return Step::Continue;
  }
  first_byte_ = false;
  if (h2_ != nullptr && !s.tunnel) {
    // A plain request on its own stream.
    if (!h2_->ready()) {
      state_ = State::Closed;  // keeps the request: it goes out on the next connection
      return Step::Continue;
    }
    stream_eof_ = stream_closed_ = h2_headers_ = false;
    h2_status_ = 0;
    stream_error_ = 0;
    h2_body_ = 0;
    body_off_ = 0;
    stream_ = h2_->submit(this, s.h2_request_nv, !s.body.empty());
    if (stream_ < 0) return fail(ErrorKind::BadResponse);
    sent_at_ = nowNs();
    state_ = State::Awaiting;
    return Step::Block;
  }
  switch (o.workload) {
    case Workload::Http:
      parser_.reset(s.head_request);
      startSend(s.request.data(), s.request.size());
      break;
    case Workload::WebSocket:
      ws_msg_bytes_ = 0;
      startSend(s.ws_frame.data(), s.ws_frame.size());
      break;
    case Workload::TunnelUp:
      tunnel_left_ = o.tunnel_bytes;
      tunnel_done_ = 0;
      hs_.clear();
      startSend(s.tunnel_header.data(), s.tunnel_header.size());
      break;
    case Workload::TunnelDown:
      tunnel_left_ = 0;
      tunnel_done_ = 0;
      startSend(s.tunnel_header.data(), s.tunnel_header.size());
      break;
    case Workload::Hold:
      return Step::Idle;
  }
  state_ = State::Awaiting;
  sent_at_ = 0;
  if (!flush()) return state_ == State::Closed ? Step::Continue : Step::Block;
  if (o.workload == Workload::TunnelUp) return Step::Continue;  // the payload follows
  sent_at_ = nowNs();
  // The response cannot be here yet: wait for readiness instead of a read that would block.
  return Step::Block;
}

Conn::Step Conn::stepAwaitingH2() {
  if (!stream_closed_) return Step::Block;
  const int32_t done = stream_;
  stream_ = -1;
  h2_->cancel(done, false);
  if (stream_error_ == NGHTTP2_REFUSED_STREAM) {
    // Not processed (the proxy is going away, or at its stream limit): send it again.
    state_ = State::Closed;
    return Step::Continue;
  }
  if (!h2_headers_ || !stream_eof_ || stream_error_ != 0) return fail(ErrorKind::Reset);
  Results& r = w_.results();
  r.body_rx += h2_body_;
  r.body_tx += w_.opts().body_bytes;
  complete(h2_status_);
  state_ = State::Ready;
  return Step::Continue;
}

Conn::Step Conn::stepAwaiting() {
  const Options& o = w_.opts();
  const Shared& s = w_.shared();
  Results& r = w_.results();
  if (h2_ != nullptr && !s.tunnel) return stepAwaitingH2();
  if (!flush()) return state_ == State::Closed ? Step::Continue : Step::Block;
  if (o.workload == Workload::TunnelUp && tunnel_left_ > 0) {
    // Stream the payload from the shared pattern, one socket write per chunk.
    while (tunnel_left_ > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(tunnel_left_, s.pattern.size()));
      startSend(s.pattern.data(), n);
      tunnel_left_ -= n;
      if (!flush()) return state_ == State::Closed ? Step::Continue : Step::Block;
    }
  }
  if (sent_at_ == 0) sent_at_ = nowNs();
  char* buf = w_.scratch();
  const size_t cap = w_.scratchSize();
  for (;;) {
    const ssize_t n = ioRead(buf, cap);
    if (n == kAgain) return Step::Block;
    if (n < 0) return fail(ErrorKind::Reset);
    if (n > 0 && !first_byte_) {
      first_byte_ = true;
      r.ttfb.record(nowNs() - sent_at_);
    }
    switch (o.workload) {
      case Workload::Http: {
        if (n == 0) {
          if (!parser_.finishOnClose()) return fail(ErrorKind::Closed);
          r.body_rx += parser_.bodyBytes();
          r.body_tx += o.body_bytes;
          complete(parser_.status());
          closeSocket();
          return Step::Continue;
        }
        size_t used = 0;
        const ResponseParser::Result res = parser_.feed(buf, static_cast<size_t>(n), used);
        if (res == ResponseParser::Result::Error) return fail(ErrorKind::BadResponse);
        if (res == ResponseParser::Result::More) break;
        if (used != static_cast<size_t>(n)) return fail(ErrorKind::BadResponse);
        r.body_rx += parser_.bodyBytes();
        r.body_tx += o.body_bytes;
        complete(parser_.status());
        if (o.new_conn || parser_.close()) {
          closeSocket();
        } else {
          state_ = State::Ready;
        }
        return Step::Continue;
      }
      case Workload::WebSocket: {
        if (n == 0) return fail(ErrorKind::Closed);
        // Server frames are unmasked: FIN/opcode, length (7, 16 or 64 bit), payload.
        size_t i = 0;
        const size_t len = static_cast<size_t>(n);
        bool done = false;
        while (i < len) {
          if (!ws_in_payload_) {
            while (i < len && ws_hdr_len_ < ws_hdr_need_) {
              ws_hdr_[ws_hdr_len_++] = static_cast<uint8_t>(buf[i++]);
              if (ws_hdr_len_ == 2) {
                const uint8_t l7 = ws_hdr_[1] & 0x7f;
                if (ws_hdr_[1] & 0x80) return fail(ErrorKind::WebSocket);  // masked from server
                ws_hdr_need_ = l7 == 126 ? 4 : l7 == 127 ? 10 : 2;
              }
            }
            if (ws_hdr_len_ < ws_hdr_need_) break;
            const uint8_t opcode = ws_hdr_[0] & 0x0f;
            if (opcode >= 8) return fail(ErrorKind::WebSocket);  // close/ping: not in an echo
            uint64_t plen = ws_hdr_[1] & 0x7f;
            if (plen == 126) plen = (uint64_t{ws_hdr_[2]} << 8) | ws_hdr_[3];
            if (plen == 127) {
              plen = 0;
              for (int k = 2; k < 10; ++k) plen = (plen << 8) | ws_hdr_[k];
            }
            ws_payload_left_ = plen;
            ws_in_payload_ = true;
          }
          const size_t take = static_cast<size_t>(std::min<uint64_t>(ws_payload_left_, len - i));
          i += take;
          ws_payload_left_ -= take;
          ws_msg_bytes_ += take;
          if (ws_payload_left_ == 0) {
            ws_in_payload_ = false;
            const bool fin = ws_hdr_[0] & 0x80;
            ws_hdr_len_ = 0;
            ws_hdr_need_ = 2;
            if (fin) {
              done = true;
              break;
            }
          }
        }
        if (!done) break;
        if (i != len || ws_msg_bytes_ != o.ws_size) return fail(ErrorKind::WebSocket);
        r.body_rx += ws_msg_bytes_;
        r.body_tx += o.ws_size;
        complete(101);
        ++messages_;
        if (o.new_conn || (o.ws_count > 0 && messages_ >= o.ws_count)) {
          closeSocket();
        } else {
          state_ = State::Ready;
        }
        return Step::Continue;
      }
      case Workload::TunnelUp: {
        // The sink acknowledges with the byte count it received and a newline.
        if (n == 0) return fail(ErrorKind::Closed);
        hs_.append(buf, static_cast<size_t>(n));
        const size_t nl = hs_.find('\n');
        if (nl == std::string::npos) {
          if (hs_.size() > 32) return fail(ErrorKind::BadResponse);
          break;
        }
        if (nl + 1 != hs_.size() || strtoull(hs_.c_str(), nullptr, 10) != o.tunnel_bytes)
          return fail(ErrorKind::BadResponse);
        r.body_tx += o.tunnel_bytes;
        complete(200);
        if (o.new_conn) {
          closeSocket();
        } else {
          state_ = State::Ready;
        }
        return Step::Continue;
      }
      case Workload::TunnelDown: {
        if (n == 0) return fail(ErrorKind::Closed);
        tunnel_done_ += static_cast<uint64_t>(n);
        r.body_rx += static_cast<uint64_t>(n);
        if (tunnel_done_ < o.tunnel_bytes) break;
        if (tunnel_done_ > o.tunnel_bytes) return fail(ErrorKind::BadResponse);
        complete(200);
        if (o.new_conn) {
          closeSocket();
        } else {
          state_ = State::Ready;
        }
        return Step::Continue;
      }
      case Workload::Hold:
        return Step::Idle;
    }
    if (static_cast<size_t>(n) < cap) {
      // A short read drained the socket (for plain TCP): wait rather than read EAGAIN.
      if (dst_ssl_ == nullptr && proxy_ssl_ == nullptr) return Step::Block;
    }
  }
}

Conn::Step Conn::stepHolding() {
  char* buf = w_.scratch();
  const ssize_t n = ioRead(buf, w_.scratchSize());
  if (n == kAgain || n > 0) return Step::Idle;
  --w_.results().held;
  return fail(n == 0 ? ErrorKind::Closed : ErrorKind::Reset);
}

void Conn::markPending() {
  if (pending) return;
  pending = true;
  w_.addPending(this);
}

void Conn::h2Status(int status) {
  // Interim responses (100 Continue) are followed by the real one.
  if (status >= 200 || status == 101) h2_status_ = status;
  markPending();
}

void Conn::h2Headers(bool end_stream) {
  if (h2_status_ != 0) h2_headers_ = true;
  if (end_stream) stream_eof_ = true;
  markPending();
}

void Conn::h2Data(const uint8_t* data, size_t len) {
  if (!w_.shared().tunnel) {
    // A plain request's response body: counted, never kept.
    if (!first_byte_) {
      first_byte_ = true;
      w_.results().ttfb.record(nowNs() - sent_at_);
    }
    h2_body_ += len;
    w_.results().app_rx += len;
    return;
  }
  in_pipe_.append(reinterpret_cast<const char*>(data), len);
  markPending();
}

ssize_t Conn::h2Read(int32_t stream_id, uint8_t* buf, size_t len, uint32_t* flags) {
  const Shared& s = w_.shared();
  if (stream_id != stream_) {
    // A tunnel this connection has finished with: END_STREAM, the graceful close.
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return 0;
  }
  if (!s.tunnel) {
    const size_t n = std::min(len, s.body.size() - body_off_);
    memcpy(buf, s.body.data() + body_off_, n);
    body_off_ += n;
    w_.results().app_tx += n;
    if (body_off_ == s.body.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }
  const size_t avail = out_pipe_.size() - out_off_;
  if (avail == 0) return NGHTTP2_ERR_DEFERRED;
  const size_t n = std::min(avail, len);
  memcpy(buf, out_pipe_.data() + out_off_, n);
  out_off_ += n;
  if (out_off_ == out_pipe_.size()) {
    out_pipe_.clear();
    out_off_ = 0;
  }
  if (pipe_blocked_ && out_pipe_.size() - out_off_ < kPipeLimit / 2) {
    pipe_blocked_ = false;
    markPending();
  }
  return static_cast<ssize_t>(n);
}

void Conn::h2Lost(ErrorKind kind, bool during_setup) {
  const bool had_stream = stream_ >= 0;
  stream_ = -1;  // the session is gone: nothing to cancel
  const bool plain_idle = state_ == State::Ready && !w_.shared().tunnel;
  if (had_stream && stream_closed_) {
    // The stream ended before the connection did (a complete response, or a refusal): its own
    // outcome decides, in drive().
  } else if ((state_ == State::H2Wait && !during_setup) || plain_idle) {
    // Nothing of this request reached the old connection: it waits for the next one.
    state_ = State::Closed;
  } else if (state_ != State::Closed || (has_ticket_ && during_setup)) {
    fail(kind);
  }
  markPending();
}

Conn::Step Conn::h2Open() {
  const Shared& s = w_.shared();
  phase_start_ = nowNs();
  in_pipe_.clear();
  in_off_ = 0;
  out_pipe_.clear();
  out_off_ = 0;
  stream_eof_ = stream_closed_ = h2_headers_ = pipe_blocked_ = false;
  h2_status_ = 0;
  stream_error_ = 0;
  if (!s.tunnel) {
    // Plain requests: each opens its own stream when it is sent.
    counting_app_ = true;
    state_ = State::Ready;
    return Step::Continue;
  }
  stream_ = h2_->submit(this, s.h2_connect_nv, true);
  if (stream_ < 0) return fail(ErrorKind::BadResponse);
  state_ = State::H2Connect;
  return Step::Block;
}

Conn::Step Conn::stepH2Connect() {
  if (stream_closed_ && stream_error_ == NGHTTP2_REFUSED_STREAM && !h2_headers_) {
    stream_ = -1;
    state_ = State::Closed;  // not processed: try again on the next connection
    return Step::Continue;
  }
  if (!h2_headers_) {
    if (stream_closed_ || stream_eof_) return fail(ErrorKind::Closed);
    return Step::Block;
  }
  if (h2_status_ < 200 || h2_status_ >= 300) {
    ++w_.results().proxy_status[h2_status_ > 0 && h2_status_ < 600 ? h2_status_ : 599];
    return fail(ErrorKind::ProxyStatus);
  }
  w_.results().proxy_handshake.record(nowNs() - phase_start_);
  return destinationUp();
}

// -- HTTP/2 sessions

namespace h2cb {

int onHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
             size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void*) {
  if (frame->hd.type != NGHTTP2_HEADERS || namelen != 7 || memcmp(name, ":status", 7) != 0)
    return 0;
  Conn* c = static_cast<Conn*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
  if (c == nullptr) return 0;
  int status = 0;
  for (size_t i = 0; i < valuelen && i < 3; ++i) status = status * 10 + (value[i] - '0');
  c->h2Status(status);
  return 0;
}

int onFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
  if (frame->hd.type == NGHTTP2_GOAWAY) static_cast<H2Session*>(user_data)->onGoaway();
  if (frame->hd.stream_id == 0) return 0;
  Conn* c = static_cast<Conn*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
  if (c == nullptr) return 0;
  const bool end = frame->hd.flags & NGHTTP2_FLAG_END_STREAM;
  if (frame->hd.type == NGHTTP2_HEADERS) {
    c->h2Headers(end);
  } else if (frame->hd.type == NGHTTP2_DATA && end) {
    c->h2End();
  }
  return 0;
}

int onDataChunk(nghttp2_session* session, uint8_t, int32_t stream_id, const uint8_t* data,
                size_t len, void*) {
  Conn* c = static_cast<Conn*>(nghttp2_session_get_stream_user_data(session, stream_id));
  if (c != nullptr) c->h2Data(data, len);
  return 0;
}

int onStreamClose(nghttp2_session* session, int32_t stream_id, uint32_t error, void*) {
  Conn* c = static_cast<Conn*>(nghttp2_session_get_stream_user_data(session, stream_id));
  if (c != nullptr) c->h2Closed(error);
  return 0;
}

ssize_t readData(nghttp2_session*, int32_t stream_id, uint8_t* buf, size_t length, uint32_t* flags,
                 nghttp2_data_source* source, void*) {
  return static_cast<Conn*>(source->ptr)->h2Read(stream_id, buf, length, flags);
}

nghttp2_session_callbacks* callbacks() {
  static nghttp2_session_callbacks* cbs = [] {
    nghttp2_session_callbacks* c;
    nghttp2_session_callbacks_new(&c);
    nghttp2_session_callbacks_set_on_header_callback(c, onHeader);
    nghttp2_session_callbacks_set_on_frame_recv_callback(c, onFrameRecv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(c, onDataChunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(c, onStreamClose);
    return c;
  }();
  return cbs;
}

}  // namespace h2cb

ssize_t H2Session::rawRead(char* buf, size_t len) {
  for (;;) {
    const ssize_t n = ::read(fd_, buf, len);
    if (n >= 0) {
      w_.results().wire_rx += static_cast<uint64_t>(n);
      return n;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return kAgain;
    return kError;
  }
}

ssize_t H2Session::rawWrite(const char* buf, size_t len) {
  for (;;) {
    const ssize_t n = ::send(fd_, buf, len, MSG_NOSIGNAL);
    if (n >= 0) {
      w_.results().wire_tx += static_cast<uint64_t>(n);
      return n;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      want_write_ = true;
      return kAgain;
    }
    return kError;
  }
}

void H2Session::ensure() {
  if (state_ != State::Idle) return;
  const Shared& s = w_.shared();
  fd_ = ::socket(s.connect_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return lost(ErrorKind::ConnectFailed);
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ++w_.results().connections;
  phase_start_ = nowNs();
  if (::connect(fd_, reinterpret_cast<const sockaddr*>(&s.connect_addr), s.connect_len) != 0 &&
      errno != EINPROGRESS) {
    return lost(errno == ECONNREFUSED ? ErrorKind::ConnectRefused : ErrorKind::ConnectFailed);
  }
  state_ = State::Connecting;
  updateEvents();
}

void H2Session::updateEvents() {
  if (fd_ < 0) return;
  const uint32_t want =
      EPOLLIN |
      ((want_write_ || state_ == State::Connecting) ? static_cast<uint32_t>(EPOLLOUT) : 0u);
  if (want == events_) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.ptr = static_cast<Pollable*>(this);
  epoll_ctl(w_.epollFd(), events_ == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd_, &ev);
  events_ = want;
}

void H2Session::onEvent(uint32_t) {
  want_write_ = false;
  Results& r = w_.results();
  if (state_ == State::Connecting) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      return lost(err == ECONNREFUSED ? ErrorKind::ConnectRefused : ErrorKind::ConnectFailed);
    }
    sockaddr_storage peer;
    socklen_t plen = sizeof(peer);
    if (getpeername(fd_, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) {
      if (errno != ENOTCONN) return lost(ErrorKind::ConnectFailed);
      updateEvents();
      return;
    }
    const uint64_t now = nowNs();
    r.connect.record(now - phase_start_);
    phase_start_ = now;
    if (!w_.shared().h2_tls) return becomeReady();
    ssl_ = SSL_new(w_.shared().proxy_ctx);
    const Url& peer_url = w_.opts().proxy.url;
    in6_addr ignored;
    const bool ip = inet_pton(AF_INET, peer_url.host.c_str(), &ignored) == 1 ||
                    inet_pton(AF_INET6, peer_url.host.c_str(), &ignored) == 1;
    if (!ip) SSL_set_tlsext_host_name(ssl_, peer_url.host.c_str());
    if (!w_.opts().proxy_ca.empty()) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
      if (ip) {
        X509_VERIFY_PARAM_set1_ip_asc(param, peer_url.host.c_str());
      } else {
        X509_VERIFY_PARAM_set1_host(param, peer_url.host.c_str(), peer_url.host.size());
      }
    }
    BIO* bio = BIO_new(bioMethod(false));
    BIO_set_data(bio, static_cast<RawIo*>(this));
    SSL_set_bio(ssl_, bio, bio);
    SSL_set_connect_state(ssl_);
    SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (session_ != nullptr && !w_.opts().no_resume) SSL_set_session(ssl_, session_);
    state_ = State::Tls;
  }
  if (state_ == State::Tls) {
    const int rc = SSL_do_handshake(ssl_);
    if (rc != 1) {
      const int err = SSL_get_error(ssl_, rc);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        if (err == SSL_ERROR_WANT_WRITE) want_write_ = true;
        updateEvents();
        return;
      }
      ERR_clear_error();
      return lost(ErrorKind::ProxyTls);
    }
    const uint8_t* alpn = nullptr;
    unsigned alpn_len = 0;
    SSL_get0_alpn_selected(ssl_, &alpn, &alpn_len);
    if (alpn_len != 2 || memcmp(alpn, "h2", 2) != 0) return lost(ErrorKind::ProxyTls);
    ++(SSL_session_reused(ssl_) ? r.tls_resumed : r.tls_full);
    if (session_ != nullptr) SSL_SESSION_free(session_);
    session_ = SSL_get1_session(ssl_);
    return becomeReady();
  }
  if (state_ != State::Ready) return;
  if (!writeOut()) return;
  char* buf = w_.scratch();
  for (;;) {
    ssize_t n;
    if (ssl_ != nullptr) {
      const int rc = SSL_read(ssl_, buf, static_cast<int>(w_.scratchSize()));
      if (rc > 0) {
        n = rc;
      } else {
        const int err = SSL_get_error(ssl_, rc);
        if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
          if (err == SSL_ERROR_WANT_WRITE) want_write_ = true;
          break;
        }
        n = (err == SSL_ERROR_ZERO_RETURN || err == SSL_ERROR_SYSCALL) ? 0 : kError;
        ERR_clear_error();
      }
    } else {
      n = rawRead(buf, w_.scratchSize());
      if (n == kAgain) break;
    }
    if (n <= 0) return lost(n == 0 ? ErrorKind::Closed : ErrorKind::Reset);
    if (nghttp2_session_mem_recv(ngh_, reinterpret_cast<const uint8_t*>(buf),
                                 static_cast<size_t>(n)) < 0) {
      return lost(ErrorKind::BadResponse);
    }
    if (ssl_ == nullptr && static_cast<size_t>(n) < w_.scratchSize()) break;
  }
  updateEvents();
}

void H2Session::becomeReady() {
  nghttp2_session_client_new(&ngh_, h2cb::callbacks(), this);
  // Big windows: a load generator must not be the flow-control bottleneck of a tunnel.
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 16 * 1024 * 1024},
  };
  nghttp2_submit_settings(ngh_, NGHTTP2_FLAG_NONE, settings, 2);
  nghttp2_session_set_local_window_size(ngh_, NGHTTP2_FLAG_NONE, 0, 64 * 1024 * 1024);
  state_ = State::Ready;
  if (!w_.shared().tunnel && ssl_ != nullptr) {
    w_.results().proxy_handshake.record(nowNs() - phase_start_);
  }
  for (Conn* c : conns_) c->h2SessionReady();
  updateEvents();
}

int32_t H2Session::submit(Conn* c, const std::vector<nghttp2_nv>& nv, bool with_data) {
  if (ngh_ == nullptr) return -1;
  nghttp2_data_provider provider;
  provider.source.ptr = c;
  provider.read_callback = h2cb::readData;
  return nghttp2_submit_request(ngh_, nullptr, nv.data(), nv.size(),
                                with_data ? &provider : nullptr, c);
}

void H2Session::cancel(int32_t id, bool reset_stream) {
  if (ngh_ == nullptr) return;
  nghttp2_session_set_stream_user_data(ngh_, id, nullptr);
  if (reset_stream) nghttp2_submit_rst_stream(ngh_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
}

bool H2Session::writeOut() {
  while (out_off_ < out_.size()) {
    ssize_t n;
    if (ssl_ != nullptr) {
      const int rc =
          SSL_write(ssl_, out_.data() + out_off_, static_cast<int>(out_.size() - out_off_));
      if (rc > 0) {
        n = rc;
      } else {
        const int err = SSL_get_error(ssl_, rc);
        ERR_clear_error();
        if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
          want_write_ = true;
          updateEvents();
          return true;
        }
        lost(ErrorKind::Reset);
        return false;
      }
    } else {
      n = rawWrite(out_.data() + out_off_, out_.size() - out_off_);
      if (n == kAgain) {
        updateEvents();
        return true;
      }
      if (n < 0) {
        lost(ErrorKind::Reset);
        return false;
      }
    }
    out_off_ += static_cast<size_t>(n);
  }
  out_.clear();
  out_off_ = 0;
  return true;
}

void H2Session::flush() {
  if (state_ != State::Ready) return;
  for (int round = 0; round < 64; ++round) {
    // Frame up to 256 KiB, write it, repeat while the socket takes everything.
    while (out_.size() - out_off_ < 256 * 1024) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(ngh_, &data);
      if (n < 0) return lost(ErrorKind::BadResponse);
      if (n == 0) break;
      out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    }
    if (out_.size() == out_off_) break;
    if (!writeOut()) return;
    if (out_off_ != 0 || !out_.empty()) break;  // the socket is full
  }
  if (nghttp2_session_want_read(ngh_) == 0 && nghttp2_session_want_write(ngh_) == 0 &&
      out_.empty()) {
    return lost(ErrorKind::Closed);  // GOAWAY and nothing left
  }
  updateEvents();
}

void H2Session::reset() {
  if (ngh_ != nullptr) nghttp2_session_del(ngh_);
  ngh_ = nullptr;
  if (ssl_ != nullptr) SSL_free(ssl_);
  ssl_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  events_ = 0;
  out_.clear();
  out_off_ = 0;
  goaway_ = false;
  state_ = State::Idle;
}

void H2Session::lost(ErrorKind kind) {
  const bool during_setup = state_ != State::Ready;
  reset();
  for (Conn* c : conns_) c->h2Lost(kind, during_setup);
}

// -- Worker

void Worker::run() {
  ep_ = epoll_create1(EPOLL_CLOEXEC);
  const Options& o = opts();
  std::vector<epoll_event> events(512);
  for (auto& c : conns_) c->drive();
  runPending();
  uint64_t last_scan = nowNs();
  uint64_t drain_deadline = 0;
  const uint64_t timeout_ns = static_cast<uint64_t>(o.timeout_s * 1e9);
  for (;;) {
    uint64_t now = nowNs();
    if (!stopping_ && (g_interrupted.load(std::memory_order_relaxed) ||
                       (shared_.end_ns != 0 && now >= shared_.end_ns))) {
      stopping_ = true;
      // In-flight requests may finish (they are counted); after the timeout they are dropped.
      drain_deadline = now + std::min<uint64_t>(timeout_ns, 2000000000ull);
      if (g_interrupted.load() && o.workload == Workload::Hold) drain_deadline = now;
    }
    if (stopping_ || quota_ > 0) {
      bool any_busy = false;
      for (auto& c : conns_) {
        if (c->busy()) {
          any_busy = true;
          break;
        }
      }
      const bool quota_done = quota_ > 0 && issued_ >= quota_;
      if ((stopping_ || quota_done) && (!any_busy || (stopping_ && now >= drain_deadline))) break;
    }
    // Wait at most until the next timer, and at most 50 ms (timeouts, stop checks).
    uint64_t wait_ns = 50000000;
    if (!timers_.empty()) {
      const uint64_t at = timers_.top().first;
      wait_ns = at > now ? std::min<uint64_t>(wait_ns, at - now) : 0;
    }
    timespec ts{static_cast<time_t>(wait_ns / 1000000000), static_cast<long>(wait_ns % 1000000000)};
    const int n = epoll_pwait2(ep_, events.data(), static_cast<int>(events.size()),
                               wait_ns == 0 ? &ts : &ts, nullptr);
    for (int i = 0; i < n; ++i)
      static_cast<Pollable*>(events[i].data.ptr)->onEvent(events[i].events);
    if (!timers_.empty()) {
      now = nowNs();
      while (!timers_.empty() && timers_.top().first <= now) {
        Conn* c = timers_.top().second;
        timers_.pop();
        c->onTimer();
      }
    }
    if (now - last_scan > 50000000) {
      now = nowNs();
      last_scan = now;
      for (auto& c : conns_) c->checkTimeout(now);
    }
    if (!pending_.empty() || !sessions_.empty()) runPending();
  }
  results_.end_ns = nowNs();
  for (auto& c : conns_) c->abandon();
  sessions_.clear();
  onDone();
  ::close(ep_);
  finished_.store(true);
}

// ---------------------------------------------------------------------------------------------
// Start-up

bool resolve(const std::string& host, uint16_t port, sockaddr_storage& out, socklen_t& len,
             std::string& error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    error = "cannot resolve " + host + ": " + gai_strerror(rc);
    return false;
  }
  memcpy(&out, res->ai_addr, res->ai_addrlen);
  len = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

SSL_CTX* makeCtx(const std::string& ca, const std::string& crt, const std::string& key,
                 bool new_conn_cache, std::string& error) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (!ca.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) {
      error = "cannot load CA file " + ca;
      return nullptr;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  if (!crt.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, crt.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
      error = "cannot load client certificate " + crt + " / key " + key;
      return nullptr;
    }
  }
  if (new_conn_cache) {
    // Each connection keeps its own last session (new_session_cb) to resume with.
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
    SSL_CTX_sess_set_new_cb(ctx, newSessionCallback);
  }
  static const char kAlpn[] = "\x08http/1.1";
  SSL_CTX_set_alpn_protos(ctx, reinterpret_cast<const uint8_t*>(kAlpn), sizeof(kAlpn) - 1);
  return ctx;
}

bool buildShared(const Options& o, Shared& s, std::string& error) {
  s.opts = &o;
  const bool via_proxy = o.proxy.kind != ProxyKind::Direct;
  s.socks = o.proxy.kind == ProxyKind::Socks5 || o.proxy.kind == ProxyKind::Socks5h;
  s.proxy_tls = o.proxy.kind == ProxyKind::Https;
  s.h2 = o.proxy.kind == ProxyKind::Http2 || o.proxy.kind == ProxyKind::Http2c;
  s.h2_tls = o.proxy.kind == ProxyKind::Http2;
  s.dst_tls = o.dst.tls();
  const bool raw = o.workload == Workload::TunnelUp || o.workload == Workload::TunnelDown ||
                   o.workload == Workload::Hold;
  // WebSocket over HTTP/2 would need extended CONNECT (RFC 8441): through an HTTP/2 proxy a
  // WebSocket goes inside a CONNECT tunnel.
  s.tunnel = s.socks || (via_proxy && (o.force_connect || s.dst_tls || raw ||
                                       (s.h2 && o.workload == Workload::WebSocket)));
  const Url& first_hop = via_proxy ? o.proxy.url : o.dst;
  if (!resolve(first_hop.host, first_hop.port, s.connect_addr, s.connect_len, error)) return false;

  std::string proxy_auth;
  if (via_proxy && !s.socks && o.proxy.url.has_userinfo) {
    proxy_auth = "Proxy-Authorization: Basic " +
                 base64(o.proxy.url.user + ":" + o.proxy.url.password) + "\r\n";
  }
  const bool absolute = via_proxy && !s.tunnel;
  const std::string target = absolute ? (o.dst.scheme == "ws" ? "http" : o.dst.scheme) + "://" +
                                            o.dst.authority() + o.dst.path
                                      : o.dst.path;
  std::string common = "Host: " + o.dst.authority() + "\r\nUser-Agent: sluice-load\r\n";
  for (const std::string& h : o.headers) common += h + "\r\n";
  if (absolute) common += proxy_auth;

  s.head_request = o.method == "HEAD";
  s.request = o.method + " " + target + " HTTP/1.1\r\n" + common;
  if (o.body_bytes > 0) s.request += "Content-Length: " + std::to_string(o.body_bytes) + "\r\n";
  s.request += "\r\n";
  if (o.body_bytes > 0) {
    static constexpr std::string_view kPattern =
        "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_";
    s.request.reserve(s.request.size() + o.body_bytes);
    for (uint64_t i = 0; i < o.body_bytes; ++i) s.request += kPattern[i % kPattern.size()];
  }

  if (o.body_bytes > 0) s.body = s.request.substr(s.request.size() - o.body_bytes);
  if (s.h2) {
    // Header blocks, built once; nghttp2 reads the strings in place (NO_COPY).
    auto& f = s.h2_fields;
    const std::string auth = o.proxy.url.has_userinfo
                                 ? "Basic " + base64(o.proxy.url.user + ":" + o.proxy.url.password)
                                 : "";
    f.reserve(32 + o.headers.size());
    const size_t request_start = f.size();
    f.emplace_back(":method", o.method);
    f.emplace_back(":scheme", o.dst.scheme == "ws" ? "http" : o.dst.scheme);
    f.emplace_back(":authority", o.dst.authority());
    f.emplace_back(":path", o.dst.path);
    f.emplace_back("user-agent", "sluice-load");
    if (!auth.empty()) f.emplace_back("proxy-authorization", auth);
    if (o.body_bytes > 0) f.emplace_back("content-length", std::to_string(o.body_bytes));
    for (const std::string& h : o.headers) {
      const size_t colon = h.find(':');
      if (colon == std::string::npos) return error = "bad -H " + h, false;
      std::string name = h.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t v = colon + 1;
      while (v < h.size() && (h[v] == ' ' || h[v] == '\t')) ++v;
      f.emplace_back(name, h.substr(v));
    }
    const size_t connect_start = f.size();
    f.emplace_back(":method", "CONNECT");
    f.emplace_back(":authority", o.dst.hostPort());
    f.emplace_back("user-agent", "sluice-load");
    if (!auth.empty()) f.emplace_back("proxy-authorization", auth);
    const auto nv = [&f](size_t i) {
      return nghttp2_nv{reinterpret_cast<uint8_t*>(f[i].first.data()),
                        reinterpret_cast<uint8_t*>(f[i].second.data()), f[i].first.size(),
                        f[i].second.size(),
                        NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
    };
    for (size_t i = request_start; i < connect_start; ++i) s.h2_request_nv.push_back(nv(i));
    for (size_t i = connect_start; i < f.size(); ++i) s.h2_connect_nv.push_back(nv(i));
  }
  if (s.tunnel && !s.socks) {
    s.connect_request = "CONNECT " + o.dst.hostPort() + " HTTP/1.1\r\nHost: " + o.dst.hostPort() +
                        "\r\nUser-Agent: sluice-load\r\n" + proxy_auth + "\r\n";
  }
  if (s.socks) {
    const bool auth = o.proxy.url.has_userinfo;
    s.socks_greeting = auth ? std::string("\x05\x02\x00\x02", 4) : std::string("\x05\x01\x00", 3);
    if (auth) {
      s.socks_auth = "\x01";
      s.socks_auth += static_cast<char>(o.proxy.url.user.size());
      s.socks_auth += o.proxy.url.user;
      s.socks_auth += static_cast<char>(o.proxy.url.password.size());
      s.socks_auth += o.proxy.url.password;
    }
    s.socks_connect = std::string("\x05\x01\x00", 3);
    in_addr a4;
    in6_addr a6;
    if (inet_pton(AF_INET, o.dst.host.c_str(), &a4) == 1) {
      s.socks_connect += '\x01';
      s.socks_connect.append(reinterpret_cast<const char*>(&a4), 4);
    } else if (inet_pton(AF_INET6, o.dst.host.c_str(), &a6) == 1) {
      s.socks_connect += '\x04';
      s.socks_connect.append(reinterpret_cast<const char*>(&a6), 16);
    } else if (o.proxy.kind == ProxyKind::Socks5h) {
      if (o.dst.host.size() > 255) return error = "host name too long for SOCKS5", false;
      s.socks_connect += '\x03';
      s.socks_connect += static_cast<char>(o.dst.host.size());
      s.socks_connect += o.dst.host;
    } else {
      // socks5://: the client resolves (socks5h:// leaves it to the proxy).
      sockaddr_storage ss;
      socklen_t len;
      if (!resolve(o.dst.host, o.dst.port, ss, len, error)) return false;
      if (ss.ss_family == AF_INET) {
        s.socks_connect += '\x01';
        s.socks_connect.append(
            reinterpret_cast<const char*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr), 4);
      } else {
        s.socks_connect += '\x04';
        s.socks_connect.append(
            reinterpret_cast<const char*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr), 16);
      }
    }
    s.socks_connect += static_cast<char>(o.dst.port >> 8);
    s.socks_connect += static_cast<char>(o.dst.port & 0xff);
  }
  if (o.workload == Workload::WebSocket) {
    const std::string path = o.dst.path == "/" ? "/ws" : o.dst.path;
    const std::string ws_target = absolute ? "http://" + o.dst.authority() + path : path;
    s.ws_upgrade = "GET " + ws_target + " HTTP/1.1\r\nHost: " + o.dst.authority() +
                   "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" +
                   (absolute ? proxy_auth : "") + "\r\n";
    // One masked binary frame, built once: a fixed mask is valid framing, and the server
    // cannot tell. Payload bytes are the pattern, masked.
    const uint8_t mask[4] = {0x12, 0x34, 0x56, 0x78};
    std::string& f = s.ws_frame;
    f += '\x82';
    if (o.ws_size < 126) {
      f += static_cast<char>(0x80 | o.ws_size);
    } else if (o.ws_size < 65536) {
      f += static_cast<char>(0x80 | 126);
      f += static_cast<char>(o.ws_size >> 8);
      f += static_cast<char>(o.ws_size & 0xff);
    } else {
      f += static_cast<char>(0x80 | 127);
      for (int k = 7; k >= 0; --k) f += static_cast<char>((o.ws_size >> (8 * k)) & 0xff);
    }
    f.append(reinterpret_cast<const char*>(mask), 4);
    for (uint64_t i = 0; i < o.ws_size; ++i) f += static_cast<char>(('a' + i % 26) ^ mask[i % 4]);
  }
  if (o.workload == Workload::TunnelUp || o.workload == Workload::TunnelDown) {
    s.tunnel_header = std::to_string(o.tunnel_bytes) + "\n";
    s.pattern.assign(64 * 1024, 'x');
  }
  const bool cache = o.new_conn || o.workload == Workload::WebSocket;
  if (s.dst_tls && !(s.dst_ctx = makeCtx(o.ca, o.crt, o.key, cache, error))) return false;
  if (s.proxy_tls && !(s.proxy_ctx = makeCtx(o.proxy_ca, "", "", cache, error))) return false;
  if (s.h2_tls) {
    if (s.proxy_ctx != nullptr) SSL_CTX_free(s.proxy_ctx);
    if (!(s.proxy_ctx = makeCtx(o.proxy_ca, "", "", false, error))) return false;
    static const char kH2[] = "\x02h2";
    SSL_CTX_set_alpn_protos(s.proxy_ctx, reinterpret_cast<const uint8_t*>(kH2), sizeof(kH2) - 1);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Report

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

void printText(const Options& o, const Shared& s, const Results& r, double elapsed) {
  const uint64_t total = r.ok + r.failed;
  uint64_t non2xx = 0, errors = 0;
  for (int i = 0; i < 600; ++i)
    if (i < 200 || i >= 300) non2xx += r.status[i];
  for (uint64_t e : r.errors) errors += e;
  if (o.workload != Workload::Http) non2xx = 0;
  std::string out;
  if (o.workload == Workload::Hold) {
    out += strf("Held %" PRIu64 " of %" PRIu64 " tunnels to %s for %.3f s\n\n", r.held, o.hold,
                o.dst.hostPort().c_str(), elapsed);
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

void onSignal(int) { g_interrupted.store(true); }

int run(int argc, char** argv) {
  Options o;
  std::string error;
  if (!parseArgs(argc, argv, o, error)) {
    if (!error.empty()) fprintf(stderr, "sluice-load: %s\n", error.c_str());
    fputs(kUsage, stderr);
    return error.empty() ? 0 : 2;
  }
  signal(SIGPIPE, SIG_IGN);
  // Thousands of connections (--hold, large -c) need descriptors: take the hard limit.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  Shared s;
  if (!buildShared(o, s, error)) {
    fprintf(stderr, "sluice-load: %s\n", error.c_str());
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // Closed loop with -c connections can hold at most -c requests: no more tickets than -n.
  s.start_ns = nowNs();
  if (o.duration_s > 0) s.end_ns = s.start_ns + static_cast<uint64_t>(o.duration_s * 1e9);
  std::vector<std::unique_ptr<Worker>> workers;
  int first = 0;
  for (int t = 0; t < o.threads; ++t) {
    const int conns = o.connections / o.threads + (t < o.connections % o.threads ? 1 : 0);
    uint64_t quota = 0;
    if (o.requests > 0) {
      quota = o.requests / o.threads + (static_cast<uint64_t>(t) < o.requests % o.threads ? 1 : 0);
    }
    workers.push_back(std::make_unique<Worker>(s, t, first, conns, quota));
    first += conns;
  }
  std::vector<std::thread> threads;
  for (auto& w : workers) {
    threads.emplace_back([&w] { w->run(); });
  }
  const bool progress = !o.quiet && isatty(2);
  uint64_t last_print = s.start_ns;
  uint64_t last_done = 0;
  for (;;) {
    bool all = true;
    for (auto& w : workers) all = all && w->finished_.load();
    if (all) break;
    usleep(20000);
    const uint64_t now = nowNs();
    if (progress && now - last_print >= 1000000000ull) {
      uint64_t done = 0;
      for (auto& w : workers) done += w->completed_.load(std::memory_order_relaxed);
      fprintf(stderr, "\r[%6.1fs] %" PRIu64 " done, %.0f/s      ", (now - s.start_ns) / 1e9, done,
              (done - last_done) * 1e9 / (now - last_print));
      last_print = now;
      last_done = done;
    }
  }
  for (auto& t : threads) t.join();
  if (progress) fputs("\r\033[K", stderr);
  Results total;
  for (auto& w : workers) total.merge(w->results());
  const uint64_t end = total.end_ns > s.start_ns ? total.end_ns : nowNs();
  const double elapsed = (end - s.start_ns) / 1e9;
  if (o.json) {
    printJson(o, s, total, elapsed);
  } else {
    printText(o, s, total, elapsed);
  }
  fflush(stdout);
  return total.ok + total.failed == 0 && o.workload != Workload::Hold ? 1 : 0;
}

}  // namespace
}  // namespace load
}  // namespace sluice

int main(int argc, char** argv) { return sluice::load::run(argc, argv); }
