#include "filters/network/socks5/socks5_proxy.h"

#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include "source/common/common/logger.h"
#include "source/common/memory/idle_cache.h"
#include "source/common/network/egress.h"
#include "source/common/network/ip_literal.h"
#include "source/common/policy/limits.h"
#include "source/common/proxy/worker_context.h"

namespace sluice {
namespace filters {
namespace socks5 {

namespace {

// Checked UDP destinations are remembered this long (refusals shorter: a DNS hiccup should not
// cut a destination off for long). Bounded in number by max_udp_destinations.
constexpr std::chrono::milliseconds kDestinationTtl{60000};
constexpr std::chrono::milliseconds kRefusedDestinationTtl{5000};
// Datagrams read per readiness event before yielding to the loop's other work.
constexpr int kMaxDatagramsPerEvent = 64;
constexpr size_t kUdpBufferBytes = 65536;

// recvfrom/sendto scratch: one per worker, never per association.
thread_local char t_udp_buffer[kUdpBufferBytes];
thread_local char t_udp_out[kUdpBufferBytes + kMaxUdpHeaderBytes];

bool sameIp(const network::Address& a, const network::Address& b) {
  if (a.family() != b.family()) return false;
  if (a.family() == AF_INET) return a.v4().sin_addr.s_addr == b.v4().sin_addr.s_addr;
  return memcmp(&a.v6().sin6_addr, &b.v6().sin6_addr, 16) == 0;
}

// `a` in the given socket family: IPv4 becomes IPv4-mapped IPv6 for an AF_INET6 socket, a
// mapped IPv6 address becomes IPv4 for an AF_INET one. False when it cannot be expressed.
bool toFamily(const network::Address& a, int family, network::Address& out) {
  if (a.family() == family) {
    out = a;
    return true;
  }
  if (family == AF_INET6 && a.family() == AF_INET) {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    in6.sin6_port = a.v4().sin_port;
    in6.sin6_addr.s6_addr[10] = 0xff;
    in6.sin6_addr.s6_addr[11] = 0xff;
    memcpy(in6.sin6_addr.s6_addr + 12, &a.v4().sin_addr.s_addr, 4);
    out = network::Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&in6), sizeof(in6));
    return true;
  }
  if (family == AF_INET && a.family() == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&a.v6().sin6_addr)) {
    uint32_t ip;
    memcpy(&ip, a.v6().sin6_addr.s6_addr + 12, 4);
    out = network::Address::ipv4(ntohl(ip), a.port());
    return true;
  }
  return false;
}

network::Address socketName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return network::Address();
  return network::Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&ss), len);
}

// Ends a stage's slice of filters: the request passed every filter of the slice.
class Checkpoint : public proxy::RequestFilter {
 public:
  Checkpoint(Stage::Owner& owner, Stage& stage) : owner_(owner), stage_(stage) {}
  proxy::RequestFilterStatus onRequest(proxy::ProxyRequest&) override {
    owner_.onStagePassed(stage_);
    return proxy::RequestFilterStatus::StopIteration;
  }

 private:
  Stage::Owner& owner_;
  Stage& stage_;
};

}  // namespace

Reply replyForDenial(proxy::Denial denial, const proxy::ProxyRequest& request) {
  switch (denial) {
    case proxy::Denial::Unauthorized:
    case proxy::Denial::Forbidden:
    case proxy::Denial::TooManyRequests:
      return Reply::NotAllowed;
    case proxy::Denial::GatewayTimeout:
      return Reply::TtlExpired;
    case proxy::Denial::BadGateway:
      switch (request.failure.kind) {
        case upstream::FailureKind::DnsFailure:
          return Reply::HostUnreachable;
        case upstream::FailureKind::Refused:
          return Reply::ConnectionRefused;
        case upstream::FailureKind::Unreachable:
          return request.failure.error == ENETUNREACH || request.failure.error == ENETDOWN
                     ? Reply::NetworkUnreachable
                     : Reply::HostUnreachable;
        case upstream::FailureKind::Timeout:
          return Reply::TtlExpired;
        case upstream::FailureKind::ParentRefused:
          return Reply::NotAllowed;
        default:
          return Reply::GeneralFailure;
      }
    case proxy::Denial::BadRequest:
    case proxy::Denial::ServiceUnavailable:
      return Reply::GeneralFailure;
  }
  return Reply::GeneralFailure;
}

// ------------------------------------------------------------------------------------------
// Stage

Stage::Stage(Owner& owner, proxy::WorkerContext& worker, const Socks5ProxyConfig& config,
             proxy::RequestPhase first, proxy::RequestPhase last)
    : owner_(owner), chain_(worker, *this) {
  chain_.reserve(config.request_filters.size() + 1);  // and the checkpoint, perhaps
  for (const proxy::RequestFilterSpec& spec : config.request_filters) {
    if (spec.phase >= first && spec.phase <= last) spec(chain_);
  }
  // Without the Route phase the chain ends in a checkpoint that reports success.
  if (last != proxy::RequestPhase::Route) {
    chain_.addFilter(std::make_unique<Checkpoint>(owner, *this));
  }
}

Stage::~Stage() { chain_.end(); }

// ------------------------------------------------------------------------------------------
// UdpRelay

UdpRelay::UdpRelay(Socks5Filter& parent, proxy::WorkerContext& worker,
                   Socks5ProxyConfigSharedPtr config, const network::Address& client,
                   uint16_t client_port, const policy::Group* group)
    : parent_(parent),
      worker_(worker),
      config_(std::move(config)),
      control_peer_(client),
      client_(client),
      client_port_known_(client_port != 0),
      group_(group),
      idle_timer_(worker.dispatcher(), [this] { onIdle(); }) {
  // Datagrams come from the control connection's IP; from the port the request named, if any.
  client_.setPort(client_port);
}

UdpRelay::~UdpRelay() { shutdown(); }

void UdpRelay::shutdown() {
  if (check_) check_->end();
  for (std::unique_ptr<ParentAssociation>& association : associations_) {
    endAssociation(*association);
  }
  checking_ = false;
  pending_.clear();
  idle_timer_.disable();
  if (file_event_) file_event_->remove();
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  own_port_.release();
  for (EgressSocket& socket : egress_) {
    if (socket.event) socket.event->remove();
    if (socket.fd >= 0) {
      ::close(socket.fd);
      socket.fd = -1;
    }
    socket.own_port.release();
  }
}

