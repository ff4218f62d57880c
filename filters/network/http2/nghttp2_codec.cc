#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include <nghttp2/nghttp2.h>

#include "filters/network/http2/codec.h"

namespace sluice {
namespace filters {
namespace http2 {

namespace {

FrameInfo frameInfo(const nghttp2_frame_hd& hd) {
  FrameInfo info;
  info.type = hd.type <= NGHTTP2_CONTINUATION ? static_cast<FrameType>(hd.type) : FrameType::Other;
  info.stream_id = hd.stream_id;
  info.length = static_cast<uint32_t>(hd.length);
  info.flags = hd.flags;
  return info;
}

// What became of the client's recent streams, for the frames that still arrive on them after
// they closed (RFC 9113 5.1): the last 128 client stream identifiers (odd), two bits each.
class ClientStreamHistory {
 public:
  enum class Fate : uint8_t {
    NeverOpened = 0,  // an identifier the client skipped: it is closed without having been used
    Opened = 1,       // open, or closed by sluice's reset (frames may still be in flight)
    ClientReset = 2,  // closed by the client's RST_STREAM
    ClientEnded = 3,  // closed after the client's END_STREAM
    Idle,             // above every identifier used so far
    Forgotten,        // too old to tell
  };

  int32_t last() const { return last_; }
  void opened(int32_t id) {
    if (id <= last_) return;
    // Identifiers skipped since the last one were never used.
    const int32_t skipped = (id - last_) / 2;
    if (skipped >= kIds) {
      bits_.fill(0);
    } else {
      for (int32_t i = last_ + 2; i < id; i += 2) set(i, Fate::NeverOpened);
    }
    last_ = id;
    set(id, Fate::Opened);
  }
  void closed(int32_t id, Fate fate) {
    if (id <= last_ && last_ - id < 2 * kIds) set(id, fate);
  }
  Fate fate(int32_t id) const {
    if (id > last_) return Fate::Idle;
    if (last_ - id >= 2 * kIds) return Fate::Forgotten;
    const uint32_t slot = slotOf(id);
    return static_cast<Fate>((bits_[slot / 32] >> (2 * (slot % 32))) & 3);
  }

 private:
  static constexpr int32_t kIds = 128;
  static uint32_t slotOf(int32_t id) { return static_cast<uint32_t>(id >> 1) % kIds; }
  void set(int32_t id, Fate fate) {
    const uint32_t slot = slotOf(id);
    uint64_t& word = bits_[slot / 32];
    const uint32_t shift = 2 * (slot % 32);
    word = (word & ~(uint64_t{3} << shift)) | (uint64_t{static_cast<uint8_t>(fate)} << shift);
  }

  int32_t last_ = 0;
  std::array<uint64_t, kIds / 32> bits_{};
};

class Nghttp2ServerCodec : public ServerCodec {
 public:
  Nghttp2ServerCodec(ServerCodecCallbacks& callbacks, const CodecSettings& settings)
      : callbacks_(callbacks), settings_(settings) {
    nghttp2_option* option = nullptr;
    nghttp2_option_new(&option);
    // Window updates follow what the filter has passed on, not what nghttp2 has parsed: the
    // stream window is the backpressure toward the client.
    nghttp2_option_set_no_auto_window_update(option, 1);
    nghttp2_option_set_max_outbound_ack(option, settings.max_outbound_control_frames);
    nghttp2_option_set_max_settings(option, settings.max_settings_entries);
    nghttp2_option_set_max_continuations(option, settings.max_continuation_frames);
    // Closed streams are not kept for the RFC 7540 priority tree: less memory per connection.
    nghttp2_option_set_no_closed_streams(option, 1);
    nghttp2_session_server_new2(&session_, sessionCallbacks(), this, option);
    nghttp2_option_del(option);
  }
  ~Nghttp2ServerCodec() override { nghttp2_session_del(session_); }

