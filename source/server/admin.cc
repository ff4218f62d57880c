#include "source/server/admin.h"

#include <cerrno>
#include <cstring>
#include <string_view>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "absl/strings/str_format.h"
#include "event2/buffer.h"
#include "event2/http.h"
#include "event2/keyvalq_struct.h"
#include "event2/listener.h"

#include "source/common/common/logger.h"
#include "source/common/http/status.h"
#include "source/common/network/ip_literal.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace server {

namespace {

// Admin requests are a line and a few headers; anything bigger is not an operator's client.
constexpr ev_ssize_t kMaxHeadersBytes = 8 * 1024;
constexpr ev_ssize_t kMaxBodyBytes = 4 * 1024;
constexpr int kRequestTimeoutSeconds = 10;

constexpr char kTextPlain[] = "text/plain; charset=utf-8";
constexpr char kJson[] = "application/json";
constexpr char kPrometheus[] = "text/plain; version=0.0.4; charset=utf-8";

// Every method evhttp can parse reaches our handler, so we answer 405 rather than its 501.
constexpr ev_uint16_t kAllMethods = EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                    EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                                    EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH;

enum class Route {
  Index,
  Ready,
  Health,
  Stats,
  Prometheus,
  ConfigDump,
  ServerInfo,
  Listeners,
  Drain
};

struct Endpoint {
  const char* path;
  Route route;
  const char* help;
};

constexpr Endpoint kEndpoints[] = {
    {"/", Route::Index, "this list"},
    {"/ready", Route::Ready, "200 when serving, 503 while starting or draining"},
    {"/health", Route::Health, "200 while the process runs"},
    {"/stats", Route::Stats,
     "counters, gauges and histograms; ?format=text|json|prometheus, ?filter=<substring>"},
    {"/stats/prometheus", Route::Prometheus, "Prometheus text exposition format 0.0.4"},
    {"/config_dump", Route::ConfigDump, "the running configuration (JSON, secrets redacted)"},
    {"/server_info", Route::ServerInfo, "server information (JSON)"},
    {"/listeners", Route::Listeners, "the listeners (JSON)"},
    {"/drain", Route::Drain, "POST: stop accepting and drain connections"},
};

struct Reply {
  int code;
  std::string body;
  const char* content_type;
  const char* allow = nullptr;  // Set on 405.
};

Reply text(int code, std::string body) { return Reply{code, std::move(body), kTextPlain}; }

const char* reason(int code) { return http::statusText(static_cast<uint16_t>(code)); }

// Owns the parsed query so every path out of the stats handler frees it.
class QueryParams {
 public:
  QueryParams() {
    params_.tqh_first = nullptr;
    params_.tqh_last = &params_.tqh_first;
  }
  QueryParams(const QueryParams&) = delete;
  QueryParams& operator=(const QueryParams&) = delete;
  ~QueryParams() { evhttp_clear_headers(&params_); }
  // False when the query is malformed.
  bool parse(const char* query) {
    return query == nullptr || evhttp_parse_query_str(query, &params_) == 0;
  }
  std::string_view get(const char* key) {
    const char* value = evhttp_find_header(&params_, key);
    return value == nullptr ? std::string_view() : std::string_view(value);
  }
  // Every parameter, decoded; the first of repeated names wins, as with get().
  std::map<std::string, std::string> all() const {
    std::map<std::string, std::string> out;
    for (const evkeyval* kv = params_.tqh_first; kv != nullptr; kv = kv->next.tqe_next) {
      out.emplace(kv->key, kv->value);
    }
    return out;
  }

