#include "source/server/ban_endpoints.h"

#include <optional>
#include <string_view>

#include "absl/strings/str_format.h"

#include "source/common/common/json.h"
#include "source/common/common/logger.h"
#include "source/common/network/address.h"

namespace sluice {
namespace server {

namespace {

AdminEndpoint::Response jsonError(int code, std::string_view message) {
  return AdminEndpoint::Response{code, absl::StrFormat("{\"error\":%s}\n", jsonQuoted(message)),
                                 true};
}

AdminEndpoint::Response listBans(ban::BanTable* table) {
  if (table == nullptr) {
    return AdminEndpoint::Response{200, "{\"enabled\":false,\"bans\":[],\"tracked\":0}\n", true};
  }
  std::string out = "{\"enabled\":true,\"bans\":[";
  bool first = true;
  for (const ban::BanTable::BanInfo& b : table->bans()) {
    // Rounded up: a ban still in force never shows 0.
    const int64_t seconds = (b.remaining.count() + 999) / 1000;
    absl::StrAppendFormat(&out,
                          "%s{\"address\":%s,\"failures\":%d,\"expires_in_seconds\":%d,"
                          "\"reason\":%s}",
                          first ? "" : ",", jsonQuoted(b.address), b.failures, seconds,
                          jsonQuoted(b.reason));
    first = false;
  }
  absl::StrAppendFormat(&out, "],\"tracked\":%d}\n", table->size());
  return AdminEndpoint::Response{200, std::move(out), true};
}

AdminEndpoint::Response unban(ban::BanTable* table,
                              const std::map<std::string, std::string>& query) {
  auto addr = query.find("addr");
  if (addr == query.end() || addr->second.empty()) {
    return jsonError(400, "use POST /bans/unban?addr=<ip address>");
  }
  std::string_view text = addr->second;
  std::string_view prefix_text;
  const size_t slash = text.find('/');
  if (slash != std::string_view::npos) {
    prefix_text = text.substr(slash + 1);
    text = text.substr(0, slash);
  }
  auto address = network::Address::parseIp(text, 0);
  if (!address.ok()) return jsonError(400, "addr: not an IPv4 or IPv6 address");
  if (table == nullptr) return jsonError(404, "bans are disabled (bans.disabled)");
  const ban::BanKey key = table->keyFor(*address);
  const ban::BanKey range = table->aggregateKeyFor(key);
  // "/64" (or the aggregate "/48") as /bans prints it is accepted; another length would name a
  // different range. Without a length, whichever ban covers the address is lifted.
  uint32_t prefix = 0;
  if (slash != std::string_view::npos) {
    if (prefix_text == std::to_string(key.prefix)) {
      prefix = key.prefix;
    } else if (range.family != 0 && prefix_text == std::to_string(range.prefix)) {
      prefix = range.prefix;
    } else if (range.family != 0) {
      return jsonError(
          400, absl::StrFormat("addr: bans are kept per /%d (and per /%d for aggregate bans) for "
                               "this address family",
                               key.prefix, range.prefix));
    } else {
      return jsonError(
          400, absl::StrFormat("addr: bans are kept per /%d for this address family", key.prefix));
    }
  }
  const std::optional<ban::BanKey> lifted = table->unban(*address, prefix);
  if (!lifted) {
    const ban::BanKey& named = prefix != 0 && prefix == range.prefix ? range : key;
    return jsonError(404, absl::StrFormat("%s is not banned", named.asString()));
  }
  SLUICE_LOG(Info, "admin: ban of %s lifted", lifted->asString());
  return AdminEndpoint::Response{
      200, absl::StrFormat("{\"unbanned\":%s}\n", jsonQuoted(lifted->asString())), true};
}

}  // namespace

void addBanEndpoints(std::function<std::shared_ptr<ban::BanTable>()> table,
                     std::map<std::string, AdminEndpoint>& extra) {
  AdminEndpoint list;
  list.help = "banned client addresses (JSON)";
  list.handler = [table](const std::map<std::string, std::string>&) {
    return listBans(table().get());
  };
  extra["/bans"] = std::move(list);

  AdminEndpoint lift;
  lift.method = AdminEndpoint::Method::Post;
  lift.help = "?addr=<ip>: lift the ban covering that address";
  lift.handler = [table](const std::map<std::string, std::string>& query) {
    return unban(table().get(), query);
  };
  extra["/bans/unban"] = std::move(lift);
}

}  // namespace server
}  // namespace sluice
