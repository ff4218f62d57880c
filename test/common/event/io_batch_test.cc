#include "source/common/event/io_batch.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

#include "source/common/event/dispatcher.h"

namespace sluice {
namespace event {
namespace {

// One end of a socket pair with what the batch did for it.
struct Owner {
  int fd = -1;
  std::string to_send;
  char in[4096];
  int prepared = 0;
  int applied = 0;
  int finished = 0;
  ssize_t result = 0;
  // What every owner had been told when this one finished (apply comes first for all).
  std::vector<Owner*>* all = nullptr;
  bool everyone_applied_before_finish = true;
  // Run in finish: another owner to cancel, a follow-up to queue.
  Owner* cancel_on_finish = nullptr;
  IoBatch* batch = nullptr;
  bool send_again_on_finish = false;
};

unsigned prepare(void* self, IoBatch::Kind kind, iovec* iov, unsigned, void**) {
  auto* o = static_cast<Owner*>(self);
  ++o->prepared;
  if (kind == IoBatch::Kind::Send) {
    if (o->to_send.empty()) return 0;
    iov[0].iov_base = o->to_send.data();
    iov[0].iov_len = o->to_send.size();
  } else {
    iov[0].iov_base = o->in;
    iov[0].iov_len = sizeof(o->in);
  }
  return 1;
}

void apply(void* self, IoBatch::Kind, ssize_t result, size_t, void*) {
  auto* o = static_cast<Owner*>(self);
  ++o->applied;
  o->result = result;
}

void finish(void* self, IoBatch::Kind kind, ssize_t, size_t);
const IoBatch::Handler kFullHandler = {&prepare, &apply, &finish};

void finish(void* self, IoBatch::Kind kind, ssize_t, size_t) {
  auto* o = static_cast<Owner*>(self);
  ++o->finished;
  if (o->all != nullptr) {
    for (Owner* other : *o->all) {
      if (other->prepared > 0 && other->applied == 0 && other->cancel_on_finish == nullptr) {
        o->everyone_applied_before_finish = false;
      }
    }
  }
  if (o->cancel_on_finish != nullptr) o->batch->cancel(o->cancel_on_finish);
  if (o->send_again_on_finish) {
    o->send_again_on_finish = false;
    o->to_send = "again";
    o->batch->add(o, kFullHandler, o->fd, kind);
  }
}

class IoBatchTest : public testing::Test {
 protected:
  void SetUp() override { signal(SIGPIPE, SIG_IGN); }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }
  // A connected pair of stream sockets, both non-blocking; returns {ours, peer}.
  std::pair<int, int> pair() {
    int sv[2];
    EXPECT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv));
    fds_.push_back(sv[0]);
    fds_.push_back(sv[1]);
    return {sv[0], sv[1]};
  }
  // One pass of the loop: the batch's flush runs from it.
  void turn() { dispatcher_.runOnce(false); }
  std::string readAll(int fd) {
    char buf[8192];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  }

  Dispatcher dispatcher_;
  IoBatch& batch_ = *dispatcher_.ioBatch();
  std::vector<int> fds_;
};

TEST_F(IoBatchTest, SendsAndReceivesOfManySocketsGoInOneEntryIntoTheKernel) {
  constexpr int kPairs = 16;
  std::vector<std::unique_ptr<Owner>> senders, receivers;
  std::vector<int> peers;
  for (int i = 0; i < kPairs; ++i) {
    auto [ours, peer] = pair();
    auto s = std::make_unique<Owner>();
    s->fd = ours;
    s->to_send = "message " + std::to_string(i);
    batch_.add(s.get(), kFullHandler, ours, IoBatch::Kind::Send);
    senders.push_back(std::move(s));
    peers.push_back(peer);
  }
  EXPECT_EQ(0u, batch_.operations());  // nothing before the loop runs it
  turn();
  if (!batch_.ringAvailable()) GTEST_SKIP() << "io_uring is not available here";
  EXPECT_EQ(uint64_t{kPairs}, batch_.operations());
  EXPECT_EQ(1u, batch_.ringEnters());
  for (int i = 0; i < kPairs; ++i) {
    EXPECT_EQ(static_cast<ssize_t>(senders[i]->to_send.size()), senders[i]->result);
    EXPECT_EQ(1, senders[i]->finished);
    EXPECT_EQ(senders[i]->to_send, readAll(peers[i]));
  }
  // The peers answer; the receives, one per socket, are another single entry.
  for (int i = 0; i < kPairs; ++i) {
    ASSERT_EQ(5, ::send(peers[i], "reply", 5, 0));
    auto r = std::make_unique<Owner>();
    r->fd = senders[i]->fd;
    batch_.add(r.get(), kFullHandler, r->fd, IoBatch::Kind::Recv);
    receivers.push_back(std::move(r));
  }
  turn();
  EXPECT_EQ(2u, batch_.ringEnters());
  for (auto& r : receivers) {
    ASSERT_EQ(5, r->result);
    EXPECT_EQ("reply", std::string(r->in, 5));
  }
}

