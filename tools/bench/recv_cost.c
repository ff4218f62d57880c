// What a turn of the loop costs from its sends to the next messages in hand, for two models of
// reading sockets, when the messages are already there (as for most of a busy worker's turns):
//   readiness   the loop today: the turn's sends, a look (epoll_wait), then the receives; a
//               round of one operation is its system call, a round of more one io_uring entry
//               (IoBatch). Three entries into the kernel per turn.
//   completion  a multishot receive stays armed on each socket with a ring of provided buffers;
//               one io_uring_enter submits the turn's sends and collects the messages the
//               kernel has received. One entry per turn.
// A turn here moves K messages each way (K sockets read, K sends; K is the first argument, 1 by
// default): before the timed part, a peer writes 1 KB to each socket read; the timed part sends
// 1 KB on each of K other loopback pairs and takes the K messages in; those pairs are drained
// after it. The two models take turns round by round, so a change in the machine's load weighs
// on each alike, and each reads its own sockets. The ring defers its task work to
// io_uring_enter (IORING_SETUP_DEFER_TASKRUN): a receive's copy is made inside the timed call,
// not when the peer's write returns.
//
//   gcc -O2 tools/bench/recv_cost.c -o /tmp/recv_cost -luring && taskset -c 0 /tmp/recv_cost [K]
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>

#include "loopback_pair.h"

enum { kRounds = 100000, kMaxK = 8, kBufs = 64, kBufSize = 4096, kGroup = 7, kRecvTag = 1000 };
static char out[1024], in[kMaxK][kBufSize], drain[kBufSize];

// The sockets of one model: peer[i] writes to sock[i]; send_c[i] -> send_s[i] carries sends.
struct Model {
  int peer[kMaxK], sock[kMaxK], send_c[kMaxK], send_s[kMaxK], ep;
};

static int setUp(struct Model* m, int k) {
  m->ep = epoll_create1(0);
  for (int i = 0; i < k; ++i) {
    if (loopbackPair(&m->peer[i], &m->sock[i]) || loopbackPair(&m->send_c[i], &m->send_s[i])) {
      return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = (uint64_t)i};
    epoll_ctl(m->ep, EPOLL_CTL_ADD, m->sock[i], &ev);
  }
  return 0;
}

// Submits what is queued and takes `n` answers; returns the sum of their results.
static long reapAll(struct io_uring* ring, int n) {
  long sum = 0;
  io_uring_submit_and_wait(ring, (unsigned)n);
  for (int i = 0; i < n; ++i) {
    struct io_uring_cqe* cqe;
    io_uring_wait_cqe(ring, &cqe);
    sum += cqe->res;
    io_uring_cqe_seen(ring, cqe);
  }
  return sum;
}

