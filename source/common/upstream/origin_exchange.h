#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "source/common/buffer/buffer.h"
#include "source/common/event/dispatcher.h"
#include "source/common/http/dechunker.h"
#include "source/common/http/h1_parser.h"
#include "source/common/http/proxy_stats.h"
#include "source/common/network/connection.h"
#include "source/common/policy/limits.h"
#include "source/common/upstream/request_record.h"
#include "source/common/upstream/shaped_ways.h"
#include "source/common/upstream/upstream_handle.h"

namespace sluice {
namespace upstream {

// A header a request filter added (it lives in the codec's request state).
struct AddedField {
  std::string_view name;
  std::string_view value;
};

// How the request body reaches the origin.
enum class RequestBody : uint8_t {
  None,         // no body
  Length,       // `content_length` bytes; Content-Length is written from the number
  Chunked,      // the client's own chunked body, passed on as it is (its Transfer-Encoding too)
  ChunkEncode,  // a body of unknown length: the exchange frames each piece as a chunk
};

// Which upgrade the request asks the origin for.
enum class Upgrade : uint8_t {
  None,
  WebSocket,        // the client's handshake passes through (it checks Sec-WebSocket-Accept)
  WebSocketOwnKey,  // the proxy makes the handshake (an HTTP/2 client sends no key) and
                    // checks the origin's Sec-WebSocket-Accept itself
};

// A request as the codec hands it to the exchange: protocol-neutral views into the codec's own
// request state, valid until start() returns.
struct OriginRequest {
  std::string_view method_text;
  http1::Method method = http1::Method::Other;
  std::string_view path;  // origin-form target
  // Written as the Host field first when not empty (HTTP/2's :authority, or an HTTP/1.0
  // request without Host); otherwise the fields carry Host.
  std::string_view host;
  // HTTP/1.0 requests go out as HTTP/1.0. A chunked answer to one (the origin breaking RFC 9112
  // 6.1) is delivered as payload whatever ExchangeOptions::response_body says: an HTTP/1.0
  // client cannot read chunked framing, so its codec ends that body by closing.
  uint8_t version_minor = 1;
  bool keep_alive_10 = false;  // an HTTP/1.0 request that asked for keep-alive
  // The forwardable fields: those flagged kHopByHop or kRemoved, and Content-Length (written
  // from the number), are skipped; Cookie fields are joined into one.
  const http1::HeaderField* fields = nullptr;
  uint32_t field_count = 0;
  const AddedField* added = nullptr;
  uint32_t added_count = 0;
  RequestBody body = RequestBody::None;
  uint64_t content_length = 0;
  Upgrade upgrade = Upgrade::None;
  // This attempt may be retried once on a fresh connection when a pooled one turns out dead
  // (the codec clears it for the retry itself). Only body-less idempotent requests are.
  bool retry_allowed = true;
};

// Where a request body stands after the exchange took what it could of the client's bytes.
enum class BodyProgress : uint8_t {
  More,      // more of the body is due
  Done,      // the whole body is out (or there is none)
  Error,     // the client's chunked framing is broken (requestBodyError() says how)
  TooLarge,  // a chunked body grew past max_request_body_bytes
};

// How the response body reaches the owner.
enum class ResponseBody : uint8_t {
  Framed,   // as the origin framed it (a chunked body stays chunked): an HTTP/1.1 client
  Payload,  // the payload only (chunked framing removed): an HTTP/2 stream
};

// What the exchange tells the codec. onResponseBody with end, onUpgraded, onRetry and
// onExchangeError are the exchange's last act in the turn they happen in: the codec may end,
// restart or reuse the exchange from inside them. The others must not end the exchange.
class ExchangeOwner {
 public:
  virtual ~ExchangeOwner() = default;
  // A 1xx other than 101 (100 Continue, 103 Early Hints).
  virtual void onInterimResponse(const http1::ResponseHead& head) = 0;
  // The final response head; onResponseBody follows in the same turn (with the body bytes
  // that came with the head, possibly none). `head` and its views are valid during the call.
  virtual void onResponseHead(const http1::ResponseHead& head) = 0;
  // Body bytes as they come (framed or payload, per ExchangeOptions); `end` once the body is
  // complete, by which time the origin connection is released (pooled when clean).
  virtual void onResponseBody(buffer::Buffer& body, bool end) = 0;
  // The origin switched protocols as asked: the connection is the codec's now (for a tunnel).
  // `early` holds what the origin sent behind its 101; origin_ended: it already half-closed.
  virtual void onUpgraded(const http1::ResponseHead& head, UpstreamHandle upstream,
                          buffer::Buffer& early, bool origin_ended) = 0;
  // A pooled connection was dead before any byte of an answer: it is let go, and the codec
  // asks the router again for a fresh one (same request, retry_allowed off).
  virtual void onRetry() = 0;
  virtual void onExchangeError(ExchangeError error, std::string_view detail) = 0;
  // The origin's write buffer rose above its high watermark (or drained): stop (resume)
  // taking request body bytes from the client.
  virtual void onOriginBackedUp(bool backed_up) = 0;
};

struct ExchangeOptions {
  http1::ParseLimits response_limits;
  std::chrono::milliseconds request_body_timeout{30000};
  // A chunked body from the client may carry at most this many payload bytes (0: unlimited); a
  // longer one is refused before the bytes that cross the limit are sent. (A body with a length
  // is the codec's to refuse before the exchange starts.)
  uint64_t max_request_body_bytes = 0;
  ResponseBody response_body = ResponseBody::Framed;
  // Counted here: bytes_upstream_tx/rx, upstream_rs_bad, upstream_rs_timeout, upstream_reset,
  // rq_retry.
  const http::ProxyStats* stats = nullptr;
};

// One HTTP/1.1 request/response exchange with an origin, for every codec: writes the request
// head and streams its body, parses the response (1xx, 101, chunked, close-delimited,
// HEAD/204/304), delivers the body framed or as payload, decides whether the connection goes
// back to the pool, retries once on a dead pooled connection, and enforces the request-body and
// response deadlines on the codec's timer (as the tunnel relay does: while an exchange runs,
// the codec passes its timer's expiries to onTimer()).
//
// A codec holds one only while it forwards a request: acquire() takes it from a per-worker free
// list and dropping the pointer gives it back (aborted), so an idle keep-alive connection or a
// tunnel holds none and steady traffic allocates none. The pointer may be dropped from inside
// any callback that is the exchange's last act.
class OriginExchange;
struct ExchangeRecycler {
  void operator()(OriginExchange* exchange) const;
};
using OriginExchangePtr = std::unique_ptr<OriginExchange, ExchangeRecycler>;

class OriginExchange : private network::ConnectionCallbacks {
 public:
  static OriginExchangePtr acquire(ExchangeOwner& owner, const ExchangeOptions& options);
  OriginExchange(ExchangeOwner& owner, const ExchangeOptions& options)
      : owner_(&owner), options_(&options) {}
  ~OriginExchange() override { abort(); }
  OriginExchange(const OriginExchange&) = delete;
  OriginExchange& operator=(const OriginExchange&) = delete;

