#pragma once

#include <memory>

#include "absl/status/statusor.h"

#include "api/sluice/config/v1/bootstrap.pb.h"
#include "source/common/ban/ban_table.h"

namespace sluice {
namespace ban {

// Limits on Bootstrap.bans beyond which a value is a mistake rather than a policy.
inline constexpr uint32_t kMaxFailuresLimit = 1000;
inline constexpr uint32_t kMinIpv6Prefix = 16;
inline constexpr uint32_t kMaxEntriesLimit = 10000000;
inline constexpr uint32_t kDefaultIpv6AggregatePrefix = 48;
inline constexpr uint32_t kMaxAggregateThresholdLimit = 1000;

// The options Bootstrap.bans asks for, defaults filled in; errors name the field ("bans.window").
absl::StatusOr<BanOptions> banOptionsFromProto(const config::v1::Bans& proto);

// The process's ban table with its "bans.*" stats, or null when bans.disabled is set.
absl::StatusOr<std::shared_ptr<BanTable>> createBanTable(const config::v1::Bans& proto);

}  // namespace ban
}  // namespace sluice
