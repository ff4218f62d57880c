#include "extensions/header_rewrite/header_rewrite.h"

namespace sluice {
namespace extensions {
namespace header_rewrite {

proxy::RequestFilterStatus HeaderRewriteFilter::onRequest(proxy::ProxyRequest& request) {
  if (request.headers == nullptr) return proxy::RequestFilterStatus::Continue;
  for (const std::string& name : config_->remove) request.headers->remove(name);
  // Replace drops what the client sent before any add, so two added values of one name both stay.
  if (config_->replace) {
    for (const auto& header : config_->add) request.headers->remove(header.first);
  }
  for (const auto& [name, value] : config_->add) {
    if (!request.headers->add(name, value)) {
      callbacks_->deny(proxy::Denial::ServiceUnavailable, "too many added headers");
      return proxy::RequestFilterStatus::StopIteration;
    }
  }
  config_->rewritten.inc();
  return proxy::RequestFilterStatus::Continue;
}

}  // namespace header_rewrite
}  // namespace extensions
}  // namespace sluice
