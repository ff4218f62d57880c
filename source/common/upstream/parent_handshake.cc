#include "source/common/upstream/parent_handshake.h"

#include <string>

#include "source/common/http/h1_parser.h"
#include "source/common/socks5/wire.h"

namespace sluice {
namespace upstream {
namespace {

// What a parent's answer to CONNECT says about the way to the target.
FailureKind kindForParentStatus(uint16_t status) {
  if (status == 403 || status == 407) return FailureKind::ParentRefused;
  if (status == 504) return FailureKind::Timeout;
  if (status >= 500) return FailureKind::Unreachable;
  return FailureKind::ProtocolError;
}

FailureKind kindForSocks5Reply(uint8_t reply) {
  switch (static_cast<socks5::Reply>(reply)) {
    case socks5::Reply::NotAllowed:
      return FailureKind::ParentRefused;
    case socks5::Reply::NetworkUnreachable:
    case socks5::Reply::HostUnreachable:
      return FailureKind::Unreachable;
    case socks5::Reply::ConnectionRefused:
      return FailureKind::Refused;
    case socks5::Reply::TtlExpired:
      return FailureKind::Timeout;
    default:
      return FailureKind::ProtocolError;
  }
}

// Static texts: a refusal's reason reaches the client.
const char* socks5ReplyText(uint8_t reply) {
  switch (static_cast<socks5::Reply>(reply)) {
    case socks5::Reply::NotAllowed:
      return "the SOCKS5 parent does not allow the connection";
    case socks5::Reply::NetworkUnreachable:
      return "the SOCKS5 parent cannot reach the network";
    case socks5::Reply::HostUnreachable:
      return "the SOCKS5 parent cannot reach the host";
    case socks5::Reply::ConnectionRefused:
      return "the destination refused the SOCKS5 parent's connection";
    case socks5::Reply::TtlExpired:
      return "the SOCKS5 parent timed out reaching the destination";
    default:
      return "the SOCKS5 parent failed to connect";
  }
}

}  // namespace

void ParentHandshake::start(network::Connection& connection, const network::Address& address,
                            std::string_view host, uint16_t port) {
  connection_ = &connection;
  address_ = address;
  host_ = host;
  port_ = port;
  connection.setCallbacks(this);
  if (protocol_ == ParentProtocol::Http) {
    writeHttpConnect();
    stage_ = Stage::HttpAnswer;
    return;
  }
  uint8_t out[socks5::kMaxClientMessageBytes];
  buffer::Buffer greeting;
  greeting.add(out, socks5::writeGreeting(out, !auth_.empty()));
  stage_ = Stage::Socks5Method;
  connection.write(greeting);
}

void ParentHandshake::startUdpAssociate(network::Connection& connection) {
  udp_associate_ = true;
  start(connection, network::Address(), std::string_view(), 0);
}

std::string parentAuthority(const network::Address& address, std::string_view host, uint16_t port) {
  if (address.valid()) return address.asString();
  const bool ipv6 = host.find(':') != std::string_view::npos;
  std::string authority;
  authority.append(ipv6 ? "[" : "").append(host).append(ipv6 ? "]:" : ":");
  authority += std::to_string(port);
  return authority;
}

void ParentHandshake::writeHttpConnect() {
  const std::string authority = parentAuthority(address_, host_, port_);
  std::string head = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n";
  if (!auth_.proxy_authorization.empty()) {
    head.append("Proxy-Authorization: ").append(auth_.proxy_authorization).append("\r\n");
  }
  head += "\r\n";
  buffer::Buffer out;
  out.add(head);
  connection_->write(out);
}

void ParentHandshake::writeSocks5Request() {
  uint8_t out[socks5::kMaxClientMessageBytes];
  buffer::Buffer request;
  request.add(out, udp_associate_ ? socks5::writeUdpAssociate(out, network::Address())
                                  : socks5::writeConnect(out, address_, host_, port_));
  stage_ = Stage::Socks5Reply;
  connection_->write(request);
}

void ParentHandshake::onData(buffer::Buffer& data, bool end_stream) {
  const bool going = protocol_ == ParentProtocol::Http ? onHttpAnswer(data) : onSocks5(data);
  if (going && end_stream) fail(FailureKind::Reset, "the parent proxy closed the connection");
}

void ParentHandshake::onEvent(network::ConnectionEvent event) {
  if (stage_ == Stage::Done) return;
  if (event == network::ConnectionEvent::RemoteClose) {
    fail(FailureKind::Reset, "the parent proxy closed the connection");
  }
}

bool ParentHandshake::onHttpAnswer(buffer::Buffer& data) {
  const std::string_view bytes = data.linearize(data.length());
  http1::ParseLimits limits;
  limits.max_head_bytes = kMaxParentResponseHeadBytes;
  http1::ResponseHead head;
  http1::ParseError err;
  switch (http1::parseResponseHead(bytes, limits, http1::Method::Connect, head, err)) {
    case http1::ParseStatus::Incomplete:
      return true;
    case http1::ParseStatus::Error:
      fail(FailureKind::ProtocolError, "the parent proxy's answer to CONNECT is not HTTP");
      return false;
    case http1::ParseStatus::Complete:
      break;
  }
  if (head.status >= 200 && head.status < 300) {
    succeed(data, head.head_size);
    return false;
  }
  switch (head.status) {
    case 407:
      fail(FailureKind::ParentRefused, "the parent proxy refused sluice's credentials (407)");
      break;
    case 403:
      fail(FailureKind::ParentRefused, "the parent proxy refused the tunnel (403)");
      break;
    case 504:
      fail(FailureKind::Timeout, "the parent proxy timed out reaching the destination (504)");
      break;
    default:
      fail(kindForParentStatus(head.status), head.status >= 500
                                                 ? "the parent proxy cannot reach the destination"
                                                 : "the parent proxy refused the tunnel");
      break;
  }
  return false;
}

bool ParentHandshake::onSocks5(buffer::Buffer& data) {
  // Each answer is parsed as soon as it is whole; a parent may send the next one early.
  socks5::ParseStatus st = socks5::ParseStatus::Ok;
  while (st == socks5::ParseStatus::Ok) {
    const std::string_view bytes = data.linearize(data.length());
    size_t size = 0;
    if (stage_ == Stage::Socks5Method) {
      uint8_t method = 0;
      st = socks5::parseMethodSelection(bytes, method, size);
      if (st != socks5::ParseStatus::Ok) break;
      data.drain(size);
      if (method == socks5::kMethodNoAuth) {
        writeSocks5Request();
      } else if (method == socks5::kMethodUserPass && !auth_.empty()) {
        uint8_t out[socks5::kMaxClientMessageBytes];
        buffer::Buffer request;
        request.add(out, socks5::writeUserPass(out, auth_.user, auth_.password));
        stage_ = Stage::Socks5Auth;
        connection_->write(request);
      } else if (method == socks5::kMethodUserPass) {
        fail(FailureKind::ParentRefused,
             "the SOCKS5 parent requires a username and password, and none is configured");
        return false;
      } else {
        fail(FailureKind::ParentRefused, "the SOCKS5 parent accepts none of sluice's methods");
        return false;
      }
    } else if (stage_ == Stage::Socks5Auth) {
      bool accepted = false;
      st = socks5::parseUserPassStatus(bytes, accepted, size);
      if (st != socks5::ParseStatus::Ok) break;
      data.drain(size);
      if (!accepted) {
        fail(FailureKind::ParentRefused, "the SOCKS5 parent refused sluice's credentials");
        return false;
      }
      writeSocks5Request();
    } else {
      uint8_t reply = 0;
      socks5::Target bound;
      st = socks5::parseReply(bytes, reply, bound, size);
      if (st != socks5::ParseStatus::Ok) break;
      if (reply != static_cast<uint8_t>(socks5::Reply::Succeeded)) {
        fail(kindForSocks5Reply(reply), socks5ReplyText(reply));
      } else if (udp_associate_) {
        udp_relay_ = bound.address();
        if (bound.type == socks5::AddressType::Domain || bound.port == 0) {
          fail(FailureKind::ProtocolError, "the SOCKS5 parent's UDP relay is no address");
          return false;
        }
        if (bound.unspecified()) {
          // "Any": the parent's own address, the one the control connection reached.
          udp_relay_ = connection_->peer();
          udp_relay_.setPort(bound.port);
        }
        succeed(data, size);
      } else {
        succeed(data, size);
      }
      return false;
    }
  }
  if (st == socks5::ParseStatus::Error) {
    fail(FailureKind::ProtocolError, "the SOCKS5 parent's answer is not SOCKS5");
    return false;
  }
  return true;
}

void ParentHandshake::succeed(buffer::Buffer& data, size_t consumed) {
  data.drain(consumed);
  stage_ = Stage::Done;
  connection_->setCallbacks(nullptr);
  callbacks_.onParentReady();
}

void ParentHandshake::fail(FailureKind kind, std::string_view reason) {
  stage_ = Stage::Done;
  connection_->setCallbacks(nullptr);
  callbacks_.onParentFailed(Failure{kind, 0}, reason);
}

}  // namespace upstream
}  // namespace sluice
