// What a 1 KB send and its receive cost over many loopback TCP pairs: one system call each
// (send, then recv, pair by pair) against io_uring carrying all the sends in one
// io_uring_enter and all the receives in another, each MSG_DONTWAIT (as sluice's
// event::IoBatch does). Both ways take turns round by round, so the machine's load weighs on
// each alike.
//
//   gcc -O2 tools/bench/batch_cost.c -o /tmp/batch_cost -luring
//   taskset -c 0 /tmp/batch_cost [pairs]        (default 32, at most 256)
#include <arpa/inet.h>
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { kMaxPairs = 256, kRounds = 20000 };
static char msg[1024], in[kMaxPairs][1024];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// Reaps exactly `want` completions, each of a whole message.
static int reap(struct io_uring* ring, unsigned want) {
  struct io_uring_cqe* cqe;
  unsigned head, n = 0;
  io_uring_for_each_cqe(ring, head, cqe) {
    if (cqe->res != (int)sizeof msg) {
      fprintf(stderr, "operation %llu: %d\n", (unsigned long long)cqe->user_data, cqe->res);
      return -1;
    }
    ++n;
  }
  io_uring_cq_advance(ring, n);
  return n == want ? 0 : -1;
}

int main(int argc, char** argv) {
  int pairs = argc > 1 ? atoi(argv[1]) : 32;
  if (pairs < 1 || pairs > kMaxPairs) return 2;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(l, (void*)&a, sizeof a) || listen(l, kMaxPairs) || getsockname(l, (void*)&a, &len)) {
    return 1;
  }
  int c[kMaxPairs], s[kMaxPairs], one = 1;
  for (int i = 0; i < pairs; ++i) {
    c[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c[i], (void*)&a, sizeof a)) return 1;
    s[i] = accept(l, 0, 0);
    setsockopt(c[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(s[i], F_SETFL, O_NONBLOCK);
    fcntl(c[i], F_SETFL, O_NONBLOCK);
  }
  struct io_uring ring;
  struct io_uring_params p = {0};
  p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
  if (io_uring_queue_init_params(kMaxPairs, &ring, &p)) return 3;
  double calls = 0, batched = 0;
  for (int r = 0; r < kRounds; ++r) {
    double t0 = now();
    for (int i = 0; i < pairs; ++i) send(c[i], msg, sizeof msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    for (int i = 0; i < pairs; ++i) {
      if (recv(s[i], in[i], sizeof in[i], MSG_DONTWAIT) != (ssize_t)sizeof msg) return 4;
    }
    double t1 = now();
    for (int i = 0; i < pairs; ++i) {
      struct io_uring_sqe* q = io_uring_get_sqe(&ring);
      io_uring_prep_send(q, c[i], msg, sizeof msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      q->user_data = i;
    }
    io_uring_submit(&ring);
    if (reap(&ring, pairs)) return 5;
    for (int i = 0; i < pairs; ++i) {
      struct io_uring_sqe* q = io_uring_get_sqe(&ring);
      io_uring_prep_recv(q, s[i], in[i], sizeof in[i], MSG_DONTWAIT);
      q->user_data = i;
    }
    io_uring_submit(&ring);
    if (reap(&ring, pairs)) return 6;
    batched += now() - t1;
    calls += t1 - t0;
  }
  double per = 1e9 / ((double)kRounds * pairs);
  printf("%d pairs, ns per send and receive: a system call each %.0f, batched %.0f\n", pairs,
         calls * per, batched * per);
  return 0;
}
