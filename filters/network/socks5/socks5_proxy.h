#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "source/common/event/dispatcher.h"
#include "source/common/network/connection_limiter.h"
#include "source/common/network/filter.h"
#include "source/common/network/local_host.h"
#include "source/common/policy/policy.h"
#include "source/common/proxy/request_filter.h"
#include "source/common/socks5/wire.h"
#include "source/common/stats/stats.h"
#include "source/common/upstream/connection_tunnel.h"
#include "source/common/upstream/request_record.h"
#include "source/common/upstream/routes.h"
#include "source/common/upstream/upstream_budget.h"

namespace sluice {
namespace filters {
namespace socks5 {

// The wire format's names, unqualified, in the codec.
using namespace ::sluice::socks5;  // NOLINT

// The reply_* stat of each reply code, in code order (Reply::Succeeded is 0).
inline constexpr size_t kReplyCodes = 9;
inline constexpr const char* kReplyStatNames[kReplyCodes] = {
    "reply_succeeded",           "reply_general_failure",       "reply_not_allowed",
    "reply_network_unreachable", "reply_host_unreachable",      "reply_connection_refused",
    "reply_ttl_expired",         "reply_command_not_supported", "reply_address_type_not_supported",
};

struct Socks5Stats {
  stats::Counter cx_total;              // connections handled
  stats::Counter handshake_timeout;     // greeting/auth/request not in within the deadline
  stats::Counter handshake_malformed;   // bad version, empty method list, bad subnegotiation
  stats::Counter no_acceptable_method;  // answered 0xFF
  stats::Counter auth_ok;               // authentication request filters passed
  stats::Counter auth_failed;           // refused by them (RFC 1929 failure status, close)
  stats::Counter rq_connect, rq_bind, rq_udp_associate;
  // One per reply code sent (the first BIND reply counts once, the second not at all), indexed
  // by the code; named by kReplyStatNames.
  stats::Counter replies[kReplyCodes];
  stats::Gauge tunnels_active;
  stats::Counter tunnel_idle_timeout;
  stats::Counter upstream_reset;      // the destination (or BIND peer) closed a tunnel
  stats::Counter downstream_reset;    // the client left while its request was being served
  stats::Counter rq_abandoned;        // ... while its lookup or connect was pending (cancelled)
  stats::Counter bind_timeout;        // no inbound connection within bind_timeout
  stats::Counter bind_peer_rejected;  // an inbound connection from another address (closed)
  stats::Gauge udp_associations_active;
  stats::Counter udp_idle_timeout;
  stats::Counter udp_client_rx;               // datagrams from the client relayed on
  stats::Counter udp_client_tx;               // datagrams to the client (replies)
  stats::Counter udp_dropped_bandwidth;       // over the key's or group's bandwidth limit
  stats::Counter udp_dropped_quota;           // past a byte quota (the association then ends)
  stats::Counter udp_dropped_source;          // from an address that is neither the client nor a
                                              // destination it sent to
  stats::Counter udp_dropped_fragment;        // FRAG != 0
  stats::Counter udp_dropped_malformed;       // a bad SOCKS UDP header
  stats::Counter udp_dropped_too_large;       // over max_udp_datagram_bytes
  stats::Counter udp_dropped_denied;          // the destination was refused by the request filters
  stats::Counter udp_dropped_pending;         // more than max_udp_pending_datagrams awaiting checks
  stats::Counter udp_send_error;              // sendto failed (no route, buffer full, ...)
  stats::Counter udp_parent_tx;               // datagrams sent on through a SOCKS5 parent
  stats::Counter udp_parent_rx;               // replies that came back through one
  stats::Counter udp_dropped_parent;          // for a parent association that could not be
                                              // made, or whose control connection closed
  stats::Counter udp_dropped_no_udp_parent;   // routed to HTTP/HTTPS parents only
  stats::Counter udp_parent_associations;     // parent associations made
  stats::Counter udp_bytes_rx, udp_bytes_tx;  // payload bytes from / to the client
};

// Immutable, shared by every worker: built once from Socks5Config.
struct Socks5ProxyConfig {
  std::vector<proxy::RequestFilterSpec> request_filters;
  // The Authenticate phase runs when the client authenticates; the others per command.
  bool has_authenticate_phase = false;
  bool require_auth = false;
  std::chrono::milliseconds handshake_timeout{10000};
  std::chrono::milliseconds bind_timeout{60000};
  std::chrono::milliseconds bind_idle_timeout{300000};
  std::chrono::milliseconds udp_idle_timeout{120000};
  uint32_t max_udp_datagram_bytes = 65507;
  uint32_t max_udp_pending = 16;
  uint32_t max_udp_destinations = 64;
  bool allow_bind = true;
  bool allow_udp_associate = true;
  bool bind_splice = true;
  Socks5Stats stats;
  upstream::TunnelStats tunnel_stats;  // tunnel.listener.<listener>.*
  // How the tunnels the codec's connections become are counted and recorded (pointing at the
  // stats here).
  upstream::ConnectionTunnelConfig tunnel;
  // The routes the router follows (Bootstrap.routes): datagrams to a destination a route sends
  // through SOCKS5 parents go through one of them.
  upstream::RoutesSharedPtr routes = upstream::Routes::none();
  std::string listener_name;          // for the end-of-request records
  stats::Histogram request_duration;  // request.<listener>.socks5.duration_seconds
};
using Socks5ProxyConfigSharedPtr = std::shared_ptr<const Socks5ProxyConfig>;

// What a refusal by the request filters becomes on the wire: a policy refusal is "not allowed",
// a destination that could not be reached says why (request.failure, set by the filter that
// found out).
Reply replyForDenial(proxy::Denial denial, const proxy::ProxyRequest& request);

class Socks5Filter;

// One run of the request filters of some phases, ended by the router (the Route phase) or, for
// checks that must not connect, by a checkpoint filter that reports success.
class Stage : public proxy::RequestSink, public event::DeferredDeletable {
 public:
  class Owner {
   public:
    virtual ~Owner() = default;
    virtual void onStagePassed(Stage& stage) = 0;
    virtual void onStageUpstream(Stage& stage, upstream::UpstreamHandle upstream) = 0;
    virtual void onStageDenied(Stage& stage, proxy::Denial denial, std::string_view reason) = 0;
  };

