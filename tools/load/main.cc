// sluice-load: a proxy-aware HTTP load generator.
//
// One epoll loop per thread (-t, Worker), each owning its share of the -c connections. Every
// connection (Conn) is a small state machine: TCP connect -> [TLS to the proxy] -> [SOCKS5 |
// CONNECT] -> [TLS to the destination] -> [WebSocket upgrade] -> requests. A request is one
// write of a request built once at start-up (Shared) and, in the steady state, one read of the
// response, parsed in place and never stored. Counts and histograms are per thread (Results)
// and merged at the end for the report.
//
// With HTTP/2 to the proxy, the connections of a thread are streams on a few shared sessions
// (H2Session, nghttp2): a plain request per stream, or a CONNECT stream whose bytes feed the
// same state machine (and BoringSSL, for TLS to the destination) through in-memory pipes.
//
// See docs/loadgen.md for the flags, the report and the coordinated-omission correction.

#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "tools/load/options.h"
#include "tools/load/report.h"
#include "tools/load/results.h"
#include "tools/load/shared.h"
#include "tools/load/worker.h"

namespace sluice {
namespace load {
namespace {

void onSignal(int) { g_interrupted.store(true); }

int run(int argc, char** argv) {
  Options o;
  std::string error;
  if (!parseArgs(argc, argv, o, error)) {
    if (!error.empty()) fprintf(stderr, "sluice-load: %s\n", error.c_str());
    fputs(kUsage, stderr);
    return error.empty() ? 0 : 2;
  }
  signal(SIGPIPE, SIG_IGN);
  // Thousands of connections (--hold, large -c) need descriptors: take the hard limit.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  Shared s;
  if (!buildShared(o, s, error)) {
    fprintf(stderr, "sluice-load: %s\n", error.c_str());
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  // Closed loop with -c connections can hold at most -c requests: no more tickets than -n.
  s.start_ns = nowNs();
  if (o.duration_s > 0) s.end_ns = s.start_ns + static_cast<uint64_t>(o.duration_s * 1e9);
  std::vector<std::unique_ptr<Worker>> workers;
  int first = 0;
  for (int t = 0; t < o.threads; ++t) {
    const int conns = o.connections / o.threads + (t < o.connections % o.threads ? 1 : 0);
    uint64_t quota = 0;
    if (o.requests > 0) {
      quota = o.requests / o.threads + (static_cast<uint64_t>(t) < o.requests % o.threads ? 1 : 0);
    }
    // --hold-window is a total too: each thread opens its share of the tunnels that many at a
    // time (parseArgs keeps -t at most the window, so every share is at least 1).
    uint64_t window = 0;
    if (o.hold_window > 0) {
      window = o.hold_window / o.threads +
               (static_cast<uint64_t>(t) < o.hold_window % o.threads ? 1 : 0);
    }
    workers.push_back(std::make_unique<Worker>(s, t, first, conns, quota, window));
    first += conns;
  }
  std::vector<std::thread> threads;
  for (auto& w : workers) {
    threads.emplace_back([&w] { w->run(); });
  }
  const bool progress = !o.quiet && isatty(2);
  uint64_t last_print = s.start_ns;
  uint64_t last_done = 0;
  for (;;) {
    bool all = true;
    for (auto& w : workers) all = all && w->finished_.load();
    if (all) break;
    usleep(20000);
    const uint64_t now = nowNs();
    if (progress && now - last_print >= 1000000000ull) {
      uint64_t done = 0;
      for (auto& w : workers) done += w->completed_.load(std::memory_order_relaxed);
      fprintf(stderr, "\r[%6.1fs] %" PRIu64 " done, %.0f/s      ", (now - s.start_ns) / 1e9, done,
              (done - last_done) * 1e9 / (now - last_print));
      last_print = now;
      last_done = done;
    }
  }
  for (auto& t : threads) t.join();
  if (progress) fputs("\r\033[K", stderr);
  Results total;
  for (auto& w : workers) total.merge(w->results());
  const uint64_t end = total.end_ns > s.start_ns ? total.end_ns : nowNs();
  const double elapsed = (end - s.start_ns) / 1e9;
  if (o.json) {
    printJson(o, s, total, elapsed);
  } else {
    printText(o, s, total, elapsed);
  }
  fflush(stdout);
  return total.ok + total.failed == 0 && o.workload != Workload::Hold ? 1 : 0;
}

}  // namespace
}  // namespace load
}  // namespace sluice

int main(int argc, char** argv) { return sluice::load::run(argc, argv); }
