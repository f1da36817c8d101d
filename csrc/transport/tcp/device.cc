// TcpDevice: memory (allocate/register), address, connection setup, the progress
// thread, sleeping. Endpoints (the data path) are in endpoint.cc.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "common/error.h"
#include "common/fork_guard.h"
#include "transport/tcp/socket.h"
#include "transport/tcp/tcp.h"

namespace rdmacoll {
namespace transport {
namespace tcp {

namespace {

constexpr uint32_t kAddressMagic = 0x32444352;  // "RCD2"
constexpr uint32_t kPackedMagic = 0x314d4354;   // "TCM1"
enum : uint32_t { kAllocated = 1, kUser = 2 };
// Setup waits at most this long for a peer (they all start together under mpiexec).
constexpr auto kConnectTimeout = std::chrono::seconds(120);

// What peers need to connect: self-describing, IPv4 or IPv6 alike.
struct Address {
  uint32_t magic;
  int32_t rank;
  int32_t size;
  uint8_t ipVersion;  // 4 or 6
  uint8_t pad;
  uint16_t port;
  uint8_t ip[16];  // network byte order; IPv4 uses the first 4, the rest 0
  uint64_t nonce;
};
static_assert(sizeof(Address) == 40, "the tcp address blob is 40 bytes");

struct Packed {
  uint32_t magic;
  uint32_t kind;
  int32_t rank;
  uint32_t id;
  uint64_t len;
};
static_assert(sizeof(Packed) <= PackedMemory::kBytes, "packed tcp memory too large");

// Library-owned memory: anonymous, pre-faulted, unmapped when the last holder (Memory,
// or a parser landing a payload in it) lets go.
struct Mapping {
  Mapping(void* p_, size_t len_) : p(p_), len(len_) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  void* p;
  size_t len;
  ~Mapping() {
    if (p != MAP_FAILED && len) munmap(p, len);
  }
};

}  // namespace

// ---------------------------------------------------------------- regions and memory

uint32_t Regions::add(char* base, size_t len, std::shared_ptr<void> keep) {
  std::lock_guard<std::mutex> g(mu_);
  uint32_t id = next_++;
  map_[id] = RegionRef{base, len, std::move(keep)};
  return id;
}

void Regions::remove(uint32_t id) {
  std::lock_guard<std::mutex> g(mu_);
  map_.erase(id);
}

bool Regions::find(uint32_t id, RegionRef* out) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = map_.find(id);
  if (it == map_.end()) return false;
  *out = it->second;
  return true;
}

TcpMemory::TcpMemory(std::shared_ptr<Regions> regions, int rank, char* ptr, size_t len, std::shared_ptr<void> keep,
                     bool allocated)
    : Memory(ptr, len), regions_(std::move(regions)), rank_(rank), allocated_(allocated) {
  id_ = regions_->add(ptr, len, std::move(keep));
}

TcpMemory::~TcpMemory() { regions_->remove(id_); }

void TcpMemory::discard(size_t off, size_t len) {
  RC_CHECK(off <= len_ && len <= len_ - off, "tcp: discard outside the region");
  if (allocated_ && madvise(static_cast<char*>(ptr_) + off, len, MADV_DONTNEED) != 0) {
    throw Error(sysError("tcp: giving pages back (madvise)", errno));
  }
}

void TcpMemory::pack(PackedMemory* out) const {
  Packed p{kPackedMagic, allocated_ ? kAllocated : kUser, rank_, id_, len_};
  std::memset(out->bytes, 0, sizeof(out->bytes));
  std::memcpy(out->bytes, &p, sizeof(p));
}

void TcpEndpoint::unpack(const PackedMemory& packed, RemoteMemory* out) {
  Packed p;
  std::memcpy(&p, packed.bytes, sizeof(p));
  if (p.magic != kPackedMagic || (p.kind != kAllocated && p.kind != kUser) || p.rank != peer_ || p.id == 0 ||
      p.len > (uint64_t(1) << 48)) {
    throw Error("tcp: malformed memory descriptor from rank " + std::to_string(peer_));
  }
  out->len = p.len;
  out->allocated = p.kind == kAllocated;
  out->key[0] = p.id;
  out->key[1] = out->key[2] = out->key[3] = 0;
  out->mapped = nullptr;
}

// ---------------------------------------------------------------- device

TcpDevice::TcpDevice(int rank, int size, const Options& options)
    : rank_(rank), size_(size), pid_(getpid()), regions_(std::make_shared<Regions>()) {
  const InterfaceChoice itf = chooseInterface(systemInterfaces(), options.socketIfname);
  ip_ = itf.addr;
  ifname_ = itf.name;
  std::random_device rd;
  nonce_ = (uint64_t(rd()) << 32) ^ rd() ^ (uint64_t(getpid()) << 16);
  listenFd_ = listenOn(ip_, &port_, size + 64);
  epollFd_ = epoll_create1(EPOLL_CLOEXEC);
  eventFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  sleepFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epollFd_ < 0 || eventFd_ < 0 || sleepFd_ < 0) {
    int e = errno;
    for (int fd : {epollFd_, eventFd_, sleepFd_}) {
      if (fd >= 0) close(fd);
    }
    close(listenFd_);
    throw Error(sysError("tcp: epoll/eventfd", e));
  }
  struct epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = eventFd_;
  epoll_ctl(epollFd_, EPOLL_CTL_ADD, eventFd_, &ev);
  forkguard::track(listenFd_);
  forkguard::track(epollFd_);
  forkguard::track(eventFd_);
  forkguard::track(sleepFd_);
  progress_ = std::thread([this] { progressLoop(); });
}

TcpDevice::~TcpDevice() {
  if (getpid() != pid_) {
    // A forked child's copy: the thread does not exist here and the descriptors were
    // closed at fork (common/fork_guard.h); touch nothing.
    progress_.detach();
    return;
  }
  stop_.store(true);
  uint64_t one = 1;
  ssize_t ignored = ::write(eventFd_, &one, sizeof(one));
  (void)ignored;
  if (progress_.joinable()) progress_.join();
  acceptor_.reset();  // (closes what it accepted: never tracked)
  for (int fd : {listenFd_, epollFd_, eventFd_, sleepFd_}) {
    if (fd >= 0) forkguard::release(fd);
  }
}

std::unique_ptr<Memory> TcpDevice::allocate(size_t len) {
  size_t maplen = len ? len : 1;
  void* p = mmap(nullptr, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) throw Error(sysError("tcp: allocating " + std::to_string(len) + " bytes", errno));
  auto keep = std::make_shared<Mapping>(p, maplen);
  return std::make_unique<TcpMemory>(regions_, rank_, static_cast<char*>(p), len, keep, true);
}

std::unique_ptr<Memory> TcpDevice::registerMemory(void* ptr, size_t len) {
  return std::make_unique<TcpMemory>(regions_, rank_, static_cast<char*>(ptr), len, nullptr, false);
}

Bytes TcpDevice::address() const {
  Address a{};
  a.magic = kAddressMagic;
  a.rank = rank_;
  a.size = size_;
  a.ipVersion = ip_.family == AF_INET6 ? 6 : 4;
  std::memcpy(a.ip, ip_.bytes, ip_.family == AF_INET6 ? 16 : 4);
  a.port = port_;
  a.nonce = nonce_;
  Bytes out(sizeof(a));
  std::memcpy(out.data(), &a, sizeof(a));
  return out;
}

std::string TcpDevice::listenAddress() const { return ifname_ + " " + endpointText(ip_, port_); }

void TcpDevice::beginSetup(const Bytes& secret) {
  RC_CHECK(listenFd_ >= 0, "tcp: setup has ended on this device (its listener is closed)");
  // The acceptor takes every waiting connection in one go, and then finds none.
  const int flags = fcntl(listenFd_, F_GETFL);
  if (flags < 0 || fcntl(listenFd_, F_SETFL, flags | O_NONBLOCK) != 0) throw Error(sysError("tcp: O_NONBLOCK", errno));
  acceptor_ = std::make_unique<Acceptor>(HandshakeIdentity{rank_, size_, nonce_, secret});
}

std::vector<std::string> TcpDevice::endSetup() {
  std::vector<std::string> dropped;
  if (acceptor_) {
    acceptor_->takeWaiting(listenFd_);
    acceptor_->closeAll();
    dropped = acceptor_->dropped();
    acceptor_.reset();
  }
  if (listenFd_ >= 0) {
    forkguard::release(listenFd_);  // (closes it)
    listenFd_ = -1;
  }
  return dropped;
}

int TcpDevice::connectToPeer(int peer, const IpAddress& ip, uint16_t port, uint64_t peerNonce) {
  RC_CHECK(acceptor_, "tcp: connect() outside setup (beginSetup first)");
  auto deadline = Clock::now() + kConnectTimeout;
  int fd = connectTo(ip, port, deadline, "rank " + std::to_string(peer));
  try {
    connectorHandshake(fd, acceptor_->identity(), peer, peerNonce, endpointText(ip, port), deadline);
  } catch (...) {
    close(fd);
    throw;
  }
  return fd;
}

int TcpDevice::acceptFrom(int peer, uint64_t peerNonce) {
  RC_CHECK(acceptor_, "tcp: connect() outside setup (beginSetup first)");
  int fd = acceptor_->waitFor(listenFd_, peer, peerNonce, Clock::now() + kConnectTimeout);
  if (fd < 0) {
    const auto& dropped = acceptor_->dropped();
    throw Error("tcp: rank " + std::to_string(peer) + " did not connect to rank " + std::to_string(rank_) + " at " +
                ifname_ + " " + endpointText(ip_, port_) + " within " + std::to_string(kConnectTimeout.count()) +
                " s (firewall, or wrong interface: set RDMACOLL_SOCKET_IFNAME)" +
                (dropped.empty()
                     ? std::string()
                     : "; " + std::to_string(dropped.size()) +
                           " connections came that did not prove this job's secret, the last " + dropped.back()));
  }
  return fd;
}

std::unique_ptr<Endpoint> TcpDevice::connect(int peer, const Bytes& peerAddress) {
  Address a;
  if (peerAddress.size() != sizeof(a)) {
    throw Error("tcp: rank " + std::to_string(peer) + " sent a " + std::to_string(peerAddress.size()) +
                "-byte address, expected " + std::to_string(sizeof(a)) + " (is it using another transport?)");
  }
  std::memcpy(&a, peerAddress.data(), sizeof(a));
  if (a.magic != kAddressMagic || a.rank != peer || a.size != size_ || peer == rank_ || peer < 0 || peer >= size_ ||
      (a.ipVersion != 4 && a.ipVersion != 6)) {
    throw Error("tcp: malformed address from rank " + std::to_string(peer));
  }
  IpAddress ip;
  ip.family = a.ipVersion == 6 ? AF_INET6 : AF_INET;
  std::memcpy(ip.bytes, a.ip, a.ipVersion == 6 ? 16 : 4);
  int fd = peer > rank_ ? connectToPeer(peer, ip, a.port, a.nonce) : acceptFrom(peer, a.nonce);
  try {
    tuneDataSocket(fd);
  } catch (...) {
    close(fd);
    throw;
  }
  return std::make_unique<TcpEndpoint>(this, peer, fd, endpointText(ip, a.port));
}

void TcpDevice::attach(TcpEndpoint* ep) {
  std::lock_guard<std::mutex> g(connsMu_);
  conns_[ep->fd()] = ep;
  forkguard::track(ep->fd());
  struct epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = ep->fd();
  if (epoll_ctl(epollFd_, EPOLL_CTL_ADD, ep->fd(), &ev) != 0) {
    conns_.erase(ep->fd());
    throw Error(sysError("tcp: epoll_ctl", errno));
  }
}

void TcpDevice::detach(TcpEndpoint* ep) {
  std::lock_guard<std::mutex> g(connsMu_);
  if (getpid() != pid_) return;
  epoll_ctl(epollFd_, EPOLL_CTL_DEL, ep->fd(), nullptr);
  conns_.erase(ep->fd());
}

void TcpDevice::unwatch(int fd) { epoll_ctl(epollFd_, EPOLL_CTL_DEL, fd, nullptr); }

void TcpDevice::progressLoop() {
  struct epoll_event evs[64];
  while (!stop_.load(std::memory_order_relaxed)) {
    int n = epoll_wait(epollFd_, evs, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // the epoll fd is gone: nothing to progress
    }
    bool events = false;
    for (int i = 0; i < n; ++i) {
      int fd = evs[i].data.fd;
      if (fd == eventFd_) {
        uint64_t v;
        ssize_t ignored = ::read(eventFd_, &v, sizeof(v));
        (void)ignored;
        continue;
      }
      std::lock_guard<std::mutex> g(connsMu_);
      auto it = conns_.find(fd);
      if (it != conns_.end()) events |= it->second->drain(true);
    }
    if (events) ring();
  }
}

// ---------------------------------------------------------------- sleeping

void TcpDevice::ring() {
  doorbell_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) {
    uint64_t one = 1;
    ssize_t ignored = ::write(sleepFd_, &one, sizeof(one));
    (void)ignored;
  }
  if (auto* hook = hook_.load(std::memory_order_acquire)) (*hook)();
}