int UdpRelay::open(const network::Address& local, int max_fd) {
  if (!local.valid()) return EAFNOSUPPORT;
  fd_ = ::socket(local.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return errno;
  if (fd_ >= max_fd) {
    upstream::UpstreamBudget::get().countReserveRefusal();
    ::close(fd_);
    fd_ = -1;
    return EMFILE;
  }
  network::Address at = local;
  at.setPort(0);
  if (::bind(fd_, at.sockaddr_ptr(), at.length()) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    return err;
  }
  bound_ = socketName(fd_);
  own_port_.hold(network::OwnPorts::Transport::Udp, bound_.port());
  // The client's address in the socket's family, as recvfrom will report it.
  network::Address client;
  if (toFamily(client_, local.family(), client)) client_ = client;
  file_event_.emplace(worker_.dispatcher(), fd_, this,
                      event::FileEvent::To<&UdpRelay::onSocketEvent>());
  const network::Egress& egress = policy::egressOf(group_);
  for (const network::Address* from : {&egress.ipv4, &egress.ipv6}) {
    if (!from->valid()) continue;
    EgressSocket& socket = egress_[from == &egress.ipv4 ? 0 : 1];
    socket.fd = ::socket(from->family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (socket.fd < 0) return errno;
    if (socket.fd >= max_fd) {
      upstream::UpstreamBudget::get().countReserveRefusal();
      return EMFILE;
    }
    const int err = network::bindSource(socket.fd, *from, /*defer_port=*/false);
    if (err != 0) {
      egress_bind_failed_ = true;
      group_->egress.bind_failed.inc();
      SLUICE_LOG(Warn, "socks5: UDP ASSOCIATE: cannot bind the egress address %s of group %s: %s",
                 from->ipString(), group_->name, strerror(err));
      return err;
    }
    socket.own_port.hold(network::OwnPorts::Transport::Udp, socketName(socket.fd).port());
    socket.relay = this;
    socket.event.emplace(worker_.dispatcher(), socket.fd, &socket,
                         event::FileEvent::To<&EgressSocket::onSocketEvent>());
  }
  idle_timer_.enable(config_->udp_idle_timeout);
  return 0;
}

int UdpRelay::socketToward(const network::Address& to) const {
  const EgressSocket& socket = egress_[to.family() == AF_INET ? 0 : 1];
  return socket.fd >= 0 ? socket.fd : fd_;
}

void UdpRelay::onEgressReadable(EgressSocket& socket) {
  for (int i = 0; i < kMaxDatagramsPerEvent; ++i) {
    if (socket.fd < 0) return;
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const ssize_t n = ::recvfrom(socket.fd, t_udp_buffer, sizeof(t_udp_buffer), MSG_TRUNC,
                                 reinterpret_cast<sockaddr*>(&ss), &len);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      continue;  // an ICMP error of an earlier send
    }
    if (static_cast<size_t>(n) > config_->max_udp_datagram_bytes ||
        static_cast<size_t>(n) > sizeof(t_udp_buffer)) {
      config_->stats.udp_dropped_too_large.inc();
      continue;
    }
    // Only destinations (and parents' relays) write here: the client was told the other socket.
    const network::Address from =
        network::Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&ss), len);
    const std::string_view datagram(t_udp_buffer, static_cast<size_t>(n));
    if (ParentAssociation* association = associationAt(from)) {
      onParentDatagram(*association, datagram);
    } else {
      onPeerDatagram(from, datagram);
    }
  }
  if (socket.fd >= 0) socket.event->activate(event::FileEvent::kRead);
}

void UdpRelay::onReadable() {
  const Socks5Stats& stats = config_->stats;
  for (int i = 0; i < kMaxDatagramsPerEvent; ++i) {
    if (fd_ < 0) return;
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    // MSG_TRUNC: the datagram's real length even when it did not fit, to count it as too large.
    const ssize_t n = ::recvfrom(fd_, t_udp_buffer, sizeof(t_udp_buffer), MSG_TRUNC,
                                 reinterpret_cast<sockaddr*>(&ss), &len);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // ICMP errors of earlier sends surface here (ECONNREFUSED): nothing to do but go on.
      continue;
    }
    const network::Address from =
        network::Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&ss), len);
    if (static_cast<size_t>(n) > config_->max_udp_datagram_bytes ||
        static_cast<size_t>(n) > sizeof(t_udp_buffer)) {
      stats.udp_dropped_too_large.inc();
      continue;
    }
    const std::string_view datagram(t_udp_buffer, static_cast<size_t>(n));
    const bool from_client =
        sameIp(from, client_) && (!client_port_known_ || from.port() == client_.port());
    if (from_client) {
      if (!client_port_known_) {
        // The first datagram fixes the client's port for the rest of the association.
        client_.setPort(from.port());
        client_port_known_ = true;
      }
      onClientDatagram(datagram);
    } else if (ParentAssociation* association = associationAt(from)) {
      onParentDatagram(*association, datagram);
    } else if (policy::egressOf(group_).empty()) {
      onPeerDatagram(from, datagram);
    } else {
      // Destinations answer the egress sockets they were written from.
      config_->stats.udp_dropped_source.inc();
    }
  }
  // More may be waiting: continue on the next loop iteration (edge-triggered).
  if (fd_ >= 0) file_event_->activate(event::FileEvent::kRead);
}

bool UdpRelay::parseDatagram(std::string_view datagram, UdpHeader& header) const {
  const Socks5Stats& stats = config_->stats;
  if (parseUdpHeader(datagram, header) != ParseStatus::Ok) {
    stats.udp_dropped_malformed.inc();
    return false;
  }
  // Reassembly is optional (RFC 1928 section 7) and a memory sink: fragments are dropped.
  if (header.frag != 0) {
    stats.udp_dropped_fragment.inc();
    return false;
  }
  return true;
}

void UdpRelay::onClientDatagram(std::string_view datagram) {
  const Socks5Stats& stats = config_->stats;
  UdpHeader header;
  if (!parseDatagram(datagram, header)) return;
  char ip_text[64];
  const std::string_view host = header.target.hostText(ip_text, sizeof(ip_text));
  const std::string_view payload = datagram.substr(header.size);
  if (host.empty()) {
    stats.udp_dropped_malformed.inc();
    return;
  }
  if (Destination* to = findDestination(host, header.target.port)) {
    if (to->allowed) {
      sendTo(*to, payload);
    } else {
      stats.udp_dropped_denied.inc();
    }
    return;
  }
  if (pending_.size() >= config_->max_udp_pending) {
    stats.udp_dropped_pending.inc();
    return;
  }
  pending_.push_back(Pending{std::string(host), header.target.port, std::string(payload)});
  runPending();
}

void UdpRelay::onPeerDatagram(const network::Address& from, std::string_view payload) {
  const Socks5Stats& stats = config_->stats;
  const Destination* match = nullptr;
  for (const Destination& d : destinations_) {
    if (d.allowed && d.address == from) {
      match = &d;
      break;
    }
  }
  // Only the destinations the client wrote to may answer it.
  if (match == nullptr || !client_port_known_) {
    stats.udp_dropped_source.inc();
    return;
  }
  sendToClient(from, payload);
}

