#include "transport/ibverbs/ibverbs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "common/error.h"
#include "transport/ibverbs/diagnose.h"
#include "transport/ibverbs/wire.h"

namespace rdmacoll {
namespace transport {
namespace ibverbs {

namespace {
constexpr size_t kBounceHalfBytes = 256 << 10;
constexpr size_t kHugePageAdviceBytes = 4 << 20;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

size_t pageRound(size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(n, 1) + page - 1) / page * page;
}
}  // namespace

// ---------------------------------------------------------------- memory

IbvMemory::IbvMemory(IbvDevice* dev, void* ptr, size_t len, const Mrs& mrs, size_t mapped, bool allocated)
    : Memory(ptr, len), dev_(dev), mrs_(mrs), mapped_(mapped), allocated_(allocated) {}

IbvMemory::~IbvMemory() {
  if (dev_) {
    dev_->forget(this);
    deregister();
  }
  if (mapped_) munmap(ptr_, mapped_);
}

void IbvMemory::deregister() {
  for (ibv_mr*& mr : mrs_) {
    if (mr) dev_->verbs().dereg_mr(mr);
    mr = nullptr;
  }
}

void IbvMemory::detach() {
  deregister();
  dev_ = nullptr;
}

void IbvMemory::pack(PackedMemory* out) const {
  if (!dev_) throw Error("ibverbs: memory packed after its device was closed");
  wire::Region r;
  r.owner = dev_->rank();
  r.allocated = allocated_;
  r.addr = reinterpret_cast<uint64_t>(ptr_);
  r.len = len_;
  r.rails = static_cast<uint8_t>(dev_->rails());
  for (int i = 0; i < dev_->rails(); ++i) r.rkey[i] = mrs_[i] ? mrs_[i]->rkey : 0;
  wire::packRegion(r, out);
}

// ---------------------------------------------------------------- device

IbvDevice::IbvDevice(int rank, int size, const Options& options)
    : rank_(rank), size_(size), connected_(static_cast<size_t>(size)) {
  verbs_ = loadVerbs(options.ibverbsLibrary);
  // Registered pages and fork(): kernels since 5.12 copy pinned pages for the child;
  // older ones need ibv_fork_init (pages become MADV_DONTFORK: a child must not touch them).
  copyOnFork_ = verbs_->is_fork_initialized && verbs_->is_fork_initialized() == IBV_FORK_UNNEEDED;
  if (!copyOnFork_ && verbs_->fork_init) verbs_->fork_init();
  for (PortChoice& c : choosePorts(*verbs_, options)) rails_.push_back(Rail{c, {}, nullptr, nullptr});
  try {
    QpLimits lim;
    std::random_device rd;
    const uint32_t psn = rd() & 0xffffff;
    for (Rail& rl : rails_) {
      const std::string name = rl.port.device + ":" + std::to_string(rl.port.port);
      portName_ += (portName_.empty() ? "" : "+") + name;
      ibv_device_attr da;
      if (verbs_->query_device(rl.port.ctx, &da) != 0) throw Error(sysError("ibverbs: ibv_query_device", errno));
      rl.pd = verbs_->alloc_pd(rl.port.ctx);
      if (!rl.pd) throw Error(sysError("ibverbs: ibv_alloc_pd on " + name, errno));
      rl.channel = verbs_->create_comp_channel(rl.port.ctx);
      if (!rl.channel) throw Error(sysError("ibverbs: ibv_create_comp_channel on " + name, errno));
      int fl = fcntl(rl.channel->fd, F_GETFL);
      fcntl(rl.channel->fd, F_SETFL, fl | O_NONBLOCK);

      // Every rail's limits apply to every queue pair (lanes differ only in their rail).
      lim.sendDepth = std::min(lim.sendDepth, da.max_qp_wr);
      lim.recvDepth = std::min(lim.recvDepth, da.max_qp_wr);
      if (lim.sendDepth + lim.recvDepth > da.max_cqe) {
        lim.recvDepth = std::min(lim.recvDepth, da.max_cqe / 2);
        lim.sendDepth = std::min(lim.sendDepth, da.max_cqe - lim.recvDepth);
      }
      if (lim.sendDepth < 8 || lim.recvDepth < 8) {
        throw Error(unusable(name + " allows only " + std::to_string(da.max_qp_wr) + " work requests per queue"));
      }
      lim.maxRdAtomic = static_cast<uint8_t>(
          std::max(1, std::min({static_cast<int>(lim.maxRdAtomic), da.max_qp_rd_atom, da.max_qp_init_rd_atom})));
      maxMessage_ = std::min<size_t>(maxMessage_, rl.port.attr.max_msg_sz ? rl.port.attr.max_msg_sz : (1u << 30));

      rl.local.port = rl.port.port;
      rl.local.linkLayer = rl.port.attr.link_layer == IBV_LINK_LAYER_ETHERNET ? wire::kEthernet : wire::kInfiniBand;
      rl.local.mtu = static_cast<uint8_t>(rl.port.attr.active_mtu);
      rl.local.lid = rl.port.attr.lid;
      rl.local.gidIndex = rl.port.gidIndex;
      rl.local.psn = psn;
    }
    if (options.ibMaxMessage) maxMessage_ = std::min<size_t>(maxMessage_, std::max<uint64_t>(options.ibMaxMessage, 64));

    lanes_ = std::clamp(std::max(options.ibQpsPerConnection, rails()), 1, kMaxLanes);
    qps_.resize(static_cast<size_t>(size) * static_cast<size_t>(lanes_));
    for (int r = 0; r < size; ++r) {
      for (int l = 0; l < lanes_ && r != rank; ++l) {
        Rail& rl = rails_[static_cast<size_t>(railOf(static_cast<size_t>(l)))];
        qps_[static_cast<size_t>(r * lanes_ + l)] =
            std::make_unique<QueuePair>(*verbs_, rl.port.ctx, rl.pd, rl.channel, lim, r);
      }
    }
  } catch (...) {
    release();
    throw;
  }
}

IbvDevice::~IbvDevice() { release(); }

void IbvDevice::release() {
  bounce_.reset();
  qps_.clear();
  {  // memory that outlives the device (an rc.empty array kept after shutdown) stays mapped
    std::lock_guard<std::mutex> g(regionsMu_);
    for (const Region& r : regions_) const_cast<IbvMemory*>(r.owner)->detach();
    regions_.clear();
  }
  for (Rail& rl : rails_) {
    if (rl.channel) verbs_->destroy_comp_channel(rl.channel), rl.channel = nullptr;
    if (rl.pd) verbs_->dealloc_pd(rl.pd), rl.pd = nullptr;
    if (rl.port.ctx) verbs_->close_device(rl.port.ctx), rl.port.ctx = nullptr;
  }
}

std::unique_ptr<Memory> IbvDevice::registerOnRails(void* p, size_t len, size_t mapped, bool allocated) {
  const size_t regLen = mapped ? mapped : len;
  Mrs mrs{};
  for (size_t i = 0; i < rails_.size(); ++i) {
    mrs[i] = verbs_->reg_mr(rails_[i].pd, p, regLen, kAccess);
    if (!mrs[i]) {
      const int err = errno;
      for (size_t j = 0; j < i; ++j) verbs_->dereg_mr(mrs[j]);
      if (mapped) munmap(p, mapped);
      throw Error("ibverbs: " + registrationFailed(err, p, regLen, memlockLimit()));
    }
  }
  keepInheritable(p, regLen);
  auto m = std::make_unique<IbvMemory>(this, p, len, mrs, mapped, allocated);
  Region r{reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + regLen, {}, m.get()};
  for (size_t i = 0; i < rails_.size(); ++i) r.lkeys[i] = mrs[i]->lkey;
  std::lock_guard<std::mutex> g(regionsMu_);
  regions_.push_back(r);
  return m;
}

std::unique_ptr<Memory> IbvDevice::allocate(size_t len) {
  const size_t mapped = pageRound(len);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw Error(sysError("ibverbs: mmap of " + std::to_string(mapped) + " bytes", errno));
  if (mapped >= kHugePageAdviceBytes) madvise(p, mapped, MADV_HUGEPAGE);
  // Pre-fault (registration pins the pages anyway; this makes them ours first).
  volatile char* c = static_cast<volatile char*>(p);
  for (size_t off = 0; off < mapped; off += static_cast<size_t>(sysconf(_SC_PAGESIZE))) c[off] = 0;
  return registerOnRails(p, len, mapped, /*allocated=*/true);
}

std::unique_ptr<Memory> IbvDevice::registerMemory(void* ptr, size_t len) {
  if (len == 0) return std::make_unique<IbvMemory>(this, ptr, 0, Mrs{}, 0, false);
  return registerOnRails(ptr, len, 0, /*allocated=*/false);
}

// Where the kernel copies pinned pages at fork, MADV_DONTFORK protects nothing and breaks
// every child that touches those pages (a DataLoader worker, the heap around a registered
// array): SIGSEGV. libibverbs still sets it when another library in the process (MPICH's
// UCX) called ibv_fork_init or set RDMAV_FORK_SAFE, so undo it for our ranges.
void IbvDevice::keepInheritable(void* p, size_t len) {
  if (!copyOnFork_ || len == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + len + page - 1) & ~(page - 1);
  madvise(reinterpret_cast<void*>(b), e - b, MADV_DOFORK);
}

// A device being removed loses its uverbs character device first (queue_pair.h: removalOf).
std::string IbvDevice::failure() {
  for (const Rail& rl : rails_) {
    const std::string gone = removalOf(rl.port.ctx, rl.port.device + ":" + std::to_string(rl.port.port));
    if (!gone.empty()) return gone;
  }
  return {};
}

void IbvDevice::forget(const IbvMemory* m) {
  std::lock_guard<std::mutex> g(regionsMu_);
  regions_.erase(std::remove_if(regions_.begin(), regions_.end(), [m](const Region& r) { return r.owner == m; }),
                 regions_.end());
}

bool IbvDevice::findLkeys(const void* p, size_t len, std::array<uint32_t, kMaxRails>* lkeys) const {
  const uintptr_t b = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> g(regionsMu_);
  for (const Region& r : regions_) {
    if (b >= r.begin && b <= r.end && len <= r.end - b) {
      *lkeys = r.lkeys;
      return true;
    }
  }
  return false;
}

Bytes IbvDevice::address() const {
  wire::Address a;
  a.rank = rank_;
  a.size = size_;
  a.linkLayer = rails_[0].local.linkLayer;
  a.psn = rails_[0].local.psn;
  for (const Rail& rl : rails_) {
    wire::RailAddress ra;
    ra.port = rl.local.port;
    ra.mtu = rl.local.mtu;
    ra.gidIndex = static_cast<uint8_t>(rl.local.gidIndex);
    ra.lid = rl.local.lid;
    std::memcpy(ra.gid, rl.port.gid.raw, sizeof(ra.gid));
    a.rail.push_back(ra);
  }
  a.lanes = static_cast<uint16_t>(lanes_);
  a.qpn.assign(qps_.size(), 0);
  for (size_t i = 0; i < qps_.size(); ++i) {
    if (qps_[i]) a.qpn[i] = qps_[i]->qpn();
  }
  return wire::packAddress(a);
}

std::unique_ptr<Endpoint> IbvDevice::connect(int peer, const Bytes& peerAddress) {
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw Error("ibverbs: cannot connect to rank " + std::to_string(peer));
  if (connected_[peer]) throw Error("ibverbs: rank " + std::to_string(peer) + " is already connected");
  wire::Address a = wire::unpackAddress(peerAddress, peer, rank_, size_);
  const wire::LinkLayer mine = rails_[0].local.linkLayer;
  if (a.linkLayer != mine) {
    auto ll = [](uint8_t l) { return l == wire::kEthernet ? "Ethernet (RoCE)" : "InfiniBand"; };
    throw Error("ibverbs: rank " + std::to_string(peer) + "'s port is " + ll(a.linkLayer) + ", this rank's (" +
                portName_ + ") is " + ll(mine) + ": they cannot reach each other; choose ports with RDMACOLL_IB_HCA");
  }
  // The lanes both ends have (they differ where the ranks' hosts have different rails).
  const int lanes = std::min<int>(lanes_, a.lanes);
  std::vector<QueuePair*> qps;
  std::vector<uint32_t> remote;
  for (int l = 0; l < lanes; ++l) {
    QueuePair* q = qps_[static_cast<size_t>(peer * lanes_ + l)].get();
    const uint32_t qpn = a.qpn[static_cast<size_t>(rank_) * a.lanes + static_cast<size_t>(l)];
    const Rail& mine = rails_[static_cast<size_t>(railOf(static_cast<size_t>(l)))];
    const size_t theirs = static_cast<size_t>(l) % a.rail.size();
    ibv_gid gid;
    std::memcpy(gid.raw, a.rail[theirs].gid, sizeof(gid.raw));
    const std::string path = "lane " + std::to_string(l) + ": " + mine.port.device + ":" +
                             std::to_string(mine.port.port) + " to its rail " + std::to_string(theirs) +
                             (mine.local.linkLayer == wire::kEthernet ? ", GID " + gidText(gid)
                                                                      : ", LID " + std::to_string(a.rail[theirs].lid));
    q->connect(mine.local, a.rail[theirs], a.psn, qpn, path);
    qps.push_back(q);
    remote.push_back(qpn);
  }
  connected_[peer] = true;
  return std::make_unique<IbvEndpoint>(this, std::move(qps), peer, std::move(remote), static_cast<int>(a.rail.size()));
}

uint64_t IbvDevice::prepareSleep() {
  for (auto& q : qps_) {
    if (q) q->arm();
  }
  return events_;
}

void IbvDevice::consumeEvents() {
  ibv_cq* cq;
  void* ctx;
  for (Rail& rl : rails_) {
    while (verbs_->get_cq_event(rl.channel, &cq, &ctx) == 0) {
      verbs_->ack_cq_events(cq, 1);
      ++events_;
    }
  }
}

void IbvDevice::sleep(uint64_t seen, int timeoutMs) {
  // A completion that arrived before the CQs were armed raises no event: look first.
  bool any = false;
  for (auto& q : qps_) {
    if (q) any = q->drain() || any;
  }
  consumeEvents();
  if (any || events_ != seen) return;
  struct pollfd p[kMaxRails];
  for (size_t i = 0; i < rails_.size(); ++i) p[i] = {rails_[i].channel->fd, POLLIN, 0};
  poll(p, rails_.size(), timeoutMs);
  consumeEvents();
}

IbvDevice::BounceHalf& IbvDevice::nextHalf() {
  if (!bounce_) {
    bounce_ = allocate(2 * kBounceHalfBytes);
    bounceLkey_ = static_cast<IbvMemory*>(bounce_.get())->lkey();
    halves_[0].ptr = static_cast<char*>(bounce_->data());
    halves_[1].ptr = halves_[0].ptr + kBounceHalfBytes;
  }
  BounceHalf& h = halves_[nextHalf_];
  nextHalf_ ^= 1;
  if (h.qp) {
    try {
      h.qp->waitSent(h.seq);  // the HCA has finished with the bytes this half held
    } catch (const Error&) {
      // That queue pair died: its requests are flushed, nothing reads the half any more.
    }
    h.qp = nullptr;
  }
  return h;
}

void IbvDevice::bounceWrite(QueuePair* qp, const char* src, uint64_t raddr, uint32_t rkey, size_t len, bool hasImm,
                            uint32_t imm) {
  std::lock_guard<std::mutex> g(bounceMu_);
  for (size_t done = 0; done < len;) {
    const size_t n = std::min({len - done, kBounceHalfBytes, maxMessage_});
    BounceHalf& h = nextHalf();
    std::memcpy(h.ptr, src + done, n);
    ibv_sge sge{reinterpret_cast<uint64_t>(h.ptr), static_cast<uint32_t>(n), bounceLkey_};
    const bool last = done + n == len;
    ibv_send_wr wr = rdmaWr(last && hasImm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE, &sge, raddr + done, rkey);
    if (last && hasImm) wr.imm_data = htonl(imm);
    h.seq = qp->post(&wr, /*signaled=*/true);
    h.qp = qp;
    done += n;
  }
}

void IbvDevice::bounceRead(QueuePair* qp, uint64_t raddr, uint32_t rkey, char* dst, size_t len) {
  std::lock_guard<std::mutex> g(bounceMu_);
  for (size_t done = 0; done < len;) {
    const size_t n = std::min({len - done, kBounceHalfBytes, maxMessage_});
    BounceHalf& h = nextHalf();
    ibv_sge sge{reinterpret_cast<uint64_t>(h.ptr), static_cast<uint32_t>(n), bounceLkey_};
    ibv_send_wr wr = rdmaWr(IBV_WR_RDMA_READ, &sge, raddr + done, rkey);
    qp->waitSent(qp->post(&wr, /*signaled=*/true));
    std::memcpy(dst + done, h.ptr, n);
    done += n;
  }
}

}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
