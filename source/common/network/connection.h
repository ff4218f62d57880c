#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "source/common/buffer/buffer.h"
#include "source/common/event/dispatcher.h"
#include "source/common/memory/slab.h"
#include "source/common/network/address.h"
#include "source/common/network/transport_socket.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace network {

enum class ConnectionEvent : uint8_t {
  Connected,    // an outbound connect finished
  RemoteClose,  // the peer reset or closed and nothing more can be written
  LocalClose,   // close() was called (delivered once, even for a flushed close)
};

enum class CloseType : uint8_t {
  NoFlush,    // drop anything unwritten and close now
  FlushWrite  // write out what is buffered first (bounded by a timer), then close
};

class Connection;

// Takes a plain TCP connection's readiness while its owner moves the bytes itself (a tunnel
// splicing socket to socket). The connection's buffers stay empty meanwhile.
class RawIoHandler {
 public:
  virtual ~RawIoHandler() = default;
  virtual void onRawReadable(Connection& connection) = 0;
  virtual void onRawWritable(Connection& connection) = 0;
};

// The owner of a connection (a network filter manager, a codec's upstream side, the pool).
class ConnectionCallbacks {
 public:
  virtual ~ConnectionCallbacks() = default;
  // Bytes arrived; end_stream when the peer half-closed. The callee drains what it consumed;
  // what it leaves stays buffered for the next call.
  virtual void onData(buffer::Buffer& data, bool end_stream) = 0;
  virtual void onEvent(ConnectionEvent event) = 0;
  // The write buffer rose above the high watermark / fell below the low one: stop/resume
  // feeding this connection (backpressure).
  virtual void onAboveWriteHighWatermark() {}
  virtual void onBelowWriteLowWatermark() {}
  // The peer's FIN (or reset) arrived while reads were disabled: whatever it sent before waits
  // unread, but the peer may be gone.
  virtual void onPeerEndWhileReadDisabled() {}
};

// Sees every write before it is queued (the network filter manager, to run write filters).
class WriteInterceptor {
 public:
  virtual ~WriteInterceptor() = default;
  // False: the interceptor took the data (a filter holds it back); nothing is queued now.
  virtual bool onWrite(buffer::Buffer& data, bool end_stream) = 0;
};

// Byte counters a connection adds to (per listener); the default handles count nowhere.
struct ConnectionByteCounters {
  stats::Counter rx;
  stats::Counter tx;
};

// A non-blocking TCP socket on one worker's dispatcher, with its own read and write buffers
// (both empty, holding no memory, while idle). Closing delivers LocalClose/RemoteClose once and
// then the owner deletes the connection through the dispatcher's deferred delete.
class Connection : public event::DeferredDeletable, public memory::SlabAllocated {
 public:
  static constexpr uint32_t kDefaultHighWatermark = 1024 * 1024;

  // Wraps an accepted, connected socket (made non-blocking here).
  enum class Blocking : uint8_t {
    Unknown,      // make it non-blocking here (two fcntl calls)
    NonBlocking,  // accept4(SOCK_NONBLOCK) already did
  };
  Connection(event::Dispatcher& dispatcher, int fd, const Address& peer,
             Blocking blocking = Blocking::Unknown);
  // Starts an outbound connect; Connected or RemoteClose follows. Null with errno set when no
  // socket could be made, or (EMFILE) when its descriptor number is `max_fd` or above. With
  // `source` (an egress address), the socket is bound to it first and the port is chosen by
  // the connect; a bind that fails gives null with errno set and `*bind_failed` true.
  static std::unique_ptr<Connection> connectTo(event::Dispatcher& dispatcher, const Address& to,
                                               int max_fd = 1 << 30,
                                               const Address* source = nullptr,
                                               bool* bind_failed = nullptr);
  ~Connection() override;

