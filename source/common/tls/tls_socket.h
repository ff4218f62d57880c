#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "openssl/ssl.h"

#include "source/common/buffer/buffer.h"
#include "source/common/event/dispatcher.h"
#include "source/common/network/handshake_gate.h"
#include "source/common/network/transport_socket.h"
#include "source/common/tls/context.h"

namespace sluice {
namespace tls {

// TLS on one connection. BoringSSL reads and writes through a BIO over two sluice buffers, so
// ciphertext moves with the same system calls as plain TCP (Buffer::readFrom, writeTo): one read
// takes in several records, and the records of one flush leave in one write.
//
// The server side serves an accepted connection, within its chain's handshake deadline and
// size bound. It starts when its worker's handshake gate lets it (its SSL object is made then):
// until that turn the client's hello stays unread in the socket. The client side serves an outbound
// one (to a parent proxy): its hello leaves with the connection's first flush after the connect,
// the connection reports Connected once the handshake is done, and the owner's connect deadline
// bounds it; a failure says why (failure()), a certificate that does not verify apart from the
// rest.
class TlsSocket : public network::TransportSocket, private network::HandshakeGate::Waiter {
 public:
  explicit TlsSocket(ServerContextSharedPtr context);
  explicit TlsSocket(ClientContextSharedPtr context);
  ~TlsSocket() override;

  // network::TransportSocket
  void setConnection(network::Connection& connection) override;
  void setHandshakeGate(network::HandshakeGate& gate) override;
  network::IoResult doRead(buffer::Buffer& buffer, size_t max) override;
  network::IoResult doWrite(buffer::Buffer& buffer, bool end_stream) override;
  size_t pendingWireBytes() const override { return raw_out_.length(); }
  void onClose() override;
  std::string_view applicationProtocol() const override;
  bool handshakeComplete() const override { return handshake_done_; }
  network::TransportFailure failure() const override { return {failure_kind_, failure_reason_}; }

  // BIO glue.
  int bioRead(char* out, int len);
  int bioWrite(const char* in, int len);

 private:
  // Ciphertext queued beyond this stops encryption until the socket takes it.
  static constexpr size_t kMaxRawOut = 64 * 1024;

  // network::HandshakeGate::Waiter
  void onHandshakeTurn() override;

  // Server side: makes the SSL object once the gate (if any) lets the handshake start. False
  // when it cannot start yet (or failed: ssl_ stays null and failed_ is set).
  bool startServerHandshake();
  void attachBio();
  bool doHandshake(network::IoResult& result);
  void countFailure(int ssl_error);
  void countClientFailure(int ssl_error);
  // The peer closed before the handshake ended.
  void countClosedInHandshake();
  // Sends raw_out_; false on a socket error. Sets `again` when the socket is full.
  bool flushRaw(network::IoResult& result);
  void onHandshakeTimeout();

  // One of the two is set: the side this socket is.
  ServerContextSharedPtr context_;
  ClientContextSharedPtr client_;
  network::Connection* connection_ = nullptr;
  network::HandshakeGate* gate_ = nullptr;  // accepted connections: the worker's
  bssl::UniquePtr<SSL> ssl_;
  buffer::Buffer raw_in_;
  buffer::Buffer raw_out_;
  std::unique_ptr<event::Timer> handshake_timer_;
  event::MonotonicTime handshake_started_{};
  uint64_t handshake_bytes_ = 0;
  bool handshake_done_ = false;
  bool shutdown_sent_ = false;
  bool raw_eof_ = false;
  bool turn_granted_ = false;  // the gate woke this socket: its handshake may start
  // The last read event brought less than a block of ciphertext: the next starts with one
  // single-region read (Buffer::readFrom's one_region).
  bool small_raw_reads_ = true;
  bool failed_ = false;  // the SSL object could not be made
  network::TransportFailure::Kind failure_kind_ = network::TransportFailure::Kind::None;
  std::string failure_reason_;
};

// Makes the TLS sockets of one filter chain. The context can be replaced at run time (new
// certificates) without a lock on the accept path: workers compare a generation number and take
// the mutex only once after each reload.
class TlsSocketFactory : public network::TransportSocketFactory {
 public:
  TlsSocketFactory(ServerContextSharedPtr context, stats::Counter reloads,
                   stats::Counter reload_failures);
  network::TransportSocketPtr createTransportSocket() const override;
  absl::Status reloadCertificates() const override;
  ServerContextSharedPtr context() const;

 private:
  mutable std::mutex mutex_;
  mutable ServerContextSharedPtr context_;  // guarded by mutex_
  mutable std::atomic<uint64_t> generation_{1};
  stats::Counter reloads_;
  stats::Counter reload_failures_;
};

// Makes the client side of TLS for each outbound connection to one server (a parent proxy).
class ClientTlsSocketFactory : public network::TransportSocketFactory {
 public:
  explicit ClientTlsSocketFactory(ClientContextSharedPtr context) : context_(std::move(context)) {}
  network::TransportSocketPtr createTransportSocket() const override;
  const ClientContextSharedPtr& context() const { return context_; }

 private:
  ClientContextSharedPtr context_;
};

}  // namespace tls
}  // namespace sluice