TEST_F(IoBatchTest, AReceiveWithNothingToReadAnswersEagainAtOnce) {
  // Two, so the ring carries them: neither waits for data that never comes.
  auto [a, pa] = pair();
  auto [b, pb] = pair();
  Owner ra, rb;
  batch_.add(&ra, kFullHandler, a, IoBatch::Kind::Recv);
  batch_.add(&rb, kFullHandler, b, IoBatch::Kind::Recv);
  const auto start = std::chrono::steady_clock::now();
  turn();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(-EAGAIN, ra.result);
  EXPECT_EQ(-EAGAIN, rb.result);
  EXPECT_EQ(1, ra.finished);
  EXPECT_EQ(1, rb.finished);
  (void)pa;
  (void)pb;
}

TEST_F(IoBatchTest, OneOperationIsTheSystemCallItself) {
  auto [ours, peer] = pair();
  Owner s;
  s.to_send = "alone";
  batch_.add(&s, kFullHandler, ours, IoBatch::Kind::Send);
  turn();
  EXPECT_EQ(1u, batch_.operations());
  EXPECT_EQ(0u, batch_.ringEnters());
  EXPECT_EQ(5, s.result);
  EXPECT_EQ("alone", readAll(peer));
}

TEST_F(IoBatchTest, ErrorsComeBackAsNegativeErrno) {
  auto [a, pa] = pair();
  auto [b, pb] = pair();
  ::close(pa);
  ::close(pb);
  fds_.erase(std::remove(fds_.begin(), fds_.end(), pa), fds_.end());
  fds_.erase(std::remove(fds_.begin(), fds_.end(), pb), fds_.end());
  Owner sa, sb;
  sa.to_send = sb.to_send = "nobody";
  batch_.add(&sa, kFullHandler, a, IoBatch::Kind::Send);
  batch_.add(&sb, kFullHandler, b, IoBatch::Kind::Send);
  turn();
  EXPECT_EQ(-EPIPE, sa.result);
  EXPECT_EQ(-EPIPE, sb.result);
}

TEST_F(IoBatchTest, ACancelledOperationIsNeverPrepared) {
  auto [a, pa] = pair();
  auto [b, pb] = pair();
  Owner gone, kept;
  gone.to_send = "gone";
  kept.to_send = "kept";
  batch_.add(&gone, kFullHandler, a, IoBatch::Kind::Send);
  batch_.add(&kept, kFullHandler, b, IoBatch::Kind::Send);
  batch_.cancel(&gone);
  turn();
  EXPECT_EQ(0, gone.prepared);
  EXPECT_EQ(0, gone.finished);
  EXPECT_EQ("", readAll(pa));
  EXPECT_EQ("kept", readAll(pb));
}

TEST_F(IoBatchTest, EveryAnswerIsAppliedBeforeAnyOwnerActsAndACancelStopsTheRest) {
  std::vector<Owner*> all;
  Owner first, second, third;
  for (Owner* o : {&first, &second, &third}) {
    auto [ours, peer] = pair();
    ASSERT_EQ(2, ::send(peer, "hi", 2, 0));
    o->fd = ours;
    o->all = &all;
    o->batch = &batch_;
    all.push_back(o);
    batch_.add(o, kFullHandler, ours, IoBatch::Kind::Recv);
  }
  // The first to finish cancels the second (as a connection closing its partner would).
  first.cancel_on_finish = &second;
  turn();
  EXPECT_TRUE(first.everyone_applied_before_finish);
  EXPECT_TRUE(third.everyone_applied_before_finish);
  EXPECT_EQ(1, second.applied);  // its bytes arrived with the others
  EXPECT_EQ(0, second.finished);
  EXPECT_EQ(1, first.finished);
  EXPECT_EQ(1, third.finished);
}

