// The floor under every proxy's CPU per request: the least an HTTP/1.1 proxy can do for the
// benchmark's requests. It reads a client's request head, drops a "Connection: close" line (and
// adds it to the response head), sends the head on an idle connection to the origin (made the first
// time none is idle, kept for the next request), passes the response back as it comes (its end
// known by Content-Length) and puts the origin connection back; a client that asked closes after
// its response. A readiness event, one recv and one send per message, level-triggered; no checks,
// no allocation per request, no timers, no logging.
//
// What it costs per request is the kernel's work for the request (accept and close when each
// request has its own connection, two receives, two sends, their TCP segments and wakeups) and
// the least a loop adds: the part of any proxy's cost that no proxy can take away.
// compare.sh --only floor runs it beside the proxies. Only for the benchmark's origin (nginx,
// Content-Length on every response, GET without a body, no pipelining): anything else closes.
//
//   gcc -O2 tools/bench/floor_relay.c -o /tmp/floor_relay
//   taskset -c 0 /tmp/floor_relay LISTEN_PORT ORIGIN_PORT
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum { kHead = 8192, kBuffer = 64 * 1024, kEvents = 256, kPool = 4096 };

struct conn {
  int fd;
  int is_origin;
  struct conn* peer;  // the other side of the exchange in progress
  char head[kHead];   // a client's request head / an origin's response head, as it comes
  size_t head_len;
  long long body_left;  // origin: body bytes still to pass on; -1 while the head comes
  int close_after;      // client: asked for "Connection: close"
  int closing;          // client: close once what is held has left
  char* held;           // bytes this socket did not take yet (its source stops reading)
  size_t held_len, held_off, held_cap;
};

static int ep;
static struct sockaddr_in origin;
static struct conn* pool[kPool];  // idle origin connections
static int pooled;
static char buffer[kBuffer];
static const char kCloseLine[] = "\r\nConnection: close";

static void watch(struct conn* c, unsigned events, int op) {
  struct epoll_event ev = {.events = events, .data.ptr = c};
  epoll_ctl(ep, op, c->fd, &ev);
}

// Connections dropped in this turn: freed once its events are handled (a later event of the
// same turn may name one; a dropped connection's fd is -1).
static struct conn* dropped[2 * kEvents];
static int ndropped;

static void drop(struct conn* c) {
  if (c == NULL || c->fd < 0) return;
  if (c->is_origin) {
    for (int i = 0; i < pooled; ++i) {
      if (pool[i] == c) pool[i] = pool[--pooled];
    }
  }
  close(c->fd);  // leaves the epoll set
  c->fd = -1;
  if (c->peer != NULL) c->peer->peer = NULL;
  dropped[ndropped++] = c;
}

// Both sides of an exchange that cannot go on.
static void drop_exchange(struct conn* c) {
  struct conn* peer = c->peer;
  drop(c);
  drop(peer);
}

static void free_dropped(void) {
  for (int i = 0; i < ndropped; ++i) {
    free(dropped[i]->held);
    free(dropped[i]);
  }
  ndropped = 0;
}

// Sends on `dst`, holding what it does not take; -1 on a failed socket.
static int send_to(struct conn* dst, const char* bytes, size_t len) {
  size_t sent = 0;
  if (dst->held_len == 0) {
    ssize_t n = send(dst->fd, bytes, len, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN) return -1;
    sent = n < 0 ? 0 : (size_t)n;
    if (sent == len) return 0;
    // The source stops reading until this socket took the rest.
    watch(dst->peer, 0, EPOLL_CTL_MOD);
    watch(dst, EPOLLIN | EPOLLOUT, EPOLL_CTL_MOD);
  }
  size_t rest = len - sent;
  if (dst->held_len + rest > dst->held_cap) {
    dst->held_cap = (dst->held_len + rest) * 2;
    dst->held = realloc(dst->held, dst->held_cap);
  }
  memcpy(dst->held + dst->held_len, bytes + sent, rest);
  dst->held_len += rest;
  return 0;
}