  Stage(Owner& owner, proxy::WorkerContext& worker, const Socks5ProxyConfig& config,
        proxy::RequestPhase first, proxy::RequestPhase last);
  ~Stage() override;

  void start(proxy::ProxyRequest& request) { chain_.start(request); }
  void end() { chain_.end(); }
  bool active() const { return chain_.active(); }

  // proxy::RequestSink
  void onUpstreamReady(upstream::UpstreamHandle upstream) override {
    owner_.onStageUpstream(*this, std::move(upstream));
  }
  void onDenied(proxy::Denial denial, std::string_view reason) override {
    owner_.onStageDenied(*this, denial, reason);
  }

 private:
  Owner& owner_;
  proxy::RequestFilterChain chain_;
};

// A UDP ASSOCIATE relay: one UDP socket, datagrams from the client (checked, unwrapped, sent on)
// and from the destinations it wrote to (wrapped, sent back). For a group with an egress, the
// datagrams to and from destinations go through a socket of their own per egress address (the
// client's socket stays on the address it reached sluice at: the one it is told), and only
// destinations of the families the egress has are reached. Lives as long as the control
// connection; tells its owner when it idles out.
//
// A destination that a route sends through parents goes through a UDP association with one of
// the route's SOCKS5 parents, which the router makes (RequestKind::UdpAssociation: dial,
// handshake, failover, health): one per route and relay, made at the first datagram for it.
// Datagrams go to the parent's relay wrapped in the SOCKS5 UDP header naming the checked
// destination address; the parent's replies are unwrapped and reach the client as from the
// destination. The association ends with the relay, or when its control connection closes.
class UdpRelay : public Stage::Owner, public event::DeferredDeletable {
 public:
  // `group`: the association's policy group (its destinations are checked in it, and reached
  // from its egress); null without one.
  UdpRelay(Socks5Filter& parent, proxy::WorkerContext& worker, Socks5ProxyConfigSharedPtr config,
           const network::Address& client, uint16_t client_port,
           const policy::Group* group = nullptr);
  ~UdpRelay() override;

  // Stops everything now (socket, timer, checks in flight); the object may be deleted later.
  void shutdown();

