// What loopback TCP carries on this machine, one way and both ways at once: the bound
// on a 2-rank allreduce over tcp (docs/transports.md, "Speed, and what bounds it").
//
//   gcc -O2 -pthread benchmarks/tcp_ceiling.c -o /tmp/tcp_ceiling
//   /tmp/tcp_ceiling [MiB per transfer, default 256] [send size KiB, default 1024] [rounds, default 5]
//
// Two processes (fork) joined by one TCP connection over 127.0.0.1, TCP_NODELAY, the
// kernel's buffer autotuning. "one way": process A sends, B receives. "both ways": each
// process sends from a thread while its main thread receives the same number of bytes.
// Prints every round's rate per direction (GB/s, 1e9 bytes) and the median; no rdmacoll.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static size_t total, chunk;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void send_all(int fd, const char* buf, size_t n) {
  for (size_t off = 0; off < n;) {
    size_t c = n - off < chunk ? n - off : chunk;
    ssize_t w = send(fd, buf + off, c, 0);
    if (w <= 0) { perror("send"); exit(1); }
    off += (size_t)w;
  }
}

static void recv_all(int fd, char* buf, size_t n) {
  for (size_t off = 0; off < n;) {
    size_t c = n - off < chunk ? n - off : chunk;
    ssize_t r = recv(fd, buf + off, c, 0);
    if (r <= 0) { perror("recv"); exit(1); }
    off += (size_t)r;
  }
}

struct sender { int fd; const char* buf; };
static void* sender_main(void* p) {
  struct sender* s = p;
  send_all(s->fd, s->buf, total);
  return NULL;
}

static void sync_peers(int fd) {  // one byte each way: both sides start together
  char c = 0;
  send_all(fd, &c, 1);
  recv_all(fd, &c, 1);
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// Returns the seconds of one round as seen by this process.
static double round_once(int fd, int first, int both, char* out, char* in) {
  sync_peers(fd);
  double t0 = now();
  if (both) {
    pthread_t th;
    struct sender s = {fd, out};
    pthread_create(&th, NULL, sender_main, &s);
    recv_all(fd, in, total);
    pthread_join(th, NULL);
  } else if (first) {
    send_all(fd, out, total);
    char c;
    recv_all(fd, &c, 1);  // the receiver has everything
  } else {
    recv_all(fd, in, total);
    send_all(fd, "", 1);
  }
  return now() - t0;
}

int main(int argc, char** argv) {
  total = (size_t)(argc > 1 ? atol(argv[1]) : 256) << 20;
  chunk = (size_t)(argc > 2 ? atol(argv[2]) : 1024) << 10;
  int rounds = argc > 3 ? atoi(argv[3]) : 5;
  if (total == 0 || chunk == 0 || rounds < 1 || rounds > 1000) {
    fprintf(stderr, "usage: %s [MiB] [send KiB] [rounds]\n", argv[0]);
    return 2;
  }
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  if (bind(lfd, (struct sockaddr*)&sa, sizeof sa) || listen(lfd, 1) || getsockname(lfd, (struct sockaddr*)&sa, &len)) {
    perror("listen");
    return 1;
  }
  pid_t pid = fork();
  int first = pid != 0, fd;
  if (!first) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr*)&sa, sizeof sa)) { perror("connect"); return 1; }
  } else {
    fd = accept(lfd, NULL, NULL);
  }
  close(lfd);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char* out = malloc(total);
  char* in = malloc(total);
  memset(out, 1, total);  // touched: no page faults inside the timed rounds
  memset(in, 0, total);
  for (int both = 0; both <= 1; ++both) {
    double rate[1000];
    round_once(fd, first, both, out, in);  // warm-up
    for (int i = 0; i < rounds; ++i) rate[i] = total / round_once(fd, first, both, out, in) / 1e9;
    if (first) {
      printf("%-9s %zu MiB in %zu KiB sends, GB/s per direction:", both ? "both ways" : "one way",
             total >> 20, chunk >> 10);
      for (int i = 0; i < rounds; ++i) printf(" %.2f", rate[i]);
      qsort(rate, rounds, sizeof rate[0], cmp);
      printf("  median %.2f\n", rate[rounds / 2]);
      fflush(stdout);
    }
  }
  close(fd);
  if (first) waitpid(pid, NULL, 0);
  return 0;
}