bool UdpRelay::chargeDatagram(policy::Direction way, size_t bytes) {
  if (quota_reached_) return false;
  if (limiter_ == nullptr || !limiter_->shapes()) return true;
  const int64_t now = policy::monotonicNanos();
  int64_t& until = shaped_until_[way == policy::Direction::Upload ? 0 : 1];
  if (now < until) {
    config_->stats.udp_dropped_bandwidth.inc();
    return false;
  }
  const int64_t wait = limiter_->chargeBytes(way, bytes, now);
  if (wait == policy::KeyLimiter::kQuotaReached) {
    config_->stats.udp_dropped_quota.inc();
    quota_reached_ = true;
    idle_timer_.enable(std::chrono::milliseconds(0));  // onIdle ends the association
    return false;
  }
  if (wait > 0) until = now + wait;
  return true;
}

void UdpRelay::sendToClient(const network::Address& from, std::string_view payload) {
  const Socks5Stats& stats = config_->stats;
  if (!chargeDatagram(policy::Direction::Download, payload.size())) return;
  const size_t header = writeUdpHeader(reinterpret_cast<uint8_t*>(t_udp_out), from);
  if (header + payload.size() > config_->max_udp_datagram_bytes ||
      header + payload.size() > sizeof(t_udp_out)) {
    stats.udp_dropped_too_large.inc();
    return;
  }
  memcpy(t_udp_out + header, payload.data(), payload.size());
  const ssize_t n = ::sendto(fd_, t_udp_out, header + payload.size(), MSG_NOSIGNAL,
                             client_.sockaddr_ptr(), client_.length());
  if (n < 0) {
    stats.udp_send_error.inc();
    return;
  }
  stats.udp_client_tx.inc();
  stats.udp_bytes_tx.add(payload.size());
  bytes_from_destinations_ += payload.size();
  idle_timer_.enable(config_->udp_idle_timeout);
}

UdpRelay::Destination* UdpRelay::findDestination(std::string_view host, uint16_t port) {
  const event::MonotonicTime now = worker_.dispatcher().now();
  for (size_t i = 0; i < destinations_.size(); ++i) {
    Destination& d = destinations_[i];
    if (d.port != port || d.host != host) continue;
    if (d.expires <= now) {
      destinations_.erase(destinations_.begin() + static_cast<std::ptrdiff_t>(i));
      return nullptr;
    }
    return &d;
  }
  return nullptr;
}

void UdpRelay::sendTo(const Destination& to, std::string_view payload) {
  const Socks5Stats& stats = config_->stats;
  if (!chargeDatagram(policy::Direction::Upload, payload.size())) return;
  if (to.route != nullptr) {
    sendThroughParent(to, payload);
    return;
  }
  const ssize_t n = ::sendto(socketToward(to.address), payload.data(), payload.size(), MSG_NOSIGNAL,
                             to.address.sockaddr_ptr(), to.address.length());
  if (n < 0) {
    stats.udp_send_error.inc();
    return;
  }
  stats.udp_client_rx.inc();
  stats.udp_bytes_rx.add(payload.size());
  bytes_to_destinations_ += payload.size();
  idle_timer_.enable(config_->udp_idle_timeout);
}

void UdpRelay::runPending() {
  // A check that completes synchronously (a literal address, a cached name) comes back through
  // finishCheck while this loop is on the stack: the loop carries on instead of recursing.
  if (in_run_pending_) return;
  in_run_pending_ = true;
  while (!checking_ && !pending_.empty() && fd_ >= 0) {
    Pending& front = pending_.front();
    if (Destination* to = findDestination(front.host, front.port)) {
      if (to->allowed) {
        sendTo(*to, front.payload);
      } else {
        config_->stats.udp_dropped_denied.inc();
      }
      pending_.pop_front();
      continue;
    }
    checking_ = true;
    check_host_ = front.host;
    check_request_ = proxy::ProxyRequest();
    check_request_.protocol = proxy::Protocol::Socks5;
    check_request_.kind = proxy::RequestKind::Datagram;
    check_request_.host = check_host_;
    check_request_.port = front.port;
    check_request_.client = control_peer_;
    check_request_.group = group_;
    if (!check_) {
      // The Authorize phase only: destinations are checked (and resolved, by the destination
      // guard) but nothing connects.
      check_.emplace(*this, worker_, *config_, proxy::RequestPhase::Authorize,
                     proxy::RequestPhase::Authorize);
    }
    check_->start(check_request_);
  }
  in_run_pending_ = false;
}

void UdpRelay::onStagePassed(Stage&) {
  uint32_t at = 0;
  const upstream::Route* route =
      config_->routes->empty() ? nullptr : config_->routes->match(check_request_, at);
  if (route != nullptr && !route->parents.empty()) {
    // Through parents: the checked address the route matched (or a literal nothing pinned).
    network::Address address;
    if (check_request_.pinned_count > 0) {
      address = check_request_.pinned[at];
    } else if (network::parseIpLiteral(check_request_.host, address)) {
      address.setPort(check_request_.port);
    }
    finishCheck(address.valid(), address, route);
    return;
  }
  const network::Egress& egress = policy::egressOf(group_);
  // Through the client's socket, a destination must be expressible in its family; through the
  // egress sockets, it must be of a family the egress has.
  auto usable = [&](const network::Address& a, network::Address& out) {
    if (egress.empty()) return toFamily(a, bound_.family(), out);
    if (!egress.reaches(a.family())) return false;
    out = a;
    return true;
  };
  network::Address chosen;
  bool found = false;
  for (uint32_t i = 0; i < check_request_.pinned_count && !found; ++i) {
    found = usable(check_request_.pinned[i], chosen);
  }
  if (!found && check_request_.pinned_count == 0) {
    // No filter pinned addresses (no destination guard): a literal is taken as it is; a name
    // cannot be, since nothing checked what it resolves to.
    network::Address literal;
    if (network::parseIpLiteral(check_request_.host, literal)) {
      literal.setPort(check_request_.port);
      found = usable(literal, chosen);
    }
  }
  parent_.onDestinationRule(check_request_.policy_rule, check_request_.policy_report_only);
  finishCheck(found, chosen);
}

void UdpRelay::onStageUpstream(Stage& stage, upstream::UpstreamHandle upstream) {
  for (std::unique_ptr<ParentAssociation>& association : associations_) {
    if (association->stage.get() == &stage) {
      onAssociated(*association, std::move(upstream));
      return;
    }
  }
  // The check stage has no router; a custom terminal filter must not hand a connection here.
  upstream.release(false);
  finishCheck(false, network::Address());
}

void UdpRelay::onStageDenied(Stage& stage, proxy::Denial, std::string_view reason) {
  for (std::unique_ptr<ParentAssociation>& association : associations_) {
    if (association->stage.get() == &stage) {
      SLUICE_LOG(Debug, "socks5: UDP association through a parent: %s", reason);
      endAssociation(*association);
      return;
    }
  }
  parent_.onDestinationRule(check_request_.policy_rule, check_request_.policy_report_only);
  finishCheck(false, network::Address());
}