TEST_F(IoBatchTest, AnOperationQueuedWhileFinishingRunsInTheSameFlush) {
  auto [a, pa] = pair();
  auto [b, pb] = pair();
  Owner sa, sb;
  sa.to_send = "first";
  sb.to_send = "other";
  sa.batch = &batch_;
  sa.fd = a;
  sa.send_again_on_finish = true;
  batch_.add(&sa, kFullHandler, a, IoBatch::Kind::Send);
  batch_.add(&sb, kFullHandler, b, IoBatch::Kind::Send);
  turn();
  EXPECT_EQ(2, sa.finished);
  EXPECT_EQ("firstagain", readAll(pa));
  EXPECT_EQ("other", readAll(pb));
}

TEST_F(IoBatchTest, APrepareThatFindsNothingLeavesTheOperationOut) {
  auto [a, pa] = pair();
  Owner empty;  // nothing to send any more
  batch_.add(&empty, kFullHandler, a, IoBatch::Kind::Send);
  turn();
  EXPECT_EQ(1, empty.prepared);
  EXPECT_EQ(0, empty.applied);
  EXPECT_EQ(0, empty.finished);
  EXPECT_EQ(0u, batch_.operations());
  (void)pa;
}

TEST_F(IoBatchTest, MoreOperationsThanTheRingHoldsAllRun) {
  const int n = static_cast<int>(IoBatch::kRingEntries) + 40;
  std::vector<std::unique_ptr<Owner>> owners;
  std::vector<int> peers;
  for (int i = 0; i < n; ++i) {
    auto [ours, peer] = pair();
    auto o = std::make_unique<Owner>();
    o->to_send = "x";
    batch_.add(o.get(), kFullHandler, ours, IoBatch::Kind::Send);
    owners.push_back(std::move(o));
    peers.push_back(peer);
  }
  turn();
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(1, owners[i]->finished);
    EXPECT_EQ("x", readAll(peers[i]));
  }
  if (batch_.ringAvailable()) {
    EXPECT_EQ(2u, batch_.ringEnters());
  }
}

// A socket event's owner, as the batch sees it.
struct Watcher {
  int epoll_fd = -1;
  int finished = 0;
  int result = 1;
};
const IoBatch::WatchHandler kWatchHandler = {
    [](void* self, epoll_event* ev) {
      ev->events = EPOLLIN | EPOLLET;
      ev->data.ptr = self;
      return static_cast<Watcher*>(self)->epoll_fd;
    },
    [](void* self, int result) {
      auto* w = static_cast<Watcher*>(self);
      ++w->finished;
      w->result = result;
    },
};

bool isOpen(int fd) { return fcntl(fd, F_GETFD) != -1; }

TEST_F(IoBatchTest, RegistrationsAndClosesGoWithTheSendsInOneEntry) {
  auto [a, pa] = pair();
  auto [b, pb] = pair();
  auto [c, pc] = pair();
  const int set = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(set, 0);
  fds_.push_back(set);
  Owner sender;
  sender.to_send = "hello";
  Watcher watcher;
  watcher.epoll_fd = set;
  batch_.add(&sender, kFullHandler, a, IoBatch::Kind::Send);
  batch_.watch(&watcher, kWatchHandler, b);
  fds_.erase(std::remove(fds_.begin(), fds_.end(), c), fds_.end());
  batch_.close(c);
  EXPECT_TRUE(isOpen(c));  // nothing before the flush
  turn();
  EXPECT_EQ(3u, batch_.operations());
  if (batch_.ringAvailable()) {
    EXPECT_EQ(1u, batch_.ringEnters());
  }
  EXPECT_EQ("hello", readAll(pa));
  EXPECT_EQ(1, watcher.finished);
  EXPECT_EQ(0, watcher.result);
  EXPECT_FALSE(isOpen(c));
  char byte;
  EXPECT_EQ(0, ::recv(pc, &byte, 1, MSG_DONTWAIT));  // the peer sees the close
  // The registration is in the set: the peer's bytes are reported, with the owner's pointer.
  ASSERT_EQ(2, ::send(pb, "hi", 2, 0));
  epoll_event ev{};
  ASSERT_EQ(1, epoll_wait(set, &ev, 1, 1000));
  EXPECT_EQ(&watcher, ev.data.ptr);
}

