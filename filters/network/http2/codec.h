#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "source/common/buffer/buffer.h"

// sluice's own view of an HTTP/2 server connection. The proxy filter talks only to these two
// interfaces, so the frame layer (nghttp2 today, see nghttp2_codec.cc) can be replaced without
// touching the filter: a codec parses client bytes into per-stream events, and serializes the
// responses, resets and flow-control credit the filter submits.
namespace sluice {
namespace filters {
namespace http2 {

// RFC 9113 section 7.
enum class ErrorCode : uint32_t {
  NoError = 0x0,
  ProtocolError = 0x1,
  InternalError = 0x2,
  FlowControlError = 0x3,
  StreamClosed = 0x5,
  RefusedStream = 0x7,
  Cancel = 0x8,
  ConnectError = 0xa,
  EnhanceYourCalm = 0xb,
};

// RFC 9113 section 6 frame types; anything else is Other.
enum class FrameType : uint8_t {
  Data = 0,
  Headers = 1,
  Priority = 2,
  RstStream = 3,
  Settings = 4,
  PushPromise = 5,
  Ping = 6,
  Goaway = 7,
  WindowUpdate = 8,
  Continuation = 9,
  Other = 255,
};

inline constexpr uint8_t kFlagEndStream = 0x1;
inline constexpr uint8_t kFlagAck = 0x1;
inline constexpr uint8_t kFlagEndHeaders = 0x4;

struct FrameInfo {
  FrameType type = FrameType::Other;
  int32_t stream_id = 0;
  uint32_t length = 0;  // payload length from the frame header (padding included)
  uint8_t flags = 0;
  uint32_t payload = 0;  // DATA: payload bytes without padding
};

struct CodecSettings {
  uint32_t max_concurrent_streams = 100;
  uint32_t initial_stream_window = 65535;
  uint32_t connection_window = 1 << 20;
  uint32_t header_table_size = 4096;
  uint32_t max_header_list_size = 65536;
  // Frames the codec answers on its own (SETTINGS and PING ACKs, RST_STREAM) queued unsent
  // before the connection is treated as a flood.
  uint32_t max_outbound_control_frames = 1000;
  uint32_t max_settings_entries = 32;
  uint32_t max_continuation_frames = 16;
  // RFC 8441 extended CONNECT (SETTINGS_ENABLE_CONNECT_PROTOCOL). Off until the proxy filter
  // bridges `:protocol` streams to an HTTP/1.1 Upgrade.
  bool enable_connect_protocol = false;
};

// What the codec reports. `stream` is the opaque pointer the filter returned from
// onStreamBegin (never null in these calls).
class ServerCodecCallbacks {
 public:
  virtual ~ServerCodecCallbacks() = default;
  // Every frame header as it arrives, before its payload is processed (CONTINUATION included).
  // False: a flood; the filter has asked for GOAWAY and the codec stops reading.
  virtual bool onFrameHeader(const FrameInfo& frame) = 0;
  // A frame was received and accepted. False as for onFrameHeader.
  virtual bool onFrame(const FrameInfo& frame) = 0;
  // A client opened a stream with a request header block. Returns the filter's stream object,
  // or null to refuse it (the codec resets it with REFUSED_STREAM).
  virtual void* onStreamBegin(int32_t stream_id) = 0;
  // One request header field (pseudo-headers first). Names and values are only valid during
  // the call. False: reset the stream.
  virtual bool onHeader(void* stream, std::string_view name, std::string_view value) = 0;
  // The request header block is complete; end_stream when the request has no body.
  virtual void onRequestHeaders(void* stream, bool end_stream) = 0;
  // Request body bytes; the filter credits them back with ServerCodec::consume().
  virtual void onRequestData(void* stream, const uint8_t* data, size_t length) = 0;
  // The client ended its side of the stream (END_STREAM on DATA or trailers).
  virtual void onRequestEnd(void* stream) = 0;
  // The client sent RST_STREAM for this stream. False as for onFrameHeader (rapid reset).
  virtual bool onStreamReset(void* stream, ErrorCode code) = 0;
  // Our side of the stream ended (the last frame with END_STREAM went out).
  virtual void onResponseSent(void* stream) = 0;
  // The stream is gone (both sides ended or a reset either way): drop everything about it.
  virtual void onStreamClose(void* stream, ErrorCode code) = 0;
  // The client broke the protocol (a stream or connection error the codec handles itself).
  // False as for onFrameHeader (too many errors).
  virtual bool onProtocolError(const FrameInfo& frame) = 0;
  // Response body for DATA frames: copy up to max bytes into buf, set eof when the body ends.
  // Returning 0 without eof suspends the stream's DATA until ServerCodec::resumeBody().
  virtual size_t readResponseBody(void* stream, uint8_t* buf, size_t max, bool& eof) = 0;
};

struct ResponseHeader {
  std::string_view name;  // lowercase
  std::string_view value;
};

class ServerCodec {
 public:
  virtual ~ServerCodec() = default;
  // Queues the server connection preface (our SETTINGS).
  virtual void start() = 0;
  // Parses client bytes and drains them. False: the connection cannot go on (a fatal protocol
  // error or a flood); what is queued (the GOAWAY) should be flushed and the connection closed.
  virtual bool receive(buffer::Buffer& data) = 0;
  // Appends queued frames to out until none are left or out holds at least max bytes.
  // False on a fatal error (outbound flood).
  virtual bool serialize(buffer::Buffer& out, size_t max) = 0;
  virtual bool wantsWrite() const = 0;
  // Nothing more to read or write (GOAWAY sent and no streams left, or terminated).
  virtual bool finished() const = 0;
  // The response head; the body follows through readResponseBody unless end_stream.
  virtual void submitResponse(int32_t stream_id, uint16_t status, const ResponseHeader* headers,
                              size_t count, bool end_stream) = 0;
  // An interim (1xx) response head, before the final one.
  virtual void submitInterim(int32_t stream_id, uint16_t status, const ResponseHeader* headers,
                             size_t count) = 0;
  virtual void resumeBody(int32_t stream_id) = 0;
  virtual void resetStream(int32_t stream_id, ErrorCode code) = 0;
  // Gives back stream flow-control window for request bytes the filter has passed on.
  virtual void consume(int32_t stream_id, size_t bytes) = 0;
  // GOAWAY with the last stream we processed; streams in flight finish.
  virtual void gracefulGoAway() = 0;
  // GOAWAY with this error; everything ends once it is sent.
  virtual void terminate(ErrorCode code) = 0;
  virtual size_t activeStreams() const = 0;
  // Response bytes the client's flow control lets the stream send now: the smaller of its
  // stream window and the connection window.
  virtual size_t sendWindow(int32_t stream_id) const = 0;
};
using ServerCodecPtr = std::unique_ptr<ServerCodec>;

// The nghttp2-backed codec.
ServerCodecPtr createNghttp2ServerCodec(ServerCodecCallbacks& callbacks,
                                        const CodecSettings& settings);

}  // namespace http2
}  // namespace filters
}  // namespace sluice