 private:
  evkeyvalq params_;
};

Reply statsReply(const evhttp_uri* uri) {
  QueryParams params;
  if (!params.parse(evhttp_uri_get_query(uri))) {
    return text(400, "malformed query string\n");
  }
  const std::string_view format = params.get("format");
  const std::string_view filter = params.get("filter");
  const stats::Store& store = stats::Store::get();
  if (format.empty() || format == "text") {
    return text(200, store.renderText(filter));
  }
  if (format == "json") {
    return Reply{200, store.renderJson(filter), kJson};
  }
  if (format == "prometheus") {
    return Reply{200, store.renderPrometheus(filter), kPrometheus};
  }
  return text(400, "unknown format: use text, json or prometheus\n");
}

void send(evhttp_request* request, const Reply& reply) {
  evkeyvalq* headers = evhttp_request_get_output_headers(request);
  evhttp_add_header(headers, "Content-Type", reply.content_type);
  evhttp_add_header(headers, "Cache-Control", "no-store");
  evhttp_add_header(headers, "X-Content-Type-Options", "nosniff");
  if (reply.allow != nullptr) {
    evhttp_add_header(headers, "Allow", reply.allow);
  }
  if (evhttp_request_get_command(request) == EVHTTP_REQ_HEAD) {
    // HEAD: the headers GET would carry, without the body.
    evhttp_add_header(headers, "Content-Length", std::to_string(reply.body.size()).c_str());
    evhttp_send_reply(request, reply.code, reason(reply.code), nullptr);
    return;
  }
  evbuffer* body = evbuffer_new();
  if (body == nullptr) {
    evhttp_send_error(request, 500, nullptr);
    return;
  }
  evbuffer_add(body, reply.body.data(), reply.body.size());
  evhttp_send_reply(request, reply.code, reason(reply.code), body);
  evbuffer_free(body);
}

// An endpoint from AdminHandlers::extra, with the same method and cross-origin rules as the
// built-in ones.
void serveExtra(evhttp_request* request, const evhttp_uri* uri, evhttp_cmd_type method,
                const AdminEndpoint& endpoint) {
  if (endpoint.method == AdminEndpoint::Method::Post) {
    if (method != EVHTTP_REQ_POST) {
      Reply reply = text(405, "use POST\n");
      reply.allow = "POST";
      send(request, reply);
      return;
    }
    if (evhttp_find_header(evhttp_request_get_input_headers(request), "Origin") != nullptr) {
      send(request, text(403, "cross-origin requests are refused\n"));
      return;
    }
  } else if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
    Reply reply = text(405, "use GET or HEAD\n");
    reply.allow = "GET, HEAD";
    send(request, reply);
    return;
  }
  QueryParams params;
  if (!params.parse(evhttp_uri_get_query(uri))) {
    send(request, text(400, "malformed query string\n"));
    return;
  }
  AdminEndpoint::Response response = endpoint.handler(params.all());
  send(request, Reply{response.code, std::move(response.body), response.json ? kJson : kTextPlain});
}

}  // namespace

Admin::Admin(event::Dispatcher& dispatcher, AdminHandlers handlers)
    : handlers_(std::move(handlers)), http_(evhttp_new(dispatcher.base())) {
  SLUICE_ASSERT(http_ != nullptr, "evhttp_new failed");
  evhttp_set_max_headers_size(http_, kMaxHeadersBytes);
  evhttp_set_max_body_size(http_, kMaxBodyBytes);
  evhttp_set_timeout(http_, kRequestTimeoutSeconds);
  evhttp_set_allowed_methods(http_, kAllMethods);
  evhttp_set_gencb(http_, &Admin::onRequest, this);
}

Admin::~Admin() {
  closing_ = true;
  evhttp_free(http_);
}

absl::Status Admin::bind(const network::Address& address) {
  if (bound_address_.valid()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("admin: already listening on %s", bound_address_.asString()));
  }
  if (!address.valid()) {
    return absl::InvalidArgumentError("admin: bind address is not an IPv4 or IPv6 address");
  }
  const std::string where = address.asString();
  int fd = ::socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrFormat("admin: socket() for %s: %s", where, strerror(errno)));
  }
  const int one = 1;
  // Lets a restarted proxy rebind while old connections sit in TIME_WAIT; a live listener on
  // the port still makes bind() fail.
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, address.sockaddr_ptr(), address.length()) != 0 || ::listen(fd, 128) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrFormat("admin: cannot listen on %s: %s", where, strerror(err)));
  }
  return listenOn(fd, where);
}

absl::Status Admin::adopt(int fd) {
  if (bound_address_.valid()) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrFormat("admin: already listening on %s", bound_address_.asString()));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return listenOn(fd, "the handed-over socket");
}

int Admin::listenFd() const {
  if (bound_ == nullptr) return -1;
  return evconnlistener_get_fd(evhttp_bound_socket_get_listener(bound_));
}

void Admin::stopListening() {
  if (bound_ == nullptr) return;
  evhttp_del_accept_socket(http_, bound_);
  bound_ = nullptr;
}