void UdpRelay::finishCheck(bool allowed, const network::Address& address,
                           const upstream::Route* route) {
  if (check_) check_->end();
  if (destinations_.size() >= config_->max_udp_destinations) {
    destinations_.erase(destinations_.begin());
  }
  Destination d;
  d.host = check_host_;
  d.port = check_request_.port;
  d.allowed = allowed;
  d.address = address;
  d.route = allowed ? route : nullptr;
  d.expires = worker_.dispatcher().now() + (allowed ? kDestinationTtl : kRefusedDestinationTtl);
  destinations_.push_back(std::move(d));
  checking_ = false;
  runPending();
}

UdpRelay::ParentAssociation* UdpRelay::associationAt(const network::Address& from) {
  for (std::unique_ptr<ParentAssociation>& association : associations_) {
    if (association->state == ParentAssociation::State::Ready && association->relay_at == from) {
      return association.get();
    }
  }
  return nullptr;
}

void UdpRelay::sendThroughParent(const Destination& to, std::string_view payload) {
  const Socks5Stats& stats = config_->stats;
  bool carries_udp = false;
  for (const upstream::Parent* parent : to.route->parents) {
    carries_udp |= parent->protocol == upstream::ParentProtocol::Socks5 && !parent->transport;
  }
  if (!carries_udp) {
    stats.udp_dropped_no_udp_parent.inc();
    return;
  }
  ParentAssociation* association = nullptr;
  for (std::unique_ptr<ParentAssociation>& a : associations_) {
    if (a->route == to.route) association = a.get();
  }
  const event::MonotonicTime now = worker_.dispatcher().now();
  if (association != nullptr && association->state == ParentAssociation::State::Ended &&
      now >= association->ended_at + kRefusedDestinationTtl) {
    association->state = ParentAssociation::State::Associating;  // made anew below
  } else if (association != nullptr) {
    if (association->state == ParentAssociation::State::Ready) {
      sendToParent(*association, to.address, payload);
    } else if (association->state == ParentAssociation::State::Ended) {
      stats.udp_dropped_parent.inc();
    } else if (association->waiting.size() >= config_->max_udp_pending) {
      stats.udp_dropped_pending.inc();
    } else {
      association->waiting.emplace_back(to.address, std::string(payload));
    }
    return;
  }
  if (association == nullptr) {
    associations_.push_back(std::make_unique<ParentAssociation>(*this, to.route));
    association = associations_.back().get();
  }
  association->waiting.emplace_back(to.address, std::string(payload));
  // The router alone: the destination is checked already. It asks the route's SOCKS5 parents
  // for a UDP association, in the route's order, for the client's share of the budget.
  ParentAssociation& a = *association;
  a.host = to.host;
  a.request = proxy::ProxyRequest();
  a.request.protocol = proxy::Protocol::Socks5;
  a.request.kind = proxy::RequestKind::UdpAssociation;
  a.request.host = a.host;
  a.request.port = to.port;
  a.request.client = control_peer_;
  a.request.group = group_;
  a.request.pinned[0] = to.address;
  a.request.pinned_count = 1;
  a.stage = std::make_unique<Stage>(*this, worker_, *config_, proxy::RequestPhase::Route,
                                    proxy::RequestPhase::Route);
  a.stage->start(a.request);
}

void UdpRelay::onAssociated(ParentAssociation& association, upstream::UpstreamHandle control) {
  association.stage->end();
  worker_.dispatcher().deferredDelete(std::move(association.stage));
  const network::Address relay = control.info().udp_relay;
  association.fd = socketToward(relay);
  const network::Address socket_at = association.fd == fd_ ? bound_ : relay;
  if (!relay.valid() || !toFamily(relay, socket_at.family(), association.relay_at)) {
    // A relay of a family sluice's socket cannot reach.
    SLUICE_LOG(Debug, "socks5: a parent's UDP relay %s is of no family the relay can reach",
               relay.valid() ? relay.asString() : std::string("?"));
    association.control = std::move(control);
    endAssociation(association);
    return;
  }
  config_->stats.udp_parent_associations.inc();
  association.control = std::move(control);
  association.control->setCallbacks(&association);
  association.state = ParentAssociation::State::Ready;
  auto waiting = std::move(association.waiting);
  association.waiting.clear();
  for (const auto& [to, payload] : waiting) sendToParent(association, to, payload);
}

void UdpRelay::sendToParent(ParentAssociation& association, const network::Address& to,
                            std::string_view payload) {
  const Socks5Stats& stats = config_->stats;
  const size_t header = writeUdpHeader(reinterpret_cast<uint8_t*>(t_udp_out), to);
  if (header + payload.size() > sizeof(t_udp_out)) {
    stats.udp_dropped_too_large.inc();
    return;
  }
  memcpy(t_udp_out + header, payload.data(), payload.size());
  const ssize_t n = ::sendto(association.fd, t_udp_out, header + payload.size(), MSG_NOSIGNAL,
                             association.relay_at.sockaddr_ptr(), association.relay_at.length());
  if (n < 0) {
    stats.udp_send_error.inc();
    return;
  }
  stats.udp_client_rx.inc();
  stats.udp_parent_tx.inc();
  stats.udp_bytes_rx.add(payload.size());
  bytes_to_destinations_ += payload.size();
  idle_timer_.enable(config_->udp_idle_timeout);
}

void UdpRelay::onParentDatagram(ParentAssociation& association, std::string_view datagram) {
  const Socks5Stats& stats = config_->stats;
  UdpHeader header;
  if (!parseDatagram(datagram, header)) return;
  // Only the destinations the client wrote to through this association may answer it.
  const network::Address from = header.target.address();
  bool known = false;
  for (const Destination& d : destinations_) {
    known |= d.allowed && d.route == association.route && d.address == from;
  }
  if (!known || !client_port_known_) {
    stats.udp_dropped_source.inc();
    return;
  }
  stats.udp_parent_rx.inc();
  sendToClient(from, datagram.substr(header.size));
}

void UdpRelay::endAssociation(ParentAssociation& association) {
  if (association.stage) {
    // Its callback may be on the stack: freed from the loop.
    association.stage->end();
    worker_.dispatcher().deferredDelete(std::move(association.stage));
  }
  if (association.control) association.control.release(false);
  if (association.state != ParentAssociation::State::Ended) {
    config_->stats.udp_dropped_parent.add(association.waiting.size());
  }
  association.waiting.clear();
  association.state = ParentAssociation::State::Ended;
  association.ended_at = worker_.dispatcher().now();
  association.fd = -1;
}

void UdpRelay::ParentAssociation::onData(buffer::Buffer& data, bool end_stream) {
  data.drain(data.length());
  if (end_stream) relay.endAssociation(*this);
}

