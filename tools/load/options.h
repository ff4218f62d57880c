// sluice-load's command line: the options, and their parsing (gosst's and wrk's forms).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/load/url.h"

namespace sluice {
namespace load {

enum class Workload { Http, WebSocket, TunnelUp, TunnelDown, Hold };

struct Options {
  int threads = 1;
  int connections = 1;
  uint64_t requests = 0;  // -n: total, 0 = by duration
  double duration_s = 0;  // -d
  double rate = 0;        // --rate: requests/s in total, 0 = closed loop
  double timeout_s = 10;  // per request (and per connection setup)
  bool new_conn = false;
  bool force_connect = false;
  bool no_resume = false;
  bool json = false;
  bool quiet = false;
  std::string method;  // default GET, or POST with a body
  std::vector<std::string> headers;
  uint64_t body_bytes = 0;
  Url dst;
  Proxy proxy;
  std::string ca, crt, key, proxy_ca;
  Workload workload = Workload::Http;
  uint64_t ws_size = 128;
  uint64_t ws_count = 0;    // messages per connection, 0 = no limit
  bool ws_one_way = false;  // each message answered by an empty one (sluice-origin's /ws/sink)
  uint64_t tunnel_bytes = 0;
  uint64_t hold = 0;
  uint64_t hold_window = 0;  // --hold-window: held tunnels opening at once, in total; 0 = all
  int h2_conns = 0;  // HTTP/2 to the proxy: connections per thread the streams share (0 = 1)
};

// "100", "1.5k", "2M", "64KiB" ... into out; false when the text is not a count.
bool parseCount(const char* text, uint64_t& out);
// "10", "10s", "500ms", "2m", "1h" into seconds.
bool parseDuration(const char* text, double& out);

extern const char kUsage[];

// Fills o from the command line; false with a message in error (empty for --help).
bool parseArgs(int argc, char** argv, Options& o, std::string& error);

}  // namespace load
}  // namespace sluice
