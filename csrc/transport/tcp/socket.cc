#include "transport/tcp/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/error.h"

namespace rdmacoll {
namespace transport {
namespace tcp {

namespace {

int msLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1000 ? 1000 : static_cast<int>(left);
}

// Wait until fd is ready for `events` or the deadline passes (false).
bool waitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    int ms = msLeft(deadline);
    struct pollfd p{fd, events, 0};
    int r = poll(&p, 1, ms);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) throw Error(sysError("tcp: poll", errno));
    if (r == 0 && ms == 0) return false;
  }
}

}  // namespace

std::string ipText(uint32_t ip) {
  char buf[INET_ADDRSTRLEN] = {};
  struct in_addr a;
  a.s_addr = ip;
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

Interface chooseInterface(const std::string& wanted) {
  const char* want = wanted.c_str();
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw Error(sysError("tcp: getifaddrs", errno));
  Interface chosen, loopback;
  std::string seen;
  for (struct ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    uint32_t ip = reinterpret_cast<struct sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    seen += std::string(seen.empty() ? "" : ", ") + i->ifa_name + " " + ipText(ip);
    if (want && *want) {
      if (chosen.ip == 0 && std::strcmp(i->ifa_name, want) == 0) chosen = {i->ifa_name, ip};
      continue;
    }
    if (!(i->ifa_flags & IFF_UP)) continue;
    if (i->ifa_flags & IFF_LOOPBACK) {
      if (loopback.ip == 0) loopback = {i->ifa_name, ip};
    } else if (chosen.ip == 0) {
      chosen = {i->ifa_name, ip};
    }
  }
  freeifaddrs(list);
  if (want && *want && chosen.ip == 0) {
    throw Error(std::string("tcp: RDMACOLL_SOCKET_IFNAME=") + want +
                " names no interface with an IPv4 address; IPv4 interfaces here: " +
                (seen.empty() ? "none" : seen));
  }
  if (chosen.ip != 0) return chosen;
  if (loopback.ip != 0) return loopback;
  return {"lo", htonl(INADDR_LOOPBACK)};
}

int listenOn(uint32_t ip, uint16_t* port, int backlog) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(sysError("tcp: socket", errno));
  struct sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = ip;
  a.sin_port = 0;
  socklen_t alen = sizeof(a);
  if (bind(fd, reinterpret_cast<struct sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, backlog) != 0 ||
      getsockname(fd, reinterpret_cast<struct sockaddr*>(&a), &alen) != 0) {
    int e = errno;
    close(fd);
    throw Error(sysError("tcp: listening on " + ipText(ip), e));
  }
  *port = ntohs(a.sin_port);
  return fd;
}

int connectTo(uint32_t ip, uint16_t port, Clock::time_point deadline, const std::string& what) {
  struct sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = ip;
  a.sin_port = htons(port);
  int lastErr = 0;
  while (true) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw Error(sysError("tcp: socket", errno));
    if (connect(fd, reinterpret_cast<struct sockaddr*>(&a), sizeof(a)) == 0) return fd;
    lastErr = errno;
    close(fd);
    bool retry = lastErr == ECONNREFUSED || lastErr == ENETUNREACH || lastErr == EHOSTUNREACH ||
                 lastErr == ETIMEDOUT || lastErr == EINTR || lastErr == EAGAIN;
    if (!retry || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw Error(sysError("tcp: connecting to " + what + " at " + ipText(ip) + ":" + std::to_string(port), lastErr));
}

bool readFull(int fd, void* p, size_t n, Clock::time_point deadline) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = recv(fd, c, n, MSG_DONTWAIT);
    if (r > 0) {
      c += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return false;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throw Error(sysError("tcp: handshake read", errno));
    if (!waitFor(fd, POLLIN, deadline)) return false;
  }
  return true;
}

bool writeFull(int fd, const void* p, size_t n, Clock::time_point deadline) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t r = send(fd, c, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      c += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) throw Error(sysError("tcp: handshake write", errno));
    if (!waitFor(fd, POLLOUT, deadline)) return false;
  }
  return true;
}

void tuneDataSocket(int fd) {
  int one = 1, buf = kSocketBufferBytes;
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) throw Error(sysError("tcp: O_NONBLOCK", errno));
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    throw Error(sysError("tcp: TCP_NODELAY", errno));
  }
  // Buffers: best effort (the kernel caps them); keepalive: a peer host that vanishes
  // without a RST is noticed eventually even when nothing is being sent.
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
