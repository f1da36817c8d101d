// One RC queue pair to one peer, with its own completion queue (shared completion channel).
//
// Send queue: every work request gets a sequence number (wr_id). Only some are signaled
// (one in every sendDepth/4, and those a caller waits for); the send queue completes in
// order, so a signaled completion retires every request before it. A post that would
// overflow the send queue first drains completions.
// Receive queue: kRecvDepth zero-length receive work requests are pre-posted; each
// RDMA_WRITE_WITH_IMM from the peer consumes one. Completed immediates wait in a FIFO
// until pollImmediate takes them, and only then is a receive re-posted, so the FIFO never
// holds more than kRecvDepth entries. A peer that outruns us gets receiver-not-ready
// NAKs and retries forever (rnr_retry 7): that is the contract's "waits for space".
// Errors: the first failed completion marks the queue pair dead with
// ibv_wc_status_str's text; every later operation throws it.
// Threads: every method takes the queue pair's mutex (put64 may come from any thread).
#pragma once
#include <infiniband/verbs.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "transport/ibverbs/loader.h"
#include "transport/ibverbs/wire.h"

namespace rdmacoll {
namespace transport {
namespace ibverbs {

struct QpLimits {
  int sendDepth = 256;
  int recvDepth = 512;
  uint32_t maxInline = 256;  // requested; the provider may grant less
  uint8_t maxRdAtomic = 16;  // outstanding RDMA READs (device limits applied)
};

// Where this side sits: the port and identity put into our address blob.
struct LocalPort {
  uint8_t port = 1;
  wire::LinkLayer linkLayer = wire::kInfiniBand;
  uint8_t mtu = IBV_MTU_1024;
  uint16_t lid = 0;
  int gidIndex = 0;
  uint32_t psn = 0;
};

// The device behind ctx is being removed (its uverbs character device is gone: rdma link
// delete, driver unload, hot-unplug): the error that says so, naming it as `where`; else
// empty. Providers that can disassociate (mlx5) then fail every call with EIO; others
// (rxe) keep working while the removal waits for every process to close the device, so
// nothing else would ever tell the job.
std::string removalOf(const ibv_context* ctx, const std::string& where);

class QueuePair {
 public:
  QueuePair(const Verbs& v, ibv_context* ctx, ibv_pd* pd, ibv_comp_channel* channel, const QpLimits& lim, int peer);
  ~QueuePair();
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  uint32_t qpn() const { return qp_->qp_num; }
  uint32_t maxInline() const { return maxInline_; }
  // INIT -> RTR -> RTS towards the peer's queue pair remoteQpn on its rail `remote`
  // (its first packet sequence number remotePsn), after pre-posting the receives. `path`
  // names the ports for errors ("lane 1, rxe1:1 to the peer's rail 0, ...").
  void connect(const LocalPort& local, const wire::RailAddress& remote, uint32_t remotePsn, uint32_t remoteQpn,
               const std::string& path);

  // Post one work request (opcode, sg list, remote address set by the caller; wr_id and
  // the signaled flag are set here). Returns its sequence number for waitSent.
  uint64_t post(ibv_send_wr* wr, bool signaled);
  // Until the request with sequence number `seq` has completed; throws if it failed.
  void waitSent(uint64_t seq);
  bool pollImmediate(uint32_t* imm);
  // Poll the completion queue once; true if it returned anything.
  bool drain();
  // Ask for a completion-channel event on the next completion.
  void arm();
  // False once a completion failed. Sends a zero-length RDMA WRITE (which consumes no
  // receive request) when the send queue has been idle, so that a peer that vanished
  // while we only receive is still noticed (retries exhausted -> error completion).
  bool alive();
  std::string deadReason();
  ibv_cq* cq() const { return cq_; }

 private:
  bool drainLocked();
  void postRecvLocked(int n);
  void throwIfDeadLocked();
  void markDeadLocked(const ibv_wc& wc);

  // Throws removalOf's error; checked every 1024 turns of a wait for the send queue, so
  // that no wait outlasts the device (a peer gone with it leaves completions that never come).
  void throwIfRemoved(int spins) const;

  const Verbs& v_;
  ibv_context* ctx_;
  int peer_;
  QpLimits lim_;
  uint32_t maxInline_ = 0;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;

  std::mutex mu_;
  uint64_t posted_ = 0;     // sequence number of the last posted send request
  uint64_t completed_ = 0;  // every request up to this one has completed
  int unsignaled_ = 0;
  uint64_t probeSeq_ = 0;  // the liveness probe in flight (0: none)
  uint64_t postedAtLastProbe_ = 0;
  std::vector<uint32_t> imms_;  // FIFO ring of received immediates (recvDepth entries)
  uint64_t immHead_ = 0, immTail_ = 0;
  bool dead_ = false;
  std::string reason_;
};

// An RDMA WRITE / WRITE_WITH_IMM / READ work request at the peer's raddr (sge null: no data).
inline ibv_send_wr rdmaWr(ibv_wr_opcode op, ibv_sge* sge, uint64_t raddr, uint32_t rkey) {
  ibv_send_wr wr{};
  wr.opcode = op;
  wr.sg_list = sge;
  wr.num_sge = sge ? 1 : 0;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return wr;
}

}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