  // Writes the request head, then takes from `from_client` what it holds of the body: the
  // bytes that belong to the body are drained and sent with the head, those of a next request
  // stay. `skip`: bytes at the front of `from_client` that are not the body (the request head
  // itself, still in the client's buffer), dropped once the head is written. The body deadline
  // (while the client's body is due), then the response deadline, run on `timer`.
  BodyProgress start(UpstreamHandle&& upstream, const OriginRequest& request, event::Timer& timer,
                     buffer::Buffer& from_client, size_t skip = 0);
  // More bytes from the client, taken as start() does. client_ended: no more will come (a body
  // of unknown length ends there; ChunkEncode writes the last chunk). Once the body is out or
  // the exchange is over (an origin may answer before the body ended), nothing is taken.
  BodyProgress sendBody(buffer::Buffer& from_client, bool client_ended);
  // Whether a request may be retried on a fresh connection if this one proves dead: a codec
  // keeps what a retry needs only then.
  static bool mayRetry(const OriginRequest& request, const UpstreamInfo& info);
  // The codec's timer fired while the exchange runs.
  void onTimer();
  // The client side backed up (or drained): stop (resume) reading the origin's response.
  void pauseResponse(bool pause);
  // The client took response bytes: the origin is not silent, the client was slow.
  void onResponseProgress();
  // Ends the exchange now (the client left, a local reply): the connection is closed and no
  // callback follows. The codec's timer is left as it is.
  void abort();

  bool active() const { return state_ != State::Idle; }
  // The response head was delivered (onResponseHead, or onUpgraded).
  bool responseStarted() const { return response_started_; }
  bool requestDone() const { return request_done_; }
  const char* requestBodyError() const { return request_chunks_.error(); }
  // The origin's write buffer is above its high watermark.
  bool originBackedUp() const;
  uint64_t bytesToOrigin() const { return bytes_to_origin_; }
  uint64_t bytesFromOrigin() const { return bytes_from_origin_; }
  // Adds what this exchange moved so far (bytes, the first byte's time) to the request's
  // record; counted once however often it is called.
  void reportTo(RequestTrace& trace);

