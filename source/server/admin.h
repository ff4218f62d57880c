#pragma once

#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"

#include "source/common/event/dispatcher.h"
#include "source/common/network/address.h"
#include "source/common/stats/stats.h"

struct evhttp;
struct evhttp_connection;
struct evhttp_request;

struct evconnlistener;
struct evhttp_bound_socket;

namespace sluice {
namespace server {

// An endpoint a feature adds (GET /bans, POST /bans/unban). Runs on the admin thread.
struct AdminEndpoint {
  struct Response {
    int code = 200;
    std::string body;
    bool json = false;  // application/json, else text/plain
  };
  // Get also answers HEAD. Post, like /drain, refuses requests carrying Origin (a web page).
  enum class Method { Get, Post };
  Method method = Method::Get;
  std::string help;  // one line for the index
  // Gets the decoded query parameters (a malformed query is answered 400 before it).
  std::function<Response(const std::map<std::string, std::string>& query)> handler;
};

// What the admin endpoints ask of the server. Each runs on the admin dispatcher's thread; an
// unset handler leaves its endpoint out (404, and absent from the index).
struct AdminHandlers {
  // GET /ready: 200 "ready" when true, 503 "not ready" while starting or draining.
  std::function<bool()> ready;
  // GET /config_dump: JSON, already redacted by the caller.
  std::function<std::string()> config_dump;
  // GET /server_info: JSON.
  std::function<std::string()> server_info;
  // GET /listeners: JSON.
  std::function<std::string()> listeners;
  // POST /drain: answered 200 "draining" (Connection: close); called once that answer is written
  // and its connection closed, or the client went away (at most the admin's 10 s request
  // timeout), so a drain that ends the process at once cannot cut the answer off.
  std::function<void()> drain;
  // More endpoints, by path ("/bans"). A built-in path takes precedence.
  std::map<std::string, AdminEndpoint> extra;
};

// The operator's HTTP endpoint (libevent evhttp), off the hot path on the main dispatcher.
// Serves GET|HEAD /, /ready, /health, /stats[?format=text|json|prometheus][&filter=substr],
// /stats/prometheus, /config_dump, /server_info, /listeners and POST /drain. Create, bind and
// destroy it on the dispatcher's thread (or while that dispatcher's loop is not running).
class Admin {
 public:
  Admin(event::Dispatcher& dispatcher, AdminHandlers handlers);
  ~Admin();
  Admin(const Admin&) = delete;
  Admin& operator=(const Admin&) = delete;

  // Listens on address (port 0 picks a free port). Fails, naming the address and the reason,
  // when the address is taken or invalid, or when the admin is already bound.
  absl::Status bind(const network::Address& address);
  // Listens on a socket already bound and listening (handed over by a binary upgrade); takes
  // ownership of it.
  absl::Status adopt(int fd);
  // The listening socket (-1 before bind), for an upgrade to hand over.
  int listenFd() const;
  // Accepts no more connections (a binary upgrade handed the socket on); those open finish.
  void stopListening();
  // The address actually listened on (with the real port); invalid before a successful bind().
  network::Address boundAddress() const { return bound_address_; }

 private:
  static void onRequest(evhttp_request* request, void* arg);
  static void onAcceptError(evconnlistener* listener, void* arg);
  // The connection that asked for a drain closed, its answer written: the drain starts.
  static void onDrainAnswered(evhttp_connection* connection, void* arg);
  void handle(evhttp_request* request);
  // Is `host` (a Host header) the admin's own address: its literal IP, any IP literal when it
  // listens on a wildcard address, or localhost when it listens on loopback, with its port or
  // none? A browser always sends Host, so a request without one is not refused.
  bool hostAllowed(const char* host) const;

  // Takes the bound, listening fd (closing it on failure).
  absl::Status listenOn(int fd, const std::string& where);

  AdminHandlers handlers_;
  evhttp* http_;
  evhttp_bound_socket* bound_ = nullptr;
  network::Address bound_address_;
  // Set while evhttp_free closes the connections left: no drain starts from a destructor.
  bool closing_ = false;
};

}  // namespace server
}  // namespace sluice
