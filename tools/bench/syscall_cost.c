// What one read and one write of 1 KB cost on a loopback TCP pair, for each way of calling the
// kernel sluice could use (readv, recvmsg, recv; writev, sendmsg, send): the loopback receive
// path runs inside the write, so each figure is most of a proxy's per-message kernel work.
//
//   gcc -O2 tools/bench/syscall_cost.c -o /tmp/syscall_cost && taskset -c 0 /tmp/syscall_cost
#include <fcntl.h>
#include <stdio.h>
#include <sys/uio.h>

#include "loopback_pair.h"

enum { kRounds = 300000 };
static char head[300], body[724], in[5][16384];

int main(void) {
  int c, s;
  if (loopbackPair(&c, &s)) return 1;
  fcntl(s, F_SETFL, O_NONBLOCK);
  const char* names[] = {"writev 1 iov / readv 5 iov", "writev 2 iov / recvmsg 5 iov",
                         "sendmsg 2 iov / readv 2 iov", "send / recv"};
  // The four ways take turns message by message, so a change in the machine's load meanwhile
  // weighs on each alike.
  double tw[4] = {0}, tr[4] = {0};
  for (int i = 0; i < kRounds; ++i) {
    for (int mode = 0; mode < 4; ++mode) {
      struct iovec w2[2] = {{head, sizeof head}, {body, sizeof body}};
      struct iovec w1[1] = {{in[4], 1024}};
      struct iovec r[5] = {
          {in[0], 1024}, {in[1], 16384}, {in[2], 16384}, {in[3], 16384}, {in[4], 16384}};
      struct msghdr m = {0};
      double t0 = benchNow();
      if (mode == 0) {
        writev(c, w1, 1);
      } else if (mode == 1) {
        writev(c, w2, 2);
      } else if (mode == 2) {
        m.msg_iov = w2;
        m.msg_iovlen = 2;
        sendmsg(c, &m, MSG_NOSIGNAL);
      } else {
        send(c, in[4], 1024, MSG_NOSIGNAL);
      }
      double t1 = benchNow();
      if (mode == 0) {
        readv(s, r, 5);
      } else if (mode == 1) {
        struct msghdr mr = {0};
        mr.msg_iov = r;
        mr.msg_iovlen = 5;
        recvmsg(s, &mr, 0);
      } else if (mode == 2) {
        readv(s, r, 2);
      } else {
        recv(s, in[0], 16384, 0);
      }
      double t2 = benchNow();
      tw[mode] += t1 - t0;
      tr[mode] += t2 - t1;
    }
  }
  for (int mode = 0; mode < 4; ++mode) {
    printf("%-30s write %5.0f ns   read %5.0f ns\n", names[mode], tw[mode] / kRounds * 1e9,
           tr[mode] / kRounds * 1e9);
  }
  return 0;
}
