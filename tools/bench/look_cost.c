// What a turn's last send and the loop's next look at its sockets cost, for each way sluice
// could make them, when the look finds a socket ready (as most of a busy worker's looks do):
//   send + epoll_wait   two system calls (the loop today, for a batch of one send);
//   ring send + epoll_wait   the send in an io_uring entry, then the look (a batch of sends);
//   ring send + look   both in one io_uring entry, the look as IORING_OP_EPOLL_WAIT (6.15+);
//   nop entry + send + epoll_wait   what one more entry into the kernel costs.
// Each round sends 1 KB on a loopback TCP pair and reads it at the other end; the epoll set
// holds a level-triggered eventfd that is always ready. The ways take turns round by round, so
// a change in the machine's load weighs on each alike.
//
//   gcc -O2 tools/bench/look_cost.c -o /tmp/look_cost -luring && taskset -c 0 /tmp/look_cost
#include <liburing.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "loopback_pair.h"

// IORING_OP_EPOLL_WAIT: kernel 6.15 on; liburing 2.3's header predates it.
enum { kOpEpollWait = 59, kRounds = 200000, kWays = 4 };
static char out[1024], in[4096];

static void reap(struct io_uring* ring) { io_uring_cq_advance(ring, io_uring_cq_ready(ring)); }

int main(void) {
  int c, s;
  if (loopbackPair(&c, &s)) return 1;
  int ep = epoll_create1(0);
  int ready = eventfd(1, EFD_NONBLOCK);
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1};
  epoll_ctl(ep, EPOLL_CTL_ADD, ready, &ev);
  struct io_uring ring;
  struct io_uring_params p = {0};
  p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  if (io_uring_queue_init_params(8, &ring, &p) < 0) return 1;
  struct io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  if (probe == NULL || !io_uring_opcode_supported(probe, kOpEpollWait)) {
    fprintf(stderr, "this kernel has no IORING_OP_EPOLL_WAIT\n");
    return 1;
  }
  const char* names[kWays] = {"send + epoll_wait", "ring send + epoll_wait", "ring send + look",
                              "nop entry + send + epoll_wait"};
  struct epoll_event found[64];
  double spent[kWays] = {0};
  for (int i = 0; i < kRounds; ++i) {
    for (int way = 0; way < kWays; ++way) {
      double t0 = benchNow();
      struct io_uring_sqe* sqe;
      if (way == 1 || way == 2) {
        sqe = io_uring_get_sqe(&ring);
        io_uring_prep_send(sqe, c, out, sizeof out, MSG_DONTWAIT);
        if (way == 2) {
          sqe = io_uring_get_sqe(&ring);
          io_uring_prep_rw(kOpEpollWait, sqe, ep, found, 64, 0);
        }
        io_uring_submit(&ring);
        reap(&ring);
        if (way == 1) epoll_wait(ep, found, 64, 0);
      } else {
        if (way == 3) {
          io_uring_prep_nop(io_uring_get_sqe(&ring));
          io_uring_submit(&ring);
          reap(&ring);
        }
        send(c, out, sizeof out, MSG_DONTWAIT);
        epoll_wait(ep, found, 64, 0);
      }
      spent[way] += benchNow() - t0;
      recv(s, in, sizeof in, MSG_DONTWAIT);
    }
  }
  for (int way = 0; way < kWays; ++way) {
    printf("%-32s %6.0f ns\n", names[way], spent[way] / kRounds * 1e9);
  }
  return 0;
}