absl::Status Admin::listenOn(int fd, const std::string& where) {
  sockaddr_storage bound;
  socklen_t bound_len = sizeof(bound);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(
        absl::StrFormat("admin: getsockname for %s: %s", where, strerror(err)));
  }
  // From here evhttp owns the socket and closes it when freed.
  evhttp_bound_socket* handle = evhttp_accept_socket_with_handle(http_, fd);
  if (handle == nullptr) {
    ::close(fd);
    return absl::InternalError(absl::StrFormat("admin: evhttp cannot accept on %s", where));
  }
  evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(handle), &Admin::onAcceptError);
  bound_ = handle;
  bound_address_ = network::Address::fromSockaddr(reinterpret_cast<sockaddr*>(&bound), bound_len);
  SLUICE_LOG(Info, "admin listening on %s", bound_address_.asString());
  return absl::OkStatus();
}

// evhttp's listener retries a failed accept at once: out of descriptors, that spins the main
// thread. Pause it instead, like the proxy listeners do, and retry a little later.
void Admin::onAcceptError(evconnlistener* listener, void*) {
  SLUICE_LOG(Debug, "admin: accept: %s; pausing accepts for 100 ms",
             evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
  evconnlistener_disable(listener);
  struct timeval pause = {0, 100 * 1000};
  event_base_once(
      evconnlistener_get_base(listener), -1, EV_TIMEOUT,
      [](evutil_socket_t, short, void* arg) {
        evconnlistener_enable(static_cast<evconnlistener*>(arg));
      },
      listener, &pause);
}

void Admin::onRequest(evhttp_request* request, void* arg) {
  static_cast<Admin*>(arg)->handle(request);
}

void Admin::onDrainAnswered(evhttp_connection*, void* arg) {
  auto* self = static_cast<Admin*>(arg);
  if (!self->closing_) self->handlers_.drain();
}

namespace {

bool isWildcard(const network::Address& a) {
  if (a.family() == AF_INET) return a.v4().sin_addr.s_addr == htonl(INADDR_ANY);
  return a.family() == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&a.v6().sin6_addr);
}

bool isLocalhost(std::string_view host) {
  static constexpr std::string_view kName = "localhost";
  if (host.size() != kName.size()) return false;
  for (size_t i = 0; i < host.size(); ++i) {
    const char c = host[i] >= 'A' && host[i] <= 'Z' ? static_cast<char>(host[i] + 32) : host[i];
    if (c != kName[i]) return false;
  }
  return true;
}

bool isLoopback(const network::Address& a) {
  if (a.family() == AF_INET) return (ntohl(a.v4().sin_addr.s_addr) >> 24) == 127;
  return a.family() == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&a.v6().sin6_addr);
}

}  // namespace

bool Admin::hostAllowed(const char* header) const {
  if (header == nullptr) return true;
  std::string_view host = header;
  // Without a port the name alone decides (what matters is whose name it is).
  uint16_t port = bound_address_.port();
  // "host", "host:port", "[v6]", "[v6]:port".
  const size_t close = host.rfind(']');
  const size_t colon = host.rfind(':');
  if (colon != std::string_view::npos && (close == std::string_view::npos || colon > close)) {
    int value = 0;
    const std::string_view digits = host.substr(colon + 1);
    if (digits.empty() || digits.size() > 5) return false;
    for (char c : digits) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    if (value > 65535) return false;
    port = static_cast<uint16_t>(value);
    host = host.substr(0, colon);
  }
  if (port != bound_address_.port()) return false;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  network::Address literal;
  const bool is_literal = network::parseIpLiteral(host, literal);
  if (isWildcard(bound_address_)) return is_literal || isLocalhost(host);
  if (is_literal) return literal.ipString() == bound_address_.ipString();
  return isLoopback(bound_address_) && isLocalhost(host);
}

