#include "source/common/tls/tls_socket.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <signal.h>
#include <sys/ioctl.h>

#include "gtest/gtest.h"
#include "openssl/ec_key.h"
#include "openssl/evp.h"
#include "openssl/pem.h"
#include "openssl/x509.h"
#include "openssl/x509v3.h"

#include "source/common/network/connection.h"
#include "source/common/network/handshake_gate.h"
#include "source/common/stats/stats.h"
#include "source/common/tls/context.h"
#include "test/common/network/loopback.h"

namespace sluice {
namespace tls {
namespace {

using network::ConnectionEvent;
using network::TransportFailure;
using std::chrono::milliseconds;

// A key and a certificate made here: a CA (self-signed) or a leaf signed by one.
struct Credential {
  bssl::UniquePtr<EVP_PKEY> key;
  bssl::UniquePtr<X509> cert;
};

bssl::UniquePtr<EVP_PKEY> newKey() {
  bssl::UniquePtr<EC_KEY> ec(EC_KEY_new_by_curve_name(NID_X9_62_prime256v1));
  EXPECT_TRUE(EC_KEY_generate_key(ec.get()));
  bssl::UniquePtr<EVP_PKEY> key(EVP_PKEY_new());
  EVP_PKEY_assign_EC_KEY(key.get(), ec.release());
  return key;
}

void addExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  bssl::UniquePtr<X509_EXTENSION> ext(X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value));
  ASSERT_NE(ext, nullptr) << value;
  X509_add_ext(cert, ext.get(), -1);
}

// issuer null: a self-signed CA. Else a server certificate for `names` (a subjectAltName).
Credential makeCertificate(const char* cn, const Credential* issuer, const char* names) {
  static long serial = 1;
  Credential c{newKey(), bssl::UniquePtr<X509>(X509_new())};
  X509* x = c.cert.get();
  X509_set_version(x, X509_VERSION_3);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400);
  X509_set_pubkey(x, c.key.get());
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const uint8_t*>(cn), -1, -1,
                             0);
  X509* signer = issuer != nullptr ? issuer->cert.get() : x;
  X509_set_issuer_name(x, X509_get_subject_name(signer));
  if (issuer == nullptr) {
    addExtension(x, signer, NID_basic_constraints, "critical,CA:TRUE");
    addExtension(x, signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    addExtension(x, signer, NID_basic_constraints, "critical,CA:FALSE");
    addExtension(x, signer, NID_subject_alt_name, names);
  }
  EXPECT_TRUE(X509_sign(x, issuer != nullptr ? issuer->key.get() : c.key.get(), EVP_sha256()));
  return c;
}

std::string writePem(const std::string& name, const X509* cert, const EVP_PKEY* key) {
  const std::string path = testing::TempDir() + "/" + name;
  bssl::UniquePtr<BIO> bio(BIO_new_file(path.c_str(), "w"));
  if (cert != nullptr) PEM_write_bio_X509(bio.get(), const_cast<X509*>(cert));
  if (key != nullptr) {
    PEM_write_bio_PrivateKey(bio.get(), const_cast<EVP_PKEY*>(key), nullptr, nullptr, 0, nullptr,
                             nullptr);
  }
  return path;
}

class TlsSocketTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Once for the process: the suites deriving from this one run it again.
    if (ca_file_ != nullptr) return;
    Credential ca = makeCertificate("sluice unit test CA", nullptr, nullptr);
    Credential other = makeCertificate("another CA", nullptr, nullptr);
    Credential server = makeCertificate("parent", &ca, "DNS:parent.test,IP:127.0.0.1");
    ca_file_ = new std::string(writePem("ca.pem", ca.cert.get(), nullptr));
    other_ca_file_ = new std::string(writePem("other-ca.pem", other.cert.get(), nullptr));
    cert_file_ = new std::string(writePem("server.pem", server.cert.get(), nullptr));
    key_file_ = new std::string(writePem("server.key", nullptr, server.key.get()));
  }

  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    ASSERT_TRUE(listener_.ok());
    ServerContextConfig config;
    config.certificates.push_back({*cert_file_, *key_file_});
    config.alpn = {"http/1.1"};
    config.stats_scope = stats::Scope("tls_test_server");
    auto server = ServerContext::create(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_context_ = *server;
  }

  void TearDown() override {
    client_.reset();
    server_.reset();
    test::runFor(dispatcher_, milliseconds(1));
  }

  // A client context toward the test server; `scope` names its stats.
  ClientContextSharedPtr clientContext(const std::string& server_name, const std::string& scope,
                                       const std::string* ca = ca_file_) {
    ClientContextConfig config;
    config.ca_file = *ca;
    config.server_name = server_name;
    config.alpn = {"http/1.1"};
    config.stats_scope = stats::Scope(scope);
    auto context = ClientContext::create(config);
    EXPECT_TRUE(context.ok()) << context.status();
    return context.ok() ? *context : nullptr;
  }

  // Connects a client with TLS to the listener, whose accepted socket is served by the TLS
  // server side (or left raw with `tls_server` false: the peer then writes `raw_answer`).
  void connect(const ClientContextSharedPtr& context, bool tls_server = true,
               const std::string& raw_answer = "", network::HandshakeGate* gate = nullptr) {
    client_cb_ = test::RecordingCallbacks();
    server_cb_ = test::RecordingCallbacks();
    client_ = network::Connection::connectTo(dispatcher_, listener_.address());
    ASSERT_NE(client_, nullptr);
    client_->setCallbacks(&client_cb_);
    client_->setTransportSocket(std::make_unique<TlsSocket>(context));
    int fd = listener_.accept();
    ASSERT_GE(fd, 0);
    if (!tls_server) {
      raw_ = std::make_unique<test::RawPeer>(fd);
      raw_->send(raw_answer);
      raw_->shutWrite();
      return;
    }
    server_ = std::make_unique<network::Connection>(dispatcher_, fd, listener_.address());
    server_->setCallbacks(&server_cb_);
    auto transport = std::make_unique<TlsSocket>(server_context_);
    if (gate != nullptr) transport->setHandshakeGate(*gate);
    server_->setTransportSocket(std::move(transport));
  }

  bool waitForEvent() {
    return test::runUntil(dispatcher_, [&] { return !client_cb_.events.empty(); });
  }

  void send(network::Connection& conn, const std::string& s) {
    buffer::Buffer b;
    b.add(s);
    conn.write(b);
  }

  uint64_t counter(const std::string& name) { return stats::Store::get().counterValue(name); }

  static std::string* ca_file_;
  static std::string* other_ca_file_;
  static std::string* cert_file_;
  static std::string* key_file_;

  event::Dispatcher dispatcher_;
  test::LoopbackListener listener_;
  ServerContextSharedPtr server_context_;
  test::RecordingCallbacks client_cb_;
  test::RecordingCallbacks server_cb_;
  network::ConnectionPtr client_;
  network::ConnectionPtr server_;
  std::unique_ptr<test::RawPeer> raw_;
};

std::string* TlsSocketTest::ca_file_ = nullptr;
std::string* TlsSocketTest::other_ca_file_ = nullptr;
std::string* TlsSocketTest::cert_file_ = nullptr;
std::string* TlsSocketTest::key_file_ = nullptr;

