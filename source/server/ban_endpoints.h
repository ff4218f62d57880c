#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "source/common/ban/ban_table.h"
#include "source/server/admin.h"

namespace sluice {
namespace server {

// Adds the admin's view of the ban table (`table` returns the one in use, null when bans are
// disabled) to `extra`:
//   GET /bans: {"enabled":true,"bans":[{"address":"192.0.2.7","failures":5,
//              "expires_in_seconds":898,"reason":"invalid proxy credentials"}],"tracked":N}
//   POST /bans/unban?addr=<ip>[/<prefix>]: lifts the ban covering the address (an IPv6 address
//              stands for its banned prefix, or for the aggregate range banned whole around it;
//              with /<prefix>, the ban of exactly that length); 200 naming what was lifted, 404
//              when nothing was banned, 400 on a malformed address.
void addBanEndpoints(std::function<std::shared_ptr<ban::BanTable>()> table,
                     std::map<std::string, AdminEndpoint>& extra);

}  // namespace server
}  // namespace sluice
