#include "source/common/config/bootstrap_loader.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/descriptor.h"

#include "api/sluice/config/v1/short.pb.h"
#include "source/common/common/logger.h"
#include "source/common/config/short_form.h"
#include "source/common/config/yaml_loader.h"
#include "source/common/network/address.h"

namespace sluice {
namespace config {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// A config file is a few kilobytes; anything this big is a mistake (or /dev/zero).
constexpr size_t kMaxConfigBytes = 4 * 1024 * 1024;

absl::Status withPrefix(std::string_view prefix, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrFormat("%s: %s", prefix, status.message()));
}

absl::Status pathError(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrFormat("%s: %s", path, what));
}

std::string joinPath(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}

bool validName(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Finds every sluice.config.v1.Filter in msg, including inside Any payloads (request filters
// live in the http1 codec's config), and checks it.
absl::Status checkFiltersIn(const Message& msg, const std::string& path, int depth) {
  if (depth > 32) return absl::OkStatus();
  const Descriptor* d = msg.GetDescriptor();
  const Reflection* r = msg.GetReflection();
  if (d == v1::Filter::descriptor()) {
    if (r->GetString(msg, d->FindFieldByName("name")).empty()) {
      return pathError(joinPath(path, "name"), "required");
    }
    const FieldDescriptor* typed = d->FindFieldByName("typed_config");
    if (!r->HasField(msg, typed) ||
        r->GetMessage(msg, typed)
            .GetReflection()
            ->GetString(r->GetMessage(msg, typed), typed->message_type()->FindFieldByNumber(1))
            .empty()) {
      return pathError(joinPath(path, "typed_config"), "required (a map with an \"@type\" key)");
    }
  }
  if (d->well_known_type() == Descriptor::WELLKNOWNTYPE_ANY) {
    const std::string url = r->GetString(msg, d->FindFieldByNumber(1));
    const size_t slash = url.rfind('/');
    const Descriptor* type =
        slash == std::string::npos
            ? nullptr
            : google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(
                  url.substr(slash + 1));
    const Message* prototype =
        type ? google::protobuf::MessageFactory::generated_factory()->GetPrototype(type) : nullptr;
    if (prototype == nullptr) {
      return pathError(joinPath(path, "@type"),
                       absl::StrFormat("unknown type \"%s\"", url.substr(0, 200)));
    }
    std::unique_ptr<Message> payload(prototype->New());
    if (!payload->ParseFromString(r->GetString(msg, d->FindFieldByNumber(2)))) {
      return pathError(path, "payload does not parse as " + type->full_name());
    }
    return checkFiltersIn(*payload, path, depth + 1);
  }
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(msg, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || f->is_map()) continue;
    if (f->is_repeated()) {
      for (int i = 0; i < r->FieldSize(msg, f); ++i) {
        absl::Status status =
            checkFiltersIn(r->GetRepeatedMessage(msg, f, i),
                           absl::StrFormat("%s[%d]", joinPath(path, f->name()), i), depth + 1);
        if (!status.ok()) return status;
      }
    } else {
      absl::Status status =
          checkFiltersIn(r->GetMessage(msg, f), joinPath(path, f->name()), depth + 1);
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

absl::Status checkResolver(const std::string& text) {
  if (network::Address::parseHostPort(text).ok()) return absl::OkStatus();
  if (network::Address::parseIp(text, 53).ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "expected a literal IP or ip:port (\"[v6]:port\"), found \"%s\"", text.substr(0, 100)));
}

}  // namespace

absl::Status validateBootstrap(const v1::Bootstrap& bootstrap) {
  if (bootstrap.listeners_size() == 0) {
    return pathError("listeners", "at least one listener is required");
  }
  if (!bootstrap.log_level().empty()) {
    LogLevel level;
    if (!logger::parseLevel(bootstrap.log_level(), level)) {
      return pathError("log_level", absl::StrFormat("expected error, warn, info or debug, found "
                                                    "\"%s\"",
                                                    bootstrap.log_level().substr(0, 32)));
    }
  }
  absl::flat_hash_map<std::string, int> names;
  std::vector<std::pair<network::Address, std::string>> addresses;
  auto checkUnique = [&](const network::Address& address, const std::string& path) -> absl::Status {
    for (const auto& [other, other_path] : addresses) {
      if (other == address) {
        return pathError(
            path, absl::StrFormat("same address as %s (%s)", other_path, address.asString()));
      }
    }
    addresses.emplace_back(address, path);
    return absl::OkStatus();
  };
  if (!bootstrap.admin().address().empty()) {
    absl::StatusOr<network::Address> admin =
        network::Address::parseHostPort(bootstrap.admin().address());
    if (!admin.ok()) return withPrefix("admin.address", admin.status());
    absl::Status status = checkUnique(*admin, "admin.address");
    if (!status.ok()) return status;
  }
  for (int i = 0; i < bootstrap.listeners_size(); ++i) {
    const v1::Listener& listener = bootstrap.listeners(i);
    const std::string path = absl::StrFormat("listeners[%d]", i);
    if (listener.name().empty()) return pathError(path + ".name", "required");
    if (!validName(listener.name())) {
      return pathError(path + ".name",
                       absl::StrFormat("\"%s\" may hold only letters, digits, '_' and '-'",
                                       listener.name().substr(0, 64)));
    }
    auto [pos, inserted] = names.try_emplace(listener.name(), i);
    if (!inserted) {
      return pathError(path + ".name", absl::StrFormat("\"%s\" is already the name of "
                                                       "listeners[%d]",
                                                       listener.name(), pos->second));
    }
    if (listener.address().empty()) return pathError(path + ".address", "required");
    absl::StatusOr<network::Address> address = network::Address::parseHostPort(listener.address());
    if (!address.ok()) return withPrefix(path + ".address", address.status());
    absl::Status status = checkUnique(*address, path + ".address");
    if (!status.ok()) return status;
    if (listener.filter_chains_size() == 0) {
      return pathError(path + ".filter_chains", "at least one filter chain is required");
    }
    for (int c = 0; c < listener.filter_chains_size(); ++c) {
      const v1::FilterChain& chain = listener.filter_chains(c);
      if (chain.filters_size() == 0) {
        return pathError(absl::StrFormat("%s.filter_chains[%d].filters", path, c),
                         "at least one filter is required");
      }
    }
  }
  for (int i = 0; i < bootstrap.dns().resolvers_size(); ++i) {
    absl::Status status = checkResolver(bootstrap.dns().resolvers(i));
    if (!status.ok()) return withPrefix(absl::StrFormat("dns.resolvers[%d]", i), status);
  }
  return checkFiltersIn(bootstrap, "", 0);
}

absl::StatusOr<v1::Bootstrap> loadBootstrapString(std::string_view yaml, std::string_view source) {
  absl::StatusOr<std::vector<std::string>> keys = yamlTopLevelKeys(yaml, source);
  if (!keys.ok()) return keys.status();
  const std::string prefix = source.empty() ? std::string("config") : std::string(source);
  bool full = false;
  for (const std::string& key : *keys) full = full || key == "listeners";

  v1::Bootstrap bootstrap;
  if (full) {
    absl::Status status = loadYaml(yaml, source, bootstrap);
    if (!status.ok()) return status;
  } else {
    // A full-form key in a file without `listeners` is a half-written full form: say so
    // rather than "unknown field".
    const Descriptor* short_type = v1::ShortConfig::descriptor();
    for (const std::string& key : *keys) {
      if (short_type->FindFieldByName(key) == nullptr &&
          v1::Bootstrap::descriptor()->FindFieldByName(key) != nullptr) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: %s: a full-form key, but there is no top-level `listeners` list, so the file "
            "reads as the short form (which has no %s); see docs/configuration.md",
            prefix, key, key));
      }
    }
    v1::ShortConfig short_config;
    LoadOptions options;
    options.scalar_shorthands.emplace_back(v1::ShortConfig::ApiKey::descriptor()->full_name(),
                                           "key");
    absl::Status status = loadYaml(yaml, source, short_config, options);
    if (!status.ok()) return status;
    absl::StatusOr<v1::Bootstrap> expanded = expandShortConfig(short_config);
    if (!expanded.ok()) return withPrefix(prefix, expanded.status());
    bootstrap = std::move(*expanded);
  }
  absl::Status status = validateBootstrap(bootstrap);
  if (!status.ok()) return withPrefix(prefix, status);
  return bootstrap;
}