  // Binds the relay socket on `local`'s IP (port 0), and the group's egress sockets. errno on
  // failure (egressBindFailed() says whether an egress address was what failed, counted and
  // logged). `max_fd`: a socket numbered there or above is refused (EMFILE): the upstream
  // budget's descriptor reserve.
  int open(const network::Address& local, int max_fd);
  bool egressBindFailed() const { return egress_bind_failed_; }
  const network::Address& bound() const { return bound_; }
  // The limits the association was admitted under (its key's; null: none).
  void setLimiter(policy::KeyLimiter* limiter) { limiter_ = limiter; }
  // Payload bytes sent to destinations and received from them, for the record.
  uint64_t bytesToDestinations() const { return bytes_to_destinations_; }
  uint64_t bytesFromDestinations() const { return bytes_from_destinations_; }

  // Stage::Owner (the destination checks)
  void onStagePassed(Stage& stage) override;
  void onStageUpstream(Stage& stage, upstream::UpstreamHandle upstream) override;
  void onStageDenied(Stage& stage, proxy::Denial denial, std::string_view reason) override;

 private:
  struct Destination {
    std::string host;
    uint16_t port = 0;
    bool allowed = false;
    network::Address address;  // where datagrams go (allowed only)
    event::MonotonicTime expires;
    // Set when a route sends it through parents: `address` is then the checked address the
    // parent is asked for, in its own family.
    const upstream::Route* route = nullptr;
  };
  // A UDP association with a SOCKS5 parent, for the destinations of one route.
  struct ParentAssociation : public network::ConnectionCallbacks {
    enum class State : uint8_t { Associating, Ready, Ended };
    ParentAssociation(UdpRelay& relay, const upstream::Route* route) : relay(relay), route(route) {}
    // network::ConnectionCallbacks: the control connection carries nothing after the reply.
    void onData(buffer::Buffer& data, bool end_stream) override;
    void onEvent(network::ConnectionEvent event) override;

    UdpRelay& relay;
    const upstream::Route* route;
    State state = State::Associating;
    std::unique_ptr<Stage> stage;  // the router, while it associates
    proxy::ProxyRequest request;
    std::string host;  // request.host points here
    upstream::UpstreamHandle control;
    int fd = -1;                // the relay's socket toward the parent's relay
    network::Address relay_at;  // the parent's relay, in that socket's family
    // Datagrams that came while it associates: destination address and payload.
    std::deque<std::pair<network::Address, std::string>> waiting;
    event::MonotonicTime ended_at{};  // a new one may be made kRefusedDestinationTtl later
  };
  struct Pending {
    std::string host;
    uint16_t port = 0;
    std::string payload;
  };

  // A socket toward destinations bound to one egress address.
  struct EgressSocket {
    int fd = -1;
    std::optional<event::FileEvent> event;
    network::OwnPort own_port;  // sluice itself for the destination guard, like bound_'s
    UdpRelay* relay = nullptr;
    void onSocketEvent(uint32_t events) {
      if (events & event::FileEvent::kRead) relay->onEgressReadable(*this);
    }
  };

  void onSocketEvent(uint32_t events) {
    if (events & event::FileEvent::kRead) onReadable();
  }
  void onReadable();
  // Reads what destinations sent to an egress socket.
  void onEgressReadable(EgressSocket& socket);
  // The socket datagrams to `to` leave from: its family's egress socket, or the client's.
  int socketToward(const network::Address& to) const;
  // The SOCKS5 UDP header of a datagram from the client or a parent: false (counted) when it is
  // malformed or a fragment.
  bool parseDatagram(std::string_view datagram, UdpHeader& header) const;
  void onClientDatagram(std::string_view datagram);
  void onPeerDatagram(const network::Address& from, std::string_view payload);
  Destination* findDestination(std::string_view host, uint16_t port);
  // Bandwidth and quotas for one datagram of `bytes` going `way`: false drops it. While a
  // direction is over its bandwidth, its datagrams are dropped (they cannot wait: UDP), and the
  // one that crosses a quota ends the association.
  bool chargeDatagram(policy::Direction way, size_t bytes);
  void sendTo(const Destination& to, std::string_view payload);
  // Through the destination's route's parent association (made here if there is none).
  void sendThroughParent(const Destination& to, std::string_view payload);
  void sendToParent(ParentAssociation& association, const network::Address& to,
                    std::string_view payload);
  void onAssociated(ParentAssociation& association, upstream::UpstreamHandle control);
  void endAssociation(ParentAssociation& association);
  ParentAssociation* associationAt(const network::Address& from);
  void onParentDatagram(ParentAssociation& association, std::string_view datagram);
  // Wraps `payload` in a UDP header naming `from` and sends it to the client.
  void sendToClient(const network::Address& from, std::string_view payload);
  void runPending();
  void finishCheck(bool allowed, const network::Address& address,
                   const upstream::Route* route = nullptr);
  void onIdle();

