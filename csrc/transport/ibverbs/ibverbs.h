// RDMA transport over libibverbs (InfiniBand, RoCE v1/v2): RC queue pairs to each peer, one
// by default, RDMACOLL_IB_QPS_PER_CONNECTION ("lanes") if set (endpoint.cc: how writes use
// them), over the process's rails: the ACTIVE ports RDMACOLL_IB_HCA allows (port.h), up to
// kMaxRails, each with its own context, protection domain, completion channel and keys.
// Lane l runs on rail l % rails (there are at least as many lanes as rails), to the peer's
// rail l % its rails; a connection uses the lanes both ends have.
//
//   allocate        page-aligned anonymous memory, pre-faulted, ibv_reg_mr'd on every rail
//                   (local write, remote write, remote read); registerMemory registers the
//                   user's bytes
//   pack/unpack     {owner, address, length, an rkey per rail} (wire.h), validated on unpack
//   write           IBV_WR_RDMA_WRITE_WITH_IMM (plain RDMA WRITE without an immediate):
//                   payloads up to the QP's max_inline_data go inline (IBV_SEND_INLINE) and
//                   return at once; larger ones from registered memory go zero-copy, their
//                   ticket the last request's completion (waitWritten: deferred completion,
//                   transport.h), split across the lanes from 64 KiB (endpoint.cc); from
//                   unregistered memory they are copied through two registered bounce
//                   halves, chunk by chunk
//   put64           an 8-byte inline RDMA WRITE (aligned: never torn in practice on PCIe
//                   HCAs); counters only grow, the peer polls its own memory
//   read            IBV_WR_RDMA_READ (kCanRead)
//   pollImmediate   drains the endpoint's completion queues, one per lane (queue_pair.h)
//   fork()          kernels since 5.12 copy registered pages for the child; older ones get
//                   ibv_fork_init (children must not touch registered pages there)
//   sleeping        completion channel: prepareSleep arms every CQ, sleep polls the
//                   channel's fd. put64 generates no completion at the peer, so a sleeper
//                   notices one only when its timeout ends (the communicator sleeps 1 ms at
//                   a time): immediates wake at once, credits within the timeout.
// Nothing of this data path has run on RDMA hardware yet (docs/ibverbs.md).
#pragma once
#include <infiniband/verbs.h>

#include <array>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/ibverbs/loader.h"
#include "transport/ibverbs/port.h"
#include "transport/ibverbs/queue_pair.h"
#include "transport/transport.h"

namespace rdmacoll {
namespace transport {
namespace ibverbs {

class IbvDevice;

using wire::kMaxLanes;
using wire::kMaxRails;

// One memory region per rail.
using Mrs = std::array<ibv_mr*, kMaxRails>;

class IbvMemory : public Memory {
 public:
  // mapped: bytes this object mmap'ed (0 for registered user memory).
  IbvMemory(IbvDevice* dev, void* ptr, size_t len, const Mrs& mrs, size_t mapped, bool allocated);
  ~IbvMemory() override;
  void pack(PackedMemory* out) const override;
  uint32_t lkey(int rail = 0) const { return mrs_[rail] ? mrs_[rail]->lkey : 0; }
  // The device is closing: deregister now; the bytes stay mapped until this object goes.
  void detach();

 private:
  void deregister();
  IbvDevice* dev_;
  Mrs mrs_;
  size_t mapped_;
  bool allocated_;
};

class IbvEndpoint : public Endpoint {
 public:
  // lanes: this rank's queue pairs to the peer (lane 0 first); remoteQpns: the peer's, the
  // same order; peerRails: how many the peer has (lane l reaches its rail l % peerRails).
  IbvEndpoint(IbvDevice* dev, std::vector<QueuePair*> lanes, int peer, std::vector<uint32_t> remoteQpns, int peerRails);
  uint32_t capabilities() const override { return kCanRead | kOffloadsWrites; }
  void unpack(const PackedMemory& packed, RemoteMemory* out) override;
  uint64_t write(const void* src, const RemoteMemory& dst, size_t dstOff, size_t len, bool hasImm,
                 uint32_t imm) override;
  void waitWritten(uint64_t ticket) override;
  void put64(const RemoteMemory& dst, size_t dstOff, uint64_t value) override;
  bool pollImmediate(uint32_t* imm) override;
  void read(const RemoteMemory& src, size_t srcOff, void* dst, size_t len) override;
  bool alive() override;
  std::string describe() const override;

