#include "source/common/ban/ban_config.h"

#include <algorithm>

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
  // Unset, the default never exceeds ipv6_prefix: a table banning per /40 aggregates nothing.
  options.ipv6_aggregate_prefix = proto.has_ipv6_aggregate_prefix()
                                      ? proto.ipv6_aggregate_prefix()
                                      : std::min(kDefaultIpv6AggregatePrefix, options.ipv6_prefix);
  if (options.ipv6_aggregate_prefix > options.ipv6_prefix) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bans.ipv6_aggregate_prefix: %d is longer than bans.ipv6_prefix (%d); use 0 to %d (0 or "
        "%d turns aggregation off)",
        options.ipv6_aggregate_prefix, options.ipv6_prefix, options.ipv6_prefix,
        options.ipv6_prefix));
  }
  if (options.ipv6_aggregate_prefix != 0 && options.ipv6_aggregate_prefix < kMinIpv6Prefix) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bans.ipv6_aggregate_prefix: %d is outside %d-%d (a shorter prefix would ban whole "
        "networks; 0 turns aggregation off)",
        options.ipv6_aggregate_prefix, kMinIpv6Prefix, options.ipv6_prefix));
  }
  if (proto.ipv6_aggregate_threshold() != 0) {
    options.ipv6_aggregate_threshold = proto.ipv6_aggregate_threshold();
  }
  if (options.ipv6_aggregate_prefix != 0 && options.ipv6_aggregate_prefix < options.ipv6_prefix) {
    // Blocks of ipv6_prefix in one aggregate range: a larger threshold could never be reached.
    const uint32_t bits = options.ipv6_prefix - options.ipv6_aggregate_prefix;
    const uint64_t blocks = bits >= 32 ? uint64_t{1} << 32 : uint64_t{1} << bits;
    const uint64_t most = std::min<uint64_t>(blocks, kMaxAggregateThresholdLimit);
    if (options.ipv6_aggregate_threshold > most) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "bans.ipv6_aggregate_threshold: at most %d (a /%d holds %d blocks of /%d)", most,
          options.ipv6_aggregate_prefix, blocks, options.ipv6_prefix));
    }
  } else if (options.ipv6_aggregate_threshold > kMaxAggregateThresholdLimit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bans.ipv6_aggregate_threshold: at most %d", kMaxAggregateThresholdLimit));
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
  stats.failures = store.counter("bans.failures", "Wrong keys recorded.");
  stats.banned = store.counter("bans.banned", "Bans started.");
  stats.aggregated = store.counter("bans.aggregated", "IPv6 ranges banned whole.");
  stats.evicted = store.counter("bans.evicted", "Ban table entries dropped at max_entries.");
  stats.evicted_failures = store.counter("bans.evicted_failures",
                                         "Addresses counting failures dropped for a newer entry.");
  stats.evicted_bans =
      store.counter("bans.evicted_bans", "Bans dropped, oldest first, for a newer ban.");
  stats.untracked =
      store.counter("bans.untracked", "Wrong keys not recorded: the table held nothing but bans.");
  stats.active = store.gauge("bans.active", "Bans in the table.");
  return std::make_shared<BanTable>(*options, stats);
}

}  // namespace ban
}  // namespace sluice
