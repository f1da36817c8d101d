#include "transport/shm/shm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>

#include "common/error.h"
#include "common/fork_guard.h"
#include "common/stream_copy.h"
#include "common/syscalls.h"

namespace rdmacoll {
namespace transport {
namespace shm {

namespace {

constexpr uint32_t kPackedMagic = 0x52434d31;   // "RCM1"
constexpr uint32_t kAddressMagic = 0x52434431;  // "RCD1"
enum : uint32_t { kAllocated = 1, kUser = 2 };

struct Packed {
  uint32_t magic;
  uint32_t kind;
  int32_t pid;
  int32_t fd;
  uint64_t idOrAddr;  // segment id (allocated) or virtual address (user)
  uint64_t len;
};
static_assert(sizeof(Packed) <= PackedMemory::kBytes, "packed shm memory too large");

struct Address {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  int32_t rank;
  uint64_t segLen;
  uint64_t segId;
  char bootId[40];
};

std::string bootId() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string s;
  std::getline(f, s);
  return s;
}

size_t deviceSegmentSize(int size) { return sizeof(DeviceHeader) + sizeof(Ring) * size; }

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const struct timespec* ts) {
  // Shared (not PRIVATE) futex: the word lives in a mapping other processes share.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

}  // namespace

// ---------------------------------------------------------------- memory

ShmMemory::ShmMemory(Segment seg) : Memory(seg.data(), seg.size()), seg_(std::move(seg)), allocated_(true) {}
ShmMemory::ShmMemory(void* ptr, size_t len) : Memory(ptr, len), allocated_(false) {}

void ShmMemory::pack(PackedMemory* out) const {
  Packed p{kPackedMagic,
           allocated_ ? kAllocated : kUser,
           static_cast<int32_t>(getpid()),
           allocated_ ? seg_.fd() : -1,
           allocated_ ? seg_.id() : reinterpret_cast<uint64_t>(ptr_),
           len_};
  std::memset(out->bytes, 0, sizeof(out->bytes));
  std::memcpy(out->bytes, &p, sizeof(p));
}

void ShmMemory::discard(size_t off, size_t len) {
  RC_CHECK(allocated_ && off <= len_ && len <= len_ - off, "shm: discard outside the segment");
  if (fallocate(seg_.fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
                static_cast<off_t>(len)) != 0) {
    throw Error(sysError("shm: giving pages back (fallocate)", errno));
  }
}

// ---------------------------------------------------------------- device

ShmDevice::ShmDevice(int rank, int size) : rank_(rank), size_(size) {
  seg_ = Segment::create(deviceSegmentSize(size), 0);
  header_ = new (seg_.data()) DeviceHeader();
  header_->doorbell.store(0);
  header_->sleepers.store(0);
  for (int r = 0; r < size; ++r) new (ring(r)) Ring();
}

Ring* ShmDevice::ring(int fromRank) const {
  char* base = static_cast<char*>(seg_.data()) + sizeof(DeviceHeader);
  return reinterpret_cast<Ring*>(base + sizeof(Ring) * fromRank);
}

std::unique_ptr<Memory> ShmDevice::allocate(size_t len) {
  return std::make_unique<ShmMemory>(Segment::create(len, nextSegmentId_++));
}

std::unique_ptr<Memory> ShmDevice::registerMemory(void* ptr, size_t len) {
  return std::make_unique<ShmMemory>(ptr, len);
}

void ShmDevice::packUser(const void* ptr, size_t len, PackedMemory* out) {
  Packed p{kPackedMagic, kUser, static_cast<int32_t>(getpid()), -1, reinterpret_cast<uint64_t>(ptr), len};
  std::memcpy(out->bytes, &p, sizeof(p));
}

Bytes ShmDevice::address() const {
  Address a{};
  a.magic = kAddressMagic;
  a.pid = getpid();
  a.fd = seg_.fd();
  a.rank = rank_;
  a.segLen = seg_.size();
  a.segId = seg_.id();
  std::string b = bootId();
  std::strncpy(a.bootId, b.c_str(), sizeof(a.bootId) - 1);
  Bytes out(sizeof(a));
  std::memcpy(out.data(), &a, sizeof(a));
  return out;
}

std::unique_ptr<Endpoint> ShmDevice::connect(int peer, const Bytes& peerAddress) {
  Address a;
  if (peerAddress.size() != sizeof(a)) {
    throw Error("shm: rank " + std::to_string(peer) + " sent a " + std::to_string(peerAddress.size()) +
                "-byte address, expected " + std::to_string(sizeof(a)));
  }
  std::memcpy(&a, peerAddress.data(), sizeof(a));
  a.bootId[sizeof(a.bootId) - 1] = 0;
  if (a.magic != kAddressMagic || a.rank != peer || a.segLen != deviceSegmentSize(size_)) {
    throw Error("shm: malformed address from rank " + std::to_string(peer));
  }
  if (bootId() != a.bootId) {
    throw Error("shm: rank " + std::to_string(peer) +
                " runs on another host; shared memory reaches only same-host peers");
  }
  Segment s = Segment::openPeer(a.pid, a.fd, a.segId, a.segLen);
  return std::make_unique<ShmEndpoint>(this, peer, a.pid, std::move(s));
}

uint64_t ShmDevice::prepareSleep() {
  header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
  return header_->doorbell.load(std::memory_order_seq_cst);
}

void ShmDevice::cancelSleep() { header_->sleepers.fetch_sub(1, std::memory_order_seq_cst); }

void ShmDevice::sleep(uint64_t seen, int timeoutMs) {
  struct timespec ts;
  ts.tv_sec = timeoutMs / 1000;
  ts.tv_nsec = static_cast<long>(timeoutMs % 1000) * 1000000L;
  futex(&header_->doorbell, FUTEX_WAIT, static_cast<uint32_t>(seen), &ts);
  header_->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void ShmDevice::wakeSleepers() {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // the event before the sleepers check
  if (header_->sleepers.load(std::memory_order_relaxed) != 0) {
    header_->doorbell.fetch_add(1, std::memory_order_seq_cst);
    futex(&header_->doorbell, FUTEX_WAKE, INT32_MAX, nullptr);
  }
}

// ---------------------------------------------------------------- endpoint

ShmEndpoint::ShmEndpoint(ShmDevice* dev, int peer, pid_t pid, Segment peerDeviceSeg)
    : dev_(dev), peer_(peer), pid_(pid), peerSeg_(std::move(peerDeviceSeg)) {
  peerHeader_ = static_cast<DeviceHeader*>(peerSeg_.data());
  char* base = static_cast<char*>(peerSeg_.data()) + sizeof(DeviceHeader);
  outRing_ = reinterpret_cast<Ring*>(base + sizeof(Ring) * dev->rank());
  inRing_ = dev->ring(peer);
  pidfd_ = forkguard::track(sys::pidfdOpen(pid));
  if (pidfd_ < 0) throw Error(sysError("shm: pidfd_open of rank " + std::to_string(peer), errno));
}

ShmEndpoint::~ShmEndpoint() { forkguard::release(pidfd_); }

std::string ShmEndpoint::describe() const {
  return "shm (rank " + std::to_string(peer_) + ", pid " + std::to_string(pid_) + ")";
}

bool ShmEndpoint::alive() {
  if (dead_) return false;
  struct pollfd p{pidfd_, POLLIN, 0};
  if (poll(&p, 1, 0) > 0) dead_ = true;  // pidfd is readable once the process has exited
  return !dead_;
}

void ShmEndpoint::unpack(const PackedMemory& packed, RemoteMemory* out) {
  Packed p;
  std::memcpy(&p, packed.bytes, sizeof(p));
  if (p.magic != kPackedMagic || (p.kind != kAllocated && p.kind != kUser) || p.pid != pid_ ||
      (p.kind == kAllocated && p.fd < 0) || p.len > (uint64_t(1) << 48)) {
    throw Error("shm: malformed memory descriptor from rank " + std::to_string(peer_));
  }
  out->len = p.len;
  out->allocated = p.kind == kAllocated;
  out->key[0] = static_cast<uint64_t>(p.pid);
  out->key[1] = static_cast<uint64_t>(static_cast<uint32_t>(p.fd));
  out->key[2] = p.idOrAddr;
  out->mapped = nullptr;
}

void* ShmEndpoint::map(RemoteMemory* m) {
  if (!m->allocated) return nullptr;
  if (m->mapped) return m->mapped;
  auto it = mapped_.find(m->key[2]);
  if (it == mapped_.end() || it->second.size() < m->len) {
    Segment s = Segment::openPeer(pid_, static_cast<int>(m->key[1]), m->key[2], m->len);
    it = mapped_.insert_or_assign(m->key[2], std::move(s)).first;
  }
  m->mapped = it->second.data();
  return m->mapped;
}

void ShmEndpoint::checkBounds(const RemoteMemory& m, size_t off, size_t len, const char* what) const {
  if (off > m.len || len > m.len - off) {
    throw Error(std::string("shm: ") + what + " of " + std::to_string(len) + " bytes at offset " + std::to_string(off) +
                " is outside rank " + std::to_string(peer_) + "'s " + std::to_string(m.len) + "-byte region");
  }
}

void ShmEndpoint::cmaTransfer(const RemoteMemory& m, size_t off, void* local, size_t len, bool toPeer) {
  char* l = static_cast<char*>(local);
  uint64_t r = m.key[2] + off;
  while (len > 0) {
    struct iovec liov{l, len};
    struct iovec riov{reinterpret_cast<void*>(r), len};
    ssize_t n = toPeer ? process_vm_writev(pid_, &liov, 1, &riov, 1, 0) : process_vm_readv(pid_, &liov, 1, &riov, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ESRCH) dead_ = true;
      throw Error(
          sysError(std::string("shm: cross-memory ") + (toPeer ? "write to " : "read from ") + describe(), errno));
    }
    if (n == 0) throw Error("shm: cross-memory transfer made no progress with " + describe());
    l += n;
    r += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
}

namespace {
constexpr size_t kMeasuredCopyBytes = 64 << 10;  // shorter copies: memcpy (a clock read costs ~25 ns)
constexpr double kSlowBytesPerNs = 4;            // 4 GB/s: near ~23 GB/s, far ~1.7 (docs/transports.md)
constexpr int kStreamedCopies = 64;
}  // namespace

void ShmEndpoint::copyIntoMapping(char* dst, const void* src, size_t len) {
  if (len < kMeasuredCopyBytes) {
    std::memcpy(dst, src, len);
  } else if (streamedLeft_ > 0) {
    --streamedLeft_;
    streamStore(dst, src, len);
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst, src, len);
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    // two in a row: not the first touch of a page, nor a preemption
    slowCopies_ = static_cast<double>(len) < kSlowBytesPerNs * ns ? slowCopies_ + 1 : 0;
    if (slowCopies_ == 2) {
      slowCopies_ = 0;
      streamedLeft_ = kStreamedCopies;
    }
  }
}

uint64_t ShmEndpoint::write(const void* src, const RemoteMemory& dst, size_t dstOff, size_t len, bool hasImm,
                            uint32_t imm) {
  if (len > 0) {
    checkBounds(dst, dstOff, len, "write");
    if (dst.allocated) {
      RemoteMemory m = dst;
      copyIntoMapping(static_cast<char*>(map(&m)) + dstOff, src, len);
    } else {
      cmaTransfer(dst, dstOff, const_cast<void*>(src), len, /*toPeer=*/true);
    }
  }
  if (!hasImm) return 0;  // copied: done
  // Wait for ring space. The consumer publishes its head in its own segment; reading it
  // pulls a cache line across cores, so only when the head last seen says "full".
  uint64_t k = sent_;
  if (k - headSeen_ >= kRingEntries) {
    headSeen_ = outRing_->head.load(std::memory_order_acquire);
    int spins = 0;
    while (k - headSeen_ >= kRingEntries) {
      if (++spins % 1024 == 0 && !alive()) throw Error("shm: " + describe() + " died");
      sched_yield();
      headSeen_ = outRing_->head.load(std::memory_order_acquire);
    }
  }
  outRing_->entries[k % kRingEntries].store(((k + 1) << 32) | imm, std::memory_order_release);
  sent_ = k + 1;
  wakePeer();
  return 0;
}

void ShmEndpoint::put64(const RemoteMemory& dst, size_t dstOff, uint64_t value) {
  checkBounds(dst, dstOff, 8, "put64");
  if (dstOff % 8 != 0) throw Error("shm: put64 at unaligned offset " + std::to_string(dstOff));
  if (dst.allocated) {
    RemoteMemory m = dst;
    char* p = static_cast<char*>(map(&m)) + dstOff;
    reinterpret_cast<std::atomic<uint64_t>*>(p)->store(value, std::memory_order_release);
  } else {
    cmaTransfer(dst, dstOff, &value, 8, /*toPeer=*/true);
  }
  wakePeer();
}

void ShmEndpoint::wakePeer() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (peerHeader_->sleepers.load(std::memory_order_relaxed) != 0) {
    peerHeader_->doorbell.fetch_add(1, std::memory_order_seq_cst);
    futex(&peerHeader_->doorbell, FUTEX_WAKE, INT32_MAX, nullptr);
  }
}

bool ShmEndpoint::pollImmediate(uint32_t* imm) {
  uint64_t e = inRing_->entries[received_ % kRingEntries].load(std::memory_order_acquire);
  if ((e >> 32) != ((received_ + 1) & 0xffffffffu)) return false;
  *imm = static_cast<uint32_t>(e);
  ++received_;
  inRing_->head.store(received_, std::memory_order_release);
  return true;
}

void ShmEndpoint::read(const RemoteMemory& src, size_t srcOff, void* dst, size_t len) {
  if (len == 0) return;
  checkBounds(src, srcOff, len, "read");
  if (src.allocated) {
    RemoteMemory m = src;
    std::memcpy(dst, static_cast<const char*>(map(&m)) + srcOff, len);
  } else {
    cmaTransfer(src, srcOff, dst, len, /*toPeer=*/false);
  }
}

}  // namespace shm
}  // namespace transport
}  // namespace rdmacoll