// `c` became writable while it held bytes.
static int drain_held(struct conn* c) {
  while (c->held_off < c->held_len) {
    ssize_t n = send(c->fd, c->held + c->held_off, c->held_len - c->held_off, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN ? 0 : -1;
    c->held_off += (size_t)n;
  }
  c->held_len = c->held_off = 0;
  if (c->closing) return -1;
  watch(c, EPOLLIN, EPOLL_CTL_MOD);
  if (c->peer != NULL) watch(c->peer, EPOLLIN, EPOLL_CTL_MOD);
  return 0;
}

static struct conn* origin_connection(void) {
  if (pooled > 0) return pool[--pooled];
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  if (fd < 0 || connect(fd, (struct sockaddr*)&origin, sizeof origin) != 0) {
    if (fd >= 0) close(fd);
    return NULL;
  }
  fcntl(fd, F_SETFL, O_NONBLOCK);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct conn* o = calloc(1, sizeof *o);
  o->fd = fd;
  o->is_origin = 1;
  watch(o, EPOLLIN, EPOLL_CTL_ADD);
  return o;
}

static void on_client(struct conn* c) {
  ssize_t n = recv(c->fd, c->head + c->head_len, kHead - c->head_len, 0);
  if (n <= 0) {
    if (n < 0 && errno == EAGAIN) return;
    drop_exchange(c);
    return;
  }
  c->head_len += (size_t)n;
  char* end = memmem(c->head, c->head_len, "\r\n\r\n", 4);
  if (end == NULL) {
    if (c->head_len == kHead) drop_exchange(c);
    return;
  }
  size_t len = (size_t)(end + 4 - c->head);
  if (c->peer != NULL || len != c->head_len) {  // pipelined, or a body: not the benchmark's
    drop_exchange(c);
    return;
  }
  char* line = memmem(c->head, len, kCloseLine, sizeof kCloseLine - 1);
  if (line != NULL) {
    c->close_after = 1;
    size_t cut = sizeof kCloseLine - 1;
    memmove(line, line + cut, len - (size_t)(line - c->head) - cut);
    len -= cut;
  }
  c->head_len = 0;
  struct conn* o = origin_connection();
  if (o == NULL) {
    drop(c);
    return;
  }
  o->peer = c;
  c->peer = o;
  o->body_left = -1;
  o->head_len = 0;
  if (send_to(o, c->head, len) != 0) drop_exchange(c);
}

static void on_origin(struct conn* o) {
  struct conn* c = o->peer;
  if (c == NULL) {  // idle: the origin closed it, or said something out of turn
    drop(o);
    return;
  }
  ssize_t n;
  if (o->body_left < 0) {
    n = recv(o->fd, o->head + o->head_len, kHead - o->head_len, 0);
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      drop_exchange(o);
      return;
    }
    o->head_len += (size_t)n;
    char* end = memmem(o->head, o->head_len, "\r\n\r\n", 4);
    const char* cl = memmem(o->head, o->head_len, "\r\nContent-Length: ", 18);
    if (end == NULL || cl == NULL || cl > end) {
      if (end != NULL || o->head_len == kHead) drop_exchange(o);
      return;
    }
    long long body = strtoll(cl + 18, NULL, 10);
    o->body_left = body - (long long)(o->head_len - (size_t)(end + 4 - o->head));
    if (c->close_after) {  // the client hears that the connection closes after this response
      const size_t add = sizeof kCloseLine - 1;
      if (o->head_len + add > kHead) {
        drop_exchange(o);
        return;
      }
      memmove(end + add, end, o->head_len - (size_t)(end - o->head));
      memcpy(end, kCloseLine, add);
      o->head_len += add;
    }
    if (send_to(c, o->head, o->head_len) != 0) {
      drop_exchange(o);
      return;
    }
  } else {
    size_t want = o->body_left < kBuffer ? (size_t)o->body_left : kBuffer;
    n = recv(o->fd, buffer, want, 0);
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0 || send_to(c, buffer, (size_t)n) != 0) {
      drop_exchange(o);
      return;
    }
    o->body_left -= n;
  }
  if (o->body_left > 0) return;
  if (o->body_left < 0) {  // more than the response: not the benchmark's origin
    drop_exchange(o);
    return;
  }
  // The response is through: the origin connection waits for the next request (read again if
  // the client's held bytes had stopped it).
  if (c->held_len > 0) watch(o, EPOLLIN, EPOLL_CTL_MOD);
  o->peer = NULL;
  c->peer = NULL;
  if (pooled < kPool) {
    pool[pooled++] = o;
  } else {
    drop(o);
  }
  if (c->close_after) {
    if (c->held_len == 0) {
      drop(c);
    } else {
      c->closing = 1;
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: floor_relay LISTEN_PORT ORIGIN_PORT\n");
    return 2;
  }
  struct sockaddr_in at = {.sin_family = AF_INET};
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  at.sin_port = htons((uint16_t)atoi(argv[1]));
  origin = at;
  origin.sin_port = htons((uint16_t)atoi(argv[2]));
  int one = 1;
  int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(l, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // accepted sockets inherit it
  if (bind(l, (struct sockaddr*)&at, sizeof at) != 0 || listen(l, 1024) != 0) {
    perror("listen");
    return 1;
  }
  ep = epoll_create1(0);
  struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(ep, EPOLL_CTL_ADD, l, &lev);
  struct epoll_event events[kEvents];
  for (;;) {
    int n = epoll_wait(ep, events, kEvents, -1);
    for (int i = 0; i < n; ++i) {
      struct conn* c = events[i].data.ptr;
      if (c == NULL) {
        int fd = accept4(l, NULL, NULL, SOCK_NONBLOCK);
        if (fd < 0) continue;
        c = calloc(1, sizeof *c);
        c->fd = fd;
        watch(c, EPOLLIN, EPOLL_CTL_ADD);
        continue;
      }
      if (c->fd < 0) continue;  // dropped earlier in this turn
      if ((events[i].events & EPOLLOUT) && c->held_len > 0 && drain_held(c) != 0) {
        if (c->closing && c->peer == NULL) {
          drop(c);
        } else {
          drop_exchange(c);
        }
        continue;
      }
      if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        if (c->is_origin) {
          on_origin(c);
        } else if (c->held_len == 0) {
          on_client(c);
        }
      }
    }
    free_dropped();
  }
}