TEST_F(IoBatchTest, ARegistrationThatFailsTellsItsOwner) {
  auto [a, pa] = pair();
  auto [b, pb] = pair();
  Watcher bad, good;
  bad.epoll_fd = a;  // not an epoll set
  const int set = epoll_create1(EPOLL_CLOEXEC);
  fds_.push_back(set);
  good.epoll_fd = set;
  batch_.watch(&bad, kWatchHandler, b);
  batch_.watch(&good, kWatchHandler, b);
  turn();
  EXPECT_EQ(-EINVAL, bad.result);
  EXPECT_EQ(0, good.result);
  (void)pa;
  (void)pb;
}

// One owner that both sends and registers, as a connection and its socket event (its first
// member, at the same address) look to the batch.
struct SendsAndWatches {
  std::string to_send;
  int epoll_fd = -1;
  int sends_finished = 0;
  int watches_finished = 0;
};
const IoBatch::Handler kSendOfBoth = {
    [](void* self, IoBatch::Kind, iovec* iov, unsigned, void**) -> unsigned {
      auto* o = static_cast<SendsAndWatches*>(self);
      iov[0].iov_base = o->to_send.data();
      iov[0].iov_len = o->to_send.size();
      return 1;
    },
    [](void*, IoBatch::Kind, ssize_t, size_t, void*) {},
    [](void* self, IoBatch::Kind, ssize_t, size_t) {
      ++static_cast<SendsAndWatches*>(self)->sends_finished;
    },
};
const IoBatch::WatchHandler kWatchOfBoth = {
    [](void* self, epoll_event* ev) {
      ev->events = EPOLLIN | EPOLLET;
      ev->data.ptr = self;
      return static_cast<SendsAndWatches*>(self)->epoll_fd;
    },
    [](void* self, int) { ++static_cast<SendsAndWatches*>(self)->watches_finished; },
};

TEST_F(IoBatchTest, CancellingARegistrationLeavesTheOwnersSendsAndTheOtherWayRound) {
  auto [a, pa] = pair();
  auto [b, pb] = pair();
  const int set = epoll_create1(EPOLL_CLOEXEC);
  fds_.push_back(set);
  SendsAndWatches owner;
  owner.to_send = "kept";
  owner.epoll_fd = set;
  batch_.add(&owner, kSendOfBoth, a, IoBatch::Kind::Send);
  batch_.watch(&owner, kWatchOfBoth, b);
  batch_.cancelWatch(&owner);
  turn();
  EXPECT_EQ(1, owner.sends_finished);
  EXPECT_EQ("kept", readAll(pa));
  EXPECT_EQ(0, owner.watches_finished);
  epoll_event ev{};
  ev.events = EPOLLIN;
  EXPECT_EQ(0, epoll_ctl(set, EPOLL_CTL_ADD, b, &ev));  // it was never registered

  owner.to_send = "dropped";
  batch_.add(&owner, kSendOfBoth, b, IoBatch::Kind::Send);
  batch_.watch(&owner, kWatchOfBoth, a);
  batch_.cancel(&owner);
  turn();
  EXPECT_EQ(1, owner.sends_finished);
  EXPECT_EQ("", readAll(pb));
  EXPECT_EQ(1, owner.watches_finished);
}

TEST_F(IoBatchTest, QueuedClosesRunAtOnceWhenAskedAndWhenTheBatchGoes) {
  auto [a, pa] = pair();
  auto [b, pb] = pair();
  fds_.erase(std::remove(fds_.begin(), fds_.end(), a), fds_.end());
  fds_.erase(std::remove(fds_.begin(), fds_.end(), b), fds_.end());
  Owner pending;
  pending.to_send = "later";
  batch_.add(&pending, kFullHandler, pa, IoBatch::Kind::Send);
  batch_.close(a);
  batch_.runCloses();
  EXPECT_FALSE(isOpen(a));
  EXPECT_TRUE(batch_.pending());  // the send waits for the flush
  EXPECT_EQ(0, pending.prepared);
  {
    IoBatch alone;
    alone.close(b);
    EXPECT_TRUE(isOpen(b));
  }
  EXPECT_FALSE(isOpen(b));
  (void)pb;
}

TEST_F(IoBatchTest, TurnedOffTheDispatcherHasNoBatch) {
  dispatcher_.setIoBatching(false);
  EXPECT_EQ(nullptr, dispatcher_.ioBatch());
  dispatcher_.setIoBatching(true);
  EXPECT_NE(nullptr, dispatcher_.ioBatch());
}

// ---- Standing receives (reads by completion) ----