int main(int argc, char** argv) {
  const int k = argc > 1 ? atoi(argv[1]) : 1;
  if (k < 1 || k > kMaxK) return 2;
  struct Model ready_m, done_m;
  if (setUp(&ready_m, k) || setUp(&done_m, k)) return 1;

  // One ring per model: the readiness model's carries its rounds of several operations.
  struct io_uring batch, ring;
  struct io_uring_params p = {0};
  p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
  if (io_uring_queue_init_params(64, &batch, &p) < 0) return 1;
  struct io_uring_params q = {0};
  q.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  if (io_uring_queue_init_params(64, &ring, &q) < 0) return 1;

  // The provided buffers the multishot receives fill.
  struct io_uring_buf_ring* br = mmap(NULL, kBufs * sizeof(struct io_uring_buf),
                                      PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  char* bufs = malloc((size_t)kBufs * kBufSize);
  struct io_uring_buf_reg reg = {
      .ring_addr = (unsigned long)br, .ring_entries = kBufs, .bgid = kGroup};
  if (br == MAP_FAILED || bufs == NULL || io_uring_register_buf_ring(&ring, &reg, 0) < 0) {
    fprintf(stderr, "no provided buffer rings here\n");
    return 1;
  }
  io_uring_buf_ring_init(br);
  for (int b = 0; b < kBufs; ++b) {
    io_uring_buf_ring_add(br, bufs + (size_t)b * kBufSize, kBufSize, b,
                          io_uring_buf_ring_mask(kBufs), b);
  }
  io_uring_buf_ring_advance(br, kBufs);
  int armed[kMaxK] = {0};

  struct epoll_event found[64];
  double spent[2] = {0};
  long checksum = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (int model = 0; model < 2; ++model) {
      struct Model* m = model == 0 ? &ready_m : &done_m;
      if (model == 1) {
        int arming = 0;
        for (int i = 0; i < k; ++i) {
          if (armed[i]) continue;
          struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
          io_uring_prep_recv_multishot(sqe, m->sock[i], NULL, 0, 0);
          sqe->flags |= IOSQE_BUFFER_SELECT;
          sqe->buf_group = kGroup;
          io_uring_sqe_set_data64(sqe, kRecvTag + (uint64_t)i);
          armed[i] = arming = 1;
        }
        if (arming) io_uring_submit(&ring);
      }
      for (int i = 0; i < k; ++i) {
        if (send(m->peer[i], out, sizeof out, 0) != sizeof out) return 1;
      }
      const double t0 = benchNow();
      long got = 0;
      if (model == 0 && k == 1) {
        send(m->send_c[0], out, sizeof out, MSG_DONTWAIT);
        epoll_wait(m->ep, found, 64, -1);
        got = recv(m->sock[0], in[0], kBufSize, MSG_DONTWAIT);
      } else if (model == 0) {
        for (int i = 0; i < k; ++i) {
          io_uring_prep_send(io_uring_get_sqe(&batch), m->send_c[i], out, sizeof out, MSG_DONTWAIT);
        }
        reapAll(&batch, k);
        int seen = 0;
        while (seen < k) seen += epoll_wait(m->ep, found, 64, -1);
        for (int i = 0; i < k; ++i) {
          io_uring_prep_recv(io_uring_get_sqe(&batch), m->sock[i], in[i], kBufSize, MSG_DONTWAIT);
        }
        got = reapAll(&batch, k);
      } else {
        for (int i = 0; i < k; ++i) {
          struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
          io_uring_prep_send(sqe, m->send_c[i], out, sizeof out, MSG_DONTWAIT);
          io_uring_sqe_set_data64(sqe, 1);
        }
        // One entry: the sends are made, the deferred receives run, every answer comes back.
        int answers = 0;
        while (answers < 2 * k) {
          io_uring_submit_and_wait(&ring, (unsigned)(2 * k - answers));
          unsigned head, seen = 0;
          struct io_uring_cqe* cqe;
          io_uring_for_each_cqe(&ring, head, cqe) {
            ++seen;
            const uint64_t tag = io_uring_cqe_get_data64(cqe);
            if (tag >= kRecvTag) {
              if (!(cqe->flags & IORING_CQE_F_MORE)) armed[tag - kRecvTag] = 0;
              if (cqe->res <= 0) continue;
              const int b = (int)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
              got += cqe->res;
              checksum += bufs[(size_t)b * kBufSize];
              io_uring_buf_ring_add(br, bufs + (size_t)b * kBufSize, kBufSize, b,
                                    io_uring_buf_ring_mask(kBufs), 0);
              io_uring_buf_ring_advance(br, 1);
            }
          }
          io_uring_cq_advance(&ring, seen);
          answers += (int)seen;
        }
      }
      spent[model] += benchNow() - t0;
      if (got != (long)(k * sizeof out)) {
        fprintf(stderr, "model %d: got %ld of %zu\n", model, got, k * sizeof out);
        return 1;
      }
      for (int i = 0; i < k; ++i) {
        if (recv(m->send_s[i], drain, sizeof drain, 0) != sizeof out) return 1;
      }
    }
  }
  printf("K=%d  readiness (today's loop)  %6.0f ns per turn\n", k, spent[0] / kRounds * 1e9);
  printf("K=%d  completion (one entry)    %6.0f ns per turn\n", k, spent[1] / kRounds * 1e9);
  return checksum == -1;
}
