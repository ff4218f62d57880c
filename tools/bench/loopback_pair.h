// What the system-call micro-benchmarks here (syscall_cost.c, look_cost.c) share: a connected
// loopback TCP pair and a clock.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double benchNow(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// A TCP connection on 127.0.0.1: *client (TCP_NODELAY) and *server (blocking). 0 on success.
static int loopbackPair(int* client, int* server) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(l, (void*)&a, sizeof a) || listen(l, 1) || getsockname(l, (void*)&a, &len)) return -1;
  *client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(*client, (void*)&a, sizeof a)) return -1;
  *server = accept(l, 0, 0);
  close(l);
  int one = 1;
  setsockopt(*client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return *server < 0 ? -1 : 0;
}