  Socks5Filter& parent_;
  proxy::WorkerContext& worker_;
  Socks5ProxyConfigSharedPtr config_;
  // The control connection's peer (for the request filters).
  network::Address control_peer_;
  network::Address client_;  // its IP from the control connection; its port once known
  bool client_port_known_ = false;
  // The key's limits (null: none): bandwidth and quotas are charged per datagram.
  policy::KeyLimiter* limiter_ = nullptr;
  int64_t shaped_until_[2] = {0, 0};  // monotonicNanos(): [0] upload, [1] download
  bool quota_reached_ = false;
  uint64_t bytes_to_destinations_ = 0;
  uint64_t bytes_from_destinations_ = 0;
  network::Address bound_;
  network::OwnPort own_port_;  // bound_'s port: sluice itself for the destination guard
  int fd_ = -1;
  std::optional<event::FileEvent> file_event_;
  const policy::Group* group_;
  EgressSocket egress_[2];  // IPv4, IPv6: open for the families the group's egress has
  bool egress_bind_failed_ = false;
  event::Timer idle_timer_;
  std::vector<Destination> destinations_;  // oldest first
  std::deque<Pending> pending_;
  std::optional<Stage> check_;
  proxy::ProxyRequest check_request_;
  std::string check_host_;  // check_request_.host points here
  bool checking_ = false;
  bool in_run_pending_ = false;
  std::vector<std::unique_ptr<ParentAssociation>> associations_;
};

// The "sluice.socks5" codec of one client connection: method negotiation, RFC 1929
// authentication through the auth request filters, then one command. CONNECT becomes a tunnel
// through the router's connection, BIND a tunnel to one inbound connection, UDP ASSOCIATE a
// UdpRelay that lives as long as this connection.
// How long a handshake under way at a drain may still take.
inline constexpr std::chrono::milliseconds kDrainHandshakeGrace{1000};

class Socks5Filter : public network::ReadFilter, public Stage::Owner {
 public:
  explicit Socks5Filter(Socks5ProxyConfigSharedPtr config);
  ~Socks5Filter() override;

  // network::ReadFilter
  void initializeReadFilterCallbacks(network::ReadFilterCallbacks& callbacks) override;
  network::FilterStatus onNewConnection() override;
  network::FilterStatus onData(buffer::Buffer& data, bool end_stream) override;
  void onEvent(network::ConnectionEvent event) override;
  void onDrain() override;
  uint32_t onKeysRevoked() override;
  void onPeerEndWhileReadDisabled() override;

  // Stage::Owner
  void onStagePassed(Stage& stage) override;
  void onStageUpstream(Stage& stage, upstream::UpstreamHandle upstream) override;
  void onStageDenied(Stage& stage, proxy::Denial denial, std::string_view reason) override;

  // The UDP relay idled out: the association (and this connection) ends.
  void onUdpIdle();
  // A datagram crossed the key's or its group's byte quota: the association ends (from the
  // loop, never from the relay's own stack).
  void onUdpQuotaReached();
  // A policy rule refused (or, report-only, would have refused) one of the association's
  // destinations: the association's record names the first such rule.
  void onDestinationRule(std::string_view rule, bool report_only) {
    trace_.setPolicyRule(rule, report_only);
  }

 private:
  enum class State : uint8_t {
    Greeting,     // waiting for VER NMETHODS METHODS
    UserPass,     // waiting for the RFC 1929 request
    Authorizing,  // auth request filters running; the client is not read
    Request,      // waiting for the command
    Filtering,    // request filters running for the command
    BindWaiting,  // BIND: listening for the one inbound connection
    Udp,          // UDP ASSOCIATE: the control connection only keeps the association alive
    // Also once the connection became a tunnel (CONNECT or BIND answered): the codec gave its
    // place to an upstream::ConnectionTunnel and is about to go.
    Closed,
  };

