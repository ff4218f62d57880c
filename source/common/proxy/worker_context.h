#pragma once

#include <cstdint>

#include "source/common/event/dispatcher.h"

namespace sluice {
namespace dns {
class Resolver;
}
namespace network {
struct Egress;
}
namespace upstream {
class Pool;
}

namespace proxy {

// What the filters running on one worker may use: all of it belongs to that worker's thread.
class WorkerContext {
 public:
  virtual ~WorkerContext() = default;
  virtual event::Dispatcher& dispatcher() = 0;
  virtual dns::Resolver& resolver() = 0;
  // The resolver whose queries leave from `egress` (a request's group's), made on first use;
  // resolver() itself when `egress` is empty.
  virtual dns::Resolver& resolver(const network::Egress& egress) = 0;
  virtual upstream::Pool& pool() = 0;
  virtual uint32_t index() const = 0;
  // True once a graceful shutdown began: codecs close keep-alive connections after the
  // current request.
  virtual bool draining() const = 0;
};

}  // namespace proxy
}  // namespace sluice
