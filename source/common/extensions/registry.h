#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_field.h"

#include "api/sluice/config/v1/bootstrap.pb.h"
#include "source/common/network/filter.h"
#include "source/common/network/transport_socket.h"
#include "source/common/policy/enforcement.h"
#include "source/common/policy/policy.h"
#include "source/common/proxy/grants.h"
#include "source/common/proxy/request_filter.h"
#include "source/common/upstream/routes.h"

namespace sluice {
namespace ban {
class BanTable;
}

namespace extensions {

// What a factory may use while it builds a filter from its config (main thread, config time).
struct FactoryContext {
  std::string listener_name;
  std::string chain_name;  // stat names of per-chain filters use it: http1.<chain>.rq_total
  std::string path;        // where this filter sits in the config, for error messages
  // The process's ban table (null when Bootstrap.bans.disabled): sluice.auth records wrong keys
  // in it, sluice.ban refuses banned clients at accept.
  std::shared_ptr<ban::BanTable> bans = nullptr;
  // sluice's own listen addresses (every listener and the admin endpoint), so a filter can keep
  // requests from looping back into the proxy.
  std::vector<network::Address> local_addresses = {};
  // The address of the listener being built (sluice.auth refuses to run keyless on one that is
  // not loopback). Invalid when a filter is built outside a listener.
  network::Address listener_address = {};
  // What the listener lets in: filters that authenticate or admit by address add theirs here
  // (null outside a listener), so a reload can tell what the next config takes away.
  proxy::ListenerGrants* grants = nullptr;
  // The grants of the running listener of the same name when a reload builds the next config
  // (null otherwise): a key kept keeps its grant, and a revocation reaches every connection
  // that holds it, whichever config version it started with.
  const proxy::ListenerGrants* running_grants = nullptr;
  // Set by a listener filter that replaces the socket's peer with the client it speaks for
  // (sluice.proxy_protocol): the listener then counts connection limits per client only once
  // its listener filters are done.
  bool sets_client_address = false;
  // The config's groups of keys (Bootstrap.policy): sluice.auth gives each key its group.
  // Null outside a server config (tests, tools): only the implicit default group exists.
  policy::PolicySharedPtr policy = nullptr;
  // While a list of request filters is built: what it does about the policy (sluice.auth
  // records its keys' groups, sluice.dest_guard that it enforces their rules). Null otherwise.
  policy::FilterListPolicy* filter_list = nullptr;
  // Where each list of request filters built for the listener leaves its record (null: nowhere),
  // for `sluice policy explain`.
  std::vector<policy::FilterListPolicySharedPtr>* filter_lists = nullptr;
  // The parent proxies and routes (Bootstrap.parents, .routes) sluice.router follows. Null: none.
  upstream::RoutesSharedPtr routes = nullptr;
};

// Common to every extension: a unique name and the config message it accepts.
class TypedFactory {
 public:
  virtual ~TypedFactory() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<google::protobuf::Message> createEmptyConfig() const = 0;
  std::string configType() const { return createEmptyConfig()->GetDescriptor()->full_name(); }
};

class ListenerFilterFactory : public TypedFactory {
 public:
  static constexpr const char* kCategory = "listener filter";
  virtual absl::StatusOr<network::ListenerFilterFactoryCb> createFilterFactory(
      const google::protobuf::Message& config, FactoryContext& context) const = 0;
};

class NetworkFilterFactory : public TypedFactory {
 public:
  static constexpr const char* kCategory = "network filter";
  virtual absl::StatusOr<network::NetworkFilterFactoryCb> createFilterFactory(
      const google::protobuf::Message& config, FactoryContext& context) const = 0;
};

// A transport socket (TLS) for the connections of one filter chain.
class TransportSocketConfigFactory : public TypedFactory {
 public:
  static constexpr const char* kCategory = "transport socket";
  virtual absl::StatusOr<network::TransportSocketFactorySharedPtr> createTransportSocketFactory(
      const google::protobuf::Message& config, FactoryContext& context) const = 0;
};

class RequestFilterFactory : public TypedFactory {
 public:
  static constexpr const char* kCategory = "request filter";
  virtual absl::StatusOr<proxy::RequestFilterFactoryCb> createFilterFactory(
      const google::protobuf::Message& config, FactoryContext& context) const = 0;
  // The phase the filter runs in (docs/extending.md). A chain lists its filters in phase order;
  // the one Route filter (the router) is terminal and last.
  virtual proxy::RequestPhase phase() const { return proxy::RequestPhase::Authorize; }
  bool terminal() const { return phase() == proxy::RequestPhase::Route; }
  // For Authenticate filters: whether this config refuses requests without a credential.
  virtual bool requiresCredential(const google::protobuf::Message& config) const { return false; }
};

// What most filter factories derive from: the config message type is written once, and the
// factory gets its config already typed. A filter factory is then its name and one method:
//   class RouterFactory : public FactoryBase<RequestFilterFactory, v1::RouterConfig> {
//     std::string name() const override { return "sluice.router"; }
//     absl::StatusOr<proxy::RequestFilterFactoryCb> createTypedFilterFactory(
//         const v1::RouterConfig& config, FactoryContext& context) const override;
//   };
template <class CategoryT, class Proto>
class FactoryBase : public CategoryT {
 public:
  using Category = CategoryT;
  using Result = decltype(std::declval<const CategoryT&>().createFilterFactory(
      std::declval<const google::protobuf::Message&>(), std::declval<FactoryContext&>()));

