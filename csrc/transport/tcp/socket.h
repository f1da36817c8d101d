// Socket plumbing of the tcp transport: listening and connecting over IPv4 or IPv6 (which
// interface and address: interfaces.h), the blocking handshake reads/writes with a
// deadline, and the options a data connection gets (non-blocking, TCP_NODELAY, buffers).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/tcp/interfaces.h"

namespace rdmacoll {
namespace transport {
namespace tcp {

using Clock = std::chrono::steady_clock;

// Socket buffer size asked for on data connections (the kernel caps it at its
// net.core.{r,w}mem_max unless the process may override it).
constexpr int kSocketBufferBytes = 4 << 20;

// A listening socket on ip, port chosen by the kernel (returned in *port).
int listenOn(const IpAddress& ip, uint16_t* port, int backlog);
// A connected blocking socket, retrying refused/unreachable attempts until deadline.
int connectTo(const IpAddress& ip, uint16_t port, Clock::time_point deadline, const std::string& what);
// Blocking exact-size transfer with a deadline on a (possibly non-blocking) socket.
// Return false on timeout or EOF; throw Error on other failures.
bool readFull(int fd, void* p, size_t n, Clock::time_point deadline);
bool writeFull(int fd, const void* p, size_t n, Clock::time_point deadline);
// Data connection options: O_NONBLOCK, TCP_NODELAY, buffers, keepalive.
void tuneDataSocket(int fd);

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
