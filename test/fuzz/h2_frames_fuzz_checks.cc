#include "test/fuzz/h2_frames_fuzz_checks.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>

#include <sys/socket.h>
#include <unistd.h>

#include "event2/event.h"

#include "filters/network/http2/http2_proxy.h"
#include "source/common/network/connection.h"
#include "source/common/proxy/worker_context.h"
#include "source/common/upstream/pool.h"

namespace sluice::http2::fuzz {
namespace {

using filters::http2proxy::Http2Config;
using filters::http2proxy::Http2ProxyFilter;

constexpr std::string_view kPreface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

// Refuses or parks requests by the first letter of the host: nothing is dialled.
class RefusingFilter : public proxy::RequestFilter {
 public:
  proxy::RequestFilterStatus onRequest(proxy::ProxyRequest& request) override {
    const char c = request.host.empty() ? 'x' : request.host[0];
    switch (c) {
      case 'p':
        return proxy::RequestFilterStatus::StopIteration;  // pending until the stream ends
      case 'a':
        callbacks_->deny(proxy::Denial::Unauthorized, "fuzz");
        break;
      case 'f':
        callbacks_->deny(proxy::Denial::Forbidden, "fuzz");
        break;
      case 'b':
        request.close_connection = true;
        callbacks_->deny(proxy::Denial::Forbidden, "fuzz ban");
        break;
      default:
        callbacks_->deny(proxy::Denial::BadGateway, "fuzz");
        break;
    }
    return proxy::RequestFilterStatus::StopIteration;
  }
};

class Worker : public proxy::WorkerContext {
 public:
  // The harness drives the codec without running the loop between frames and reads what it
  // answered at once: writes go out as they are made, not in the loop's batch.
  Worker() : pool_(dispatcher_, 4, std::chrono::milliseconds(60000)) {
    dispatcher_.setIoBatching(false);
  }
  event::Dispatcher& dispatcher() override { return dispatcher_; }
  dns::Resolver& resolver() override { abort(); }
  dns::Resolver& resolver(const network::Egress&) override { abort(); }
  upstream::Pool& pool() override { return pool_; }
  uint32_t index() const override { return 0; }
  bool draining() const override { return false; }

 private:
  event::Dispatcher dispatcher_;
  upstream::Pool pool_;
};

// The network filter manager's part: the connection's callbacks go to the one filter.
class Harness : public network::ReadFilterCallbacks, public network::ConnectionCallbacks {
 public:
  Harness(Worker& worker, network::Connection& conn, Http2ProxyFilter& filter)
      : worker_(worker), conn_(conn), filter_(filter) {}
  network::Connection& connection() override { return conn_; }
  void continueReading() override {}
  // The HTTP/2 codec keeps its place for the connection's life.
  void replaceReadFilter(network::ReadFilter&, network::ReadFilterPtr) override { abort(); }
  proxy::WorkerContext& worker() override { return worker_; }
  void onData(buffer::Buffer& data, bool end_stream) override { filter_.onData(data, end_stream); }
  void onEvent(network::ConnectionEvent event) override { filter_.onEvent(event); }
  void onAboveWriteHighWatermark() override { filter_.onAboveWriteHighWatermark(); }
  void onBelowWriteLowWatermark() override { filter_.onBelowWriteLowWatermark(); }

 private:
  Worker& worker_;
  network::Connection& conn_;
  Http2ProxyFilter& filter_;
};

std::shared_ptr<const Http2Config> makeConfig() {
  auto config = std::make_shared<Http2Config>();
  proxy::RequestFilterSpec refuse;
  refuse.phase = proxy::RequestPhase::Route;
  refuse.create = [](proxy::RequestFilterChain& chain) {
    chain.addFilter(std::make_unique<RefusingFilter>());
  };
  config->request_filters.push_back(std::move(refuse));
  // Small limits so inputs reach them.
  config->codec.max_concurrent_streams = 8;
  config->codec.max_header_list_size = 4096;
  config->max_request_headers = 16;
  config->flood.max_rapid_resets = 4;
  config->flood.max_control_frames = 16;
  config->flood.max_empty_data_frames = 4;
  config->flood.max_continuation_frames = 4;
  config->flood.max_protocol_errors = 4;
  config->codec.max_continuation_frames = 5;
  config->max_request_body_bytes = 1024;
  config->codec.enable_connect_protocol = true;  // RFC 8441 streams reach the filter
  return config;
}

// What the client side received; the first frame must be the server's SETTINGS.
struct Peer {
  size_t bytes = 0;
  char first_header[9] = {};
};

void drainPeer(int fd, Peer& peer) {
  char sink[65536];
  ssize_t n;
  while ((n = ::read(fd, sink, sizeof(sink))) > 0) {
    for (ssize_t i = 0; i < n && peer.bytes + i < sizeof(peer.first_header); ++i) {
      peer.first_header[peer.bytes + i] = sink[i];
    }
    peer.bytes += static_cast<size_t>(n);
  }
}

}  // namespace

void runFrames(const uint8_t* data, size_t size) {
  static Worker* worker = new Worker();
  static std::shared_ptr<const Http2Config> config = makeConfig();
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) != 0) abort();
  auto conn = std::make_unique<network::Connection>(worker->dispatcher(), fds[0],
                                                    network::Address::ipv4(0x7f000001, 40000),
                                                    network::Connection::Blocking::NonBlocking);
  auto filter = std::make_unique<Http2ProxyFilter>(config);
  Harness harness(*worker, *conn, *filter);
  conn->setCallbacks(&harness);
  filter->initializeReadFilterCallbacks(harness);
  filter->onNewConnection();

  size_t piece = size == 0 ? 1 : size_t{data[0]} % 64 * 7 + 1;
  std::string_view frames =
      size == 0 ? std::string_view()
                : std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1);
  Peer peer;
  drainPeer(fds[1], peer);
  // SETTINGS goes out on the new connection, before any client byte.
  if (peer.bytes < 9 || peer.first_header[3] != 0x4) abort();
  buffer::Buffer in;
  in.add(kPreface);
  for (size_t at = 0; at < frames.size() && conn->open(); at += piece) {
    in.add(frames.substr(at, piece));
    filter->onData(in, false);
    in.clear();
    drainPeer(fds[1], peer);
  }
  // Deferred flushes and 0 ms timers.
  for (int i = 0; i < 3 && conn->open(); ++i) {
    worker->dispatcher().runOnce(false);
    drainPeer(fds[1], peer);
  }
  if (conn->open()) {
    in.clear();
    filter->onData(in, true);
  }
  if (getenv("SLUICE_FUZZ_VERBOSE") != nullptr) {
    fprintf(stderr, "h2_frames: %zu input bytes, server sent %zu bytes\n", size, peer.bytes);
  }
  conn->close(network::CloseType::NoFlush);
  conn->setCallbacks(nullptr);
  filter.reset();
  conn.reset();
  ::close(fds[1]);
  // Upstreams and connections queued for deferred deletion.
  worker->dispatcher().runOnce(false);
}

}  // namespace sluice::http2::fuzz