TEST_F(TlsSocketTest, ConnectedComesOnceTheHandshakeIsDone) {
  ClientContextSharedPtr context = clientContext("parent.test", "tls_test_connected");
  connect(context);
  // Written before Connected: it waits for the handshake, then leaves encrypted.
  send(*client_, "early bytes");
  std::string alpn_at_connected;  // known once the handshake is done
  client_cb_.on_event = [&](ConnectionEvent e) {
    if (e == ConnectionEvent::Connected) {
      alpn_at_connected = std::string(client_->applicationProtocol());
      EXPECT_FALSE(client_->connecting());
    }
  };
  EXPECT_TRUE(client_->connecting());
  ASSERT_TRUE(waitForEvent());
  ASSERT_EQ(client_cb_.events[0], ConnectionEvent::Connected);
  EXPECT_EQ(alpn_at_connected, "http/1.1");
  EXPECT_EQ(client_->transportFailure().kind, TransportFailure::Kind::None);
  ASSERT_TRUE(test::runUntil(dispatcher_, [&] { return server_cb_.received == "early bytes"; }));
  send(*server_, "answer");
  ASSERT_TRUE(test::runUntil(dispatcher_, [&] { return client_cb_.received == "answer"; }));
  EXPECT_EQ(counter("tls_test_connected.handshakes"), 1u);
  EXPECT_EQ(counter("tls_test_connected.handshakes_resumed"), 0u);
  // The splice path is for plain TCP only.
  EXPECT_FALSE(client_->rawCapable());
}

TEST_F(TlsSocketTest, AnIpAddressIsCheckedAgainstTheCertificatesAddresses) {
  connect(clientContext("127.0.0.1", "tls_test_ip"));
  ASSERT_TRUE(waitForEvent());
  EXPECT_EQ(client_cb_.events[0], ConnectionEvent::Connected);

  connect(clientContext("127.0.0.2", "tls_test_ip_wrong"));
  ASSERT_TRUE(waitForEvent());
  EXPECT_EQ(client_cb_.events[0], ConnectionEvent::RemoteClose);
  TransportFailure f = client_->transportFailure();
  EXPECT_EQ(f.kind, TransportFailure::Kind::Certificate);
  EXPECT_EQ(f.reason, "certificate verify failed: IP address mismatch");
  EXPECT_EQ(client_->connectError(), 0);
}

TEST_F(TlsSocketTest, AnotherNameIsACertificateFailure) {
  connect(clientContext("other.test", "tls_test_name"));
  ASSERT_TRUE(waitForEvent());
  EXPECT_EQ(client_cb_.events[0], ConnectionEvent::RemoteClose);
  TransportFailure f = client_->transportFailure();
  EXPECT_EQ(f.kind, TransportFailure::Kind::Certificate);
  EXPECT_EQ(f.reason, "certificate verify failed: Hostname mismatch");
  EXPECT_EQ(counter("tls_test_name.handshake_fail.certificate"), 1u);
  EXPECT_EQ(counter("tls_test_name.handshakes"), 0u);
}

TEST_F(TlsSocketTest, AnotherCaIsACertificateFailure) {
  connect(clientContext("parent.test", "tls_test_ca", other_ca_file_));
  ASSERT_TRUE(waitForEvent());
  EXPECT_EQ(client_cb_.events[0], ConnectionEvent::RemoteClose);
  TransportFailure f = client_->transportFailure();
  EXPECT_EQ(f.kind, TransportFailure::Kind::Certificate);
  EXPECT_EQ(f.reason, "certificate verify failed: unable to get local issuer certificate");
  // The server saw the client's alert.
  ASSERT_TRUE(test::runUntil(dispatcher_, [&] { return !server_cb_.events.empty(); }));
}

