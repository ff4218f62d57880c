#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "source/common/buffer/buffer.h"
#include "source/common/memory/slab.h"
#include "source/common/network/connection.h"

namespace sluice {
namespace proxy {
class WorkerContext;
}

namespace network {

class ReadFilter;

enum class FilterStatus : uint8_t {
  Continue,       // pass on to the next filter
  StopIteration,  // later filters wait until continueReading() (or the connection closes)
};

// What a network filter may do with the connection it serves.
class ReadFilterCallbacks {
 public:
  virtual ~ReadFilterCallbacks() = default;
  virtual Connection& connection() = 0;
  // Resume iteration after StopIteration, from the next filter, with the buffered bytes.
  virtual void continueReading() = 0;
  virtual proxy::WorkerContext& worker() = 0;
  // `current` (a filter of this connection, usually the codec, calling from one of its own
  // methods) gives its place in the chain to `next`, which gets these callbacks and every event
  // from now on. `current` is deleted from the loop, after the call it makes this from returns.
  virtual void replaceReadFilter(ReadFilter& current, std::unique_ptr<ReadFilter> next) = 0;
};

// A network filter: sees the bytes of one downstream connection, in order with the others of
// its chain. The last filter of a chain is terminal (a codec) and consumes the bytes. Deleted
// from the loop when it gives its place to another (ReadFilterCallbacks::replaceReadFilter).
class ReadFilter : public event::DeferredDeletable, public memory::SlabAllocated {
 public:
  virtual void initializeReadFilterCallbacks(ReadFilterCallbacks& callbacks) = 0;
  // Once, when the connection is set up, before any byte.
  virtual FilterStatus onNewConnection() { return FilterStatus::Continue; }
  // Bytes from the client; the filter drains what it consumes.
  virtual FilterStatus onData(buffer::Buffer& data, bool end_stream) = 0;
  // Connection events and backpressure on the downstream write side, delivered to every filter.
  virtual void onEvent(ConnectionEvent event) {}
  virtual void onAboveWriteHighWatermark() {}
  virtual void onBelowWriteLowWatermark() {}
  // Graceful shutdown began: finish what is in flight, then close; close now if idle.
  virtual void onDrain() {}
  // The client ended its side while the connection was not being read (a filter paused it):
  // a codec whose request is still waiting for its upstream may give up on it.
  virtual void onPeerEndWhileReadDisabled() {}
  // A reload revoked API keys and its grace has passed: close whatever authenticated with a
  // revoked key (the connection, or only the HTTP/2 streams that did). Returns how many
  // connections, tunnels and streams it closed.
  virtual uint32_t onKeysRevoked() { return 0; }
};
using ReadFilterPtr = std::unique_ptr<ReadFilter>;

class WriteFilterCallbacks {
 public:
  virtual ~WriteFilterCallbacks() = default;
  virtual Connection& connection() = 0;
  // Writes data straight to the client, past every write filter (for a filter releasing data
  // it held back with StopIteration).
  virtual void injectWrite(buffer::Buffer& data, bool end_stream) = 0;
};

// A network filter on the write side: sees the bytes going to the client, in the reverse order
// of the chain (the codec's output meets the filter just before it first), and may change them.
class WriteFilter {
 public:
  virtual ~WriteFilter() = default;
  virtual void initializeWriteFilterCallbacks(WriteFilterCallbacks& callbacks) {}
  // StopIteration: the filter keeps (or dropped) the data; it writes later with injectWrite.
  virtual FilterStatus onWrite(buffer::Buffer& data, bool end_stream) = 0;
};
using WriteFilterPtr = std::unique_ptr<WriteFilter>;

class FilterManager {
 public:
  virtual ~FilterManager() = default;
  virtual void addReadFilter(ReadFilterPtr filter) = 0;
  virtual void addWriteFilter(WriteFilterPtr filter) = 0;
};

// Made once per filter chain from the filter's validated config; called per connection.
using NetworkFilterFactoryCb = std::function<void(FilterManager&)>;

// Facts listener filters record about an accepted socket; filter chain matching reads them.
struct SocketFacts {
  std::string_view transport_protocol = "raw_buffer";  // "raw_buffer" | "tls"
  std::string_view application_protocol;               // "" | "http/1.1" | "h2" | "socks5"
};

class ListenerFilterCallbacks {
 public:
  virtual ~ListenerFilterCallbacks() = default;
  virtual int fd() const = 0;
  virtual const Address& peer() const = 0;
  // The client is someone else than the socket's peer (a PROXY protocol header said so): the
  // filters after this one, the limits and the connection see `client`.
  virtual void setPeer(const Address& client) = 0;
  virtual SocketFacts& facts() = 0;
  virtual event::Dispatcher& dispatcher() = 0;
  // After StopIteration: resume with the next listener filter (true) or close the socket (false).
  virtual void continueFilterChain(bool success) = 0;
};

// Runs on an accepted socket before any connection object exists. Returning Continue passes it
// on; StopIteration waits for continueFilterChain(); a filter that wants to refuse the socket
// returns StopIteration after calling continueFilterChain(false).
//
// A filter that must see the first bytes (a protocol sniffer) returns a non-zero
// maxReadBytes(): after onAccept returns Continue, the chain peeks at the socket (MSG_PEEK: the
// bytes stay for the connection to read) and calls onData with everything peeked so far, again
// each time more arrives, until it returns Continue, the peer closes, or the listener's filter
// timeout passes (the socket is then closed).
class ListenerFilter {
 public:
  virtual ~ListenerFilter() = default;
  virtual FilterStatus onAccept(ListenerFilterCallbacks& callbacks) = 0;
  virtual size_t maxReadBytes() const { return 0; }
  // `peeked` holds at most maxReadBytes() bytes. StopIteration: wait for more.
  virtual FilterStatus onData(std::string_view peeked, ListenerFilterCallbacks& callbacks) {
    return FilterStatus::Continue;
  }
};
using ListenerFilterPtr = std::unique_ptr<ListenerFilter>;

class ListenerFilterManager {
 public:
  virtual ~ListenerFilterManager() = default;
  virtual void addListenerFilter(ListenerFilterPtr filter) = 0;
};
using ListenerFilterFactoryCb = std::function<void(ListenerFilterManager&)>;

}  // namespace network
}  // namespace sluice
