#include "transport/tcp/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
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

// The socket address of ip:port (IPv4 or IPv6); its length.
socklen_t toSockaddr(const IpAddress& ip, uint16_t port, struct sockaddr_storage* out) {
  std::memset(out, 0, sizeof(*out));
  if (ip.family == AF_INET6) {
    auto* a = reinterpret_cast<struct sockaddr_in6*>(out);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    std::memcpy(&a->sin6_addr, ip.bytes, 16);
    return sizeof(*a);
  }
  RC_CHECK(ip.family == AF_INET, "tcp: an address of unknown family " + std::to_string(ip.family));
  auto* a = reinterpret_cast<struct sockaddr_in*>(out);
  a->sin_family = AF_INET;
  a->sin_port = htons(port);
  std::memcpy(&a->sin_addr, ip.bytes, 4);
  return sizeof(*a);
}

}  // namespace

int listenOn(const IpAddress& ip, uint16_t* port, int backlog) {
  struct sockaddr_storage a;
  socklen_t alen = toSockaddr(ip, 0, &a);
  int fd = socket(ip.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(sysError("tcp: socket", errno));
  if (bind(fd, reinterpret_cast<struct sockaddr*>(&a), alen) != 0 || listen(fd, backlog) != 0 ||
      getsockname(fd, reinterpret_cast<struct sockaddr*>(&a), &alen) != 0) {
    int e = errno;
    close(fd);
    throw Error(sysError("tcp: listening on " + ipText(ip), e));
  }
  *port = ntohs(ip.family == AF_INET6 ? reinterpret_cast<struct sockaddr_in6*>(&a)->sin6_port
                                      : reinterpret_cast<struct sockaddr_in*>(&a)->sin_port);
  return fd;
}

int connectTo(const IpAddress& ip, uint16_t port, Clock::time_point deadline, const std::string& what) {
  struct sockaddr_storage a;
  const socklen_t alen = toSockaddr(ip, port, &a);
  int lastErr = 0;
  while (true) {
    int fd = socket(ip.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw Error(sysError("tcp: socket", errno));
    if (connect(fd, reinterpret_cast<struct sockaddr*>(&a), alen) == 0) return fd;
    lastErr = errno;
    close(fd);
    bool retry = lastErr == ECONNREFUSED || lastErr == ENETUNREACH || lastErr == EHOSTUNREACH || lastErr == ETIMEDOUT ||
                 lastErr == EINTR || lastErr == EAGAIN;
    if (!retry || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw Error(sysError("tcp: connecting to " + what + " at " + endpointText(ip, port), lastErr));
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