// What a standing receive told its owner.
struct Reader {
  std::string received;
  std::vector<size_t> runs;  // each `run` that closed a delivery
  int pieces = 0;
  int ended = 0;
  int result = 1;
  std::function<void()> on_run;
};

const IoBatch::StandingHandler kReader = {
    [](void* self, const char* bytes, size_t len, size_t run) {
      auto* r = static_cast<Reader*>(self);
      r->received.append(bytes, len);
      ++r->pieces;
      if (run != 0) {
        r->runs.push_back(run);
        if (r->on_run) r->on_run();
      }
    },
    [](void* self, int result) {
      auto* r = static_cast<Reader*>(self);
      ++r->ended;
      r->result = result;
    },
};

class StandingTest : public IoBatchTest {
 protected:
  void SetUp() override {
    IoBatchTest::SetUp();
    batch_.allowStanding(true);
  }
  bool arm(Reader& r, int fd) { return batch_.arm(&r, kReader, fd, -1, epoll_event{}); }
  // Turns of the loop (each waits in the ring, a second at most) until `done`.
  bool turnUntil(const std::function<bool()>& done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done()) {
      if (std::chrono::steady_clock::now() > until) return false;
      Timer limit(dispatcher_, [] {});
      limit.enable(std::chrono::milliseconds(50));
      dispatcher_.runOnce(true);
    }
    return true;
  }
};

TEST_F(StandingTest, EachMessageComesWithTheTurnsOneWait) {
  auto [ours, peer] = pair();
  Reader r;
  if (!arm(r, ours)) GTEST_SKIP() << "io_uring is not available here";
  EXPECT_TRUE(batch_.standing());
  ASSERT_EQ(3, ::send(peer, "one", 3, 0));
  ASSERT_TRUE(turnUntil([&] { return r.received == "one"; }));
  EXPECT_EQ(std::vector<size_t>{3}, r.runs);
  // The turn's wait in the ring brings the next message: no look, no receive call.
  const uint64_t waits = batch_.ringWaits();
  const uint64_t operations = batch_.operations();
  ASSERT_EQ(3, ::send(peer, "two", 3, 0));
  ASSERT_TRUE(turnUntil([&] { return r.received == "onetwo"; }));
  EXPECT_GE(batch_.ringWaits() - waits, 1u);
  EXPECT_LE(batch_.ringWaits() - waits, 2u);
  EXPECT_EQ(operations, batch_.operations());
  EXPECT_EQ(0, r.ended);
  EXPECT_EQ(1u, batch_.standingCount());
}

TEST_F(StandingTest, ThePeersEndEndsTheReceiveAfterItsBytes) {
  auto [ours, peer] = pair();
  Reader r;
  if (!arm(r, ours)) GTEST_SKIP() << "io_uring is not available here";
  ASSERT_EQ(3, ::send(peer, "bye", 3, 0));
  ::shutdown(peer, SHUT_WR);
  ASSERT_TRUE(turnUntil([&] { return r.ended == 1; }));
  EXPECT_EQ("bye", r.received);
  EXPECT_EQ(0, r.result);
  EXPECT_EQ(0u, batch_.standingCount());
  EXPECT_FALSE(batch_.standing());
}

TEST_F(StandingTest, BytesOfOneDeliveryAreHandedOverAsOneRun) {
  auto [ours, peer] = pair();
  Reader r;
  if (!arm(r, ours)) GTEST_SKIP() << "io_uring is not available here";
  turn();  // the receive is in the kernel before the bytes come
  const std::string big(3 * IoBatch::kStandingBufferSize + 100, 'x');
  ASSERT_EQ(static_cast<ssize_t>(big.size()), ::send(peer, big.data(), big.size(), 0));
  ASSERT_TRUE(turnUntil([&] { return r.received.size() == big.size(); }));
  EXPECT_GE(r.pieces, 4);  // a provided buffer each
  size_t total = 0;
  for (size_t run : r.runs) total += run;
  EXPECT_EQ(big.size(), total);
  EXPECT_LT(r.runs.size(), static_cast<size_t>(r.pieces));  // pieces went together
}

