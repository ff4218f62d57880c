#include "tools/load/response_parser.h"

#include <algorithm>
#include <cstring>

namespace sluice {
namespace load {
namespace {

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x + 32);
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y + 32);
    if (x != y) return false;
  }
  return true;
}

bool containsToken(std::string_view value, std::string_view token) {
  size_t i = 0;
  while (i < value.size()) {
    size_t end = value.find(',', i);
    if (end == std::string_view::npos) end = value.size();
    std::string_view t = value.substr(i, end - i);
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    if (equalsIgnoreCase(t, token)) return true;
    i = end + 1;
  }
  return false;
}

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The accept value for the key "dGhlIHNhbXBsZSBub25jZQ==" (RFC 6455 section 1.3).
constexpr std::string_view kWsAccept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

}  // namespace

bool ResponseParser::parseHead(std::string_view head) {
  // "HTTP/1.x NNN"
  if (head.size() < 12 || head.substr(0, 7) != "HTTP/1." || head[8] != ' ') return false;
  const bool http10 = head[7] == '0';
  int status = 0;
  for (int i = 9; i < 12; ++i) {
    if (head[i] < '0' || head[i] > '9') return false;
    status = status * 10 + (head[i] - '0');
  }
  status_ = status;
  close_ = http10;
  bool chunked = false;
  bool have_length = false;
  uint64_t length = 0;
  size_t pos = head.find('\n');
  while (pos != std::string_view::npos && pos + 1 < head.size()) {
    const size_t start = pos + 1;
    size_t end = head.find('\n', start);
    if (end == std::string_view::npos) break;
    std::string_view line = head.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = end;
    if (line.empty()) break;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return false;
    std::string_view name = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (equalsIgnoreCase(name, "content-length")) {
      uint64_t v = 0;
      if (value.empty() || value.size() > 18) return false;
      for (char c : value) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + static_cast<uint64_t>(c - '0');
      }
      if (have_length && v != length) return false;
      have_length = true;
      length = v;
    } else if (equalsIgnoreCase(name, "transfer-encoding")) {
      chunked = containsToken(value, "chunked");
    } else if (equalsIgnoreCase(name, "connection")) {
      if (containsToken(value, "close")) close_ = true;
      if (containsToken(value, "keep-alive")) close_ = false;
    } else if (equalsIgnoreCase(name, "sec-websocket-accept")) {
      accept_ok_ = value == kWsAccept;
    }
  }
  if (no_body_ || status < 200 || status == 204 || status == 304) {
    state_ = State::Complete;
    return true;
  }
  if (chunked) {
    state_ = State::ChunkSize;
    remaining_ = 0;
  } else if (have_length) {
    remaining_ = length;
    state_ = length == 0 ? State::Complete : State::Length;
  } else {
    close_ = true;
    state_ = State::UntilClose;
  }
  return true;
}

ResponseParser::Result ResponseParser::feed(const char* data, size_t len, size_t& consumed) {
  consumed = 0;
  while (consumed < len || state_ == State::Complete) {
    switch (state_) {
      case State::Complete:
        return Result::Done;
      case State::Head: {
        std::string_view view;
        size_t scan_from = 0;
        const char* p = data + consumed;
        const size_t n = len - consumed;
        const size_t carried = carry_.size();
        if (carried == 0) {
          view = std::string_view(p, n);
        } else {
          scan_from = carried >= 3 ? carried - 3 : 0;
          carry_.append(p, std::min(n, kMaxHead + 1 - std::min(carried, kMaxHead)));
          view = carry_;
        }
        const size_t end = view.find("\r\n\r\n", scan_from);
        if (end == std::string_view::npos) {
          if (carried == 0) {
            if (n > kMaxHead) return fail("response head too large");
            if (carry_.capacity() < 4096) carry_.reserve(4096);  // once per connection
            carry_.assign(p, n);
          } else if (carry_.size() > kMaxHead) {
            return fail("response head too large");
          }
          consumed = len;
          return Result::More;
        }
        const size_t head_len = end + 4;
        if (!parseHead(view.substr(0, head_len))) return fail("malformed response head");
        // Of the head, `carried` bytes came from earlier reads.
        consumed += head_len - carried;
        carry_.clear();
        if (status_ >= 100 && status_ < 200 && status_ != 101) {
          // An interim response (100 Continue): the real one follows.
          state_ = State::Head;
          close_ = false;
        }
        break;
      }
      case State::Length: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, len - consumed));
        consumed += take;
        remaining_ -= take;
        body_bytes_ += take;
        if (remaining_ == 0) state_ = State::Complete;
        break;
      }
      case State::UntilClose:
        body_bytes_ += len - consumed;
        consumed = len;
        break;
      case State::ChunkData: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, len - consumed));
        consumed += take;
        remaining_ -= take;
        body_bytes_ += take;
        if (remaining_ == 0) state_ = State::ChunkDataCr;
        break;
      }
      default: {
        const char c = data[consumed++];
        switch (state_) {
          case State::ChunkSize: {
            const int d = hexDigit(c);
            if (d >= 0) {
              if (remaining_ > (uint64_t{1} << 56)) return fail("chunk size too large");
              remaining_ = remaining_ * 16 + static_cast<uint64_t>(d);
            } else if (c == ';' || c == ' ' || c == '\t') {
              state_ = State::ChunkExt;
            } else if (c == '\r') {
              state_ = State::ChunkSizeLf;
            } else if (c == '\n') {
              state_ = remaining_ == 0 ? State::TrailerStart : State::ChunkData;
            } else {
              return fail("bad chunk size");
            }
            break;
          }
          case State::ChunkExt:
            if (c == '\n') state_ = remaining_ == 0 ? State::TrailerStart : State::ChunkData;
            break;
          case State::ChunkSizeLf:
            if (c != '\n') return fail("bad chunk size line");
            state_ = remaining_ == 0 ? State::TrailerStart : State::ChunkData;
            break;
          case State::ChunkDataCr:
            if (c == '\r') {
              state_ = State::ChunkDataLf;
            } else if (c == '\n') {
              state_ = State::ChunkSize;
            } else {
              return fail("chunk data not followed by CRLF");
            }
            break;
          case State::ChunkDataLf:
            if (c != '\n') return fail("chunk data not followed by CRLF");
            state_ = State::ChunkSize;
            break;
          case State::TrailerStart:
            if (c == '\r') {
              state_ = State::FinalLf;
            } else if (c == '\n') {
              state_ = State::Complete;
            } else {
              state_ = State::TrailerLine;
            }
            break;
          case State::TrailerLine:
            if (c == '\n') state_ = State::TrailerStart;
            break;
          case State::FinalLf:
            if (c != '\n') return fail("bad final CRLF");
            state_ = State::Complete;
            break;
          default:
            return fail("parser state");
        }
      }
    }
  }
  return state_ == State::Complete ? Result::Done : Result::More;
}

}  // namespace load
}  // namespace sluice