void UdpRelay::ParentAssociation::onEvent(network::ConnectionEvent event) {
  if (event == network::ConnectionEvent::RemoteClose ||
      event == network::ConnectionEvent::LocalClose) {
    relay.endAssociation(*this);
  }
}

void UdpRelay::onIdle() {
  if (quota_reached_) {
    parent_.onUdpQuotaReached();
    return;
  }
  config_->stats.udp_idle_timeout.inc();
  parent_.onUdpIdle();
}

// ------------------------------------------------------------------------------------------
// Socks5Filter

namespace {

// Memory for handshakes not in use on this worker (all of one size; a burst's worth is kept, and
// let go once it stayed unused for a memory_release_interval).
class HandshakePool {
 public:
  void* take(size_t size) {
    void* h = free_.take();
    return h != nullptr ? h : ::operator new(size);
  }
  void give(void* h) {
    if (!free_.give(h)) destroy(h);
  }

 private:
  static void destroy(void* h) { ::operator delete(h); }
  memory::FreeStack<void, destroy> free_{64};
};

thread_local HandshakePool t_handshakes;

}  // namespace

Socks5Filter::Socks5Filter(Socks5ProxyConfigSharedPtr config) : config_(std::move(config)) {}

void Socks5Filter::releaseHandshake() {
  if (hs_ == nullptr) return;
  if (hs_->request.grant != nullptr) grant_ = hs_->request.grant;
  hs_->~Handshake();
  t_handshakes.give(hs_);
  hs_ = nullptr;
}

Socks5Filter::~Socks5Filter() {
  auth_stage_.reset();
  request_stage_.reset();
  closeBindListener();
  if (udp_) trace_.addBytes(udp_->bytesToDestinations(), udp_->bytesFromDestinations());
  udp_.reset();
  setState(State::Closed);
  endRecord();
  releaseHandshake();
}

void Socks5Filter::setState(State state) {
  const Socks5Stats& s = config_->stats;
  if (state_ == State::Udp && state != State::Udp) s.udp_associations_active.dec();
  if (state_ != State::Udp && state == State::Udp) s.udp_associations_active.inc();
  state_ = state;
}

void Socks5Filter::initializeReadFilterCallbacks(network::ReadFilterCallbacks& callbacks) {
  callbacks_ = &callbacks;
}

network::FilterStatus Socks5Filter::onNewConnection() {
  config_->stats.cx_total.inc();
  hs_ = new (t_handshakes.take(sizeof(Handshake))) Handshake();
  timer_.emplace(downstream().dispatcher(), [this] { onTimer(); });
  // The whole handshake (greeting, authentication, request) must be in by this deadline.
  timer_->enable(config_->handshake_timeout);
  return network::FilterStatus::Continue;
}

void Socks5Filter::pauseReading(bool pause) {
  if (pause == read_paused_) return;
  read_paused_ = pause;
  downstream().readDisable(pause);
}

network::FilterStatus Socks5Filter::onData(buffer::Buffer& data, bool end_stream) {
  switch (state_) {
    case State::Greeting:
    case State::UserPass:
    case State::Request:
      process(data);
      if (end_stream && !downstream_ended_) {
        downstream_ended_ = true;
        // The client gave up mid-handshake: nothing to answer.
        if (state_ == State::Greeting || state_ == State::UserPass || state_ == State::Request) {
          closeAll();
        }
      }
      break;
    case State::Authorizing:
    case State::Filtering:
    case State::BindWaiting:
      // Bytes after the request wait in the buffer for the tunnel.
      if (end_stream) downstream_ended_ = true;
      break;
    case State::Udp:
      // The control connection carries nothing after the reply; its end ends the association.
      data.clear();
      if (end_stream) closeAll();
      break;
    case State::Closed:
      data.clear();
      break;
  }
  return network::FilterStatus::StopIteration;
}

void Socks5Filter::process(buffer::Buffer& data) {
  while (!data.empty()) {
    bool progressed = false;
    switch (state_) {
      case State::Greeting:
        progressed = processGreeting(data);
        break;
      case State::UserPass:
        progressed = processUserPass(data);
        break;
      case State::Request:
        progressed = processRequest(data);
        break;
      default:
        return;
    }
    if (!progressed) return;
  }
}

bool Socks5Filter::processGreeting(buffer::Buffer& data) {
  const std::string_view view = data.linearize(std::min(data.length(), kMaxGreetingBytes));
  Greeting greeting;
  const ParseStatus st = parseGreeting(view, greeting);
  if (st == ParseStatus::Incomplete) return false;
  if (st == ParseStatus::Error) {
    // Not SOCKS5 (or no methods): there is no reply a client of another version would read.
    config_->stats.handshake_malformed.inc();
    closeAll();
    return false;
  }
  data.drain(greeting.size);
  uint8_t method = kMethodNoneAcceptable;
  if (config_->require_auth) {
    if (greeting.offers_user_pass) method = kMethodUserPass;
  } else if (greeting.offers_no_auth) {
    method = kMethodNoAuth;
  } else if (greeting.offers_user_pass) {
    method = kMethodUserPass;
  }
  // Counted before the answer leaves: a client that reads it may ask for the stats at once.
  if (method == kMethodNoneAcceptable) config_->stats.no_acceptable_method.inc();
  const uint8_t answer[2] = {kVersion, method};
  writeToClient(answer, sizeof(answer));
  if (state_ == State::Closed) return false;
  if (method == kMethodNoneAcceptable) {
    closeAll();
    return false;
  }
  method_user_pass_ = method == kMethodUserPass;
  if (method_user_pass_) {
    setState(State::UserPass);
    return true;
  }
  authorize();
  return state_ == State::Request;
}

bool Socks5Filter::processUserPass(buffer::Buffer& data) {
  const std::string_view view = data.linearize(std::min(data.length(), kMaxAuthBytes));
  UserPass up;
  const ParseStatus st = parseUserPass(view, up);
  if (st == ParseStatus::Incomplete) return false;
  if (st == ParseStatus::Error) {
    config_->stats.handshake_malformed.inc();
    sendAuthStatus(0x01);
    return false;
  }
  // The password is the API key; any user name is accepted, as with HTTP Basic.
  memcpy(hs_->password, up.password.data(), up.password.size());
  hs_->request.credential = std::string_view(hs_->password, up.password.size());
  hs_->request.credential_form = proxy::CredentialForm::Key;
  data.drain(up.size);
  authorize();
  return state_ == State::Request;
}

void Socks5Filter::authorize() {
  hs_->request.protocol = proxy::Protocol::Socks5;
  hs_->request.kind = proxy::RequestKind::Tunnel;
  hs_->request.client = downstream().peer();
  hs_->request.client_fd = downstream().fd();
  if (!config_->has_authenticate_phase) {
    onAuthorized();
    return;
  }
  setState(State::Authorizing);
  pauseReading(true);
  if (!auth_stage_) {
    auth_stage_ = std::make_unique<Stage>(*this, callbacks_->worker(), *config_,
                                          proxy::RequestPhase::Authenticate,
                                          proxy::RequestPhase::Authenticate);
  }
  auth_stage_->start(hs_->request);
}

