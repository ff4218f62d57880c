#pragma once

#include <memory>
#include <string>
#include <vector>

#include "source/common/proxy/request_filter.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace extensions {
namespace header_rewrite {

struct HeaderRewriteConfig {
  std::vector<std::string> remove;
  std::vector<std::pair<std::string, std::string>> add;
  bool replace = false;
  stats::Counter rewritten;  // requests this filter edited
};
using HeaderRewriteConfigSharedPtr = std::shared_ptr<const HeaderRewriteConfig>;

// "sluice.header_rewrite": removes and adds headers on every relayed HTTP request. Tunnels carry
// no headers and pass untouched. The added names and values live in the shared config, so an
// edit costs no allocation.
class HeaderRewriteFilter : public proxy::RequestFilter {
 public:
  explicit HeaderRewriteFilter(HeaderRewriteConfigSharedPtr config) : config_(std::move(config)) {}
  proxy::RequestFilterStatus onRequest(proxy::ProxyRequest& request) override;

 private:
  HeaderRewriteConfigSharedPtr config_;
};

}  // namespace header_rewrite
}  // namespace extensions
}  // namespace sluice