absl::StatusOr<v1::Bootstrap> loadBootstrapFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrFormat("%s: cannot open: %s", path, strerror(errno)));
  }
  std::string text;
  char buf[16384];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: cannot read: %s", path, strerror(err)));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxConfigBytes) {
      ::close(fd);
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: larger than %d bytes, not a config file", path, kMaxConfigBytes));
    }
  }
  ::close(fd);
  return loadBootstrapString(text, path);
}

std::string defaultConfigPath() {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  // The XDG spec says relative values are invalid and must be ignored.
  if (xdg != nullptr && xdg[0] == '/') {
    return std::string(xdg) + "/sluice/config.yaml";
  }
  std::string home;
  const char* env_home = std::getenv("HOME");
  if (env_home != nullptr && env_home[0] != '\0') {
    home = env_home;
  } else {
    struct passwd pw;
    struct passwd* result = nullptr;
    char buf[4096];
    if (getpwuid_r(getuid(), &pw, buf, sizeof(buf), &result) == 0 && result != nullptr &&
        result->pw_dir != nullptr) {
      home = result->pw_dir;
    }
  }
  if (home.empty()) return ".config/sluice/config.yaml";
  while (home.size() > 1 && home.back() == '/') home.pop_back();
  if (home == "/") return "/.config/sluice/config.yaml";
  return home + "/.config/sluice/config.yaml";
}

}  // namespace config
}  // namespace sluice
