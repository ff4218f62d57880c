#include "source/common/upstream/request_record.h"

#include <string>

#include "gtest/gtest.h"

#include "source/common/stats/stats.h"

namespace sluice {
namespace upstream {
namespace {

event::MonotonicTime now() { return std::chrono::steady_clock::now(); }
uint64_t total() { return stats::Store::get().counterValue("request_record.total"); }
uint64_t denied() { return stats::Store::get().counterValue("request_record.denied"); }

// A request's times are the readings its codec passes (the turn's), never a clock of the
// trace's own: from begin's to end's, and the first byte's in between.
TEST(RequestTrace, TimesAreTheReadingsItIsGiven) {
  const auto hist = requestDurationHistogram("times", proxy::Protocol::Http1);
  auto sum = [] {
    return stats::Store::get()
        .histogramValue("request.times.http1.duration_seconds")
        .value_or(stats::Store::HistogramValue{})
        .sum_micros;
  };
  const uint64_t before = sum();
  const event::MonotonicTime start = now() - std::chrono::hours(1);
  RequestTrace trace;
  trace.begin(start, proxy::Protocol::Http1, "GET", "example.com", 80, nullptr);
  trace.firstByte(start + std::chrono::microseconds(700));
  const RequestRecord r = trace.record("l", start + std::chrono::microseconds(1500));
  EXPECT_EQ(r.first_byte, std::chrono::microseconds(700));
  EXPECT_EQ(r.total, std::chrono::microseconds(1500));
  trace.end(start + std::chrono::microseconds(2500), "times", hist);
  EXPECT_EQ(sum(), before + 2500);
}

TEST(RequestTrace, EmitsOnceAfterEachBegin) {
  RequestTrace trace;
  const uint64_t before = total();
  trace.end(now(), "l");  // nothing began
  EXPECT_EQ(total(), before);
  trace.begin(now(), proxy::Protocol::Http1, "GET", "example.com", 80, nullptr);
  EXPECT_TRUE(trace.open());
  trace.end(now(), "l");
  trace.end(now(), "l");
  EXPECT_EQ(total(), before + 1);
  EXPECT_FALSE(trace.open());
  trace.begin(now(), proxy::Protocol::Http2, "GET", "example.com", 80, nullptr);
  trace.end(now(), "l");
  EXPECT_EQ(total(), before + 2);
}

TEST(RequestTrace, EndAddsTheDurationToTheListenersHistogram) {
  const stats::Histogram h1 = requestDurationHistogram("hist", proxy::Protocol::Http1);
  const stats::Histogram socks = requestDurationHistogram("hist", proxy::Protocol::Socks5);
  // Per listener and protocol; the same pair is the same histogram.
  EXPECT_EQ(requestDurationHistogram("hist", proxy::Protocol::Http1).index, h1.index);
  EXPECT_NE(socks.index, h1.index);
  auto count = [](const char* name) {
    return stats::Store::get()
        .histogramValue(name)
        .value_or(stats::Store::HistogramValue{})
        .count();
  };
  const uint64_t before = count("request.hist.http1.duration_seconds");
  RequestTrace trace;
  trace.end(now(), "hist", h1);  // nothing began
  trace.begin(now(), proxy::Protocol::Http1, "GET", "example.com", 80, nullptr);
  trace.end(now(), "hist", h1);
  trace.end(now(), "hist", h1);
  EXPECT_EQ(count("request.hist.http1.duration_seconds"), before + 1);
  EXPECT_EQ(count("request.hist.socks5.duration_seconds"), 0u);
  const std::string prometheus = stats::Store::get().renderPrometheus("request.hist.");
  EXPECT_NE(prometheus.find("# TYPE sluice_request_duration_seconds histogram\n"),
            std::string::npos)
      << prometheus;
  EXPECT_NE(prometheus.find("sluice_request_duration_seconds_count{listener=\"hist\","
                            "protocol=\"http1\"} " +
                            std::to_string(before + 1) + "\n"),
            std::string::npos)
      << prometheus;
}

TEST(RequestTrace, FirstFailureWinsAndCountsAsDenied) {
  RequestTrace trace;
  const uint64_t before = denied();
  trace.begin(now(), proxy::Protocol::Socks5, "connect", "h", 1, nullptr);
  trace.fail("first reason", FailureKind::Refused);
  trace.fail("second reason", FailureKind::Timeout);
  const RequestRecord r = trace.record("l", now());
  EXPECT_EQ(r.denial, "first reason");
  EXPECT_EQ(r.failure, FailureKind::Refused);
  EXPECT_EQ(r.method, "connect");
  EXPECT_EQ(r.host, "h");
  trace.end(now(), "l");
  EXPECT_EQ(denied(), before + 1);
}

TEST(RequestTrace, KeepsAMethodItDoesNotKnowAndResetsOnBegin) {
  RequestTrace trace;
  trace.begin(now(), proxy::Protocol::Http1, "PROPFIND", "example.com", 80, nullptr);
  trace.fail("refused");
  RequestRecord r = trace.record("l", now());
  EXPECT_EQ(r.method, "PROPFIND");
  EXPECT_EQ(r.host, "example.com");
  EXPECT_EQ(r.denial, "refused");
  trace.end(now(), "l");
  trace.begin(now(), proxy::Protocol::Http1, "GET", "b.example", 80, nullptr);
  trace.setStatus(200);
  trace.addBytes(10, 20);
  r = trace.record("l", now());
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.host, "b.example");
  EXPECT_EQ(r.denial, "");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.bytes_to_origin, 10u);
  EXPECT_EQ(r.bytes_from_origin, 20u);
  EXPECT_EQ(r.first_byte.count(), -1);
}

TEST(RequestTrace, CarriesTheProxyStatusErrorOfItsOwnAnswerOnly) {
  RequestTrace trace;
  trace.begin(now(), proxy::Protocol::Http1, "GET", "example.com", 80, nullptr);
  trace.setStatus(403);
  trace.setProxyStatusError("destination_ip_prohibited");
  RequestRecord r = trace.record("l", now());
  EXPECT_EQ(r.proxy_status_error, "destination_ip_prohibited");
  trace.end(now(), "l");
  // An origin's answer on the next request carries none.
  trace.begin(now(), proxy::Protocol::Http1, "GET", "example.com", 80, nullptr);
  trace.setStatus(403);
  r = trace.record("l", now());
  EXPECT_EQ(r.proxy_status_error, "");
  trace.end(now(), "l");
}

TEST(RequestTrace, RecordsTheClientConnectionsAddress) {
  // The trace points at the client connection's address (the connection outlives the record).
  network::Address client = *network::Address::parseHostPort("192.0.2.7:40000");
  RequestTrace trace;
  trace.begin(now(), proxy::Protocol::Socks5, "connect", "h", 1, &client);
  RequestRecord r = trace.record("l", now());
  EXPECT_EQ(r.client, client);
  EXPECT_NE(formatRecord(r).find(" client=192.0.2.7:40000 "), std::string::npos) << formatRecord(r);
  trace.end(now(), "l");
  // A request begun without one has none.
  trace.begin(now(), proxy::Protocol::Socks5, "connect", "h", 1, nullptr);
  r = trace.record("l", now());
  EXPECT_EQ(r.client, network::Address());
  trace.end(now(), "l");
}

TEST(RequestTrace, MovesTheRequestInFlightAndLeavesItsSourceClosed) {
  // A connection that becomes a tunnel hands its request over: one record, from the new trace.
  RequestTrace trace;
  trace.begin(now(), proxy::Protocol::Http1, "CONNECT", "a-host-name-longer-than-sso.example", 443,
              nullptr);
  trace.setStatus(200);
  trace.addBytes(5, 7);
  const uint64_t before = total();
  RequestTrace moved(std::move(trace));
  EXPECT_FALSE(trace.open());  // NOLINT(bugprone-use-after-move): the moved-from state is defined
  EXPECT_TRUE(moved.open());
  trace.end(now(), "l");
  EXPECT_EQ(total(), before) << "the trace moved from emits nothing";
  const RequestRecord r = moved.record("l", now());
  EXPECT_EQ(r.host, "a-host-name-longer-than-sso.example");
  EXPECT_EQ(r.method, "CONNECT");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.bytes_to_origin, 5u);
  EXPECT_EQ(r.bytes_from_origin, 7u);
  moved.end(now(), "l");
  EXPECT_EQ(total(), before + 1);
}

TEST(RequestRecord, FormatsEveryFieldAndQuotesSpaces) {
  RequestRecord r;
  r.protocol = proxy::Protocol::Http2;
  r.listener = "edge";
  r.method = "PROPFIND";
  r.host = "::1";
  r.port = 8080;
  r.status = 502;
  r.bytes_to_origin = 10;
  r.bytes_from_origin = 20;
  r.connect = std::chrono::microseconds(7);
  r.denial = "origin said \"no\"";
  r.failure = FailureKind::Reset;
  EXPECT_EQ(formatRecord(r),
            "request protocol=http2 listener=edge key=- client=- method=PROPFIND "
            "target=[::1]:8080 status=502 bytes_to_origin=10 bytes_from_origin=20 resolve_us=- "
            "connect_us=7 first_byte_us=- total_us=0 upstream=- failure=reset "
            "denial=\"origin said \\\"no\\\"\"");
}

}  // namespace
}  // namespace upstream
}  // namespace sluice
