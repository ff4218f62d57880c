#include "source/common/network/connection.h"

#include <algorithm>
#include <cerrno>

#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "source/common/common/logger.h"
#include "source/common/network/egress.h"

namespace sluice {
namespace network {

namespace {
// Bytes read per readiness event before yielding to other connections on the loop.
constexpr size_t kReadPerEvent = 4 * buffer::kBlockSize;
static_assert(event::IoBatch::kStandingReceiveLimit == kReadPerEvent,
              "a standing receive takes what a read event would");
constexpr std::chrono::milliseconds kFlushCloseTimeout{10000};
// Writes up to this many bytes wait for the loop's batch of sends (event::IoBatch).
constexpr size_t kBatchedWriteMax = buffer::kBlockSize;

// Whether a worker's accepted sockets have their first bytes when they are read at accept
// (readAtAccept). A read that found bytes (or the end) adds kAcceptReadGain to the credit, one
// that found nothing takes one away: reads at accept go on while more than one in
// kAcceptReadGain + 1 finds something. Without credit, one accepted socket in kAcceptReadProbe
// is read at once all the same, so clients that start sending sooner are noticed.
constexpr uint8_t kAcceptReadGain = 4;
constexpr uint8_t kAcceptReadCreditMax = 64;
constexpr uint8_t kAcceptReadProbe = 16;
struct AcceptReads {
  uint8_t credit = kAcceptReadCreditMax / 4;
  uint8_t skipped = 0;
};
// Per worker (a worker is a thread, and its accepted sockets come from its own listeners).
thread_local AcceptReads t_accept_reads;

// A flushed close's limit, per worker (Connection::setFlushCloseLimit).
struct FlushCloseLimit {
  std::chrono::milliseconds limit = kFlushCloseTimeout;
  stats::Counter timeouts;  // slot 0 (never reported) until a worker sets it
};
thread_local FlushCloseLimit t_flush_close;
}  // namespace

bool setNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Connection::Connection(event::Dispatcher& dispatcher, int fd, const Address& peer,
                       Blocking blocking)
    : Connection(dispatcher, fd, peer, State::Open) {
  inbound_ = true;
  // A blocking socket would stall the worker on the read that ends an edge-triggered burst.
  if (blocking != Blocking::NonBlocking) setNonBlocking(fd);
}

Connection::Connection(event::Dispatcher& dispatcher, int fd, const Address& peer, State state)
    : file_event_(dispatcher, fd, this, event::FileEvent::To<&Connection::onFileEvent>(),
                  // A connect in progress ends in writability; an open socket is watched for it
                  // once a write finds it full (waitWritable()).
                  state == State::Connecting ? event::FileEvent::Interest::ReadWrite
                                             : event::FileEvent::Interest::Read),
      peer_(peer),
      fd_(fd),
      state_(state),
      above_high_(false),
      read_end_(false),
      write_end_pending_(false),
      write_shut_(false),
      close_after_flush_(false),
      read_pending_(false),
      peer_closed_(false),
      write_blocked_(false),
      force_deliver_(false),
      in_write_(false),
      close_deferred_(false),
      awaiting_transport_(false),
      inbound_(false),
      small_reads_(true),
      send_queued_(false),
      recv_queued_(false),
      read_before_(false),
      standing_(false),
      standing_stop_(false),
      // Reads by completion are a worker's choice, made before its first connection.
      readiness_only_(dispatcher.ioBatch() == nullptr || !dispatcher.ioBatch()->standingAllowed()),
      accept_read_(false) {}

std::unique_ptr<Connection> Connection::connectTo(event::Dispatcher& dispatcher, const Address& to,
                                                  int max_fd, const Address* source,
                                                  bool* bind_failed) {
  if (bind_failed != nullptr) *bind_failed = false;
  int fd = ::socket(to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  if (fd >= max_fd) {
    ::close(fd);
    errno = EMFILE;
    return nullptr;
  }
  if (source != nullptr) {
    const int bind_error = bindSource(fd, *source, /*defer_port=*/true);
    if (bind_error != 0) {
      ::close(fd);
      if (bind_failed != nullptr) *bind_failed = true;
      errno = bind_error;
      return nullptr;
    }
  }
  setNoDelay(fd);
  int rc = ::connect(fd, to.sockaddr_ptr(), to.length());
  int err = rc == 0 ? 0 : errno;
  auto conn = std::unique_ptr<Connection>(new Connection(dispatcher, fd, to, State::Connecting));
  if (err != 0 && err != EINPROGRESS) {
    // Report the failure from the loop, after the caller has installed its callbacks.
    conn->connect_error_ = static_cast<uint8_t>(err);
    conn->file_event_.activate(event::FileEvent::kWrite);
  }
  return conn;
}

Connection::~Connection() {
  // What was written before the owner let the connection go leaves, as it would have at once.
  if (send_queued_ || recv_queued_) leaveBatch(state_ == State::Open);
  releaseStanding();
  if (state_ != State::Closed) {
    file_event_.removeBeforeClose();
    dispatcher().closeSocket(fd_);
  }
}

void Connection::onFileEvent(uint32_t events) {
  if (state_ == State::Closed) return;
  if (close_deferred_) {
    close_deferred_ = false;
    closeNow(deferred_event_);
    return;
  }
  if (state_ == State::Connecting) {
    if ((events & (event::FileEvent::kWrite | event::FileEvent::kClosed)) == 0 &&
        connect_error_ == 0) {
      return;
    }
    int err = connect_error_;
    if (err == 0) {
      socklen_t len = sizeof(err);
      if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    if (err == 0 && extras_ != nullptr && !extras_->connect_prefix.empty()) {
      std::string& prefix = extras_->connect_prefix;
      // A freshly connected socket's send buffer is empty: a short header goes out whole.
      const ssize_t n = ::send(fd_, prefix.data(), prefix.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n != static_cast<ssize_t>(prefix.size())) {
        err = n < 0 ? errno : EIO;
      } else {
        counters_.tx.add(static_cast<uint64_t>(n));
      }
      std::string().swap(prefix);
    }
    if (err != 0) {
      connect_error_ = static_cast<uint8_t>(err);
      closeNow(ConnectionEvent::RemoteClose);
      return;
    }
    state_ = State::Open;
    if (transport() != nullptr && !transport()->handshakeComplete()) {
      // The transport's handshake comes first: its first flight leaves with the flush below,
      // and the owner hears Connected when it is done.
      awaiting_transport_ = true;
    } else {
      callbacks_->onEvent(ConnectionEvent::Connected);
      if (state_ == State::Closed) return;
    }
    events |= event::FileEvent::kWrite;
  }
  if (raw_ != nullptr) {
    RawIoHandler* raw = raw_;
    if (events & event::FileEvent::kWrite) {
      raw->onRawWritable(*this);
      if (state_ == State::Closed || raw_ != raw) return;
    }
    if (events & event::FileEvent::kRead) raw->onRawReadable(*this);
    return;
  }
  if (events & event::FileEvent::kWrite) {
    write_blocked_ = false;
    // A send queued in the loop's batch goes with it.
    if (!send_queued_) flushWrite();
    if (state_ == State::Closed) return;
  }
  if (events & event::FileEvent::kRead) {
    read_pending_ = true;
    if ((events & event::FileEvent::kClosed) && !peer_closed_) {
      peer_closed_ = true;
      if (read_disable_count_ > 0) {
        callbacks_->onPeerEndWhileReadDisabled();
        if (state_ == State::Closed) return;
      }
    }
    if (read_disable_count_ == 0) onReadReady();
  }
}

bool Connection::hasUnreadBytes(size_t taken) const {
  if (read_buffer_.length() > taken) return true;
  // A standing receive may hold bytes the kernel took and the loop has not delivered yet.
  if (standing_) return true;
  int pending = 0;
  return state_ != State::Closed && ioctl(fd_, FIONREAD, &pending) == 0 && pending > 0;
}

void Connection::setTransportSocket(TransportSocketPtr transport) {
  extras().transport = std::move(transport);
  extras_->transport->setConnection(*this);
}

void Connection::onTransportReadReady() {
  IoResult r;
  if (!read_end_) r = transport()->doRead(read_buffer_, kReadPerEvent);
  counters_.rx.add(r.wire_read);
  counters_.tx.add(r.wire_written);
  if (r.action == IoResult::Action::Close) {
    closeNow(ConnectionEvent::RemoteClose);
    return;
  }
  if (r.end_stream) read_end_ = true;
  read_pending_ = r.again && !read_end_;
  if (!checkTransportReady()) return;
  // A read can produce bytes to send (handshake messages, session tickets), and a finished
  // handshake releases plaintext queued before it.
  if (!write_blocked_ && (transport()->pendingWireBytes() > 0 || !write_buffer_.empty())) {
    flushWrite();
    if (state_ == State::Closed) return;
  }
  bool force = force_deliver_;
  force_deliver_ = false;
  if (r.plaintext > 0 || r.end_stream || (force && (!read_buffer_.empty() || read_end_))) {
    callbacks_->onData(read_buffer_, read_end_);
    if (state_ == State::Closed) return;
  }
  if (read_pending_ && read_disable_count_ == 0) file_event_.activate(event::FileEvent::kRead);
}

bool Connection::checkTransportReady() {
  if (!awaiting_transport_ || !transport()->handshakeComplete()) return true;
  awaiting_transport_ = false;
  callbacks_->onEvent(ConnectionEvent::Connected);
  return state_ != State::Closed;
}

void Connection::flushTransport() {
  IoResult r = transport()->doWrite(write_buffer_, write_end_pending_ && !write_shut_);
  counters_.rx.add(r.wire_read);
  counters_.tx.add(r.wire_written);
  if (r.action == IoResult::Action::Close) {
    closeNow(ConnectionEvent::RemoteClose);
    return;
  }
  write_blocked_ = false;
  if (r.again) waitWritable();
  // Never on a writer's stack: the owner's own write cannot complete a handshake under it.
  if (!in_write_ && !checkTransportReady()) return;
  if (write_buffer_.empty() && transport()->pendingWireBytes() == 0) {
    if (close_after_flush_) {
      closeNow(ConnectionEvent::LocalClose);
      return;
    }
    // The transport ended its own stream (close_notify) when it took the last bytes.
    if (write_end_pending_ && !write_shut_ && transport()->handshakeComplete()) {
      ::shutdown(fd_, SHUT_WR);
      write_shut_ = true;
    }
  }
  checkLowWatermark();
}

void Connection::onReadReady() {
  if (transport() != nullptr) {
    onTransportReadReady();
    return;
  }
  if (standing_) {
    // The ring reads the socket (or will stop, and then hand it back): only what is buffered
    // is handed over here.
    read_pending_ = false;
    readSocket(0, false);
    return;
  }
  // A socket whose messages are small waits for the loop's batch; a bulk one reads now.
  event::IoBatch* batch;
  if (small_reads_ && !read_end_ && (batch = dispatcher().ioBatch()) != nullptr) {
    if (!recv_queued_) {
      recv_queued_ = true;
      batch->add(this, kBatchHandler, fd_, event::IoBatch::Kind::Recv);
    }
    return;
  }
  readSocket(0, false);
}

void Connection::readSocket(size_t total, bool saw_end) {
  while (read_pending_ && !read_end_ && total < kReadPerEvent) {
    int err = 0;
    size_t asked = 0;
    ssize_t rc = read_buffer_.readFrom(fd_, kReadPerEvent - total, err, asked, inbound_,
                                       small_reads_ && total == 0);
    if (rc > 0) {
      total += static_cast<size_t>(rc);
      // A short read emptied the socket: edge-triggered readiness will report the next bytes,
      // so the read that would only return EAGAIN is skipped. Not once the peer closed: its FIN
      // may sit behind those bytes and no further edge would announce it.
      if (static_cast<size_t>(rc) < asked && !peer_closed_) read_pending_ = false;
      continue;
    }
    if (rc == 0) {
      read_end_ = true;
      saw_end = true;
      read_pending_ = false;
      break;
    }
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      read_pending_ = false;
      break;
    }
    closeNow(ConnectionEvent::RemoteClose);
    return;
  }
  if (total > 0) {
    counters_.rx.add(total);
    small_reads_ = total < (inbound_ ? buffer::kSmallBlockSize : buffer::kBlockSize);
  }
  if (accept_read_) {
    accept_read_ = false;
    AcceptReads& reads = t_accept_reads;
    if (total > 0 || saw_end) {
      reads.credit =
          static_cast<uint8_t>(std::min<int>(reads.credit + kAcceptReadGain, kAcceptReadCreditMax));
    } else if (reads.credit > 0) {
      --reads.credit;
    }
  }
  bool force = force_deliver_;
  force_deliver_ = false;
  if (total > 0 || saw_end || (force && (!read_buffer_.empty() || read_end_))) {
    callbacks_->onData(read_buffer_, read_end_);
    if (state_ == State::Closed) return;
  }
  // Yield after a large read so one busy peer cannot starve the loop; resume next iteration.
  if (read_pending_ && !read_end_ && read_disable_count_ == 0) {
    file_event_.activate(event::FileEvent::kRead);
  } else if (!read_pending_ && !readiness_only_) {
    // A connection that has read a message before reads the next ones by completion; one that
    // carries a single message (a new connection per request) never arms.
    if (read_before_) {
      armStanding();
    } else if (total > 0) {
      read_before_ = true;
    }
  }
}

// ---- reads by completion ----

void Connection::armStanding() {
  event::IoBatch* batch = dispatcher().ioBatch();
  // Read-disabled or not (an HTTP/1 client is, from its request until the response is out):
  // a standing receive stops by itself if bytes come meanwhile.
  if (state_ != State::Open || transport() != nullptr || raw_ != nullptr || read_end_ ||
      !small_reads_ || standing_ || batch == nullptr || !batch->standingAllowed()) {
    return;
  }
  epoll_event quiet{};
  const int epoll_fd = file_event_.quietReads(&quiet);
  standing_ = batch->arm(this, kStandingHandler, fd_, epoll_fd, quiet);
  if (!standing_) file_event_.readsByReadiness();
}

void Connection::stopStanding() {
  if (!standing_ || standing_stop_) return;
  // Reads go back to readiness once the receive's last answer is in: what it took before
  // comes first. The cancellation goes at once: a connection that stops reading (backpressure)
  // must not go on filling the worker's buffers until the turn ends.
  standing_stop_ = true;
  event::IoBatch* batch = dispatcher().ioBatch();
  batch->disarm(this);
  batch->submitPending();
}

void Connection::readByReadinessOnly() {
  readiness_only_ = true;
  stopStanding();
}

void Connection::releaseStanding() {
  if (!standing_) return;
  if (event::IoBatch* batch = dispatcher().ioBatch()) batch->release(this);
  standing_ = false;
  standing_stop_ = false;
}

const event::IoBatch::StandingHandler Connection::kStandingHandler = {&Connection::onStandingData,
                                                                      &Connection::onStandingEnded};

void Connection::onStandingData(void* self, const char* bytes, size_t len, size_t run) {
  auto* c = static_cast<Connection*>(self);
  c->read_buffer_.add(bytes, len);
  c->counters_.rx.add(len);
  if (run == 0) return;  // more of the same delivery follows
  if (run >= buffer::kBlockSize) {
    // A bulk stream: block-sized reads by readiness cost less than a message per buffer (and a
    // tunnel's relay can splice them).
    c->small_reads_ = false;
    c->stopStanding();
  }
  if (c->read_disable_count_ > 0) {
    // Bytes while the owner does not read (a pipelined request, a peer ahead of its
    // backpressure): kept for when reading resumes, and the receive stops, so that what a
    // connection holds unread stays what one turn brought.
    c->force_deliver_ = true;
    c->stopStanding();
    return;
  }
  c->callbacks_->onData(c->read_buffer_, c->read_end_);
}

void Connection::onStandingEnded(void* self, int result) {
  auto* c = static_cast<Connection*>(self);
  c->standing_ = false;
  c->standing_stop_ = false;
  c->file_event_.readsByReadiness();
  if (result == 0) {
    c->read_end_ = true;
    c->peer_closed_ = true;
    c->read_pending_ = false;
    if (c->read_disable_count_ > 0) {
      c->force_deliver_ = true;  // the end is handed over when reading resumes
      c->callbacks_->onPeerEndWhileReadDisabled();
      return;
    }
    c->callbacks_->onData(c->read_buffer_, true);
    return;
  }
  if (result == -ECANCELED || result == -ENOBUFS || result == -EAGAIN || result == -EINTR ||
      result == -EINVAL) {
    // Stopped, out of buffers, or ended by the kernel: the socket is read by readiness (what
    // it holds now first), and armed again once it is empty.
    c->readSocketAgain();
    return;
  }
  c->closeNow(ConnectionEvent::RemoteClose);
}

void Connection::scheduleRead() {
  if (state_ != State::Open) return;
  force_deliver_ = true;
  file_event_.activate(event::FileEvent::kRead);
}

void Connection::readSocketAgain() {
  if (state_ != State::Open) return;
  read_pending_ = true;
  if (read_disable_count_ == 0) file_event_.activate(event::FileEvent::kRead);
}

void Connection::readAtAccept() {
  AcceptReads& reads = t_accept_reads;
  if (reads.credit == 0 && ++reads.skipped < kAcceptReadProbe) return;
  reads.skipped = 0;
  accept_read_ = true;
  readSocketAgain();
}

void Connection::write(buffer::Buffer& data, bool end_stream) {
  WriteInterceptor* interceptor = this->interceptor();
  if (interceptor != nullptr && state_ != State::Closed && !write_shut_ &&
      !interceptor->onWrite(data, end_stream)) {
    return;
  }
  writeDirect(data, end_stream);
}

void Connection::writeDirect(buffer::Buffer& data, bool end_stream) {
  if (state_ == State::Closed || write_shut_ || close_deferred_) {
    data.clear();
    return;
  }
  write_buffer_.move(data);
  if (end_stream) write_end_pending_ = true;
  if (send_queued_) {
    // The queued send takes these bytes too.
  } else if (state_ == State::Open && !write_blocked_ && transport() == nullptr &&
             !write_buffer_.empty() && write_buffer_.length() <= kBatchedWriteMax &&
             dispatcher().ioBatch() != nullptr) {
    // A message's worth waits for the loop's batch; more (bulk, a tunnel) goes at once, where
    // entering the kernel is a small part of the cost, and leaves the buffers empty for splice.
    send_queued_ = true;
    dispatcher().ioBatch()->add(this, kBatchHandler, fd_, event::IoBatch::Kind::Send);
  } else if (state_ == State::Open && !write_blocked_) {
    in_write_ = true;
    flushWrite();
    in_write_ = false;
    if (close_deferred_) return;
  }
  if (!above_high_ && write_buffer_.length() > highWatermark()) {
    above_high_ = true;
    callbacks_->onAboveWriteHighWatermark();
  }
}

void Connection::flushWrite() {
  if (transport() != nullptr) {
    flushTransport();
    return;
  }
  while (!write_buffer_.empty()) {
    int err = 0;
    size_t asked = 0;
    ssize_t rc = write_buffer_.writeTo(fd_, err, asked);
    if (rc >= 0) {
      counters_.tx.add(static_cast<uint64_t>(rc));
      // A short write filled the send buffer: wait for writability instead of asking again.
      if (static_cast<size_t>(rc) < asked) {
        waitWritable();
        break;
      }
      continue;
    }
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      waitWritable();
      break;
    }
    closeNow(ConnectionEvent::RemoteClose);
    return;
  }
  afterWrite();
}

void Connection::waitWritable() {
  write_blocked_ = true;
  file_event_.watchWrites();
  if (close_after_flush_) armFlushTimer();
}

void Connection::setFlushCloseLimit(std::chrono::milliseconds limit, stats::Counter timeouts) {
  t_flush_close = FlushCloseLimit{limit, timeouts};
}

void Connection::armFlushTimer() {
  std::optional<event::Timer>& timer = extras().flush_timer;
  if (timer) return;  // armed once, when the close began to wait
  timer.emplace(dispatcher(), [this] {
    t_flush_close.timeouts.inc();
    closeNow(ConnectionEvent::LocalClose);
  });
  timer->enable(t_flush_close.limit);
}

void Connection::afterWrite() {
  if (write_buffer_.empty()) {
    if (close_after_flush_) {
      closeNow(ConnectionEvent::LocalClose);
      return;
    }
    if (write_end_pending_ && !write_shut_) {
      ::shutdown(fd_, SHUT_WR);
      write_shut_ = true;
    }
  }
  checkLowWatermark();
}

const event::IoBatch::Handler Connection::kBatchHandler = {
    &Connection::prepareBatched, &Connection::applyBatched, &Connection::finishBatched};

unsigned Connection::prepareBatched(void* self, event::IoBatch::Kind kind, iovec* iov, unsigned max,
                                    void** cookie) {
  auto* c = static_cast<Connection*>(self);
  if (kind == event::IoBatch::Kind::Send) {
    c->send_queued_ = false;
    if (c->state_ != State::Open || c->write_blocked_ || c->raw_ != nullptr) return 0;
    size_t bytes;
    const unsigned n = c->write_buffer_.slices(iov, max, bytes);
    c->send_queued_ = n > 0;
    return n;
  }
  // A receive asked for before the owner stopped reading (or went raw) waits: read_pending_
  // stays, and reading again looks at the socket.
  c->recv_queued_ = false;
  if (c->state_ != State::Open || c->raw_ != nullptr || c->read_disable_count_ > 0 ||
      c->read_end_ || !c->read_pending_) {
    return 0;
  }
  const buffer::Buffer::Reservation r = c->read_buffer_.reserveRead(c->inbound_);
  iov[0].iov_base = r.data;
  iov[0].iov_len = std::min(r.size, kReadPerEvent);
  *cookie = r.block;
  c->recv_queued_ = true;
  return 1;
}

void Connection::applyBatched(void* self, event::IoBatch::Kind kind, ssize_t result, size_t asked,
                              void* cookie) {
  auto* c = static_cast<Connection*>(self);
  if (kind == event::IoBatch::Kind::Send) {
    if (result > 0) {
      c->write_buffer_.drain(static_cast<size_t>(result));
      c->counters_.tx.add(static_cast<uint64_t>(result));
    }
    return;
  }
  auto* block = static_cast<buffer::Block*>(cookie);
  c->read_buffer_.commit({block, block->data() + block->end, asked},
                         result > 0 ? static_cast<size_t>(result) : 0);
  if (result == 0) c->read_end_ = true;
}

void Connection::finishBatched(void* self, event::IoBatch::Kind kind, ssize_t result,
                               size_t asked) {
  auto* c = static_cast<Connection*>(self);
  if (kind == event::IoBatch::Kind::Send) {
    c->send_queued_ = false;
    c->finishBatchedSend(result, asked);
  } else {
    c->recv_queued_ = false;
    c->finishBatchedRecv(result, asked);
  }
}

void Connection::finishBatchedSend(ssize_t result, size_t asked) {
  if (state_ != State::Open) return;
  if (result < 0 && result != -EAGAIN && result != -EINTR) {
    closeNow(ConnectionEvent::RemoteClose);
    return;
  }
  // A short send filled the socket's send buffer: writability brings the rest.
  if (result == -EAGAIN || (result >= 0 && static_cast<size_t>(result) < asked)) {
    waitWritable();
  }
  if (!write_blocked_ && raw_ == nullptr && !write_buffer_.empty()) {
    // More than one send's slices, or bytes written since: they go with the next round.
    send_queued_ = true;
    dispatcher().ioBatch()->add(this, kBatchHandler, fd_, event::IoBatch::Kind::Send);
    checkLowWatermark();
    return;
  }
  afterWrite();
}

void Connection::finishBatchedRecv(ssize_t result, size_t asked) {
  if (state_ != State::Open || raw_ != nullptr) return;
  size_t total = 0;
  bool saw_end = false;
  if (result > 0) {
    total = static_cast<size_t>(result);
    if (total < asked && !peer_closed_) read_pending_ = false;
  } else if (result == 0) {
    saw_end = true;
    read_pending_ = false;
  } else if (result == -EAGAIN) {
    read_pending_ = false;
  } else if (result != -EINTR) {
    closeNow(ConnectionEvent::RemoteClose);
    return;
  }
  if (read_disable_count_ > 0) {
    // Stopped reading since: the bytes wait in the buffer for readDisable(false).
    if (total > 0) counters_.rx.add(total);
    return;
  }
  readSocket(total, saw_end);
}

void Connection::leaveBatch(bool send_now) {
  event::IoBatch* batch = dispatcher().ioBatch();
  if (batch != nullptr) batch->cancel(this);
  recv_queued_ = false;
  if (!send_queued_) return;
  send_queued_ = false;
  if (!send_now) return;
  while (!write_buffer_.empty()) {
    int err = 0;
    size_t asked = 0;
    const ssize_t rc = write_buffer_.writeTo(fd_, err, asked);
    if (rc > 0) counters_.tx.add(static_cast<uint64_t>(rc));
    if (rc <= 0 || static_cast<size_t>(rc) < asked) break;
  }
}

void Connection::checkLowWatermark() {
  if (above_high_ && write_buffer_.length() <= highWatermark() / 2) {
    above_high_ = false;
    callbacks_->onBelowWriteLowWatermark();
  }
}

bool Connection::rawCapable() const {
  return transport() == nullptr && interceptor() == nullptr && state_ == State::Open &&
         !standing_ && read_buffer_.empty() && write_buffer_.empty() && !close_after_flush_ &&
         !close_deferred_ && !write_end_pending_ && !read_end_;
}

void Connection::setRawIoHandler(RawIoHandler* handler, bool resume) {
  // rawCapable() said so: no receive stands, which would read the socket behind the handler.
  SLUICE_ASSERT(handler == nullptr || !standing_, "raw I/O on a socket read by completion");
  raw_ = handler;
  if (handler == nullptr && resume && state_ == State::Open) {
    // The raw owner may have left bytes unread: look again, as after a readiness edge.
    read_pending_ = true;
    file_event_.activate(event::FileEvent::kRead | event::FileEvent::kWrite);
  }
}

void Connection::close(CloseType type) {
  if (state_ == State::Closed) return;
  if (close_deferred_) {
    // The socket already failed (or finished a flushed close): nothing more can leave.
    close_deferred_ = false;
    closeNow(ConnectionEvent::LocalClose);
    return;
  }
  const bool unsent =
      !write_buffer_.empty() || (transport() != nullptr && transport()->pendingWireBytes() > 0);
  if (type == CloseType::FlushWrite && state_ == State::Open && unsent) {
    if (close_after_flush_) return;
    close_after_flush_ = true;
    ++read_disable_count_;
    // Bytes queued in this turn's batch leave before the loop waits again: a socket that takes
    // them all closes then, with no timer armed (a response with Connection: close closes so). One
    // that takes only part waits for writability, and that arms the timer (waitWritable).
    if (!send_queued_ || write_blocked_ || raw_ != nullptr || transport() != nullptr) {
      armFlushTimer();
    }
    return;
  }
  closeNow(ConnectionEvent::LocalClose);
}

void Connection::closeNow(ConnectionEvent event) {
  if (state_ == State::Closed) return;
  if (in_write_) {
    // Found while the owner was writing: delivered from the loop, so no owner sees its
    // connection close under its own write.
    if (!close_deferred_) {
      close_deferred_ = true;
      deferred_event_ = event;
      file_event_.activate(event::FileEvent::kWrite);
    }
    return;
  }
  if (send_queued_ || recv_queued_) {
    leaveBatch(event == ConnectionEvent::LocalClose && !write_shut_);
  }
  releaseStanding();
  state_ = State::Closed;
  file_event_.removeBeforeClose();
  if (transport() != nullptr && event == ConnectionEvent::LocalClose) transport()->onClose();
  dispatcher().closeSocket(fd_);
  fd_ = -1;
  read_buffer_.clear();
  write_buffer_.clear();
  if (extras_ != nullptr && extras_->flush_timer) extras_->flush_timer->disable();
  if (callbacks_ != nullptr) callbacks_->onEvent(event);
}

void Connection::readDisable(bool disable) {
  if (state_ == State::Closed) return;
  if (disable) {
    // A standing receive stands on: a connection that stops reading usually hears nothing
    // meanwhile (an HTTP/1 client waiting for its response), and stopping is a system call.
    // Bytes that do come stop it (onStandingData).
    ++read_disable_count_;
    return;
  }
  if (read_disable_count_ == 0) return;
  if (--read_disable_count_ == 0 && (read_pending_ || force_deliver_ || !read_buffer_.empty())) {
    force_deliver_ = true;
    file_event_.activate(event::FileEvent::kRead);
  }
}

}  // namespace network
}  // namespace sluice