TEST_F(TlsSocketTest, APeerThatSpeaksNoTlsIsAHandshakeFailure) {
  connect(clientContext("parent.test", "tls_test_plain"), false,
          "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
  ASSERT_TRUE(waitForEvent());
  EXPECT_EQ(client_cb_.events[0], ConnectionEvent::RemoteClose);
  TransportFailure f = client_->transportFailure();
  EXPECT_EQ(f.kind, TransportFailure::Kind::Handshake);
  EXPECT_EQ(f.reason, "TLS handshake failed (WRONG_VERSION_NUMBER)");
  EXPECT_EQ(counter("tls_test_plain.handshake_fail.other"), 1u);
}

TEST_F(TlsSocketTest, APeerThatClosesIsAHandshakeFailure) {
  connect(clientContext("parent.test", "tls_test_closed"), false, "");
  ASSERT_TRUE(waitForEvent());
  EXPECT_EQ(client_cb_.events[0], ConnectionEvent::RemoteClose);
  TransportFailure f = client_->transportFailure();
  EXPECT_EQ(f.kind, TransportFailure::Kind::Handshake);
  EXPECT_EQ(f.reason, "the connection closed during the TLS handshake");
}

TEST_F(TlsSocketTest, TheNextConnectionResumesTheSession) {
  ClientContextSharedPtr context = clientContext("parent.test", "tls_test_resume");
  for (int i = 0; i < 3; ++i) {
    connect(context);
    ASSERT_TRUE(waitForEvent());
    ASSERT_EQ(client_cb_.events[0], ConnectionEvent::Connected);
    // A TLS 1.3 ticket comes after the handshake: an exchange reads it.
    send(*client_, "ping");
    ASSERT_TRUE(test::runUntil(dispatcher_, [&] { return server_cb_.received == "ping"; }));
    send(*server_, "pong");
    ASSERT_TRUE(test::runUntil(dispatcher_, [&] { return client_cb_.received == "pong"; }));
    client_->close(network::CloseType::NoFlush);
    server_->close(network::CloseType::NoFlush);
  }
  EXPECT_EQ(counter("tls_test_resume.handshakes"), 3u);
  EXPECT_EQ(counter("tls_test_resume.handshakes_resumed"), 2u);
  // Another context (another parent) has sessions of its own: none to offer yet.
  connect(clientContext("parent.test", "tls_test_resume_other"));
  ASSERT_TRUE(waitForEvent());
  ASSERT_EQ(client_cb_.events[0], ConnectionEvent::Connected);
  EXPECT_EQ(counter("tls_test_resume_other.handshakes_resumed"), 0u);
}

// Two clients whose hellos are in their accepted sockets before the server sides exist, so one
// look at the sockets finds both and a gate of one per turn starts one and queues the other.
struct TwoHandshakes {
  test::RecordingCallbacks client_cb[2];
  test::RecordingCallbacks server_cb[2];
  network::ConnectionPtr clients[2];
  network::ConnectionPtr servers[2];
  int fds[2] = {-1, -1};

  static int unread(int fd) {
    int n = 0;
    return ioctl(fd, FIONREAD, &n) == 0 ? n : -1;
  }
  // The server side whose hello is still unread (the waiting one), or -1.
  int waiting() const {
    if (unread(fds[0]) > 0 && unread(fds[1]) == 0) return 0;
    if (unread(fds[1]) > 0 && unread(fds[0]) == 0) return 1;
    return -1;
  }
};

class GatedTlsSocketTest : public TlsSocketTest {
 protected:
  // Returns once the gate has queued one of the two (its turn not come yet).
  void startTwo(network::HandshakeGate& gate, const ClientContextSharedPtr& context,
                TwoHandshakes& t) {
    for (int i = 0; i < 2; ++i) {
      t.clients[i] = network::Connection::connectTo(dispatcher_, listener_.address());
      ASSERT_NE(t.clients[i], nullptr);
      t.clients[i]->setCallbacks(&t.client_cb[i]);
      t.clients[i]->setTransportSocket(std::make_unique<TlsSocket>(context));
      t.fds[i] = listener_.accept();
      ASSERT_GE(t.fds[i], 0);
    }
    ASSERT_TRUE(test::runUntil(dispatcher_, [&] {
      return TwoHandshakes::unread(t.fds[0]) > 0 && TwoHandshakes::unread(t.fds[1]) > 0;
    }));
    for (int i = 0; i < 2; ++i) {
      t.servers[i] =
          std::make_unique<network::Connection>(dispatcher_, t.fds[i], listener_.address());
      t.servers[i]->setCallbacks(&t.server_cb[i]);
      auto transport = std::make_unique<TlsSocket>(server_context_);
      transport->setHandshakeGate(gate);
      t.servers[i]->setTransportSocket(std::move(transport));
    }
    // runUntil returns after the loop iteration that queued it; the turn is a later one.
    ASSERT_TRUE(test::runUntil(dispatcher_, [&] { return gate.waitingCount() == 1; }));
  }
};

TEST_F(GatedTlsSocketTest, AHandshakeBeyondItsTurnsShareWaitsUnreadAndThenCompletes) {
  network::HandshakeGate gate(dispatcher_, 1,
                              stats::Store::get().counter("tls_test_gate.handshakes_waited"));
  TwoHandshakes t;
  startTwo(gate, clientContext("parent.test", "tls_test_gate"), t);
  // The waiting side has not read its client's hello; the one that started has.
  EXPECT_GE(t.waiting(), 0);
  EXPECT_EQ(counter("tls_test_gate.handshakes_waited"), 1u);
  ASSERT_TRUE(test::runUntil(dispatcher_, [&] {
    return !t.client_cb[0].events.empty() && !t.client_cb[1].events.empty();
  }));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(t.client_cb[i].events[0], ConnectionEvent::Connected);
    send(*t.clients[i], "hello " + std::to_string(i));
  }
  ASSERT_TRUE(test::runUntil(dispatcher_, [&] {
    return t.server_cb[0].received == "hello 0" && t.server_cb[1].received == "hello 1";
  }));
  EXPECT_EQ(gate.waitingCount(), 0u);
}

