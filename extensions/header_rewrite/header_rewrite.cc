#include "extensions/header_rewrite/header_rewrite.h"

namespace sluice {
namespace extensions {
namespace header_rewrite {

proxy::RequestFilterStatus HeaderRewriteFilter::onRequest(proxy::ProxyRequest& request) {
  if (request.headers == nullptr) return proxy::RequestFilterStatus::Continue;
  for (const std::string& name : config_->remove) request.headers->remove(name);
  for (const auto& [name, value] : config_->add) {
    if (config_->replace) request.headers->remove(name);
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