void Admin::handle(evhttp_request* request) {
  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(request);
  if (uri == nullptr) {
    send(request, text(400, "bad request target\n"));
    return;
  }
  // Origin-form targets are matched as sent: evhttp_uri would read "//health" as a host.
  std::string_view path = evhttp_request_get_uri(request);
  if (path.empty() || path[0] != '/') {
    const char* absolute_path = evhttp_uri_get_path(uri);
    path = absolute_path == nullptr ? "" : absolute_path;
  }
  path = path.substr(0, path.find_first_of("?#"));
  // An absolute-form target with no path ("http://host") means "/".
  if (path.empty()) {
    path = "/";
  }
  // A web page whose name was rebound to the admin's address reaches it with its own name in
  // Host: only the admin's own address is answered (DNS rebinding). Liveness and readiness
  // reveal nothing and are probed by balancers under names of their own: they stay open.
  if (path != "/health" && path != "/ready" &&
      !hostAllowed(evhttp_find_header(evhttp_request_get_input_headers(request), "Host"))) {
    // Registered on first use: the stats listing stays as it was until a refusal happens.
    stats::Store::get()
        .counter("admin.host_refused",
                 "Admin requests refused for a Host that is not the admin address (421).")
        .inc();
    send(request, text(421, "Host is not this admin endpoint's address\n"));
    return;
  }

  auto available = [this](Route route) {
    switch (route) {
      case Route::Ready:
        return static_cast<bool>(handlers_.ready);
      case Route::ConfigDump:
        return static_cast<bool>(handlers_.config_dump);
      case Route::ServerInfo:
        return static_cast<bool>(handlers_.server_info);
      case Route::Listeners:
        return static_cast<bool>(handlers_.listeners);
      case Route::Drain:
        return static_cast<bool>(handlers_.drain);
      default:
        return true;
    }
  };

  const Endpoint* endpoint = nullptr;
  for (const Endpoint& candidate : kEndpoints) {
    if (path == candidate.path && available(candidate.route)) {
      endpoint = &candidate;
      break;
    }
  }
  const evhttp_cmd_type method = evhttp_request_get_command(request);
  if (endpoint == nullptr) {
    auto extra = handlers_.extra.find(std::string(path));
    if (extra == handlers_.extra.end() || !extra->second.handler) {
      send(request, text(404, "not found; GET / lists the endpoints\n"));
      return;
    }
    serveExtra(request, uri, method, extra->second);
    return;
  }

  if (endpoint->route == Route::Drain) {
    if (method != EVHTTP_REQ_POST) {
      Reply reply = text(405, "use POST\n");
      reply.allow = "POST";
      send(request, reply);
      return;
    }
    // Browsers send Origin on cross-site POSTs: a web page must not be able to drain the proxy.
    if (evhttp_find_header(evhttp_request_get_input_headers(request), "Origin") != nullptr) {
      send(request, text(403, "cross-origin requests are refused\n"));
      return;
    }
    SLUICE_LOG(Info, "admin: drain requested");
    // With no connection open, a drain ends the process within a loop turn, before a reply
    // queued now would be written. It starts when this connection closes instead: evhttp
    // closes it once the answer is out (Connection: close), or when the client goes away.
    evhttp_add_header(evhttp_request_get_output_headers(request), "Connection", "close");
    evhttp_connection_set_closecb(evhttp_request_get_connection(request), &Admin::onDrainAnswered,
                                  this);
    send(request, text(200, "draining\n"));
    return;
  }
  if (method != EVHTTP_REQ_GET && method != EVHTTP_REQ_HEAD) {
    Reply reply = text(405, "use GET or HEAD\n");
    reply.allow = "GET, HEAD";
    send(request, reply);
    return;
  }

  switch (endpoint->route) {
    case Route::Index: {
      std::string body = "sluice admin\n";
      for (const Endpoint& e : kEndpoints) {
        if (available(e.route)) {
          absl::StrAppendFormat(&body, "  %-18s %s\n", e.path, e.help);
        }
      }
      for (const auto& [extra_path, e] : handlers_.extra) {
        absl::StrAppendFormat(&body, "  %-18s %s%s\n", extra_path,
                              e.method == AdminEndpoint::Method::Post ? "POST: " : "", e.help);
      }
      send(request, text(200, std::move(body)));
      return;
    }
    case Route::Ready:
      send(request, handlers_.ready() ? text(200, "ready\n") : text(503, "not ready\n"));
      return;
    case Route::Health:
      send(request, text(200, "ok\n"));
      return;
    case Route::Stats:
      send(request, statsReply(uri));
      return;
    case Route::Prometheus:
      send(request, Reply{200, stats::Store::get().renderPrometheus(), kPrometheus});
      return;
    case Route::ConfigDump:
      send(request, Reply{200, handlers_.config_dump(), kJson});
      return;
    case Route::ServerInfo:
      send(request, Reply{200, handlers_.server_info(), kJson});
      return;
    case Route::Listeners:
      send(request, Reply{200, handlers_.listeners(), kJson});
      return;
    case Route::Drain:
      return;  // Answered above.
  }
}

}  // namespace server
}  // namespace sluice