TEST_F(GatedTlsSocketTest, AConnectionClosedWhileWaitingLeavesTheQueue) {
  network::HandshakeGate gate(dispatcher_, 1,
                              stats::Store::get().counter("tls_test_gate_close.waited"));
  TwoHandshakes t;
  startTwo(gate, clientContext("parent.test", "tls_test_gate_close"), t);
  const int waiting = t.waiting();
  ASSERT_GE(waiting, 0);
  t.servers[waiting]->close(network::CloseType::NoFlush);
  EXPECT_EQ(gate.waitingCount(), 0u);
  const int other = 1 - waiting;
  ASSERT_TRUE(test::runUntil(dispatcher_, [&] {
    return !t.client_cb[0].events.empty() && !t.client_cb[1].events.empty();
  }));
  EXPECT_EQ(t.client_cb[other].events[0], ConnectionEvent::Connected);
  EXPECT_NE(t.client_cb[waiting].events[0], ConnectionEvent::Connected);
}

TEST(ClientContextTest, ConfigErrorsNameTheirField) {
  auto error = [](const std::string& ca, const std::string& name) {
    ClientContextConfig config;
    config.ca_file = ca;
    config.server_name = name;
    auto context = ClientContext::create(config);
    return context.ok() ? std::string() : std::string(context.status().message());
  };
  const std::string missing = testing::TempDir() + "/no-such-ca.pem";
  EXPECT_EQ(error(missing, "parent.test"),
            "ca_file: cannot read " + missing + ": No such file or directory");
  const std::string not_pem = testing::TempDir() + "/not-pem.txt";
  FILE* f = fopen(not_pem.c_str(), "w");
  fputs("not a certificate\n", f);
  fclose(f);
  EXPECT_EQ(error(not_pem, "parent.test"), "ca_file: " + not_pem + " holds no PEM certificate");
  for (const char* bad : {"", "a b", "-a.test", "a-.test", "a..test", "*.test", "a.test."}) {
    EXPECT_EQ(error(kSystemCaFile, bad).rfind("server_name: ", 0), 0u) << bad;
  }
  for (const char* good : {"parent.test", "localhost", "127.0.0.1", "::1", "A-1.example"}) {
    EXPECT_EQ(error(kSystemCaFile, good), "") << good;
  }
}

}  // namespace
}  // namespace tls
}  // namespace sluice
