#include "absl/strings/str_format.h"

#include "extensions/header_rewrite/header_rewrite.h"
#include "extensions/header_rewrite/header_rewrite.pb.h"
#include "source/common/extensions/registry.h"
#include "source/common/http/h1_parser.h"

namespace sluice {
namespace extensions {
namespace header_rewrite {
namespace {

// A header name must be a token, a value visible characters and spaces: what the config says
// goes on the wire as is, so it is checked here once.
bool validName(const std::string& name) {
  if (name.empty()) return false;
  for (unsigned char c : name) {
    if (!(http1::detail::kCharClasses[c] & http1::detail::kTchar)) return false;
  }
  return true;
}

bool validValue(const std::string& value) {
  for (unsigned char c : value) {
    if (!(http1::detail::kCharClasses[c] & http1::detail::kValue)) return false;
  }
  return true;
}

class HeaderRewriteFactory : public FactoryBase<RequestFilterFactory, v1::HeaderRewriteConfig> {
 public:
  std::string name() const override { return "sluice.header_rewrite"; }
  absl::StatusOr<proxy::RequestFilterFactoryCb> createTypedFilterFactory(
      const v1::HeaderRewriteConfig& proto, FactoryContext& context) const override {
    auto config = std::make_shared<HeaderRewriteConfig>();
    for (int i = 0; i < proto.remove_size(); ++i) {
      if (!validName(proto.remove(i))) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s.typed_config.remove[%d]: '%s' is not a header name", context.path,
                            i, proto.remove(i)));
      }
      config->remove.push_back(proto.remove(i));
    }
    for (int i = 0; i < proto.add_size(); ++i) {
      const auto& h = proto.add(i);
      if (!validName(h.name())) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s.typed_config.add[%d].name: '%s' is not a header name", context.path, i, h.name()));
      }
      if (!validValue(h.value())) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s.typed_config.add[%d].value: control characters are not allowed", context.path, i));
      }
      config->add.emplace_back(h.name(), h.value());
    }
    config->replace = proto.replace();
    config->rewritten = stats::Store::get().counter("header_rewrite.rq_rewritten",
                                                    "Requests the header_rewrite filter rewrote.");
    HeaderRewriteConfigSharedPtr shared = std::move(config);
    return proxy::RequestFilterFactoryCb([shared](proxy::RequestFilterChain& chain) {
      chain.addFilter(std::make_unique<HeaderRewriteFilter>(shared));
    });
  }
};

SLUICE_REGISTER_FACTORY(HeaderRewriteFactory);

}  // namespace
}  // namespace header_rewrite
}  // namespace extensions
}  // namespace sluice
