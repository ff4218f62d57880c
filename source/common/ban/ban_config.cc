#include "source/common/ban/ban_config.h"

#include "absl/strings/str_format.h"

#include "source/common/common/duration.h"

namespace sluice {
namespace ban {

namespace {

// A day-long window or a year-long ban is a policy; beyond that it is a typo (and the table
// would hold the entries for that long).
constexpr std::chrono::milliseconds kMaxWindow = std::chrono::hours(24);
constexpr std::chrono::milliseconds kMaxDuration = std::chrono::hours(24 * 365);

absl::Status checkDuration(const char* field, const google::protobuf::Duration& d,
                           std::chrono::milliseconds max) {
  if (d.seconds() < 0 || d.nanos() < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("bans.%s: must not be negative", field));
  }
  if (d.seconds() > max.count() / 1000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bans.%s: at most %ds", field, static_cast<int64_t>(max.count() / 1000)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BanOptions> banOptionsFromProto(const config::v1::Bans& proto) {
  BanOptions options;
  if (proto.max_failures() != 0) options.max_failures = proto.max_failures();
  if (options.max_failures > kMaxFailuresLimit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bans.max_failures: at most %d", kMaxFailuresLimit));
  }
  if (proto.ipv6_prefix() != 0) options.ipv6_prefix = proto.ipv6_prefix();
  if (options.ipv6_prefix < kMinIpv6Prefix || options.ipv6_prefix > 128) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bans.ipv6_prefix: %d is outside %d-128 (a shorter prefix would ban whole networks)",
        options.ipv6_prefix, kMinIpv6Prefix));
  }
  if (proto.max_entries() != 0) options.max_entries = proto.max_entries();
  if (options.max_entries > kMaxEntriesLimit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bans.max_entries: at most %d", kMaxEntriesLimit));
  }
  absl::Status status = checkDuration("window", proto.window(), kMaxWindow);
  if (!status.ok()) return status;
  status = checkDuration("duration", proto.duration(), kMaxDuration);
  if (!status.ok()) return status;
  options.window = durationOr(proto.has_window(), proto.window(), options.window);
  options.duration = durationOr(proto.has_duration(), proto.duration(), options.duration);
  return options;
}

absl::StatusOr<std::shared_ptr<BanTable>> createBanTable(const config::v1::Bans& proto) {
  auto options = banOptionsFromProto(proto);
  if (!options.ok()) return options.status();
  if (proto.disabled()) return std::shared_ptr<BanTable>();
  stats::Store& store = stats::Store::get();
  BanStats stats;
  stats.failures = store.counter("bans.failures");
  stats.banned = store.counter("bans.banned");
  stats.evicted = store.counter("bans.evicted");
  stats.active = store.gauge("bans.active");
  return std::make_shared<BanTable>(*options, stats);
}

}  // namespace ban
}  // namespace sluice
