#include "transport/ibverbs/queue_pair.h"

#include <arpa/inet.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace rdmacoll {
namespace transport {
namespace ibverbs {

namespace {
constexpr int kPollBatch = 16;
constexpr uint8_t kAckTimeout = 16;  // 4.096 us * 2^16 = 268 ms per try
// Retries before a lost peer fails the request (7 tries of 268 ms: ~1.9 s). Not 7, the
// field's maximum: Soft-RoCE (rxe_comp.c) takes retry_cnt 7 as "retry forever", as the
// spec defines only for rnr_retry, and a survivor of a killed rank would never learn.
constexpr uint8_t kRetryCount = 6;
constexpr uint8_t kRnrRetry = 7;      // 7 = retry forever while the peer has no receive posted
constexpr uint8_t kMinRnrTimer = 12;  // 0.64 ms between receiver-not-ready retries
constexpr uint8_t kHopLimit = 64;

// A failed completion's opcode is undefined (verbs sets only wr_id, status, vendor_err);
// our receives have wr_id 0, sends their sequence number.
const char* opName(const ibv_wc& wc) { return wc.wr_id ? "an RDMA write or read" : "a receive"; }
}  // namespace

QueuePair::QueuePair(const Verbs& v, ibv_context* ctx, ibv_pd* pd, ibv_comp_channel* channel, const QpLimits& lim,
                     int peer)
    : v_(v), ctx_(ctx), peer_(peer), lim_(lim), imms_(static_cast<size_t>(lim.recvDepth)) {
  cq_ = v_.create_cq(ctx, lim.sendDepth + lim.recvDepth, nullptr, channel, 0);
  if (!cq_) throw Error(sysError("ibverbs: ibv_create_cq for rank " + std::to_string(peer), errno));
  ibv_qp_init_attr ia{};
  ia.send_cq = cq_;
  ia.recv_cq = cq_;
  ia.qp_type = IBV_QPT_RC;
  ia.sq_sig_all = 0;
  ia.cap.max_send_wr = static_cast<uint32_t>(lim.sendDepth);
  ia.cap.max_recv_wr = static_cast<uint32_t>(lim.recvDepth);
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  // Providers differ in how much inline data they allow: ask for less until one fits.
  for (uint32_t want : {lim.maxInline, 64u, 0u}) {
    ia.cap.max_inline_data = want;
    qp_ = v_.create_qp(pd, &ia);
    if (qp_) break;
  }
  if (!qp_) {
    int err = errno;
    v_.destroy_cq(cq_);
    throw Error(sysError("ibverbs: ibv_create_qp (RC) for rank " + std::to_string(peer), err));
  }
  maxInline_ = ia.cap.max_inline_data;  // what the provider granted
}

QueuePair::~QueuePair() {
  if (qp_) v_.destroy_qp(qp_);
  if (cq_) v_.destroy_cq(cq_);
}

void QueuePair::connect(const LocalPort& local, const wire::RailAddress& remote, uint32_t remotePsn, uint32_t remoteQpn,
                        const std::string& path) {
  std::lock_guard<std::mutex> g(mu_);
  const std::string who = " (queue pair to rank " + std::to_string(peer_) + ")";
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = local.port;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  int rc = v_.modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc) throw Error(sysError("ibverbs: ibv_modify_qp to INIT" + who, rc));
  postRecvLocked(lim_.recvDepth);

  std::memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min<int>(local.mtu, remote.mtu));
  a.dest_qp_num = remoteQpn;
  a.rq_psn = remotePsn;
  a.max_dest_rd_atomic = lim_.maxRdAtomic;
  a.min_rnr_timer = kMinRnrTimer;
  a.ah_attr.port_num = local.port;
  a.ah_attr.sl = 0;
  if (local.linkLayer == wire::kEthernet) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, sizeof(remote.gid));
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(local.gidIndex);
    a.ah_attr.grh.hop_limit = kHopLimit;
  } else {
    a.ah_attr.dlid = remote.lid;
  }
  rc = v_.modify_qp(qp_, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  // RoCE resolves the route to the peer's GID here: a port that cannot reach it fails now
  if (rc) {
    throw Error(
        sysError("ibverbs: ibv_modify_qp to RTR (queue pair to rank " + std::to_string(peer_) + ", " + path + ")", rc) +
        ": can this port reach that one? RDMACOLL_IB_HCA chooses the ports (rails) of each host");
  }

  std::memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = kAckTimeout;
  a.retry_cnt = kRetryCount;
  a.rnr_retry = kRnrRetry;
  a.sq_psn = local.psn;
  a.max_rd_atomic = lim_.maxRdAtomic;
  rc = v_.modify_qp(
      qp_, &a,
      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc) throw Error(sysError("ibverbs: ibv_modify_qp to RTS" + who, rc));
}

void QueuePair::postRecvLocked(int n) {
  // Zero-length receives: RDMA_WRITE_WITH_IMM places its payload by remote address and
  // only needs a receive request to report the immediate.
  for (int i = 0; i < n; ++i) {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = 0;
    wr.sg_list = nullptr;
    wr.num_sge = 0;
    int rc = ibv_post_recv(qp_, &wr, &bad);
    if (rc) throw Error(sysError("ibverbs: ibv_post_recv for rank " + std::to_string(peer_), rc));
  }
}

