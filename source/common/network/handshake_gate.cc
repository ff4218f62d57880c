#include "source/common/network/handshake_gate.h"

#include <chrono>

namespace sluice {
namespace network {

void HandshakeGate::Waiter::leaveHandshakeQueue() {
  if (gate_ != nullptr) gate_->unlink(*this);
}

HandshakeGate::HandshakeGate(event::Dispatcher& dispatcher, uint32_t per_turn,
                             stats::Counter waited)
    : turn_(dispatcher, [this] { onTurn(); }), per_turn_(per_turn), waited_(waited) {}

HandshakeGate::~HandshakeGate() {
  // Connections deleted after the worker's gate (deferred deletion) find themselves unqueued.
  while (head_ != nullptr) unlink(*head_);
}

void HandshakeGate::setPerTurn(uint32_t per_turn) {
  per_turn_ = per_turn;
  if (head_ != nullptr) armTurn();
}

bool HandshakeGate::admit(Waiter& waiter) {
  if (waiter.gate_ != nullptr) return false;
  if (per_turn_ == 0) return true;
  if (head_ == nullptr && started_ < per_turn_) {
    // The count starts over at the next turn once this turn's share is used up.
    if (++started_ == per_turn_) armTurn();
    return true;
  }
  enqueue(waiter);
  waited_.inc();
  armTurn();
  return false;
}

void HandshakeGate::onTurn() {
  started_ = 0;
  while (head_ != nullptr && (per_turn_ == 0 || started_ < per_turn_)) {
    Waiter& next = *head_;
    unlink(next);
    ++started_;
    next.onHandshakeTurn();
  }
  if (head_ != nullptr || (per_turn_ != 0 && started_ == per_turn_)) armTurn();
}

void HandshakeGate::enqueue(Waiter& waiter) {
  waiter.gate_ = this;
  waiter.prev_ = tail_;
  waiter.next_ = nullptr;
  if (tail_ != nullptr) {
    tail_->next_ = &waiter;
  } else {
    head_ = &waiter;
  }
  tail_ = &waiter;
  ++waiting_;
}

void HandshakeGate::unlink(Waiter& waiter) {
  if (waiter.prev_ != nullptr) {
    waiter.prev_->next_ = waiter.next_;
  } else {
    head_ = waiter.next_;
  }
  if (waiter.next_ != nullptr) {
    waiter.next_->prev_ = waiter.prev_;
  } else {
    tail_ = waiter.prev_;
  }
  waiter.gate_ = nullptr;
  waiter.prev_ = nullptr;
  waiter.next_ = nullptr;
  --waiting_;
}

void HandshakeGate::armTurn() {
  if (!turn_.enabled()) turn_.enable(std::chrono::milliseconds(0));
}

}  // namespace network
}  // namespace sluice
