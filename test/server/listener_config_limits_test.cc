#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/empty.pb.h"
#include "gtest/gtest.h"

#include "source/common/extensions/registry.h"
#include "source/server/listener_config.h"

namespace sluice {
namespace server {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A terminal network filter that does nothing: enough for a listener to build.
class NullCodecFactory : public extensions::NetworkFilterFactory {
 public:
  using Category = extensions::NetworkFilterFactory;
  std::string name() const override { return "test.null_codec"; }
  std::unique_ptr<google::protobuf::Message> createEmptyConfig() const override {
    return std::make_unique<google::protobuf::Empty>();
  }
  absl::StatusOr<network::NetworkFilterFactoryCb> createFilterFactory(
      const google::protobuf::Message&, extensions::FactoryContext&) const override {
    return network::NetworkFilterFactoryCb([](network::FilterManager&) {});
  }
};
SLUICE_REGISTER_FACTORY(NullCodecFactory);

config::v1::Bootstrap bootstrapWith(uint32_t max, uint32_t per_client,
                                    config::v1::ConnectionLimits::OverflowReply reply) {
  config::v1::Bootstrap b;
  config::v1::Listener* l = b.add_listeners();
  l->set_name("l");
  l->set_address("127.0.0.1:1");
  config::v1::Filter* f = l->add_filter_chains()->add_filters();
  f->set_name("test.null_codec");
  f->mutable_typed_config()->PackFrom(google::protobuf::Empty());
  l->mutable_connection_limits()->set_max_connections(max);
  l->mutable_connection_limits()->set_max_connections_per_client(per_client);
  l->mutable_connection_limits()->set_overflow_reply(reply);
  return b;
}

TEST(ServerConfigTest, MemoryReleaseIntervalDefaultsAndZeroTurnsItOff) {
  config::v1::Bootstrap b = bootstrapWith(0, 0, config::v1::ConnectionLimits::CLOSE);
  auto config = buildServerConfig(b);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ((*config)->memory_release_interval, std::chrono::seconds(10));
  b.mutable_memory_release_interval()->set_seconds(0);
  config = buildServerConfig(b);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ((*config)->memory_release_interval, std::chrono::milliseconds(0));
  b.mutable_memory_release_interval()->set_seconds(2);
  config = buildServerConfig(b);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ((*config)->memory_release_interval, std::chrono::seconds(2));
}

TEST(ServerConfigTest, CloseFlushTimeoutDefaultsAndItsBound) {
  config::v1::Bootstrap b = bootstrapWith(0, 0, config::v1::ConnectionLimits::CLOSE);
  auto config = buildServerConfig(b);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ((*config)->close_flush_timeout, std::chrono::seconds(10));
  b.mutable_close_flush_timeout()->set_nanos(250000000);
  config = buildServerConfig(b);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ((*config)->close_flush_timeout, std::chrono::milliseconds(250));
  b.mutable_close_flush_timeout()->set_seconds(3601);
  config = buildServerConfig(b);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(), "close_flush_timeout: at most 1h");
}

TEST(ServerConfigTest, IoUringIsOnUnlessDisabled) {
  config::v1::Bootstrap b = bootstrapWith(0, 0, config::v1::ConnectionLimits::CLOSE);
  auto config = buildServerConfig(b);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_TRUE((*config)->io_uring);
  b.set_disable_io_uring(true);
  config = buildServerConfig(b);
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_FALSE((*config)->io_uring);
}

TEST(ListenerConfigLimitsTest, DefaultsWhenUnset) {
  auto config = buildServerConfig(bootstrapWith(0, 0, config::v1::ConnectionLimits::CLOSE));
  ASSERT_TRUE(config.ok()) << config.status().message();
  const ListenerConfig& l = *(*config)->listeners[0];
  ASSERT_NE(l.limiter, nullptr);
  EXPECT_EQ(l.limiter->maxConnections(), 10000u);
  EXPECT_EQ(l.limiter->maxConnectionsPerClient(), 256u);
  EXPECT_EQ(l.overflow_reply, "");
}

TEST(ListenerConfigLimitsTest, PerClientIsCappedAtTheListenerLimit) {
  auto config = buildServerConfig(bootstrapWith(20, 0, config::v1::ConnectionLimits::CLOSE));
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ((*config)->listeners[0]->limiter->maxConnections(), 20u);
  EXPECT_EQ((*config)->listeners[0]->limiter->maxConnectionsPerClient(), 20u);
}

TEST(ListenerConfigLimitsTest, OutOfRangeNamesTheField) {
  auto config = buildServerConfig(bootstrapWith(20000000, 0, config::v1::ConnectionLimits::CLOSE));
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            "listeners[0].connection_limits.max_connections: 20000000 is out of range [1, "
            "10000000]");
  config = buildServerConfig(bootstrapWith(0, 4000000000u, config::v1::ConnectionLimits::CLOSE));
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(),
              HasSubstr("listeners[0].connection_limits.max_connections_per_client: "));
}

TEST(ListenerConfigLimitsTest, Http503ReplyIsAWholeResponse) {
  auto config = buildServerConfig(bootstrapWith(0, 0, config::v1::ConnectionLimits::HTTP_503));
  ASSERT_TRUE(config.ok()) << config.status().message();
  const std::string& reply = (*config)->listeners[0]->overflow_reply;
  EXPECT_THAT(reply, StartsWith("HTTP/1.1 503 Service Unavailable\r\n"));
  EXPECT_THAT(reply, HasSubstr("\r\nConnection: close\r\n"));
  EXPECT_THAT(reply, HasSubstr("\r\nProxy-Status: sluice; error=connection_limit_reached; "
                               "details=\"too many connections\"\r\n"));
  const size_t end = reply.find("\r\n\r\n");
  ASSERT_NE(end, std::string::npos);
  const std::string body = reply.substr(end + 4);
  EXPECT_THAT(reply, HasSubstr("\r\nContent-Length: " + std::to_string(body.size()) + "\r\n"));
  EXPECT_EQ(body, "503 Service Unavailable: too many connections\n");
  // Small enough for one non-blocking send into a fresh socket.
  EXPECT_LT(reply.size(), 512u);
}

}  // namespace
}  // namespace server
}  // namespace sluice
