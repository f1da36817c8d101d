#include "transport/tcp/handshake.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/sha256.h"
#include "common/syscalls.h"

namespace rdmacoll {
namespace transport {
namespace tcp {

// The wire's messages: a named namespace, not an anonymous one, because Acceptor::Handshake
// (a member of a class with linkage) holds a Hello, and in a unity build (CMakeLists.txt)
// this file is no longer the main file, where GCC warns about such a member
// (-Wsubobject-linkage).
namespace handshake_wire {

constexpr uint32_t kHelloMagic = 0x32484352;  // "RCH2"
constexpr uint32_t kReplyMagic = 0x32524352;  // "RCR2"
constexpr uint32_t kProofMagic = 0x32504352;  // "RCP2"
constexpr uint32_t kAckMagic = 0x32414352;    // "RCA2"
constexpr size_t kChallenge = 16;

struct Hello {
  uint32_t magic;
  int32_t from, to, size;
  uint64_t toNonce, fromNonce;
  uint8_t challenge[kChallenge];
};
struct Reply {
  uint32_t magic;
  int32_t from, to, pad;
  uint8_t challenge[kChallenge];
  uint8_t proof[32];
};
struct Proof {
  uint32_t magic, pad;
  uint8_t proof[32];
};
struct Ack {
  uint32_t magic, pad;
};
static_assert(sizeof(Hello) == 48 && sizeof(Reply) == 64 && sizeof(Proof) == 40, "handshake wire sizes");

}  // namespace handshake_wire
using namespace handshake_wire;

namespace {

void fresh(uint8_t* out, size_t n) {
  while (n > 0) {
    const long r = sys::getRandom(out, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(sysError("tcp: getrandom", errno));
    }
    out += r;
    n -= static_cast<size_t>(r);
  }
}

// HMAC(secret, role || hello || listener's challenge): what each side proves.
Digest proofOf(const Bytes& secret, const char* role, const Hello& hello, const uint8_t* listenerChallenge) {
  uint8_t msg[16 + sizeof(Hello) + kChallenge] = {};
  std::strncpy(reinterpret_cast<char*>(msg), role, 16);
  std::memcpy(msg + 16, &hello, sizeof(hello));
  std::memcpy(msg + 16 + sizeof(hello), listenerChallenge, kChallenge);
  return hmacSha256(secret.data(), secret.size(), msg, sizeof(msg));
}

bool proves(const uint8_t* given, const Digest& expected) {
  Digest g;
  std::memcpy(g.data(), given, g.size());
  return equalDigests(g, expected);
}

std::string peerText(const struct sockaddr_storage& a) {
  IpAddress ip;
  uint16_t port = 0;
  if (a.ss_family == AF_INET6) {
    const auto* s = reinterpret_cast<const struct sockaddr_in6*>(&a);
    ip.family = AF_INET6;
    std::memcpy(ip.bytes, &s->sin6_addr, 16);
    port = ntohs(s->sin6_port);
  } else if (a.ss_family == AF_INET) {
    const auto* s = reinterpret_cast<const struct sockaddr_in*>(&a);
    ip.family = AF_INET;
    std::memcpy(ip.bytes, &s->sin_addr, 4);
    port = ntohs(s->sin_port);
  } else {
    return "a connection of address family " + std::to_string(a.ss_family);
  }
  return endpointText(ip, port);
}

}  // namespace

void connectorHandshake(int fd, const HandshakeIdentity& me, int peer, uint64_t peerNonce, const std::string& where,
                        Clock::time_point deadline) {
  RC_CHECK(!me.secret.empty(), "tcp: no job secret to connect with (bootstrap creates one)");
  Hello h{};
  h.magic = kHelloMagic;
  h.from = me.rank;
  h.to = peer;
  h.size = me.size;
  h.toNonce = peerNonce;
  h.fromNonce = me.nonce;
  fresh(h.challenge, kChallenge);
  const std::string who = "rank " + std::to_string(peer) + " at " + where;
  Reply r{};
  if (!writeFull(fd, &h, sizeof(h), deadline) || !readFull(fd, &r, sizeof(r), deadline)) {
    throw Error("tcp: " + who + " did not answer the connection's hello (closed or timed out)");
  }
  if (r.magic != kReplyMagic || r.from != peer || r.to != me.rank ||
      !proves(r.proof, proofOf(me.secret, "listener", h, r.challenge))) {
    throw Error("tcp: the process at " + where + " is not rank " + std::to_string(peer) +
                " of this job: it did not prove the job's secret");
  }
  Proof p{};
  p.magic = kProofMagic;
  Digest mine = proofOf(me.secret, "connector", h, r.challenge);
  std::memcpy(p.proof, mine.data(), mine.size());
  Ack a{};
  if (!writeFull(fd, &p, sizeof(p), deadline) || !readFull(fd, &a, sizeof(a), deadline) || a.magic != kAckMagic) {
    throw Error("tcp: " + who + " refused this rank's proof of the job's secret (closed or timed out)");
  }
}

// ---------------------------------------------------------------- the listener's side

struct Acceptor::Handshake {
  int fd = -1;
  std::string from;  // "ip:port"
  Clock::time_point deadline;
  bool helloSeen = false;
  Hello hello{};
  uint8_t challenge[kChallenge] = {};  // ours, sent in the reply
  uint8_t buf[sizeof(Hello) > sizeof(Proof) ? sizeof(Hello) : sizeof(Proof)] = {};
  size_t have = 0;
};

Acceptor::Acceptor(HandshakeIdentity me) : me_(std::move(me)) {}

Acceptor::~Acceptor() { closeAll(); }

void Acceptor::closeAll() {
  while (!active_.empty()) drop(*active_.front(), "still in handshake when setup ended");
  for (auto& kv : proved_) close(kv.second.fd);
  proved_.clear();
}

void Acceptor::drop(Handshake& h, const std::string& why) {
  close(h.fd);
  dropped_.push_back(h.from + ": " + why);
  active_.erase(std::find_if(active_.begin(), active_.end(), [&](const auto& p) { return p.get() == &h; }));
}

Acceptor::Handshake* Acceptor::oldestStranger() const {
  // A connection whose hello passed names this rank's device nonce, which only the
  // bootstrap gave out: a peer (their number is bounded by the job's size), never dropped
  // to make room.
  for (const auto& h : active_) {
    if (!h->helloSeen) return h.get();
  }
  return nullptr;
}

void Acceptor::accept(int listenFd) {
  while (true) {
    struct sockaddr_storage a{};
    socklen_t alen = sizeof(a);
    int fd = accept4(listenFd, reinterpret_cast<struct sockaddr*>(&a), &alen, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EMFILE && errno != ENFILE) return;  // none waiting (or transient: the next poll retries)
      // Out of descriptors: make room (a stranger's connection first), or wait a little
      // rather than spin on a listener that stays readable.
      if (Handshake* h = oldestStranger()) {
        drop(*h, "dropped: out of file descriptors");
        continue;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    if (active_.size() >= kMaxHandshakes) {
      if (Handshake* h = oldestStranger()) drop(*h, "dropped for a newer connection (too many at once)");
    }
    auto h = std::make_unique<Handshake>();
    h->fd = fd;
    h->from = peerText(a);
    h->deadline = Clock::now() + kHandshakeTimeout;
    active_.push_back(std::move(h));
  }
}

bool Acceptor::advance(Handshake& h) {
  const size_t want = h.helloSeen ? sizeof(Proof) : sizeof(Hello);
  while (h.have < want) {
    ssize_t r = recv(h.fd, h.buf + h.have, want - h.have, MSG_DONTWAIT);
    if (r > 0) {
      h.have += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // more later
    drop(h, r == 0 ? "closed before finishing the handshake" : sysError("read", errno));
    return false;
  }
  h.have = 0;
  if (!h.helloSeen) {
    std::memcpy(&h.hello, h.buf, sizeof(Hello));
    const Hello& m = h.hello;
    if (m.magic != kHelloMagic) {
      drop(h, "not an rdmacoll hello (garbage)");
      return false;
    }
    if (m.to != me_.rank || m.size != me_.size || m.toNonce != me_.nonce || m.from < 0 || m.from >= me_.rank) {
      drop(h, "a hello for another rank, job or device (from rank " + std::to_string(m.from) + " to rank " +
                  std::to_string(m.to) + " of " + std::to_string(m.size) + ")");
      return false;
    }
    h.helloSeen = true;
    Reply r{};
    r.magic = kReplyMagic;
    r.from = me_.rank;
    r.to = m.from;
    fresh(h.challenge, kChallenge);
    std::memcpy(r.challenge, h.challenge, kChallenge);
    Digest d = proofOf(me_.secret, "listener", m, h.challenge);
    std::memcpy(r.proof, d.data(), d.size());
    // A fresh connection's send buffer takes 64 bytes at once.
    if (send(h.fd, &r, sizeof(r), MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(r))) {
      drop(h, "closed before the reply");
      return false;
    }
    return advance(h);  // the proof may be there already
  }
  Proof p;
  std::memcpy(&p, h.buf, sizeof(p));
  if (p.magic != kProofMagic || !proves(p.proof, proofOf(me_.secret, "connector", h.hello, h.challenge))) {
    drop(h, "claimed rank " + std::to_string(h.hello.from) + " without proving the job's secret");
    return false;
  }
  Ack a{kAckMagic, 0};
  if (send(h.fd, &a, sizeof(a), MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(a))) {
    drop(h, "closed before the acknowledgement");
    return false;
  }
  auto old = proved_.find(h.hello.from);
  if (old != proved_.end()) {  // the same rank again: its newer connection wins
    close(old->second.fd);
    dropped_.push_back(old->second.from + ": replaced by a newer connection from rank " + std::to_string(h.hello.from));
  }
  proved_[h.hello.from] = Proved{h.fd, h.hello.fromNonce, h.from};
  active_.erase(std::find_if(active_.begin(), active_.end(), [&](const auto& q) { return q.get() == &h; }));
  return false;
}

int Acceptor::waitFor(int listenFd, int peer, uint64_t peerNonce, Clock::time_point deadline) {
  RC_CHECK(!me_.secret.empty(), "tcp: no job secret to accept connections with (bootstrap creates one)");
  std::vector<struct pollfd> fds;
  while (true) {
    auto it = proved_.find(peer);
    if (it != proved_.end()) {
      Proved p = it->second;
      proved_.erase(it);
      if (p.nonce == peerNonce) return p.fd;
      close(p.fd);  // rank `peer` of this job, but not the device whose address bootstrap gave
      dropped_.push_back(p.from + ": rank " + std::to_string(peer) + " from another device than its address names");
      continue;
    }
    const auto now = Clock::now();
    if (now >= deadline) return -1;
    auto next = deadline;  // the nearest deadline bounds the wait
    for (const auto& h : active_) next = std::min(next, h->deadline);
    fds.assign(1, pollfd{listenFd, POLLIN, 0});
    for (const auto& h : active_) fds.push_back(pollfd{h->fd, POLLIN, 0});
    // (a handshake may have expired while this rank connected to others: wait 0, then drop it)
    auto ms = std::max<long long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1);
    int n = poll(fds.data(), static_cast<nfds_t>(fds.size()), static_cast<int>(std::min<long long>(ms, 1000)));
    if (n < 0 && errno != EINTR) throw Error(sysError("tcp: poll during setup", errno));
    if (n > 0) {
      // Handshakes first (their order in fds is active_'s before any accept or drop).
      std::vector<Handshake*> ready;
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents) ready.push_back(active_[i - 1].get());
      }
      for (Handshake* h : ready) advance(*h);
      if (fds[0].revents & POLLIN) accept(listenFd);
    }
    // Then the expired ones go (after reading: bytes already there count).
    const auto later = Clock::now();
    for (size_t i = 0; i < active_.size();) {
      if (active_[i]->deadline <= later) {
        drop(*active_[i], "no complete handshake within " + std::to_string(kHandshakeTimeout.count()) + " s");
      } else {
        ++i;
      }
    }
  }
}

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
