// The network filter chain of a real server, in process: read filters see the client's bytes,
// write filters see what goes back, in reverse order, and may hold it back.
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "google/protobuf/empty.pb.h"

#include "source/common/extensions/registry.h"
#include "source/server/listener_config.h"
#include "source/server/server.h"

namespace sluice {
namespace {

// Terminal read filter: writes back whatever arrives.
class Echo : public network::ReadFilter {
 public:
  void initializeReadFilterCallbacks(network::ReadFilterCallbacks& cb) override { cb_ = &cb; }
  network::FilterStatus onData(buffer::Buffer& data, bool end_stream) override {
    cb_->connection().write(data, end_stream);
    if (end_stream) cb_->connection().close(network::CloseType::FlushWrite);
    return network::FilterStatus::StopIteration;
  }

 private:
  network::ReadFilterCallbacks* cb_ = nullptr;
};

// Appends a tag to everything written.
class Tag : public network::WriteFilter {
 public:
  explicit Tag(std::string tag) : tag_(std::move(tag)) {}
  network::FilterStatus onWrite(buffer::Buffer& data, bool) override {
    data.add(tag_);
    return network::FilterStatus::Continue;
  }

 private:
  std::string tag_;
};

// Holds written bytes back until a newline, then releases them at once.
class Lines : public network::WriteFilter {
 public:
  void initializeWriteFilterCallbacks(network::WriteFilterCallbacks& cb) override { cb_ = &cb; }
  network::FilterStatus onWrite(buffer::Buffer& data, bool end_stream) override {
    bool newline = data.linearize(data.length()).find('\n') != std::string_view::npos;
    held_.move(data);
    if (newline) cb_->injectWrite(held_, end_stream);
    return network::FilterStatus::StopIteration;
  }

 private:
  network::WriteFilterCallbacks* cb_ = nullptr;
  buffer::Buffer held_;
};

template <int kVariant>
class TestFactory : public extensions::NetworkFilterFactory {
 public:
  using Category = extensions::NetworkFilterFactory;
  std::string name() const override { return "test.echo" + std::to_string(kVariant); }
  std::unique_ptr<google::protobuf::Message> createEmptyConfig() const override {
    return std::make_unique<google::protobuf::Empty>();
  }
  absl::StatusOr<network::NetworkFilterFactoryCb> createFilterFactory(
      const google::protobuf::Message&, extensions::FactoryContext&) const override {
    return network::NetworkFilterFactoryCb([](network::FilterManager& m) {
      if (kVariant == 0) {
        m.addWriteFilter(std::make_unique<Tag>("A"));
        m.addWriteFilter(std::make_unique<Tag>("B"));
      } else {
        m.addWriteFilter(std::make_unique<Lines>());
      }
      m.addReadFilter(std::make_unique<Echo>());
    });
  }
};
using TagFactory = TestFactory<0>;
using LinesFactory = TestFactory<1>;
SLUICE_REGISTER_FACTORY(TagFactory);
SLUICE_REGISTER_FACTORY(LinesFactory);

uint16_t freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

std::string recvFor(int fd, size_t want) {
  std::string got;
  char buf[256];
  while (got.size() < want) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

class NetworkFiltersTest : public testing::Test {
 protected:
  void start(const std::string& filter) {
    port_ = freePort();
    config::v1::Bootstrap bootstrap;
    bootstrap.set_workers(1);
    bootstrap.mutable_drain_timeout()->set_seconds(2);
    auto* listener = bootstrap.add_listeners();
    listener->set_name("test");
    listener->set_address("127.0.0.1:" + std::to_string(port_));
    auto* f = listener->add_filter_chains()->add_filters();
    f->set_name(filter);
    f->mutable_typed_config()->PackFrom(google::protobuf::Empty());
    auto config = server::buildServerConfig(bootstrap);
    ASSERT_TRUE(config.ok()) << config.status();
    server_ = std::make_unique<server::Server>(*config);
    ASSERT_TRUE(server_->start().ok());
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    if (!server_) return;
    // The server drains on SIGTERM, as the real binary does.
    kill(getpid(), SIGTERM);
    thread_.join();
    server_.reset();
  }
  int connectClient() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    return fd;
  }

  uint16_t port_ = 0;
  std::unique_ptr<server::Server> server_;
  std::thread thread_;
};

TEST_F(NetworkFiltersTest, WriteFiltersRunInReverseOrder) {
  start("test.echo0");
  int fd = connectClient();
  ASSERT_EQ(send(fd, "x", 1, 0), 1);
  // Added A then B: the codec's output meets B first.
  EXPECT_EQ(recvFor(fd, 3), "xBA");
  close(fd);
}

TEST_F(NetworkFiltersTest, WriteFilterHoldsBackAndInjects) {
  start("test.echo1");
  int fd = connectClient();
  ASSERT_EQ(send(fd, "ab", 2, 0), 2);
  // Nothing comes back until a newline was written.
  char c;
  timeval short_wait{0, 300 * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &short_wait, sizeof(short_wait));
  EXPECT_EQ(recv(fd, &c, 1, 0), -1);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ASSERT_EQ(send(fd, "c\n", 2, 0), 2);
  EXPECT_EQ(recvFor(fd, 4), "abc\n");
  close(fd);
}

}  // namespace
}  // namespace sluice