  void setCallbacks(ConnectionCallbacks* callbacks) { callbacks_ = callbacks; }
  // Puts a transport (TLS) between the buffers and the socket. Before any I/O: right after an
  // accepted connection is made, or right after connectTo (before Connected). On an outbound
  // connection the transport's handshake starts when the TCP connect completes (its first
  // flight leaves with the first flush) and Connected comes once it is done, so the owner only
  // ever writes and reads plaintext; bytes written before wait in the write buffer. A
  // transport that fails first is a RemoteClose, transportFailure() saying why.
  void setTransportSocket(TransportSocketPtr transport);
  // An outbound connection: bytes sent on the socket as they are the moment the connect
  // completes, before anything of the transport socket or the owner (a PROXY protocol header
  // toward a parent, ahead of its TLS). A socket that does not take them all at once fails the
  // connect (RemoteClose, connectError() EIO).
  void setConnectPrefix(std::string prefix) { extras().connect_prefix = std::move(prefix); }
  // Why the transport closed the connection before its handshake completed (None for plain
  // TCP, and for a connection that closed for any other reason).
  TransportFailure transportFailure() const {
    return transport() != nullptr ? transport()->failure() : TransportFailure{};
  }
  // The application protocol the transport negotiated (ALPN), empty for plain TCP.
  std::string_view applicationProtocol() const {
    return transport() != nullptr ? transport()->applicationProtocol() : std::string_view();
  }
  ConnectionCallbacks* callbacks() const { return callbacks_; }
  event::Dispatcher& dispatcher() { return file_event_.dispatcher(); }
  const Address& peer() const { return peer_; }
  int fd() const { return fd_; }
  // The kernel reported the peer's FIN (EPOLLRDHUP): a short read no longer means the socket
  // is drained, since the FIN may sit behind the bytes read.
  bool peerClosed() const { return peer_closed_; }
  bool open() const { return state_ != State::Closed; }
  // An outbound connection not yet Connected: the TCP connect, or its transport's handshake.
  bool connecting() const { return state_ == State::Connecting || awaiting_transport_; }
  // errno of a failed outbound connect (0 otherwise).
  int connectError() const { return connect_error_; }

  // Queues data (taking its blocks) and writes as much as the socket takes now. With
  // end_stream the write side is shut down once everything is written (half-close). A write
  // never closes the connection on the caller's stack: a failure found while writing (or the
  // end of a flushed close) is delivered from the loop, on the connection's next event.
  void write(buffer::Buffer& data, bool end_stream = false);
  // Queues data without passing it to the write interceptor (a write filter's own output).
  void writeDirect(buffer::Buffer& data, bool end_stream = false);
  // Null (the default) costs one test per write.
  void setWriteInterceptor(WriteInterceptor* interceptor) {
    if (interceptor != nullptr || extras_ != nullptr) extras().interceptor = interceptor;
  }
  void close(CloseType type);
  // Nested: n disables need n enables. While disabled, nothing is read (TCP backpressure).
  void readDisable(bool disable);
  bool readEnabled() const { return read_disable_count_ == 0; }
  size_t writeBufferLength() const { return write_buffer_.length(); }
  bool aboveHighWatermark() const { return above_high_; }
  // Few connections set their own (the origin tool's); the others keep the default in no field.
  void setHighWatermark(uint32_t bytes) { extras().high_watermark = bytes; }
  // How long a flushed close (CloseType::FlushWrite) waits for the peer to take the last bytes,
  // for the connections of the calling thread: a worker sets it from close_flush_timeout at its
  // start and at each reload (10 s elsewhere). A close that runs out drops what is left and
  // counts in `timeouts`.
  static void setFlushCloseLimit(std::chrono::milliseconds limit, stats::Counter timeouts);
  void setByteCounters(ConnectionByteCounters counters) { counters_ = counters; }
  // The whole-connection data delivered to the callbacks but not yet drained stays here.
  buffer::Buffer& readBuffer() { return read_buffer_; }
  // Bytes the peer sent beyond the first `taken` of the read buffer (those its reader still
  // holds): in the buffer or still in the kernel (or, while a receive stands, maybe there).
  bool hasUnreadBytes(size_t taken = 0) const;
  // From now on the socket is read by readiness only (a tunnel about to splice it): a receive
  // standing in the loop's batch stops, and rawCapable() holds once its last bytes are in.
  void readByReadinessOnly();
  // True when the socket can be handed to a RawIoHandler: plain TCP (no transport), no write
  // filter that must see the bytes, open, nothing buffered either way, no close or half-close
  // pending.
  bool rawCapable() const;
  // Routes readiness to `handler` instead of the buffered path. Null gives it back; with
  // `resume` the next loop iteration reads as if the socket had just become readable.
  void setRawIoHandler(RawIoHandler* handler, bool resume = true);
  // Bytes a raw handler moved through this socket, for the connection's byte counters.
  void countRawBytes(uint64_t rx, uint64_t tx) {
    counters_.rx.add(rx);
    counters_.tx.add(tx);
  }
  // A raw handler's write found the socket full: writability is reported from now on.
  void watchWrites() { file_event_.watchWrites(); }
  // Gives the bytes in the read buffer to the callbacks again on the next loop iteration
  // (used after the owner switches state, e.g. an upgrade to a tunnel, or after readDisable).
  void scheduleRead();
  // The transport left bytes unread on purpose (a handshake waiting its turn) and can take them
  // now: the socket is read on the next loop iteration, as after a readiness edge.
  void readSocketAgain();
  // A plain connection just accepted: read at once (the receive goes in the loop's batch with
  // the socket's registration, and a request that came with its connection costs no turn of its
  // own) while the worker's accepted sockets have had their first bytes by then often enough;
  // otherwise it waits for readiness like any socket. Each read at once that found nothing (the
  // client sends only once its connect completed, after the accept) was a receive for nothing.
  void readAtAccept();