TEST_F(StandingTest, DisarmHandsOverWhatCameThenEndsWithEcanceled) {
  auto [ours, peer] = pair();
  Reader r;
  if (!arm(r, ours)) GTEST_SKIP() << "io_uring is not available here";
  turn();
  ASSERT_EQ(5, ::send(peer, "first", 5, 0));
  ASSERT_TRUE(turnUntil([&] { return r.received == "first"; }));
  // Bytes the kernel took before the cancellation, then the end; none after it.
  ASSERT_EQ(6, ::send(peer, "second", 6, 0));
  batch_.collect();
  batch_.disarm(&r);
  batch_.submitPending();
  ASSERT_TRUE(turnUntil([&] { return r.ended == 1; }));
  EXPECT_EQ(-ECANCELED, r.result);
  ASSERT_EQ(5, ::send(peer, "third", 5, 0));
  turn();
  turn();
  EXPECT_EQ(1, r.ended);
  // "second" either came before the end or is still in the socket, never after the end.
  std::string rest = r.received.substr(5) + readAll(ours);
  EXPECT_EQ("secondthird", rest);
}

TEST_F(StandingTest, AReleasedReceiveTellsNothingAndItsSocketClosesWithTheBatch) {
  auto [ours, peer] = pair();
  fds_.erase(std::remove(fds_.begin(), fds_.end(), ours), fds_.end());
  Reader r;
  if (!arm(r, ours)) GTEST_SKIP() << "io_uring is not available here";
  turn();
  ASSERT_EQ(4, ::send(peer, "late", 4, 0));
  batch_.release(&r);
  // Until its last answer is in, no other receive may stand for the same address.
  EXPECT_FALSE(arm(r, peer));
  batch_.close(ours);
  turn();
  turn();
  EXPECT_EQ(0, r.ended);
  EXPECT_EQ("", r.received);
  EXPECT_EQ(0u, batch_.standingCount());
  Reader again;
  EXPECT_TRUE(arm(again, peer));  // that address's receive is over
  // The kernel let the socket go with the close: the peer sees its end.
  char c;
  EXPECT_EQ(0, ::recv(peer, &c, 1, MSG_DONTWAIT));
}

TEST_F(StandingTest, WithoutBuffersLeftTheReceiveEndsWithEnobufs) {
  constexpr unsigned kReaders = IoBatch::kStandingBuffers + 8;
  std::vector<Reader> readers(kReaders);
  std::vector<int> peers;
  for (unsigned i = 0; i < kReaders; ++i) {
    auto [ours, peer] = pair();
    if (!arm(readers[i], ours)) {
      GTEST_SKIP() << "io_uring is not available here";
    }
    peers.push_back(peer);
  }
  turn();
  // Every socket gets a message before the loop hands any buffer back.
  for (int peer : peers) ASSERT_EQ(1, ::send(peer, "m", 1, 0));
  batch_.collect();
  int starved = 0;
  ASSERT_TRUE(turnUntil([&] {
    starved = 0;
    int delivered = 0;
    for (const Reader& r : readers) {
      starved += r.ended == 1 && r.result == -ENOBUFS ? 1 : 0;
      delivered += r.received == "m" ? 1 : 0;
    }
    return starved + delivered == static_cast<int>(kReaders);
  }));
  EXPECT_GE(starved, 8);
  // The others stand on; the buffers went back, and the next messages come.
  for (unsigned i = 0; i < kReaders; ++i) {
    if (readers[i].ended == 0) {
      ASSERT_EQ(1, ::send(peers[i], "n", 1, 0));
    }
  }
  ASSERT_TRUE(turnUntil([&] {
    for (const Reader& r : readers) {
      if (r.ended == 0 && r.received != "mn") return false;
    }
    return true;
  }));
}

TEST_F(StandingTest, WhileLibeventWaitsAMessageStillWakesTheLoop) {
  auto [ours, peer] = pair();
  Reader r;
  if (!arm(r, ours)) GTEST_SKIP() << "io_uring is not available here";
  turn();
  // A libevent timer of its own (as a DNS query's) makes libevent the one that waits.
  ::event* other = evtimer_new(
      dispatcher_.base(), [](evutil_socket_t, short, void*) {}, nullptr);
  timeval ten{10, 0};
  evtimer_add(other, &ten);
  ASSERT_FALSE(dispatcher_.libeventIdle());
  std::thread sender([peer = peer] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_EQ(4, ::send(peer, "wake", 4, 0));
  });
  const auto start = std::chrono::steady_clock::now();
  while (r.received != "wake" &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    dispatcher_.runOnce(true);
  }
  sender.join();
  EXPECT_EQ("wake", r.received);
  // Woken by the message, not by the ten-second timer.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  event_free(other);
  turn();
  EXPECT_TRUE(dispatcher_.libeventIdle());
}

}  // namespace
}  // namespace event
}  // namespace sluice