  std::unique_ptr<google::protobuf::Message> createEmptyConfig() const final {
    return std::make_unique<Proto>();
  }
  Result createFilterFactory(const google::protobuf::Message& config,
                             FactoryContext& context) const final {
    return createTypedFilterFactory(static_cast<const Proto&>(config), context);
  }

 protected:
  // `config` was checked against the schema (unknown fields refused) before it gets here.
  virtual Result createTypedFilterFactory(const Proto& config, FactoryContext& context) const = 0;
};

// The extensions linked into this binary, by category. Filled by static registration before
// main() runs; read-only afterwards.
template <class Factory>
class Registry {
 public:
  static void add(Factory* factory) { factories().push_back(factory); }
  static const Factory* byName(std::string_view name) {
    for (const Factory* f : factories()) {
      if (f->name() == name) return f;
    }
    return nullptr;
  }
  static const Factory* byConfigType(std::string_view type) {
    for (const Factory* f : factories()) {
      if (f->configType() == type) return f;
    }
    return nullptr;
  }
  static const std::vector<Factory*>& all() { return factories(); }

 private:
  static std::vector<Factory*>& factories() {
    static std::vector<Factory*> list;
    return list;
  }
};

// The factory named by `filter` (or, without a name, the one owning its config type), with
// its typed_config unpacked and checked against the factory's message type.
template <class Factory>
struct ResolvedFilter {
  const Factory* factory;
  std::unique_ptr<google::protobuf::Message> config;
};
template <class Factory>
absl::StatusOr<ResolvedFilter<Factory>> resolveFilter(const config::v1::Filter& filter,
                                                      std::string_view path);

// Builds a request filter chain's factories from its config (used by codecs, whose configs
// nest request filters). Checks that the filters are in phase order and that exactly the last
// one is terminal.
absl::StatusOr<std::vector<proxy::RequestFilterSpec>> createRequestFilterFactories(
    const google::protobuf::RepeatedPtrField<config::v1::Filter>& filters, FactoryContext& context);

// "name (config type)" of every linked extension, one category per line, for the startup log.
std::string describeLinked();

template <class Factory>
class RegisterFactory {
 public:
  RegisterFactory() { Registry<typename Factory::Category>::add(&instance_); }

 private:
  Factory instance_;
};

}  // namespace extensions
}  // namespace sluice

// Registers FACTORY (which declares `using Category = <ListenerFilterFactory|...>;`) at startup.
// Its library needs `alwayslink = True` so the linker keeps the registration.
#define SLUICE_REGISTER_FACTORY(FACTORY) \
  static ::sluice::extensions::RegisterFactory<FACTORY> sluice_register_##FACTORY