 private:
  // A split write's parts (their last requests' sequence numbers), by ticket: fixed size,
  // nothing allocated per write.
  struct Split {
    uint64_t ticket;
    std::array<uint64_t, kMaxLanes> seqs;  // [lane]; lane 0's is the ticket
  };
  // The immediate alone on lanes 1.. (a write with one whose data went on lane 0 alone).
  void immediateOnOtherLanes(uint64_t raddr, const RemoteMemory& dst, uint32_t imm);
  // The rails lane l runs on, here and at the peer.
  int rail(size_t lane) const;
  int peerRail(size_t lane) const { return static_cast<int>(lane % static_cast<size_t>(peerRails_)); }
  // Until the parts in flight on lanes 1.. of split writes up to `ticket` have completed.
  void waitSplits(uint64_t ticket);

  IbvDevice* dev_;
  std::vector<QueuePair*> lanes_;
  QueuePair* qp_;  // lanes_[0]
  int peer_;
  std::vector<uint32_t> remoteQpns_;
  int peerRails_;
  std::mutex splitsMu_;
  std::deque<Split> splits_;
  std::mutex immMu_;
  std::vector<uint32_t> imms_;  // [lane]: its next immediate, once polled
  std::vector<bool> haveImm_;
  std::mutex scratchMu_;  // put64 without inline support (rare providers)
  std::unique_ptr<Memory> scratch_;
};

class IbvDevice : public Device {
 public:
  IbvDevice(int rank, int size, const Options& options);
  ~IbvDevice() override;
  const char* name() const override { return "ibverbs"; }
  std::unique_ptr<Memory> allocate(size_t len) override;
  std::unique_ptr<Memory> registerMemory(void* ptr, size_t len) override;
  std::string failure() override;
  Bytes address() const override;
  std::unique_ptr<Endpoint> connect(int peer, const Bytes& peerAddress) override;
  uint64_t prepareSleep() override;
  void cancelSleep() override {}
  void sleep(uint64_t seen, int timeoutMs) override;

  // For memory and endpoints.
  const Verbs& verbs() const { return *verbs_; }
  int rank() const { return rank_; }
  int rails() const { return static_cast<int>(rails_.size()); }
  int railOf(size_t lane) const { return static_cast<int>(lane % rails_.size()); }
  size_t maxMessage() const { return maxMessage_; }
  // "rxe0:1" (one rail), "rxe0:1+rxe1:1" (two)
  const std::string& portName() const { return portName_; }
  void forget(const IbvMemory* m);
  // The lkeys (per rail) of a registered region holding [p, p+len); false when there is none.
  bool findLkeys(const void* p, size_t len, std::array<uint32_t, kMaxRails>* lkeys) const;
  // Move [src, src+len) to the peer through the bounce halves (unregistered src), or
  // fetch into dst (read). The last chunk of a write carries the immediate.
  void bounceWrite(QueuePair* qp, const char* src, uint64_t raddr, uint32_t rkey, size_t len, bool hasImm,
                   uint32_t imm);
  void bounceRead(QueuePair* qp, uint64_t raddr, uint32_t rkey, char* dst, size_t len);

 private:
  struct Region {
    uintptr_t begin, end;
    std::array<uint32_t, kMaxRails> lkeys;
    const IbvMemory* owner;
  };
  // One port in use: its own context (PortChoice::ctx), protection domain and completion
  // channel (every queue pair on it reports there).
  struct Rail {
    PortChoice port;
    LocalPort local;
    ibv_pd* pd = nullptr;
    ibv_comp_channel* channel = nullptr;
  };
  struct BounceHalf {
    char* ptr = nullptr;
    QueuePair* qp = nullptr;  // last request that used this half
    uint64_t seq = 0;
  };
  void release();
  // Register [p, p+len) on every rail (deregistering what it did on failure) and record it.
  std::unique_ptr<Memory> registerOnRails(void* p, size_t len, size_t mapped, bool allocated);
  void keepInheritable(void* p, size_t len);
  void consumeEvents();
  BounceHalf& nextHalf();

  int rank_, size_;
  std::unique_ptr<Verbs> verbs_;
  std::vector<Rail> rails_;
  std::string portName_;
  size_t maxMessage_ = 1u << 30;
  bool copyOnFork_ = false;  // the kernel copies pinned pages for a forked child
  int lanes_ = 1;            // queue pairs per peer: RDMACOLL_IB_QPS_PER_CONNECTION, at least one per rail
  std::vector<std::unique_ptr<QueuePair>> qps_;  // [peer * lanes_ + lane]; null for this rank
  std::vector<bool> connected_;
  uint64_t events_ = 0;
  mutable std::mutex regionsMu_;
  std::vector<Region> regions_;
  std::mutex bounceMu_;  // abortAll may write from another thread
  std::unique_ptr<Memory> bounce_;
  uint32_t bounceLkey_ = 0;  // rail 0's (the halves serve lane 0)
  BounceHalf halves_[2];
  int nextHalf_ = 0;
};

}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