void Socks5Filter::onAuthorized() {
  if (auth_stage_) auth_stage_->end();
  config_->stats.auth_ok.inc();
  if (method_user_pass_) {
    sendAuthStatus(0x00);
  }
  setState(State::Request);
  // A request sent right behind the credentials is already buffered: resuming delivers it.
  pauseReading(false);
}

void Socks5Filter::onStagePassed(Stage& stage) {
  if (auth_stage_ && &stage == &*auth_stage_) {
    onAuthorized();
    return;
  }
  // The BIND check passed: the named peer is an allowed destination; its addresses are pinned.
  if (request_stage_) request_stage_->end();
  onBindChecked();
}

void Socks5Filter::onStageUpstream(Stage& stage, upstream::UpstreamHandle upstream) {
  stage.end();
  if (state_ != State::Filtering || command_ != Command::Connect) {
    // Only CONNECT runs the router; anything else handing a connection here is dropped.
    upstream.release(false);
    sendReply(Reply::GeneralFailure, network::Address());
    return;
  }
  trace_.routed(hs_->request);
  // BND.ADDR/BND.PORT: the address sluice connects from.
  sendReply(Reply::Succeeded, socketName(upstream->fd()));
  startTunnel(std::move(upstream));
}

void Socks5Filter::onStageDenied(Stage& stage, proxy::Denial denial, std::string_view reason) {
  stage.end();
  if (auth_stage_ && &stage == &*auth_stage_) {
    config_->stats.auth_failed.inc();
    // No command came yet: the record is of the refused authentication.
    trace_.begin(downstream().dispatcher().now(), proxy::Protocol::Socks5, "auth", {}, 0,
                 &downstream().peer());
    trace_.fail(reason);
    if (method_user_pass_) {
      // RFC 1929: any non-zero status, then the server closes the connection.
      sendAuthStatus(0x01);
    } else {
      // Without authentication there is no status to send: refuse what the client asks next.
      sendReply(Reply::NotAllowed, network::Address());
    }
    return;
  }
  trace_.routed(hs_->request);
  trace_.fail(reason, hs_->request.failure.kind);
  sendReply(replyForDenial(denial, hs_->request), network::Address());
}

bool Socks5Filter::processRequest(buffer::Buffer& data) {
  const std::string_view view = data.linearize(std::min(data.length(), kMaxRequestBytes));
  Request request;
  Reply error = Reply::GeneralFailure;
  const ParseStatus st = parseRequest(view, request, error);
  if (st == ParseStatus::Incomplete) return false;
  if (st == ParseStatus::Error) {
    if (error != Reply::AddressTypeNotSupported) config_->stats.handshake_malformed.inc();
    trace_.begin(downstream().dispatcher().now(), proxy::Protocol::Socks5, "-", {}, 0,
                 &downstream().peer());
    trace_.fail("malformed request");
    sendReply(error, network::Address());
    return false;
  }
  target_ = request.target;
  if (target_.type == AddressType::Domain) {
    memcpy(hs_->host, target_.domain.data(), target_.domain.size());
    target_.domain = std::string_view(hs_->host, target_.domain.size());
  }
  {
    char text[64];
    const std::string_view host =
        target_.type == AddressType::Domain ? target_.domain : target_.hostText(text, sizeof(text));
    trace_.begin(downstream().dispatcher().now(), proxy::Protocol::Socks5,
                 commandName(request.command), host, target_.port, &downstream().peer());
  }
  data.drain(request.size);
  timer_->disable();
  switch (request.command) {
    case static_cast<uint8_t>(Command::Connect):
      command_ = Command::Connect;
      config_->stats.rq_connect.inc();
      if (admitCommand()) startConnect();
      break;
    case static_cast<uint8_t>(Command::Bind):
      command_ = Command::Bind;
      config_->stats.rq_bind.inc();
      if (!config_->allow_bind) {
        sendReply(Reply::CommandNotSupported, network::Address());
        break;
      }
      if (admitCommand()) startBind();
      break;
    case static_cast<uint8_t>(Command::UdpAssociate):
      command_ = Command::UdpAssociate;
      config_->stats.rq_udp_associate.inc();
      if (!config_->allow_udp_associate) {
        sendReply(Reply::CommandNotSupported, network::Address());
        break;
      }
      if (admitCommand()) startUdpAssociate();
      break;
    default:
      sendReply(Reply::CommandNotSupported, network::Address());
      break;
  }
  return false;
}

bool Socks5Filter::admitCommand() {
  policy::KeyLimiter* limiter = hs_->request.limiter;
  if (limiter == nullptr) return true;
  policy::LimitRefusal refusal;
  if (limiter->admit(*trace_.limitSlot(), refusal)) {
    // The router hands the limits on with the upstream (bandwidth is charged where bytes move).
    hs_->request.limit_slot = trace_.limitSlot();
    return true;
  }
  trace_.routed(hs_->request);
  trace_.fail(refusal.reason);
  sendReply(replyForDenial(proxy::Denial::TooManyRequests, hs_->request), network::Address());
  return false;
}

// The host for the request filters: the domain as sent, or the literal address as text.
void Socks5Filter::fillRequestTarget() {
  if (target_.type == AddressType::Domain) {
    hs_->request.host = target_.domain;
  } else {
    hs_->request.host = target_.hostText(hs_->host, sizeof(hs_->host));
  }
  hs_->request.port = target_.port;
  hs_->request.pinned_count = 0;
}

void Socks5Filter::startConnect() {
  fillRequestTarget();
  setState(State::Filtering);
  pauseReading(true);
  request_stage_ =
      std::make_unique<Stage>(*this, callbacks_->worker(), *config_, proxy::RequestPhase::Authorize,
                              proxy::RequestPhase::Route);
  request_stage_->start(hs_->request);
}

void Socks5Filter::startBind() {
  hs_->request.kind = proxy::RequestKind::Bind;
  setState(State::Filtering);
  pauseReading(true);
  // The peer the client expects is checked as a destination would be (address and port), and
  // its checked addresses are the only ones the inbound connection may come from. A BIND for
  // any peer (0.0.0.0 or ::) has nothing to check or pin, but passes the filters too: the
  // policy's rules on socks5-bind apply to it (and, when they need an address, to the peer
  // that connects).
  fillRequestTarget();
  request_stage_ =
      std::make_unique<Stage>(*this, callbacks_->worker(), *config_, proxy::RequestPhase::Authorize,
                              proxy::RequestPhase::Authorize);
  request_stage_->start(hs_->request);
}

