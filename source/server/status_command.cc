#include "source/server/status_command.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

#include "source/common/common/json.h"
#include "source/server/admin_client.h"

namespace sluice {
namespace server {

namespace {

constexpr std::chrono::milliseconds kAdminTimeout{3000};

using google::protobuf::Struct;
using google::protobuf::Value;

absl::StatusOr<Struct> parseJson(std::string_view json, std::string_view what) {
  Struct out;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &out, options);
  if (!status.ok()) {
    return absl::DataLossError(
        absl::StrFormat("%s is not the JSON sluice writes: %s", what, status.ToString()));
  }
  return out;
}

int64_t number(const Struct& s, const char* field) {
  auto it = s.fields().find(field);
  if (it == s.fields().end() || it->second.kind_case() != Value::kNumberValue) return 0;
  return static_cast<int64_t>(it->second.number_value());
}

std::string string(const Struct& s, const char* field) {
  auto it = s.fields().find(field);
  if (it == s.fields().end() || it->second.kind_case() != Value::kStringValue) return "";
  return it->second.string_value();
}

std::string humanDuration(int64_t seconds) {
  const int64_t days = seconds / 86400, hours = seconds / 3600 % 24, minutes = seconds / 60 % 60;
  if (days > 0) return absl::StrFormat("%dd %dh %dm", days, hours, minutes);
  if (hours > 0) return absl::StrFormat("%dh %dm %ds", hours, minutes, seconds % 60);
  if (minutes > 0) return absl::StrFormat("%dm %ds", minutes, seconds % 60);
  return absl::StrFormat("%ds", seconds);
}

absl::StatusOr<std::string> fetch(const network::Address& admin, const char* path) {
  auto answer = adminGet(admin, path, kAdminTimeout);
  if (!answer.ok()) return answer.status();
  if (answer->code != 200) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the admin endpoint at %s answered %d to GET %s: %s", adminDialAddress(admin).asString(),
        answer->code, path, answer->body.substr(0, 200)));
  }
  return std::move(answer->body);
}

}  // namespace

absl::StatusOr<InstanceStatus> parseInstanceStatus(std::string_view server_info,
                                                   std::string_view listeners,
                                                   std::string_view stats_text,
                                                   std::string_view bans) {
  InstanceStatus out;
  auto info = parseJson(server_info, "GET /server_info");
  if (!info.ok()) return info.status();
  out.version = string(*info, "version");
  out.state = string(*info, "state");
  out.uptime_seconds = number(*info, "uptime_seconds");
  out.workers = number(*info, "workers");
  out.config_version = number(*info, "config_version");
  out.active_connections = number(*info, "active_connections");
  if (out.version.empty() || out.state.empty()) {
    return absl::DataLossError("GET /server_info has no version or state: is this sluice?");
  }

  auto listing = parseJson(listeners, "GET /listeners");
  if (!listing.ok()) return listing.status();
  auto it = listing->fields().find("listeners");
  if (it != listing->fields().end() && it->second.has_list_value()) {
    for (const Value& v : it->second.list_value().values()) {
      if (!v.has_struct_value()) continue;
      out.listeners.push_back(
          {string(v.struct_value(), "name"), string(v.struct_value(), "address")});
    }
  }

  // "name: value" lines.
  const absl::string_view stats_lines(stats_text.data(), stats_text.size());
  for (absl::string_view line : absl::StrSplit(stats_lines, '\n', absl::SkipEmpty())) {
    const size_t colon = line.rfind(": ");
    int64_t value = 0;
    if (colon == absl::string_view::npos || !absl::SimpleAtoi(line.substr(colon + 2), &value)) {
      continue;
    }
    const absl::string_view name = line.substr(0, colon);
    if (absl::StartsWith(name, "tunnel.listener.") && absl::EndsWith(name, ".tunnels_active")) {
      out.tunnels_active += value;
    } else if (name == "request_record.total") {
      out.requests_total = value;
    } else if (name == "upstream.client_limit_refused") {
      out.budget_client_refused = value;
    } else if (name == "upstream.descriptor_reserve_refused") {
      out.budget_reserve_refused = value;
    }
  }

  auto ban_list = parseJson(bans, "GET /bans");
  if (!ban_list.ok()) return ban_list.status();
  auto enabled = ban_list->fields().find("enabled");
  out.bans_enabled = enabled != ban_list->fields().end() && enabled->second.bool_value();
  auto entries = ban_list->fields().find("bans");
  if (entries != ban_list->fields().end() && entries->second.has_list_value()) {
    out.bans = entries->second.list_value().values_size();
  }
  return out;
}