 private:
  enum class State : uint8_t { Connecting, Open, Closed };
  Connection(event::Dispatcher& dispatcher, int fd, const Address& peer, State state);

  void onFileEvent(uint32_t events);
  void onReadReady();
  // Reads the socket until it is drained (or kReadPerEvent), after `total` bytes (saw_end: and
  // the peer's FIN) a batched receive brought, then hands the bytes to the callbacks.
  void readSocket(size_t total, bool saw_end);
  // The loop's batch of sends and receives (event::IoBatch): a plain connection's write and
  // its next small read are queued there and reach the kernel with the others of the turn.
  static const event::IoBatch::Handler kBatchHandler;
  static unsigned prepareBatched(void* self, event::IoBatch::Kind kind, iovec* iov, unsigned max,
                                 void** cookie);
  static void applyBatched(void* self, event::IoBatch::Kind kind, ssize_t result, size_t asked,
                           void* cookie);
  static void finishBatched(void* self, event::IoBatch::Kind kind, ssize_t result, size_t asked);
  void finishBatchedSend(ssize_t result, size_t asked);
  void finishBatchedRecv(ssize_t result, size_t asked);
  // Takes the connection's queued operations out of the batch (it closes or goes away). A send
  // still queued is made now when the connection closes itself: what it wrote before close()
  // leaves as it would have without the batch.
  void leaveBatch(bool send_now);
  void onTransportReadReady();
  void flushTransport();
  // Outbound: delivers Connected once the transport's handshake is done. False when the owner
  // closed the connection from it.
  bool checkTransportReady();
  void onWriteReady();
  void flushWrite();
  // After a write: the end of a flushed close, the half-close, the low watermark.
  // A write found the socket full: wait for writability (watched from now on).
  void waitWritable();
  void afterWrite();
  // A flushed close's limit: what the peer does not take within the thread's limit
  // (setFlushCloseLimit) is dropped. Armed once.
  void armFlushTimer();
  void closeNow(ConnectionEvent event);
  // Reads by completion (event::IoBatch's standing receives): armed once a plain socket that
  // reads messages has read one before and is empty; stopped when bytes come while reads are
  // disabled (they wait in the read buffer) and for a bulk stream (read by readiness in blocks
  // again), then armed again once the socket is read empty; released when the connection
  // closes. Never while a raw handler owns the socket (rawCapable() is false meanwhile).
  void armStanding();
  void stopStanding();
  void releaseStanding();
  static void onStandingData(void* self, const char* bytes, size_t len, size_t run);
  static void onStandingEnded(void* self, int result);
  static const event::IoBatch::StandingHandler kStandingHandler;
  void checkLowWatermark();

