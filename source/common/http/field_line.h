#pragma once

#include <string_view>

#include "source/common/buffer/buffer.h"

namespace sluice::http {

// Appends one HTTP/1.1 field line, "name: value\r\n".
inline void addFieldLine(buffer::Buffer& out, std::string_view name, std::string_view value) {
  out.add(name);
  out.add(": ", 2);
  out.add(value);
  out.add("\r\n", 2);
}

}  // namespace sluice::http