  // The HTTP/1.1 request head the exchange writes for `request` (exposed for tests).
  static void writeRequestHead(const OriginRequest& request, std::string_view websocket_key,
                               const UpstreamInfo& info, buffer::Buffer& out);

 private:
  enum class State : uint8_t {
    Idle,
    Head,  // waiting for (the rest of) the response head
    Body,  // relaying the response body
  };

  // network::ConnectionCallbacks (the origin connection)
  void onData(buffer::Buffer& data, bool end_stream) override;
  void onEvent(network::ConnectionEvent event) override;
  void onAboveWriteHighWatermark() override { owner_->onOriginBackedUp(true); }
  void onBelowWriteLowWatermark() override { owner_->onOriginBackedUp(false); }

  void write(buffer::Buffer& out);
  // Moves the body bytes of `from_client` into `out`, framed for the origin.
  BodyProgress takeBody(buffer::Buffer& from_client, bool client_ended, buffer::Buffer& out);
  void armTimer();
  // Parses the head(s) at the front of `data` and hands on the start of the body.
  void onHeadData(buffer::Buffer& data, bool end_stream);
  // after_head: the final head was just delivered, so onResponseBody follows even with no byte.
  void onBodyData(buffer::Buffer& data, bool end_stream, bool after_head = false);
  void onSwitched(const http1::ResponseHead& head, buffer::Buffer& data, bool end_stream);
  void onOriginClosed();
  // Releases the connection (pooled when `reusable`) and forgets the exchange.
  void finish(bool reusable);
  void fail(ExchangeError error, std::string_view detail);
  bool retryable() const;
  // Bandwidth shaping (the request's limits): charges `bytes` that just moved one way (0 to
  // the origin, 1 from it) and, when the limit says so, pauses the side that produced them: the
  // origin's reads, or the client's body (onOriginBackedUp) while more of it is due.
  void shape(size_t way, size_t bytes);
  bool shaping() const { return limiter_ != nullptr && limiter_->shapes(); }
  void onShapeTimer();
  // Ends any pause (the exchange ends or hands its connection over); tell_owner: a paused
  // request body is resumed with onOriginBackedUp(false), so the codec's pauses stay paired.
  void stopShaping(bool tell_owner);

  friend struct ExchangeRecycler;
  ExchangeOwner* owner_;
  const ExchangeOptions* options_;
  UpstreamHandle upstream_;
  event::Timer* timer_ = nullptr;
  std::chrono::milliseconds response_timeout_{60000};
  // Counts start()s: a callback that is not the exchange's last act checks it afterwards.
  uint32_t generation_ = 0;
  State state_ = State::Idle;
  http1::Method method_ = http1::Method::Other;
  Upgrade upgrade_ = Upgrade::None;
  RequestBody request_body_ = RequestBody::None;
  http1::BodyFraming response_framing_ = http1::BodyFraming::None;
  bool request_done_ = false;
  bool retryable_request_ = false;  // mayRetry() held when the exchange started
  bool response_started_ = false;
  bool response_keep_alive_ = true;
  bool response_paused_ = false;
  bool any_response_byte_ = false;
  bool decode_chunks_ = false;  // a chunked response is delivered as payload
  uint32_t head_scanned_ = 0;
  uint64_t response_body_left_ = 0;
  uint64_t request_body_left_ = 0;
  http1::Dechunker request_chunks_;  // the client's chunked body, passed on as framed
  uint64_t bytes_to_origin_ = 0;
  uint64_t bytes_from_origin_ = 0;
  uint64_t reported_to_ = 0;  // of bytes_to_origin_ / bytes_from_origin_, in the record already
  uint64_t reported_from_ = 0;
  event::MonotonicTime first_byte_at_{};
  http1::Dechunker response_chunks_;
  policy::KeyLimiter* limiter_ = nullptr;  // the request's limits (bandwidth), or null
  // [0] request body to the origin, [1] response from it. Its timer, made on the first pause,
  // is kept while the exchange sits in the worker's free list.
  ShapedWays shaped_;
  bool quota_reached_ = false;  // a charge reached a byte quota: the exchange ends
  // The key of a handshake the proxy makes (Upgrade::WebSocketOwnKey), base64 of 16 bytes.
  char websocket_key_[24] = {};
};

}  // namespace upstream
}  // namespace sluice
