#pragma once

#include <cstdint>

#include "source/common/event/dispatcher.h"
#include "source/common/stats/stats.h"

namespace sluice {
namespace network {

// How many transport handshakes (TLS) one worker starts per turn of its loop. A handshake asks
// before its first step; beyond the turn's share it waits, its bytes unread in the kernel's
// socket buffer, in arrival order, and is woken on a later turn. A burst of thousands of new
// TLS connections then neither holds thousands of handshake states at once (whose freed pieces
// would stay between what the connections keep) nor keeps the loop from its open connections
// for the seconds their handshakes take: each turn looks at the sockets (the clients' answers
// to the handshakes already started) before it starts more.
//
// The gate bounds starts, not handshakes in progress, so a client that stalls its handshake
// holds nothing another needs; a waiting connection stays under its handshake deadline.
class HandshakeGate {
 public:
  // A connection whose handshake may have to wait. Queued through its own links, no allocation;
  // leaves the queue when destroyed.
  class Waiter {
   public:
    // Its turn came: it may start (it wakes its read; this never runs the handshake on the
    // gate's stack).
    virtual void onHandshakeTurn() = 0;
    bool waiting() const { return gate_ != nullptr; }
    // Leaves the queue (a closed connection). No-op when not waiting.
    void leaveHandshakeQueue();

   protected:
    Waiter() = default;
    ~Waiter() { leaveHandshakeQueue(); }

   private:
    friend class HandshakeGate;
    HandshakeGate* gate_ = nullptr;  // set while queued
    Waiter* prev_ = nullptr;
    Waiter* next_ = nullptr;
  };

  // per_turn 0: no bound. `waited` counts handshakes that had to wait.
  HandshakeGate(event::Dispatcher& dispatcher, uint32_t per_turn, stats::Counter waited);
  ~HandshakeGate();
  HandshakeGate(const HandshakeGate&) = delete;
  HandshakeGate& operator=(const HandshakeGate&) = delete;

  // A reload's new bound; the waiting ones are taken at the next turn under it.
  void setPerTurn(uint32_t per_turn);
  // True: start now. False: queued (or still queued), onHandshakeTurn() comes on a later turn.
  bool admit(Waiter& waiter);
  uint32_t waitingCount() const { return waiting_; }

 private:
  void onTurn();
  void enqueue(Waiter& waiter);
  void unlink(Waiter& waiter);
  // The next turn: the timer fires after the loop's next look at its sockets.
  void armTurn();

  event::Timer turn_;
  uint32_t per_turn_;
  uint32_t started_ = 0;  // handshakes started since the last turn
  uint32_t waiting_ = 0;
  Waiter* head_ = nullptr;
  Waiter* tail_ = nullptr;
  stats::Counter waited_;
};

}  // namespace network
}  // namespace sluice
