#include "source/common/extensions/registry.h"

#include "absl/strings/str_format.h"

namespace sluice {
namespace extensions {

namespace {
constexpr std::string_view kTypePrefix = "type.googleapis.com/";

template <class Factory>
std::string linkedNames() {
  std::string out;
  for (const Factory* f : Registry<Factory>::all()) {
    if (!out.empty()) out += ", ";
    out += f->name();
  }
  return out.empty() ? "none" : out;
}
}  // namespace

template <class Factory>
absl::StatusOr<ResolvedFilter<Factory>> resolveFilter(const config::v1::Filter& filter,
                                                      std::string_view path) {
  const std::string& type_url = filter.typed_config().type_url();
  std::string type =
      type_url.rfind(kTypePrefix.data(), 0) == 0 ? type_url.substr(kTypePrefix.size()) : type_url;
  const Factory* factory = nullptr;
  if (!filter.name().empty()) {
    factory = Registry<Factory>::byName(filter.name());
    if (factory == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: unknown %s '%s' (linked: %s)", path,
                                                        Factory::kCategory, filter.name(),
                                                        linkedNames<Factory>()));
    }
  } else if (!type.empty()) {
    factory = Registry<Factory>::byConfigType(type);
    if (factory == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: no %s takes config type '%s'", path, Factory::kCategory, type));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrFormat("%s: a filter needs a name", path));
  }
  ResolvedFilter<Factory> resolved{factory, factory->createEmptyConfig()};
  if (filter.has_typed_config()) {
    if (type != resolved.config->GetDescriptor()->full_name()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.typed_config: filter '%s' takes '%s', not '%s'", path,
                          factory->name(), resolved.config->GetDescriptor()->full_name(), type));
    }
    if (!filter.typed_config().UnpackTo(resolved.config.get())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.typed_config: cannot decode '%s'", path, type));
    }
  }
  return resolved;
}

template absl::StatusOr<ResolvedFilter<ListenerFilterFactory>> resolveFilter(
    const config::v1::Filter&, std::string_view);
template absl::StatusOr<ResolvedFilter<NetworkFilterFactory>> resolveFilter(
    const config::v1::Filter&, std::string_view);
template absl::StatusOr<ResolvedFilter<RequestFilterFactory>> resolveFilter(
    const config::v1::Filter&, std::string_view);
template absl::StatusOr<ResolvedFilter<TransportSocketConfigFactory>> resolveFilter(
    const config::v1::Filter&, std::string_view);

namespace {

// The filters of one list, each built and checked for its place (phase order, the router last).
absl::StatusOr<std::vector<proxy::RequestFilterSpec>> createRequestFilterList(
    const google::protobuf::RepeatedPtrField<config::v1::Filter>& filters, FactoryContext& context,
    const std::string& base) {
  std::vector<proxy::RequestFilterSpec> out;
  for (int i = 0; i < filters.size(); ++i) {
    std::string path = absl::StrFormat("%s.request_filters[%d]", base, i);
    auto resolved = resolveFilter<RequestFilterFactory>(filters[i], path);
    if (!resolved.ok()) return resolved.status();
    bool last = i == filters.size() - 1;
    if (resolved->factory->terminal() != last) {
      return absl::InvalidArgumentError(absl::StrFormat(
          last ? "%s: the last request filter must be terminal (sluice.router), not '%s'"
               : "%s: terminal filter '%s' must be the last request filter",
          path, resolved->factory->name()));
    }
    const proxy::RequestPhase phase = resolved->factory->phase();
    if (!out.empty() && phase < out.back().phase) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: '%s' runs in the %s phase, after filters of the %s phase: list request filters "
          "in phase order (authenticate, authorize, route)",
          path, resolved->factory->name(), proxy::phaseName(phase),
          proxy::phaseName(out.back().phase)));
    }
    context.path = path;
    auto cb = resolved->factory->createFilterFactory(*resolved->config, context);
    context.path = base;
    if (!cb.ok()) return cb.status();
    proxy::RequestFilterSpec spec;
    spec.phase = phase;
    spec.requires_credential = resolved->factory->requiresCredential(*resolved->config);
    spec.create = std::move(*cb);
    out.push_back(std::move(spec));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<proxy::RequestFilterSpec>> createRequestFilterFactories(
    const google::protobuf::RepeatedPtrField<config::v1::Filter>& filters,
    FactoryContext& context) {
  const std::string base = context.path;
  if (filters.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s.request_filters: empty; the last request filter must be sluice.router", base));
  }
  auto list = std::make_shared<policy::FilterListPolicy>();
  list->path = base + ".request_filters";
  policy::FilterListPolicy* const outer = context.filter_list;
  context.filter_list = list.get();
  auto built = createRequestFilterList(filters, context, base);
  context.filter_list = outer;
  if (!built.ok()) return built.status();
  // A group's rules hold wherever its keys get in: a list that lets them in checks them.
  const policy::Policy& policy =
      context.policy != nullptr ? *context.policy : *policy::Policy::empty();
  if (const policy::Group* group = list->unenforcedGroup(policy)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: requests of policy group \"%s\" (which has rules) get in through these filters, "
        "but no sluice.dest_guard is among them to enforce the rules: add sluice.dest_guard "
        "after sluice.auth",
        list->path, group->name));
  }
  if (context.filter_lists != nullptr) context.filter_lists->push_back(std::move(list));
  return built;
}

std::string describeLinked() {
  return absl::StrFormat(
      "listener filters: %s; transport sockets: %s; network filters: %s; request filters: %s",
      linkedNames<ListenerFilterFactory>(), linkedNames<TransportSocketConfigFactory>(),
      linkedNames<NetworkFilterFactory>(), linkedNames<RequestFilterFactory>());
}

}  // namespace extensions
}  // namespace sluice