  void start() override {
    std::vector<nghttp2_settings_entry> entries = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, settings_.max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, settings_.initial_stream_window},
        {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, settings_.header_table_size},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, settings_.max_header_list_size},
    };
    if (settings_.enable_connect_protocol) {
      entries.push_back({NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1});
    }
    nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, entries.data(), entries.size());
    if (settings_.connection_window > NGHTTP2_INITIAL_CONNECTION_WINDOW_SIZE) {
      nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                            static_cast<int32_t>(settings_.connection_window));
    }
  }

  bool receive(buffer::Buffer& data) override {
    while (!data.empty()) {
      std::string_view piece = data.front();
      if (failed_ || !scan(reinterpret_cast<const uint8_t*>(piece.data()), piece.size())) {
        data.clear();
        return false;
      }
      data.drain(piece.size());
    }
    return !failed_;
  }

  bool serialize(buffer::Buffer& out, size_t max) override {
    while (out.length() < max) {
      const uint8_t* bytes = nullptr;
      ssize_t n = nghttp2_session_mem_send(session_, &bytes);
      if (n < 0) return false;
      if (n == 0) break;
      out.add(bytes, static_cast<size_t>(n));
    }
    return true;
  }

  bool wantsWrite() const override { return nghttp2_session_want_write(session_) != 0; }
  bool finished() const override {
    return nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0;
  }

  void submitResponse(int32_t stream_id, uint16_t status, const ResponseHeader* headers,
                      size_t count, bool end_stream) override {
    char digits[3];
    fillNva(status, digits, headers, count);
    nghttp2_data_provider provider;
    provider.source.ptr = nghttp2_session_get_stream_user_data(session_, stream_id);
    provider.read_callback = &Nghttp2ServerCodec::onReadBody;
    nghttp2_submit_response(session_, stream_id, nva_.data(), nva_.size(),
                            end_stream ? nullptr : &provider);
  }

  void submitInterim(int32_t stream_id, uint16_t status, const ResponseHeader* headers,
                     size_t count) override {
    char digits[3];
    fillNva(status, digits, headers, count);
    nghttp2_submit_headers(session_, NGHTTP2_FLAG_NONE, stream_id, nullptr, nva_.data(),
                           nva_.size(), nullptr);
  }

  void resumeBody(int32_t stream_id) override { nghttp2_session_resume_data(session_, stream_id); }
  void resetStream(int32_t stream_id, ErrorCode code) override {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, static_cast<uint32_t>(code));
  }
  void consume(int32_t stream_id, size_t bytes) override {
    if (bytes > 0) nghttp2_session_consume_stream(session_, stream_id, bytes);
  }
  void gracefulGoAway() override {
    nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                          nullptr, 0);
  }
  void terminate(ErrorCode code) override {
    nghttp2_session_terminate_session(session_, static_cast<uint32_t>(code));
  }
  size_t activeStreams() const override { return active_; }
  size_t sendWindow(int32_t stream_id) const override {
    const int32_t stream = nghttp2_session_get_stream_remote_window_size(session_, stream_id);
    const int32_t connection = nghttp2_session_get_remote_window_size(session_);
    const int32_t window = std::min(stream, connection);
    return window > 0 ? static_cast<size_t>(window) : 0;
  }

 private:
  // nghttp2 copies the fields when a frame is submitted; the vector keeps its capacity.
  void fillNva(uint16_t status, char (&digits)[3], const ResponseHeader* headers, size_t count) {
    nva_.clear();
    digits[0] = static_cast<char>('0' + status / 100 % 10);
    digits[1] = static_cast<char>('0' + status / 10 % 10);
    digits[2] = static_cast<char>('0' + status % 10);
    nva_.push_back(makeNv(":status", std::string_view(digits, 3)));
    for (size_t i = 0; i < count; ++i) nva_.push_back(makeNv(headers[i].name, headers[i].value));
  }

  static nghttp2_nv makeNv(std::string_view name, std::string_view value) {
    nghttp2_nv nv;
    nv.name = reinterpret_cast<uint8_t*>(const_cast<char*>(name.data()));
    nv.namelen = name.size();
    nv.value = reinterpret_cast<uint8_t*>(const_cast<char*>(value.data()));
    nv.valuelen = value.size();
    nv.flags = NGHTTP2_NV_FLAG_NONE;
    return nv;
  }

  // Passes client bytes to nghttp2.
  bool feed(const uint8_t* bytes, size_t n) {
    if (n == 0) return true;
    ssize_t rc = nghttp2_session_mem_recv(session_, bytes, n);
    if (rc >= 0 && !failed_) return true;
    failed_ = true;
    // A library-detected error (bad preface, HPACK failure, flood) gets a GOAWAY unless the
    // filter already queued one.
    if (rc < 0 && rc != NGHTTP2_ERR_CALLBACK_FAILURE) {
      nghttp2_session_terminate_session(
          session_, rc == NGHTTP2_ERR_FLOODED ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR);
    }
    return false;
  }

  static int32_t streamIdOf(const uint8_t* header) {
    return static_cast<int32_t>((uint32_t{header[5]} & 0x7f) << 24 | uint32_t{header[6]} << 16 |
                                uint32_t{header[7]} << 8 | header[8]);
  }

  // The bytes of the frame header being gathered: 9, or 13 for a WINDOW_UPDATE on a stream
  // (its increment decides what becomes of it).
  size_t headNeeded() const {
    if (held_ < 9) return 9;
    const uint32_t length = uint32_t{hold_[0]} << 16 | uint32_t{hold_[1]} << 8 | hold_[2];
    const bool on_stream = (hold_[5] & 0x7f) != 0 || hold_[6] != 0 || hold_[7] != 0 || hold_[8];
    return hold_[3] == NGHTTP2_WINDOW_UPDATE && length == 4 && on_stream ? 13 : 9;
  }

  // Walks the client's bytes frame by frame into nghttp2, except a WINDOW_UPDATE with a zero
  // increment on a stream already opened: RFC 9113 6.9 makes that a stream error
  // (RST_STREAM PROTOCOL_ERROR), which nghttp2 would make a connection error. A frame header
  // split across reads is held (at most 13 bytes) until it is whole.
  bool scan(const uint8_t* p, size_t n) {
    size_t from = 0;  // bytes before this are passed on or held
    size_t i = 0;
    while (i < n) {
      if (pass_left_ > 0) {
        const size_t k = std::min(pass_left_, n - i);
        i += k;
        pass_left_ -= k;
        continue;
      }
      if (held_ == 0) {
        if (!feed(p + from, i - from)) return false;
      }
      size_t need = headNeeded();
      size_t k = std::min(need - held_, n - i);
      memcpy(hold_.data() + held_, p + i, k);
      held_ += k;
      i += k;
      from = i;
      if (held_ < need) continue;
      need = headNeeded();
      if (held_ < need) continue;  // a stream WINDOW_UPDATE: its increment comes next
      const uint32_t length = uint32_t{hold_[0]} << 16 | uint32_t{hold_[1]} << 8 | hold_[2];
      if (need == 13) {
        const int32_t stream = streamIdOf(hold_.data());
        const uint32_t increment = (uint32_t{hold_[9]} & 0x7f) << 24 | uint32_t{hold_[10]} << 16 |
                                   uint32_t{hold_[11]} << 8 | hold_[12];
        if (increment == 0 && stream <= history_.last()) {
          held_ = 0;
          if (!streamError(FrameType::WindowUpdate, stream, ErrorCode::ProtocolError)) {
            return false;
          }
          continue;
        }
      }
      if (!checkStreamState(hold_[3], streamIdOf(hold_.data()))) return false;
      if (!feed(hold_.data(), held_)) return false;
      pass_left_ = length + 9 - held_;
      held_ = 0;
    }
    return feed(p + from, n - from);
  }

  // A connection error nghttp2 does not raise itself: GOAWAY, counted as a protocol error.
  bool connectionError(const FrameInfo& info, ErrorCode code) {
    callbacks_.onProtocolError(info);
    if (!failed_) nghttp2_session_terminate_session(session_, static_cast<uint32_t>(code));
    failed_ = true;
    return false;
  }

  // A stream error nghttp2 does not raise itself: RST_STREAM, counted as a protocol error.
  bool streamError(FrameType type, int32_t stream_id, ErrorCode code) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, static_cast<uint32_t>(code));
    FrameInfo info;
    info.type = type;
    info.stream_id = stream_id;
    if (!callbacks_.onProtocolError(info)) {
      failed_ = true;
      return false;
    }
    return true;
  }

  // RFC 9113 5.1 and 5.1.1 for DATA and HEADERS on streams that are not open, which nghttp2
  // drops silently. False: a connection error (GOAWAY queued).
  // Runs on the frame's header before nghttp2 sees the frame, which it is given in any case
  // (a header block must be decoded whatever becomes of its stream).
  bool checkStreamState(uint8_t type, int32_t stream_id) {
    if ((type != NGHTTP2_DATA && type != NGHTTP2_HEADERS) || stream_id <= 0) return true;
    const ClientStreamHistory::Fate fate = history_.fate(stream_id);
    if (fate == ClientStreamHistory::Fate::Idle) {
      if (type == NGHTTP2_HEADERS) history_.opened(stream_id);
      return true;
    }
    if (nghttp2_session_find_stream(session_, stream_id) != nullptr) return true;
    FrameInfo info;
    info.type = static_cast<FrameType>(type);
    info.stream_id = stream_id;
    switch (fate) {
      case ClientStreamHistory::Fate::NeverOpened:
        if (type == NGHTTP2_HEADERS) return connectionError(info, ErrorCode::ProtocolError);
        return streamError(info.type, stream_id, ErrorCode::StreamClosed);
      case ClientStreamHistory::Fate::ClientReset:
        return streamError(info.type, stream_id, ErrorCode::StreamClosed);
      case ClientStreamHistory::Fate::ClientEnded:
        return connectionError(info, ErrorCode::StreamClosed);
      case ClientStreamHistory::Fate::Opened:     // closed by sluice: frames were in flight
      case ClientStreamHistory::Fate::Forgotten:  // too old to tell: ignored, as nghttp2 does
      case ClientStreamHistory::Fate::Idle:
        return true;
    }
    return true;
  }

  static Nghttp2ServerCodec& self(void* user_data) {
    return *static_cast<Nghttp2ServerCodec*>(user_data);
  }
  void* streamOf(int32_t stream_id) {
    return nghttp2_session_get_stream_user_data(session_, stream_id);
  }

  static int onBeginFrame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user_data) {
    Nghttp2ServerCodec& c = self(user_data);
    if (!c.callbacks_.onFrameHeader(frameInfo(*hd))) {
      c.failed_ = true;
      return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
  }

  static int onBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    Nghttp2ServerCodec& c = self(user_data);
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    void* stream = c.callbacks_.onStreamBegin(frame->hd.stream_id);
    if (stream == nullptr) {
      // The header block is still decoded (HPACK state is shared) and then ignored.
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                NGHTTP2_REFUSED_STREAM);
      return 0;
    }
    ++c.active_;
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, stream);
    return 0;
  }

  static int onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t,
                      void* user_data) {
    Nghttp2ServerCodec& c = self(user_data);
    // Trailers are not relayed.
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    void* stream = c.streamOf(frame->hd.stream_id);
    if (stream == nullptr) return 0;
    bool ok = c.callbacks_.onHeader(
        stream, std::string_view(reinterpret_cast<const char*>(name), namelen),
        std::string_view(reinterpret_cast<const char*>(value), valuelen));
    return ok ? 0 : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }

  static int onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    Nghttp2ServerCodec& c = self(user_data);
    // The stream closes when this returns: its history says the client reset it.
    if (frame->hd.type == NGHTTP2_RST_STREAM) c.client_reset_id_ = frame->hd.stream_id;
    FrameInfo info = frameInfo(frame->hd);
    if (frame->hd.type == NGHTTP2_DATA) {
      info.payload = static_cast<uint32_t>(frame->hd.length - frame->data.padlen);
    }
    if (!c.callbacks_.onFrame(info)) {
      c.failed_ = true;
      return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    void* stream = frame->hd.stream_id != 0 ? c.streamOf(frame->hd.stream_id) : nullptr;
    if (stream == nullptr) return 0;
    const bool end_stream = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS:
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
          c.callbacks_.onRequestHeaders(stream, end_stream);
        } else if (end_stream) {
          c.callbacks_.onRequestEnd(stream);
        }
        break;
      case NGHTTP2_DATA:
        if (end_stream) c.callbacks_.onRequestEnd(stream);
        break;
      case NGHTTP2_RST_STREAM:
        if (!c.callbacks_.onStreamReset(stream,
                                        static_cast<ErrorCode>(frame->rst_stream.error_code))) {
          c.failed_ = true;
          return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        break;
      default:
        break;
    }
    return 0;
  }

  static int onFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    Nghttp2ServerCodec& c = self(user_data);
    if ((frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
      void* stream = c.streamOf(frame->hd.stream_id);
      if (stream != nullptr) c.callbacks_.onResponseSent(stream);
    }
    return 0;
  }

  static int onInvalidFrame(nghttp2_session*, const nghttp2_frame* frame, int, void* user_data) {
    Nghttp2ServerCodec& c = self(user_data);
    if (!c.callbacks_.onProtocolError(frameInfo(frame->hd))) {
      c.failed_ = true;
      return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return 0;
  }

  static int onDataChunk(nghttp2_session* session, uint8_t, int32_t stream_id, const uint8_t* data,
                         size_t len, void* user_data) {
    Nghttp2ServerCodec& c = self(user_data);
    // The connection window is given back at once: each stream's own window bounds what it
    // may have outstanding, so one stalled stream cannot block the others.
    nghttp2_session_consume_connection(session, len);
    void* stream = c.streamOf(stream_id);
    if (stream != nullptr) c.callbacks_.onRequestData(stream, data, len);
    return 0;
  }

  static int onStreamClose(nghttp2_session* session, int32_t stream_id, uint32_t error_code,
                           void* user_data) {
    Nghttp2ServerCodec& c = self(user_data);
    c.recordClose(session, stream_id);
    void* stream = c.streamOf(stream_id);
    if (stream == nullptr) return 0;
    nghttp2_session_set_stream_user_data(session, stream_id, nullptr);
    --c.active_;
    c.callbacks_.onStreamClose(stream, static_cast<ErrorCode>(error_code));
    return 0;
  }

  void recordClose(nghttp2_session* session, int32_t stream_id) {
    ClientStreamHistory::Fate fate = ClientStreamHistory::Fate::Opened;
    if (stream_id == client_reset_id_) {
      fate = ClientStreamHistory::Fate::ClientReset;
    } else if (nghttp2_stream* s = nghttp2_session_find_stream(session, stream_id)) {
      if (nghttp2_stream_get_state(s) == NGHTTP2_STREAM_STATE_HALF_CLOSED_REMOTE) {
        fate = ClientStreamHistory::Fate::ClientEnded;
      }
    }
    client_reset_id_ = 0;
    history_.closed(stream_id, fate);
  }

  static ssize_t onReadBody(nghttp2_session*, int32_t, uint8_t* buf, size_t length,
                            uint32_t* data_flags, nghttp2_data_source* source, void* user_data) {
    Nghttp2ServerCodec& c = self(user_data);
    if (source->ptr == nullptr) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF;
      return 0;
    }
    bool eof = false;
    size_t n = c.callbacks_.readResponseBody(source->ptr, buf, length, eof);
    if (eof) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    } else if (n == 0) {
      return NGHTTP2_ERR_DEFERRED;
    }
    return static_cast<ssize_t>(n);
  }

  static nghttp2_session_callbacks* sessionCallbacks() {
    // Built once; nghttp2 copies it into each session.
    static nghttp2_session_callbacks* callbacks = [] {
      nghttp2_session_callbacks* cb = nullptr;
      nghttp2_session_callbacks_new(&cb);
      nghttp2_session_callbacks_set_on_begin_frame_callback(cb, &onBeginFrame);
      nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &onBeginHeaders);
      nghttp2_session_callbacks_set_on_header_callback(cb, &onHeader);
      nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &onFrameRecv);
      nghttp2_session_callbacks_set_on_frame_send_callback(cb, &onFrameSend);
      nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cb, &onInvalidFrame);
      nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &onDataChunk);
      nghttp2_session_callbacks_set_on_stream_close_callback(cb, &onStreamClose);
      return cb;
    }();
    return callbacks;
  }

  ServerCodecCallbacks& callbacks_;
  const CodecSettings settings_;
  nghttp2_session* session_ = nullptr;
  std::vector<nghttp2_nv> nva_;
  size_t active_ = 0;
  bool failed_ = false;
  ClientStreamHistory history_;
  int32_t client_reset_id_ = 0;
  // The frame scanner: bytes of the preface or of a frame's payload still to pass through, and
  // a frame header being gathered.
  size_t pass_left_ = 24;
  size_t held_ = 0;
  std::array<uint8_t, 13> hold_{};
};

}  // namespace

ServerCodecPtr createNghttp2ServerCodec(ServerCodecCallbacks& callbacks,
                                        const CodecSettings& settings) {
  return std::make_unique<Nghttp2ServerCodec>(callbacks, settings);
}

}  // namespace http2
}  // namespace filters
}  // namespace sluice