  network::Connection& downstream() { return callbacks_->connection(); }
  void setState(State state);
  // Consumes whole handshake messages from `data` while the state allows.
  void process(buffer::Buffer& data);
  bool processGreeting(buffer::Buffer& data);
  bool processUserPass(buffer::Buffer& data);
  bool processRequest(buffer::Buffer& data);
  void pauseReading(bool pause);
  void authorize();
  void onAuthorized();
  // SOCKS5 authenticates once per connection, before its command is known: each command is
  // admitted under the key's limits here, its place held in the command's trace for as long as
  // it lasts (a tunnel, a BIND, a UDP association). False when a limit refused it: reply 0x02
  // (not allowed) and close.
  bool admitCommand();
  void fillRequestTarget();
  void startConnect();
  void startBind();
  void startUdpAssociate();
  void onBindEvent(uint32_t events) {
    if (events & event::FileEvent::kRead) onBindAccept();
  }
  void onBindAccept();
  // A BIND for any peer: whether the policy's rules that need the peer's address admit the one
  // that connected (counted; in a report-only group recorded and admitted).
  bool admitAnyPeer(const network::Address& peer);
  void onBindChecked();
  // The reply went out: the connection is a tunnel from here on, served by an
  // upstream::ConnectionTunnel in this codec's place.
  void startTunnel(upstream::UpstreamHandle upstream);
  void onTimer();
  // Sends a reply; a failure closes the connection after it.
  void sendReply(Reply reply, const network::Address& bound);
  void writeToClient(const uint8_t* bytes, size_t n);
  // The RFC 1929 status (0 success); a failure closes the connection after it.
  void sendAuthStatus(uint8_t status);
  network::Address localAddress() const;
  void closeBindListener();
  // Ends the stages and frees them from the loop (one of them may be on the stack).
  void releaseStages();
  void releaseUdp();
  // Ends everything but the client connection (closed, or about to be).
  void releaseAll();
  void closeAll();
  // The command in flight ends: its record goes out (once).
  void endRecord();

  Socks5ProxyConfigSharedPtr config_;
  network::ReadFilterCallbacks* callbacks_ = nullptr;
  // The filter instances of each stage live only while they may run: a tunnel lets them go.
  std::unique_ptr<Stage> auth_stage_;     // the Authenticate phase + checkpoint
  std::unique_ptr<Stage> request_stage_;  // the rest: to the router (CONNECT) or a checkpoint
  std::optional<event::Timer> timer_;
  State state_ = State::Greeting;
  bool method_user_pass_ = false;
  bool read_paused_ = false;
  bool downstream_ended_ = false;

  // The command in flight: held from the connection's start until its tunnel starts (an idle
  // tunnel holds none), from the worker's free list. Its views point into its own buffers.
  struct Handshake {
    proxy::ProxyRequest request;
    char host[256];
    char password[256];
  };
  Handshake* hs_ = nullptr;
  bool draining_ = false;
  // The key the client authenticated with, kept once the handshake is released.
  const proxy::KeyGrant* grant_ = nullptr;
  void releaseHandshake();
  Command command_ = Command::Connect;
  Target target_;  // target_.domain points into hs_->host

  // BIND: made for the command (a connection that never binds holds none). It stays until the
  // filter goes, its socket closed once the peer connected: its event may be on the stack.
  struct BindListener {
    int fd = -1;
    std::optional<event::FileEvent> event;
    network::Address address;
    network::OwnPort port;  // address's port: sluice itself for the destination guard
    // The client's place in the upstream budget: the listener's, then its peer's (moved into
    // the tunnel's handle).
    network::ConnectionSlot slot;
  };
  std::unique_ptr<BindListener> bind_;
  // The UDP relay socket's place in the client's upstream budget.
  network::ConnectionSlot udp_slot_;
  // UDP ASSOCIATE
  std::unique_ptr<UdpRelay> udp_;
  // What the command (or a refused authentication) leaves in its end-of-request record.
  upstream::RequestTrace trace_;
};

}  // namespace socks5
}  // namespace filters
}  // namespace sluice