bool TcpDevice::setWakeHook(std::function<void()> hook) {
  RC_CHECK(!hookOwner_, "tcp: the wake hook is set once");
  hookOwner_ = std::make_unique<std::function<void()>>(std::move(hook));
  hook_.store(hookOwner_.get(), std::memory_order_release);
  return true;
}

uint64_t TcpDevice::prepareSleep() {
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  return doorbell_.load(std::memory_order_seq_cst);
}

void TcpDevice::cancelSleep() { sleepers_.fetch_sub(1, std::memory_order_seq_cst); }

void TcpDevice::sleep(uint64_t seen, int timeoutMs) {
  // Wait for a ring (sleepFd_) or bytes on any connection, then read them here. The
  // connection list is only tried: the progress thread may hold it, and then it is the
  // one reading (and it rings).
  constexpr int kMaxFds = 64;
  struct pollfd fds[kMaxFds];
  TcpEndpoint* eps[kMaxFds];
  int n = 0;
  fds[n++] = {sleepFd_, POLLIN, 0};
  std::unique_lock<std::mutex> g(connsMu_, std::try_to_lock);
  if (g.owns_lock()) {
    for (auto& kv : conns_) {
      if (n == kMaxFds) break;
      eps[n] = kv.second;
      fds[n++] = {kv.first, POLLIN, 0};
    }
    g.unlock();
  }
  if (doorbell_.load(std::memory_order_seq_cst) == static_cast<uint32_t>(seen)) {
    poll(fds, static_cast<nfds_t>(n), timeoutMs);
  }
  if (fds[0].revents & POLLIN) {
    uint64_t v;
    ssize_t ignored = ::read(sleepFd_, &v, sizeof(v));
    (void)ignored;
  }
  bool events = false;
  if (n > 1 && g.try_lock()) {  // endpoints cannot go away while the list is held
    for (int i = 1; i < n; ++i) {
      if (fds[i].revents && conns_.count(fds[i].fd) && conns_[fds[i].fd] == eps[i]) events |= eps[i]->drain(false);
    }
    g.unlock();
  }
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  if (events) ring();
}

}  // namespace tcp
}  // namespace transport
}  // namespace rdmacoll
