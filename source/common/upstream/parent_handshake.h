#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "source/common/event/dispatcher.h"
#include "source/common/network/address.h"
#include "source/common/network/connection.h"
#include "source/common/upstream/failure.h"

namespace sluice {
namespace upstream {

// How sluice speaks to a parent proxy.
enum class ParentProtocol : uint8_t {
  Http,    // CONNECT for tunnels; absolute-form requests for plain HTTP
  Socks5,  // RFC 1928 CONNECT, with RFC 1929 username/password when configured
};

// sluice's credentials for one parent, built at config time and never logged.
struct ParentAuth {
  std::string user;
  std::string password;
  // "Basic base64(user:password)" for an HTTP parent; empty without credentials.
  std::string proxy_authorization;
  bool empty() const { return user.empty() && password.empty(); }
};

// What an HTTP parent is asked for, as a CONNECT target and the authority of an absolute-form
// request: `address` as "ip:port" ("[v6]:port") when valid, else `host` and `port` (an IPv6
// literal in brackets).
std::string parentAuthority(const network::Address& address, std::string_view host, uint16_t port);

// Largest answer head an HTTP parent may send to a CONNECT.
inline constexpr size_t kMaxParentResponseHeadBytes = 16384;

class ParentHandshakeCallbacks {
 public:
  virtual ~ParentHandshakeCallbacks() = default;
  // The connection now carries bytes to and from the target. Bytes the parent sent after its
  // answer stay in the connection's read buffer. The connection's callbacks are the owner's
  // again (unset until it sets them).
  virtual void onParentReady() = 0;
  // The parent refused, answered something else, or the connection closed. `reason` is
  // short and safe to show a client (it never holds the credentials); valid during the call.
  virtual void onParentFailed(Failure failure, std::string_view reason) = 0;
};

// Asks a parent proxy for a tunnel to a target, over a connection to the parent that has just
// connected: an HTTP CONNECT, or a SOCKS5 greeting, username/password and CONNECT. The owner
// bounds how long it takes (the router's connect timer covers it). Callbacks come from the
// loop (the connection's events), never from start()'s stack. The handshake must outlive the
// connection's use of it: the owner deletes it only after a callback or after taking the
// connection's callbacks back.
class ParentHandshake : public network::ConnectionCallbacks, public event::DeferredDeletable {
 public:
  ParentHandshake(ParentProtocol protocol, const ParentAuth& auth,
                  ParentHandshakeCallbacks& callbacks)
      : protocol_(protocol), auth_(auth), callbacks_(callbacks) {}

  // The target: `address` when valid (sluice resolved and checked it), else the name `host`
  // (at most 255 bytes; the parent resolves it) and `port`. `host` must stay valid until a
  // callback.
  void start(network::Connection& connection, const network::Address& address,
             std::string_view host, uint16_t port);
  // A SOCKS5 parent only: asks for a UDP association instead of a tunnel (RFC 1928 UDP
  // ASSOCIATE, sluice's source not named: all zeros). On success udpRelay() is where the
  // parent takes the association's datagrams; the connection then only keeps it alive.
  void startUdpAssociate(network::Connection& connection);
  // The parent's relay address from its reply (a reply of "any" address means the control
  // connection's peer, at the port it names); valid once onParentReady() ran for a UDP
  // association.
  const network::Address& udpRelay() const { return udp_relay_; }

  // network::ConnectionCallbacks
  void onData(buffer::Buffer& data, bool end_stream) override;
  void onEvent(network::ConnectionEvent event) override;

 private:
  enum class Stage : uint8_t { Idle, HttpAnswer, Socks5Method, Socks5Auth, Socks5Reply, Done };

  void writeHttpConnect();
  // CONNECT, or UDP ASSOCIATE for startUdpAssociate().
  void writeSocks5Request();
  // Each returns false once the handshake ended (a callback ran).
  bool onHttpAnswer(buffer::Buffer& data);
  bool onSocks5(buffer::Buffer& data);
  void succeed(buffer::Buffer& data, size_t consumed);
  void fail(FailureKind kind, std::string_view reason);

  const ParentProtocol protocol_;
  const ParentAuth& auth_;
  ParentHandshakeCallbacks& callbacks_;
  network::Connection* connection_ = nullptr;
  network::Address address_;
  std::string_view host_;
  uint16_t port_ = 0;
  Stage stage_ = Stage::Idle;
  bool udp_associate_ = false;
  network::Address udp_relay_;
};

}  // namespace upstream
}  // namespace sluice