absl::StatusOr<InstanceStatus> queryInstanceStatus(const network::Address& admin) {
  auto info = fetch(admin, "/server_info");
  if (!info.ok()) return info.status();
  auto listeners = fetch(admin, "/listeners");
  if (!listeners.ok()) return listeners.status();
  auto stats = fetch(admin, "/stats");
  if (!stats.ok()) return stats.status();
  auto bans = fetch(admin, "/bans");
  if (!bans.ok()) return bans.status();
  auto status = parseInstanceStatus(*info, *listeners, *stats, *bans);
  if (status.ok()) status->admin_address = adminDialAddress(admin).asString();
  return status;
}

std::string renderStatusText(const InstanceStatus& s) {
  std::string out = absl::StrFormat("sluice %s, admin endpoint %s\n", s.version, s.admin_address);
  absl::StrAppendFormat(&out, "  state:            %s\n", s.state);
  absl::StrAppendFormat(&out, "  uptime:           %s (%d s)\n", humanDuration(s.uptime_seconds),
                        s.uptime_seconds);
  absl::StrAppendFormat(&out, "  workers:          %d\n", s.workers);
  absl::StrAppendFormat(&out, "  config version:   %d\n", s.config_version);
  if (s.listeners.empty()) absl::StrAppendFormat(&out, "  listeners:        none\n");
  for (size_t i = 0; i < s.listeners.size(); ++i) {
    absl::StrAppendFormat(&out, "  %-17s %-10s %s\n", i == 0 ? "listeners:" : "",
                          s.listeners[i].name, s.listeners[i].address);
  }
  absl::StrAppendFormat(&out, "  connections:      %d open\n", s.active_connections);
  absl::StrAppendFormat(&out, "  tunnels:          %d active\n", s.tunnels_active);
  absl::StrAppendFormat(&out, "  requests:         %d served\n", s.requests_total);
  absl::StrAppendFormat(&out,
                        "  budget refusals:  %d (per-client limit %d, descriptor reserve %d)\n",
                        s.budget_client_refused + s.budget_reserve_refused, s.budget_client_refused,
                        s.budget_reserve_refused);
  if (s.bans_enabled) {
    absl::StrAppendFormat(&out, "  bans:             %d\n", s.bans);
  } else {
    absl::StrAppendFormat(&out, "  bans:             disabled\n");
  }
  return out;
}

std::string renderStatusJson(const InstanceStatus& s) {
  std::string listeners;
  for (const InstanceStatus::Listener& l : s.listeners) {
    absl::StrAppendFormat(&listeners, "%s{\"name\":%s,\"address\":%s}",
                          listeners.empty() ? "" : ",", jsonQuoted(l.name), jsonQuoted(l.address));
  }
  return absl::StrFormat(
      "{\"admin_address\":%s,\"version\":%s,\"uptime_seconds\":%d,\"state\":%s,"
      "\"workers\":%d,\"config_version\":%d,\"listeners\":[%s],\"active_connections\":%d,"
      "\"tunnels_active\":%d,"
      "\"requests_total\":%d,\"upstream_budget_refused\":%d,"
      "\"upstream_client_limit_refused\":%d,\"upstream_descriptor_reserve_refused\":%d,"
      "\"bans_enabled\":%s,\"bans\":%d}\n",
      jsonQuoted(s.admin_address), jsonQuoted(s.version), s.uptime_seconds, jsonQuoted(s.state),
      s.workers, s.config_version, listeners, s.active_connections, s.tunnels_active,
      s.requests_total, s.budget_client_refused + s.budget_reserve_refused, s.budget_client_refused,
      s.budget_reserve_refused, s.bans_enabled ? "true" : "false", s.bans);
}

}  // namespace server
}  // namespace sluice
