#include "absl/strings/str_format.h"
#include "api/sluice/filters/v1/auth.pb.h"
#include "extensions/registry.h"
#include "filters/request/auth/auth.h"
#include "source/common/common/logger.h"

namespace sluice {
namespace filters {
namespace auth {
namespace {

class AuthFactory : public extensions::RequestFilterFactory {
 public:
  using Category = extensions::RequestFilterFactory;

  std::string name() const override { return "sluice.auth"; }
  std::unique_ptr<google::protobuf::Message> createEmptyConfig() const override {
    return std::make_unique<sluice::filters::v1::AuthConfig>();
  }

  absl::StatusOr<proxy::RequestFilterFactoryCb> createFilterFactory(
      const google::protobuf::Message& message,
      extensions::FactoryContext& context) const override {
    const auto& proto = static_cast<const sluice::filters::v1::AuthConfig&>(message);
    auto config = std::make_shared<AuthConfig>();
    config->realm = proto.realm().empty() ? "sluice" : proto.realm();
    if (config->realm.find_first_of("\"\\\r\n") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.typed_config.realm: must not contain quotes, backslashes or line breaks",
          context.path));
    }
    stats::Store& store = stats::Store::get();
    for (int i = 0; i < proto.api_keys_size(); ++i) {
      const auto& k = proto.api_keys(i);
      if (k.key().empty()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s.typed_config.api_keys[%d].key: empty", context.path, i));
      }
      ApiKey key;
      key.name = k.name().empty() ? absl::StrFormat("key%d", i + 1) : k.name();
      for (const ApiKey& other : config->keys) {
        if (other.name == key.name) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s.typed_config.api_keys[%d].name: '%s' is used twice", context.path, i, key.name));
        }
      }
      key.digest = sha256(k.key());
      key.allowed = store.counter(
          absl::StrFormat("auth.key.%s.allowed", stats::sanitizeNamePart(key.name)));
      config->keys.push_back(std::move(key));
    }
    config->allowed = store.counter("auth.allowed");
    config->denied_missing = store.counter("auth.denied_missing");
    config->denied_invalid = store.counter("auth.denied_invalid");
    config->open_relay = store.counter("auth.open_relay");
    if (config->keys.empty()) {
      SLUICE_LOG(Warn,
                 "%s: no API keys: listener '%s' is an OPEN RELAY; anyone who reaches it can use "
                 "it (set auth.api_keys, or run `sluice init` for a config with a key)",
                 context.path, context.listener_name);
    }
    AuthConfigSharedPtr shared = std::move(config);
    return proxy::RequestFilterFactoryCb([shared](proxy::RequestFilterChain& chain) {
      chain.addFilter(std::make_unique<AuthFilter>(shared));
    });
  }
};

SLUICE_REGISTER_FACTORY(AuthFactory);

}  // namespace
}  // namespace auth
}  // namespace filters
}  // namespace sluice