void QueuePair::markDeadLocked(const ibv_wc& wc) {
  if (!dead_) {
    dead_ = true;
    char vendor[32];
    std::snprintf(vendor, sizeof(vendor), "0x%x", wc.vendor_err);
    reason_ = "ibverbs: " + std::string(opName(wc)) + " with rank " + std::to_string(peer_) +
              " failed: " + v_.wc_status_str(wc.status) + " (status " + std::to_string(wc.status) + ", vendor error " +
              vendor + ")";
  }
}

bool QueuePair::drainLocked() {
  ibv_wc wc[kPollBatch];
  bool any = false;
  for (;;) {
    int n = ibv_poll_cq(cq_, kPollBatch, wc);
    if (n < 0) {
      if (!dead_) dead_ = true, reason_ = "ibverbs: ibv_poll_cq failed for rank " + std::to_string(peer_);
      return any;
    }
    for (int i = 0; i < n; ++i) {
      const ibv_wc& w = wc[i];
      if (w.status != IBV_WC_SUCCESS) {
        markDeadLocked(w);
        if (w.wr_id) completed_ = std::max<uint64_t>(completed_, w.wr_id);  // flushed sends retire too
        continue;
      }
      if (w.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        imms_[immTail_ % imms_.size()] = ntohl(w.imm_data);
        ++immTail_;
      } else {
        completed_ = std::max<uint64_t>(completed_, w.wr_id);
      }
    }
    any = any || n > 0;
    if (n < kPollBatch) return any;
  }
}

bool QueuePair::drain() {
  std::lock_guard<std::mutex> g(mu_);
  return drainLocked();
}

void QueuePair::arm() {
  std::lock_guard<std::mutex> g(mu_);
  ibv_req_notify_cq(cq_, 0);
}

void QueuePair::throwIfDeadLocked() {
  if (dead_) throw Error(reason_);
}

std::string removalOf(const ibv_context* ctx, const std::string& where) {
  if (!ctx || ctx->device->dev_path[0] == 0 || access(ctx->device->dev_path, F_OK) == 0) return {};
  return "ibverbs: the RDMA device " + where +
         " is being removed from this host (rdma link delete, driver unload or hot-unplug: " + ctx->device->dev_path +
         " is gone); the removal completes when this process closes it (rdmacoll.shutdown() or exit)";
}

void QueuePair::throwIfRemoved(int spins) const {
  if ((spins & 1023) != 1023) return;
  const std::string gone = removalOf(ctx_, ctx_->device->name);
  if (!gone.empty()) throw Error(gone);
}

uint64_t QueuePair::post(ibv_send_wr* wr, bool signaled) {
  std::lock_guard<std::mutex> g(mu_);
  throwIfDeadLocked();
  // Room in the send queue: at most sendDepth-1 requests outstanding. At least one in
  // every sendDepth/4 is signaled, so draining makes progress.
  for (int spins = 0; posted_ - completed_ >= static_cast<uint64_t>(lim_.sendDepth - 1); ++spins) {
    if (!drainLocked()) sched_yield();
    throwIfDeadLocked();
    throwIfRemoved(spins);
  }
  const uint64_t seq = ++posted_;
  if (++unsignaled_ >= lim_.sendDepth / 4) signaled = true;
  if (signaled) unsignaled_ = 0;
  wr->wr_id = seq;
  wr->next = nullptr;
  if (signaled) wr->send_flags |= IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(qp_, wr, &bad);
  if (rc) {
    --posted_;
    throw Error(sysError("ibverbs: ibv_post_send to rank " + std::to_string(peer_), rc));
  }
  return seq;
}

void QueuePair::waitSent(uint64_t seq) {
  for (int spins = 0;; ++spins) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (completed_ < seq) drainLocked();
      throwIfDeadLocked();
      if (completed_ >= seq) return;
    }
    if (spins > 64) sched_yield();
    throwIfRemoved(spins);
  }
}

bool QueuePair::pollImmediate(uint32_t* imm) {
  std::lock_guard<std::mutex> g(mu_);
  if (immHead_ == immTail_) drainLocked();
  if (immHead_ == immTail_) {
    throwIfDeadLocked();
    return false;
  }
  *imm = imms_[immHead_ % imms_.size()];
  ++immHead_;
  if (!dead_) postRecvLocked(1);
  return true;
}

bool QueuePair::alive() {
  std::lock_guard<std::mutex> g(mu_);
  drainLocked();
  if (dead_) return false;
  const bool probeDone = probeSeq_ == 0 || completed_ >= probeSeq_;
  if (probeDone && posted_ == postedAtLastProbe_ && posted_ - completed_ < static_cast<uint64_t>(lim_.sendDepth - 1)) {
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;  // zero-length, no immediate: consumes no receive request
    wr.num_sge = 0;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr_id = ++posted_;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp_, &wr, &bad) == 0) {
      probeSeq_ = posted_;
      unsignaled_ = 0;
    } else {
      --posted_;
    }
  }
  postedAtLastProbe_ = posted_;
  return true;
}

std::string QueuePair::deadReason() {
  std::lock_guard<std::mutex> g(mu_);
  return reason_;
}

}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
