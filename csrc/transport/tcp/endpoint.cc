// TcpEndpoint: the data path. Senders frame and send from the calling thread; the
// device's progress thread feeds received bytes through the FrameParser.
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/fork_guard.h"
#include "transport/tcp/tcp.h"

namespace rdmacoll {
namespace transport {
namespace tcp {

namespace {
// Bytes the progress thread reads from one connection before it looks at the others.
constexpr size_t kReadBudget = 8 << 20;
}  // namespace

TcpEndpoint::TcpEndpoint(TcpDevice* dev, int peer, int fd, const std::string& where)
    : dev_(dev), peer_(peer), fd_(fd), where_(where), parser_(dev->regions()) {
  try {
    dev_->attach(this);
  } catch (...) {
    close(fd_);
    throw;
  }
}

// Leaving: a goodbye tells the peer that its later writes (credits, acknowledgements of
// this rank's last call) may be dropped instead of failing. The socket itself stays open
// until the process ends, as a shared-memory peer's process does: its end (EOF/RST) is
// what peers take for death, whether it ends normally or is killed.
TcpEndpoint::~TcpEndpoint() {
  if (dev_->forked()) return;  // the child's copy: the descriptor was closed at fork
  dev_->detach(this);
  std::lock_guard<std::mutex> g(sendMu_);
  if (!alive()) {
    forkguard::release(fd_);
    return;
  }
  FrameHeader h = byeHeader();
  struct pollfd p{fd_, POLLOUT, 0};
  if (poll(&p, 1, 100) > 0) {
    ssize_t ignored = send(fd_, &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
  }
}

std::string TcpEndpoint::describe() const { return "tcp (rank " + std::to_string(peer_) + " at " + where_ + ")"; }

std::string TcpEndpoint::deathText() const {
  std::lock_guard<std::mutex> g(errMu_);
  return "tcp: connection to " + describe() + " failed: " + error_;
}

void TcpEndpoint::markDead(const std::string& why) {
  {
    std::lock_guard<std::mutex> g(errMu_);
    if (error_.empty()) error_ = why;
  }
  if (!dead_.exchange(true)) {
    // Both directions: the peer sees the connection end, our poll()s and epoll return.
    shutdown(fd_, SHUT_RDWR);
    dev_->ring();
  }
}

void TcpEndpoint::checkBounds(const RemoteMemory& m, size_t off, size_t len, const char* what) const {
  if (off > m.len || len > m.len - off) {
    throw Error(std::string("tcp: ") + what + " of " + std::to_string(len) + " bytes at offset " + std::to_string(off) +
                " is outside rank " + std::to_string(peer_) + "'s " + std::to_string(m.len) + "-byte region");
  }
}

// After a goodbye, writes into the peer's allocated memory are dropped (as a shared-memory
// peer's mapping outlives it, so late credits are harmless); its registered user memory is
// gone with it, and saying so is the contract's.
void TcpEndpoint::checkLeft(const RemoteMemory& dst) const {
  if (left_.load(std::memory_order_acquire) && !dst.allocated) {
    throw Error("tcp: " + describe() + " left (shutdown); its registered memory is gone");
  }
}

void TcpEndpoint::sendFrame(const FrameHeader& h, const void* payload, size_t len) {
  std::lock_guard<std::mutex> g(sendMu_);
  if (left_.load(std::memory_order_acquire)) return;  // it no longer listens, nor needs to
  if (!alive()) throw Error(deathText());
  struct iovec iov[2] = {{const_cast<FrameHeader*>(&h), sizeof(h)}, {const_cast<void*>(payload), len}};
  struct iovec* v = iov;
  int count = len ? 2 : 1;
  while (count > 0) {
    struct msghdr m{};
    m.msg_iov = v;
    m.msg_iovlen = static_cast<size_t>(count);
    ssize_t n = sendmsg(fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        if (left_.load(std::memory_order_acquire)) return;
        markDead(strerror(errno));
        throw Error(deathText());
      }
      // The peer's kernel buffer is full; its progress thread drains it into memory.
      if (left_.load(std::memory_order_acquire)) return;
      if (!alive()) throw Error(deathText());
      struct pollfd p{fd_, POLLOUT, 0};
      poll(&p, 1, 100);
      continue;
    }
    size_t done = static_cast<size_t>(n);
    while (count > 0 && done >= v->iov_len) {
      done -= v->iov_len;
      ++v;
      --count;
    }
    if (count > 0) {
      v->iov_base = static_cast<char*>(v->iov_base) + done;
      v->iov_len -= done;
    }
  }
}

uint64_t TcpEndpoint::write(const void* src, const RemoteMemory& dst, size_t dstOff, size_t len, bool hasImm,
                            uint32_t imm) {
  checkBounds(dst, dstOff, len, "write");
  if (len == 0 && !hasImm) return 0;
  checkLeft(dst);
  sendFrame(writeHeader(static_cast<uint32_t>(dst.key[0]), dstOff, len, hasImm, imm), src, len);
  return 0;  // the socket took a copy
}

void TcpEndpoint::put64(const RemoteMemory& dst, size_t dstOff, uint64_t value) {
  checkBounds(dst, dstOff, 8, "put64");
  if (dstOff % 8 != 0) throw Error("tcp: put64 at unaligned offset " + std::to_string(dstOff));
  checkLeft(dst);
  sendFrame(put64Header(static_cast<uint32_t>(dst.key[0]), dstOff, value), nullptr, 0);
}

bool TcpEndpoint::pollImmediate(uint32_t* imm) {
  if (immAvail_.load(std::memory_order_acquire) == 0) {
    // The caller drives the receive itself when the progress thread is not at it.
    if (drain(false)) dev_->ring();
    if (immAvail_.load(std::memory_order_acquire) == 0) return false;
  }
  std::lock_guard<std::mutex> g(immMu_);
  *imm = imms_.front();
  imms_.pop_front();
  immAvail_.fetch_sub(1, std::memory_order_release);
  return true;
}

bool TcpEndpoint::drain(bool wait) {
  std::unique_lock<std::mutex> g(rxMu_, std::defer_lock);
  if (wait) {
    g.lock();
  } else if (!g.try_lock()) {
    return false;
  }
  return readLocked();
}

bool TcpEndpoint::readLocked() {
  if (removed_) return false;
  bool events = false;
  size_t budget = kReadBudget;
  while (budget > 0) {
    if (!alive()) break;  // the sender side failed: stop reading, report below
    FrameParser::Target t = parser_.next();
    size_t want = t.len < budget ? t.len : budget;
    ssize_t n = recv(fd_, t.dst, want, MSG_DONTWAIT);
    if (n > 0) {
      budget -= static_cast<size_t>(n);
      uint32_t imm = 0;
      FrameParser::Event ev = parser_.advance(static_cast<size_t>(n), &imm);
      if (ev == FrameParser::Event::kImmediate) {
        std::lock_guard<std::mutex> g(immMu_);
        imms_.push_back(imm);
        immAvail_.fetch_add(1, std::memory_order_release);
        events = true;
      } else if (ev == FrameParser::Event::kPut) {
        events = true;
      } else if (ev == FrameParser::Event::kBye) {
        left_.store(true, std::memory_order_release);
      } else if (ev == FrameParser::Event::kError) {
        markDead("rank " + std::to_string(peer_) + " sent a malformed frame (" + parser_.error() +
                 "); connection closed");
      }
      continue;
    }
    if (n == 0) {
      markDead(left_.load()                ? "the peer left (shutdown) and its process ended"
               : parser_.atFrameBoundary() ? "the peer closed the connection (process ended?)"
                                           : "the peer closed the connection in the middle of a frame");
    } else if (errno == EINTR) {
      continue;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      markDead(strerror(errno));
    }
    break;
  }
  if (!alive()) {
    dev_->unwatch(fd_);
    removed_ = true;
    events = true;
  }
  return events;
}

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