  uint32_t highWatermark() const {
    return extras_ == nullptr ? kDefaultHighWatermark : extras_->high_watermark;
  }

  // Pointers first, then the address and the smaller fields, then the flags: no padding between.
  // The dispatcher and the descriptor's registration are the socket event's.
  ConnectionCallbacks* callbacks_ = nullptr;
  RawIoHandler* raw_ = nullptr;
  buffer::Buffer read_buffer_;
  buffer::Buffer write_buffer_;
  event::FileEvent file_event_;
  // What few connections need, made on first use: a transport (TLS), write filters, the timer
  // of a flushed close, the bytes an outbound connection sends as soon as it connects (a
  // parent's PROXY header), a high watermark of its own.
  struct Extras {
    TransportSocketPtr transport;             // TLS: reads and writes go through it
    WriteInterceptor* interceptor = nullptr;  // the filter manager's write filters
    std::optional<event::Timer> flush_timer;
    std::string connect_prefix;  // empty: none
    uint32_t high_watermark = kDefaultHighWatermark;
  };
  Extras& extras() {
    if (extras_ == nullptr) extras_ = std::make_unique<Extras>();
    return *extras_;
  }
  std::unique_ptr<Extras> extras_;
  TransportSocket* transport() const {
    return extras_ != nullptr ? extras_->transport.get() : nullptr;
  }
  WriteInterceptor* interceptor() const {
    return extras_ != nullptr ? extras_->interceptor : nullptr;
  }
  Address peer_;
  int fd_;
  ConnectionByteCounters counters_;
  uint16_t read_disable_count_ = 0;
  uint8_t connect_error_ = 0;  // an errno (all below 256)
  State state_;
  // One bit each, all false at construction (a tunnel holds two connections).
  bool above_high_ : 1;
  bool read_end_ : 1;           // the peer half-closed its write side
  bool write_end_pending_ : 1;  // shut down our write side once the buffer drains
  bool write_shut_ : 1;
  bool close_after_flush_ : 1;
  bool read_pending_ : 1;  // edge-triggered readiness not yet consumed
  bool peer_closed_ : 1;   // the kernel reported the peer's FIN (EPOLLRDHUP)
  bool write_blocked_ : 1;
  bool force_deliver_ : 1;       // hand buffered bytes to the callbacks on the next read event
  bool in_write_ : 1;            // inside write(): a close waits for the loop
  bool close_deferred_ : 1;      // deferred_event_ is delivered on the next event
  bool awaiting_transport_ : 1;  // outbound: TCP is up, Connected waits for the handshake
  // Accepted from a client: a read into an empty buffer starts with a small block, so a request
  // head waiting for its destination (or a client sending it slowly) holds 1 KiB, not 16.
  bool inbound_ : 1;
  // The last read event brought less than one region's worth (a small block inbound, a block
  // otherwise): the next starts with a single-region read (Buffer::readFrom's one_region). Set
  // at first: a new client's head usually fits the small block (as nginx's first 1 KiB read).
  bool small_reads_ : 1;
  bool send_queued_ : 1;     // a send waits in the loop's batch
  bool recv_queued_ : 1;     // a receive waits in the loop's batch
  bool read_before_ : 1;     // a read brought bytes before (reads by completion from the next)
  bool standing_ : 1;        // a receive stands in the loop's batch (reads by completion)
  bool standing_stop_ : 1;   // it was asked to stop
  bool readiness_only_ : 1;  // never by completion (off in the worker, or readByReadinessOnly)
  bool accept_read_ : 1;     // read at accept (readAtAccept): what it finds counts for the next
  ConnectionEvent deferred_event_ = ConnectionEvent::RemoteClose;
};

using ConnectionPtr = std::unique_ptr<Connection>;

// Socket helpers.
bool setNonBlocking(int fd);
void setNoDelay(int fd);

}  // namespace network
}  // namespace sluice
