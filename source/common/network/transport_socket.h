#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/status.h"

#include "source/common/buffer/buffer.h"

namespace sluice {
namespace network {

class Connection;
class HandshakeGate;

// The outcome of one doRead/doWrite of a transport socket.
struct IoResult {
  enum class Action : uint8_t {
    KeepOpen,
    Close,  // the transport failed (a handshake refused, a socket error): close without flushing
  };
  Action action = Action::KeepOpen;
  uint64_t plaintext = 0;     // bytes added to (read) or taken from (write) the caller's buffer
  uint64_t wire_read = 0;     // bytes read from the socket, for the byte counters
  uint64_t wire_written = 0;  // bytes written to it (a read can write: handshake, tickets)
  bool end_stream = false;    // read: the peer ended its side cleanly
  // read: more may be readable now (a read budget ran out) — schedule another read.
  // write: the socket's send buffer is full — wait for writability.
  bool again = false;
};

// Why a transport failed, for the owner of an outbound connection to report (a TLS client's
// handshake that failed before the connection was ready).
struct TransportFailure {
  enum class Kind : uint8_t {
    None,
    Handshake,    // no handshake came about: the peer closed, sent no TLS, nothing in common
    Certificate,  // the peer's certificate did not verify (its chain, its name, its dates)
  };
  Kind kind = Kind::None;
  std::string_view reason;  // short, for a log or a client; valid while the transport lives
};

// A layer between a connection's buffers and its socket (TLS). A connection without one reads
// and writes the socket directly, which is the plain-TCP fast path.
class TransportSocket {
 public:
  virtual ~TransportSocket() = default;
  // The connection the socket belongs to (its descriptor, peerClosed(), close()).
  virtual void setConnection(Connection& connection) = 0;
  // The worker's gate for handshakes of accepted connections (set before setConnection). A
  // transport without a costly handshake ignores it.
  virtual void setHandshakeGate(HandshakeGate& gate) {}
  // The socket is readable: read and decode into `buffer` (at most about `max` plaintext bytes).
  virtual IoResult doRead(buffer::Buffer& buffer, size_t max) = 0;
  // The socket is writable or there is new data: encode and send what fits; `buffer` is drained
  // by what was taken. end_stream: the caller's side is done once `buffer` is empty.
  virtual IoResult doWrite(buffer::Buffer& buffer, bool end_stream) = 0;
  // Bytes encoded but not yet accepted by the socket (they count against the write watermark).
  virtual size_t pendingWireBytes() const = 0;
  // The connection is closing: a best-effort goodbye (a TLS close_notify) if it fits now.
  virtual void onClose() = 0;
  // The negotiated application protocol (ALPN), empty when none.
  virtual std::string_view applicationProtocol() const = 0;
  virtual bool handshakeComplete() const = 0;
  // Why the transport closed its connection before its handshake completed (None otherwise).
  virtual TransportFailure failure() const { return {}; }
};
using TransportSocketPtr = std::unique_ptr<TransportSocket>;

// Made once per filter chain from its config (shared by every worker); makes one transport
// socket per accepted connection. The upstream side has its own (TLS to a parent proxy): one
// per outbound connection.
class TransportSocketFactory {
 public:
  virtual ~TransportSocketFactory() = default;
  virtual TransportSocketPtr createTransportSocket() const = 0;
  // Re-reads certificates and keys from disk (main thread). On error the ones in use stay.
  // Connections made afterwards use the new ones; open connections keep theirs.
  virtual absl::Status reloadCertificates() const { return absl::OkStatus(); }
};
using TransportSocketFactorySharedPtr = std::shared_ptr<const TransportSocketFactory>;

}  // namespace network
}  // namespace sluice