void Socks5Filter::onBindChecked() {
  if (hs_->request.pinned_count == 0 &&
      !(target_.type != AddressType::Domain && target_.unspecified())) {
    // No filter pinned the peer (no destination guard): a literal stands for itself; a name,
    // unchecked, cannot be trusted to filter by.
    network::Address literal;
    if (target_.type == AddressType::Domain ||
        !network::parseIpLiteral(hs_->request.host, literal)) {
      sendReply(Reply::NotAllowed, network::Address());
      return;
    }
    hs_->request.pinned[0] = literal;
    hs_->request.pinned_count = 1;
  }
  // The peer connects to the address the client is told; with an egress it is the group's
  // (the one destinations see it from: an FTP server wants the data connection from there).
  const network::Egress& egress = policy::egressOf(hs_->request.group);
  network::Address local;
  if (egress.empty()) {
    local = localAddress();
  } else {
    // The family of the first expected peer address the egress has one for; any peer: the
    // request's family first.
    const network::Address* from = nullptr;
    for (uint32_t i = 0; i < hs_->request.pinned_count && from == nullptr; ++i) {
      from = egress.sourceFor(hs_->request.pinned[i].family());
    }
    if (hs_->request.pinned_count == 0) {
      const bool v6 = target_.type == AddressType::IPv6;
      from = egress.sourceFor(v6 ? AF_INET6 : AF_INET);
      if (from == nullptr) from = egress.sourceFor(v6 ? AF_INET : AF_INET6);
    }
    if (from == nullptr) {
      // Like a connect: the group reaches only the families its egress has.
      sendReply(Reply::HostUnreachable, network::Address());
      return;
    }
    local = *from;
  }
  if (!local.valid()) {
    sendReply(Reply::GeneralFailure, network::Address());
    return;
  }
  // The listener, then the peer it accepts, is one upstream socket of the client's budget.
  upstream::UpstreamBudget& budget = upstream::UpstreamBudget::get();
  bind_ = std::make_unique<BindListener>();
  if (!budget.admit(downstream().peer(), bind_->slot)) {
    sendReply(Reply::GeneralFailure, network::Address());
    return;
  }
  bind_->fd = ::socket(local.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (bind_->fd >= budget.descriptorCeiling()) {
    budget.countReserveRefusal();
    closeBindListener();
    sendReply(Reply::GeneralFailure, network::Address());
    return;
  }
  network::Address at = local;
  at.setPort(0);
  const int bind_error =
      bind_->fd < 0 ? errno : network::bindSource(bind_->fd, at, /*defer_port=*/false);
  if (bind_error != 0 && !egress.empty() && bind_->fd >= 0) {
    hs_->request.group->egress.bind_failed.inc();
    SLUICE_LOG(Warn, "socks5: BIND: cannot bind the egress address %s of group %s: %s",
               at.ipString(), hs_->request.group->name, strerror(bind_error));
    closeBindListener();
    sendReply(Reply::GeneralFailure, network::Address());
    return;
  }
  if (bind_error != 0 || ::listen(bind_->fd, 1) != 0) {
    SLUICE_LOG(Warn, "socks5: BIND: cannot listen on %s: %s", at.ipString(),
               strerror(bind_error != 0 ? bind_error : errno));
    closeBindListener();
    sendReply(Reply::GeneralFailure, network::Address());
    return;
  }
  bind_->address = socketName(bind_->fd);
  bind_->port.hold(network::OwnPorts::Transport::Tcp, bind_->address.port());
  bind_->event.emplace(downstream().dispatcher(), bind_->fd, this,
                       event::FileEvent::To<&Socks5Filter::onBindEvent>());
  // A write never closes the connection under its caller: the state holds.
  sendReply(Reply::Succeeded, bind_->address);
  setState(State::BindWaiting);
  timer_->enable(config_->bind_timeout);
}

void Socks5Filter::onBindAccept() {
  while (state_ == State::BindWaiting && bind_ != nullptr && bind_->fd >= 0) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const int fd =
        ::accept4(bind_->fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    const network::Address peer =
        network::Address::fromSockaddr(reinterpret_cast<const sockaddr*>(&ss), len);
    bool allowed = hs_->request.pinned_count == 0 && admitAnyPeer(peer);
    for (uint32_t i = 0; i < hs_->request.pinned_count && !allowed; ++i) {
      network::Address expected;
      allowed = toFamily(hs_->request.pinned[i], peer.family(), expected) && sameIp(expected, peer);
    }
    if (!allowed) {
      // RFC 1928: DST.ADDR of a BIND request is what the server filters the inbound peer by.
      config_->stats.bind_peer_rejected.inc();
      ::close(fd);
      continue;
    }
    closeBindListener();
    upstream::UpstreamInfo info;
    info.tunnel_idle_timeout = config_->bind_idle_timeout;
    info.splice = config_->bind_splice;
    info.limiter = trace_.limitSlot()->limiter();
    upstream::UpstreamHandle inbound(
        std::make_unique<network::Connection>(downstream().dispatcher(), fd, peer,
                                              network::Connection::Blocking::NonBlocking),
        nullptr, info, std::move(bind_->slot));
    // The second reply names the peer that connected.
    sendReply(Reply::Succeeded, peer);
    startTunnel(std::move(inbound));
    return;
  }
}

bool Socks5Filter::admitAnyPeer(const network::Address& peer) {
  const policy::Group* group = hs_->request.group;
  if (group == nullptr || group->rules.inactive()) return true;
  const policy::RuleSet& rules = group->rules;
  const policy::Destination bind{{}, hs_->request.port, policy::Kind::Socks5Bind};
  const policy::NameCheck check = rules.checkName(bind);
  // Decided without an address: the request filters enforced (and counted) it already.
  if (!check.needsAddresses()) return true;
  const policy::Decision decision = rules.checkAddress(bind, check, peer);
  if (decision.allows()) {
    rules.stats().allowed.inc();
    return true;
  }
  if (rules.reportOnly()) {
    rules.stats().report_only.inc();
    trace_.setPolicyRule(decision.rule->name, true);
    return true;
  }
  rules.stats().denied.inc();
  return false;
}

void Socks5Filter::startUdpAssociate() {
  const network::Address local = localAddress();
  // The client's datagrams must come from the control connection's IP; DST.PORT, when given,
  // is the port they come from (DST.ADDR is ignored: behind NAT it is not what arrives).
  udp_ = std::make_unique<UdpRelay>(*this, callbacks_->worker(), config_, downstream().peer(),
                                    target_.port, hs_->request.group);
  udp_->setLimiter(hs_->request.limiter);
  // The relay socket is one upstream socket of the client's budget.
  if (!upstream::UpstreamBudget::get().admit(downstream().peer(), udp_slot_)) {
    releaseUdp();
    sendReply(Reply::GeneralFailure, network::Address());
    return;
  }
  const int err = udp_->open(local, upstream::UpstreamBudget::get().descriptorCeiling());
  if (err != 0) {
    if (!udp_->egressBindFailed()) {
      SLUICE_LOG(Warn, "socks5: UDP ASSOCIATE: cannot bind a relay socket on %s: %s",
                 local.valid() ? local.ipString() : std::string("?"), strerror(err));
    }
    releaseUdp();
    sendReply(Reply::GeneralFailure, network::Address());
    return;
  }
  sendReply(Reply::Succeeded, udp_->bound());
  setState(State::Udp);
  // Read on, to see the client close: the association ends with this connection.
  pauseReading(false);
}

void Socks5Filter::onUdpIdle() { closeAll(); }

void Socks5Filter::onUdpQuotaReached() {
  trace_.fail("byte quota reached");
  closeAll();
}

void Socks5Filter::startTunnel(upstream::UpstreamHandle upstream) {
  // The command is served: its filters (and the authentication's) are not needed any more, nor
  // is the codec, which gives its place to the tunnel (taking the command's trace) and goes.
  releaseStages();
  const upstream::TunnelStats* key_stats = hs_->request.principal_tunnel_stats;
  // The key a reload may revoke (CONNECT's router said it already; a BIND has none).
  trace_.authenticated(hs_->request);
  target_.domain = {};
  releaseHandshake();
  setState(State::Closed);
  timer_->disable();
  pauseReading(false);
  // Bytes the client sent behind its request go first, then its end if it already half-closed.
  upstream::ConnectionTunnel::replace(*callbacks_, *this, config_->tunnel, trace_,
                                      {std::move(upstream), key_stats, /*upgrade=*/false,
                                       downstream_ended_, /*upstream_ended=*/false});
}

void Socks5Filter::onEvent(network::ConnectionEvent event) {
  if (event == network::ConnectionEvent::Connected) return;
  if (state_ == State::Authorizing || state_ == State::Filtering || state_ == State::BindWaiting) {
    config_->stats.downstream_reset.inc();
  }
  releaseAll();
}

void Socks5Filter::onPeerEndWhileReadDisabled() {
  // The client left while its command waited for the filters (a lookup, a connect), or while
  // its BIND waited for the peer: the reply has no reader, so the wait ends now instead of
  // running to its timeout (and the command's place under its limits goes back).
  if (state_ != State::Authorizing && state_ != State::Filtering && state_ != State::BindWaiting) {
    return;
  }
  // A FIN behind the tunnel's first bytes is a half-close: the command goes on.
  if (downstream().hasUnreadBytes()) return;
  if (state_ != State::BindWaiting) config_->stats.rq_abandoned.inc();
  downstream().close(network::CloseType::NoFlush);
}

void Socks5Filter::onDrain() {
  // Mid-handshake: what the client already sent may be on its way (a new connection's
  // greeting, say), and closing now would reset it. The handshake gets at most
  // kDrainHandshakeGrace more; its command is served. Tunnels and associations run on until
  // they end or the drain timeout passes.
  draining_ = true;
  if (state_ == State::Greeting || state_ == State::UserPass || state_ == State::Request) {
    timer_->enable(kDrainHandshakeGrace);
  }
}

uint32_t Socks5Filter::onKeysRevoked() {
  const proxy::KeyGrant* grant =
      hs_ != nullptr && hs_->request.grant != nullptr ? hs_->request.grant : grant_;
  if (state_ == State::Closed || grant == nullptr || !grant->revoked()) return 0;
  // The tunnel, the UDP association or the BIND of a key a reload took away.
  trace_.fail(proxy::kRevokedReason);
  closeAll();
  return 1;
}

void Socks5Filter::onTimer() {
  switch (state_) {
    case State::Greeting:
    case State::UserPass:
    case State::Authorizing:
    case State::Request:
      // A drain's grace is not a slow client.
      if (!draining_) config_->stats.handshake_timeout.inc();
      closeAll();
      break;
    case State::BindWaiting:
      config_->stats.bind_timeout.inc();
      sendReply(Reply::TtlExpired, network::Address());
      break;
    case State::Filtering:
    case State::Udp:
    case State::Closed:
      break;
  }
}

void Socks5Filter::sendReply(Reply reply, const network::Address& bound) {
  uint8_t bytes[kMaxReplyBytes];
  const size_t n = writeReply(bytes, reply, bound);
  const auto code = static_cast<size_t>(reply);
  if (code < kReplyCodes) config_->stats.replies[code].inc();
  trace_.setStatus(static_cast<uint16_t>(code));
  if (reply != Reply::Succeeded) trace_.fail(replyName(reply));
  writeToClient(bytes, n);
  if (reply != Reply::Succeeded) closeAll();
}

void Socks5Filter::writeToClient(const uint8_t* bytes, size_t n) {
  buffer::Buffer out;
  out.add(bytes, n);
  downstream().write(out);
}

void Socks5Filter::sendAuthStatus(uint8_t status) {
  const uint8_t answer[2] = {kAuthVersion, status};
  writeToClient(answer, sizeof(answer));
  if (status != 0x00) closeAll();
}

network::Address Socks5Filter::localAddress() const {
  return socketName(callbacks_->connection().fd());
}

void Socks5Filter::closeBindListener() {
  if (bind_ == nullptr) return;
  // The FileEvent object stays until the filter goes: this may run inside its callback.
  if (bind_->event) bind_->event->remove();
  if (bind_->fd >= 0) {
    ::close(bind_->fd);
    bind_->fd = -1;
  }
  bind_->port.release();
}

void Socks5Filter::releaseStages() {
  for (std::unique_ptr<Stage>* stage : {&auth_stage_, &request_stage_}) {
    if (!*stage) continue;
    (*stage)->end();
    callbacks_->connection().dispatcher().deferredDelete(std::move(*stage));
  }
}

void Socks5Filter::releaseUdp() {
  if (!udp_) return;
  trace_.addBytes(udp_->bytesToDestinations(), udp_->bytesFromDestinations());
  // The relay may be inside one of its own callbacks (its idle timer): stop it now, free it
  // after the callback.
  udp_->shutdown();
  udp_slot_.reset();
  callbacks_->connection().dispatcher().deferredDelete(std::move(udp_));
}

void Socks5Filter::releaseAll() {
  setState(State::Closed);
  if (auth_stage_) auth_stage_->end();
  if (request_stage_) request_stage_->end();
  if (timer_) timer_->disable();
  closeBindListener();
  releaseUdp();
  endRecord();
  releaseHandshake();
}

void Socks5Filter::endRecord() {
  if (!trace_.open()) return;  // nothing began (and perhaps no connection was ever given)
  trace_.end(downstream().dispatcher().now(), config_->listener_name, config_->request_duration);
}

void Socks5Filter::closeAll() {
  if (state_ == State::Closed) return;
  releaseAll();
  downstream().close(network::CloseType::FlushWrite);
}

}  // namespace socks5
}  // namespace filters
}  // namespace sluice
