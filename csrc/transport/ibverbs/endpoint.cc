// One peer's connection over its lanes: the queue pairs this rank keeps to that peer
// (RDMACOLL_IB_QPS_PER_CONNECTION, as NCCL_IB_QPS_PER_CONNECTION; one by default). Lane 0
// carries everything but the parts of a split write, so with one lane nothing below applies.
//
//   split      a zero-copy write from registered memory of kSplitBytes or more that carries
//              an immediate (the slot pipelines', eager's) is cut into one part per lane
//              (64-byte multiples, ceil(len / lanes) rounded up; the last lanes may get
//              the rest or nothing), all posted at once; its ticket is lane 0's part's, and
//              waitWritten waits for the other lanes' parts too (kept by ticket, in order).
//              Other writes go on lane 0 whole: smaller ones, inline ones, those through
//              the bounce halves, and those without an immediate, whose signal is a later
//              put64 (a progress counter) that lane 0 orders behind them.
//   immediate  RC delivers one queue pair's writes in order, not one lane's against
//              another's. So with lanes > 1 a write with an immediate carries it on every
//              lane (a zero-length write on a lane without a part of it): each lane's
//              immediate lands after that lane's bytes, and pollImmediate hands one out
//              once every lane has delivered its next, which must be the same.
//   put64      lane 0, posted (never waits): the bytes a counter guards went on lane 0
//              whole; a split write is announced by its own immediates, not by a counter.
//   read       lane 0.
//   rails      lane l runs on this rank's rail l % rails and reaches the peer's rail
//              l % its rails: a part's source key is this rank's key of its lane's rail,
//              its target key the peer's of that lane's rail (wire::rkeyOf). Lane 0 is
//              rail 0 at both ends, so everything but split parts uses rail 0.
// Bytes per write do not change; a split write costs lanes - 1 more work requests and
// completions, an immediate lanes - 1 more receive completions at the peer.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "transport/ibverbs/ibverbs.h"
#include "transport/ibverbs/wire.h"

namespace rdmacoll {
namespace transport {
namespace ibverbs {

namespace {
// Below this a write is mostly latency: one lane, one completion.
constexpr size_t kSplitBytes = 64 << 10;
constexpr size_t kPartAlign = 64;
}  // namespace

IbvEndpoint::IbvEndpoint(IbvDevice* dev, std::vector<QueuePair*> lanes, int peer, std::vector<uint32_t> remoteQpns,
                         int peerRails)
    : dev_(dev),
      lanes_(std::move(lanes)),
      qp_(lanes_.at(0)),
      peer_(peer),
      remoteQpns_(std::move(remoteQpns)),
      peerRails_(std::max(1, peerRails)),
      imms_(lanes_.size()),
      haveImm_(lanes_.size()) {}

std::string IbvEndpoint::describe() const {
  std::string q, r;
  for (size_t l = 0; l < lanes_.size(); ++l) {
    q += (l ? "," : "") + std::to_string(lanes_[l]->qpn());
    r += (l ? "," : "") + std::to_string(remoteQpns_[l]);
  }
  return "ibverbs " + dev_->portName() + " (rank " + std::to_string(peer_) + ", qpn " + q + " -> " + r + ")";
}

void IbvEndpoint::unpack(const PackedMemory& packed, RemoteMemory* out) { wire::unpackRegion(packed, peer_, out); }

int IbvEndpoint::rail(size_t lane) const { return dev_->railOf(lane); }

namespace {
// [src, src+len) zero-copy on one queue pair, in messages the port accepts; the last one
// carries the immediate. Returns the last request's sequence number.
uint64_t postZeroCopy(QueuePair* qp, size_t maxMessage, const char* src, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                      size_t len, bool hasImm, uint32_t imm) {
  uint64_t last = 0;
  for (size_t done = 0; done < len;) {
    const size_t n = std::min(len - done, maxMessage);
    const bool isLast = done + n == len;
    ibv_sge sge{reinterpret_cast<uint64_t>(src + done), static_cast<uint32_t>(n), lkey};
    ibv_send_wr wr =
        rdmaWr(isLast && hasImm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE, &sge, raddr + done, rkey);
    if (isLast && hasImm) wr.imm_data = htonl(imm);
    last = qp->post(&wr, isLast);
    done += n;
  }
  return last;
}

// The immediate alone: a zero-length write (no bytes, so no source to wait for).
void postImmediate(QueuePair* qp, uint64_t raddr, uint32_t rkey, uint32_t imm) {
  ibv_send_wr wr = rdmaWr(IBV_WR_RDMA_WRITE_WITH_IMM, nullptr, raddr, rkey);
  wr.imm_data = htonl(imm);
  qp->post(&wr, false);
}
}  // namespace

void IbvEndpoint::immediateOnOtherLanes(uint64_t raddr, const RemoteMemory& dst, uint32_t imm) {
  for (size_t l = 1; l < lanes_.size(); ++l) postImmediate(lanes_[l], raddr, wire::rkeyOf(dst, peerRail(l)), imm);
}

uint64_t IbvEndpoint::write(const void* src, const RemoteMemory& dst, size_t dstOff, size_t len, bool hasImm,
                            uint32_t imm) {
  wire::checkRemote(dst, peer_, dstOff, len, "write");
  const uint64_t raddr = dst.key[0] + dstOff;
  const uint32_t rkey = wire::rkeyOf(dst, 0);
  const size_t lanes = lanes_.size();
  std::array<uint32_t, kMaxRails> lkeys{};
  const bool registered = len > qp_->maxInline() && dev_->findLkeys(src, len, &lkeys);
  const uint32_t lkey = lkeys[0];
  if (registered && hasImm && lanes > 1 && len >= kSplitBytes) {
    // One part per lane, all in flight at once; each lane's last request carries the
    // immediate. Posted and kept under the lock: splits_ stays in ticket order.
    const size_t part = ((len + lanes - 1) / lanes + kPartAlign - 1) / kPartAlign * kPartAlign;
    const char* s = static_cast<const char*>(src);
    std::lock_guard<std::mutex> g(splitsMu_);
    Split split{0, {}};
    for (size_t l = lanes; l-- > 0;) {  // lane 0 last: its part's completion is the ticket
      const size_t off = l * part;
      const size_t n = off < len ? std::min(part, len - off) : 0;
      uint64_t seq = 0;
      const uint32_t laneRkey = wire::rkeyOf(dst, peerRail(l));
      if (n > 0) {
        seq = postZeroCopy(lanes_[l], dev_->maxMessage(), s + off, lkeys[static_cast<size_t>(rail(l))], raddr + off,
                           laneRkey, n, true, imm);
      } else {
        postImmediate(lanes_[l], raddr, laneRkey, imm);
      }
      split.seqs[l] = seq;
    }
    split.ticket = split.seqs[0];
    splits_.push_back(split);
    return split.ticket;
  }
  // With several lanes, a write with an immediate and its immediates on the other lanes are
  // posted under the lock split writes take, so that every lane sees the immediates of
  // concurrent writers in one order (pollImmediate requires them equal).
  std::unique_lock<std::mutex> order(splitsMu_, std::defer_lock);
  if (hasImm && lanes > 1) order.lock();
  const ibv_wr_opcode lastOp = hasImm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  uint64_t ticket = 0;
  if (len == 0) {
    if (hasImm) postImmediate(qp_, raddr, rkey, imm);
  } else if (len <= qp_->maxInline()) {
    // The provider copies inline data at post time: src is free on return, no lkey needed.
    ibv_sge sge{reinterpret_cast<uint64_t>(src), static_cast<uint32_t>(len), 0};
    ibv_send_wr wr = rdmaWr(lastOp, &sge, raddr, rkey);
    wr.send_flags = IBV_SEND_INLINE;
    if (hasImm) wr.imm_data = htonl(imm);
    qp_->post(&wr, false);
  } else if (!registered) {
    dev_->bounceWrite(qp_, static_cast<const char*>(src), raddr, rkey, len, hasImm, imm);  // staged: src is free
  } else {
    // Zero-copy from registered memory. Deferred: the HCA reads src until the last
    // message's completion, which is the ticket (waitWritten).
    ticket = postZeroCopy(qp_, dev_->maxMessage(), static_cast<const char*>(src), lkey, raddr, rkey, len, hasImm, imm);
  }
  if (hasImm && lanes > 1) immediateOnOtherLanes(raddr, dst, imm);
  return ticket;
}

void IbvEndpoint::waitSplits(uint64_t ticket) {
  // Waited for before they are forgotten: another thread's waitWritten must not find a
  // split gone whose parts are still being read (a lane completes in order, so its last
  // part's completion covers the earlier ones).
  std::array<uint64_t, kMaxLanes> wait{};  // [lane]: the last part to wait for
  uint64_t covered = 0;                    // the last split waited for (tickets grow)
  {
    std::lock_guard<std::mutex> g(splitsMu_);
    if (splits_.empty() || splits_.front().ticket > ticket) return;
    for (const Split& s : splits_) {
      if (s.ticket > ticket) break;
      for (size_t l = 1; l < lanes_.size(); ++l) wait[l] = std::max(wait[l], s.seqs[l]);
      covered = s.ticket;
    }
  }
  for (size_t l = 1; l < lanes_.size(); ++l) {
    if (wait[l]) lanes_[l]->waitSent(wait[l]);
  }
  std::lock_guard<std::mutex> g(splitsMu_);
  while (!splits_.empty() && splits_.front().ticket <= covered) splits_.pop_front();
}

void IbvEndpoint::waitWritten(uint64_t ticket) {
  if (ticket == 0) return;
  qp_->waitSent(ticket);
  if (lanes_.size() > 1) waitSplits(ticket);
}

void IbvEndpoint::put64(const RemoteMemory& dst, size_t dstOff, uint64_t value) {
  wire::checkRemote(dst, peer_, dstOff, 8, "put64", 8);
  ibv_send_wr wr{};
  const uint64_t raddr = dst.key[0] + dstOff;
  const uint32_t rkey = wire::rkeyOf(dst, 0);
  if (qp_->maxInline() >= sizeof(value)) {
    ibv_sge sge{reinterpret_cast<uint64_t>(&value), sizeof(value), 0};
    wr = rdmaWr(IBV_WR_RDMA_WRITE, &sge, raddr, rkey);
    wr.send_flags = IBV_SEND_INLINE;
    qp_->post(&wr, false);
    return;
  }
  std::lock_guard<std::mutex> g(scratchMu_);
  if (!scratch_) scratch_ = dev_->allocate(sizeof(value));
  std::memcpy(scratch_->data(), &value, sizeof(value));
  ibv_sge sge{reinterpret_cast<uint64_t>(scratch_->data()), sizeof(value),
              static_cast<IbvMemory*>(scratch_.get())->lkey()};
  wr = rdmaWr(IBV_WR_RDMA_WRITE, &sge, raddr, rkey);
  qp_->waitSent(qp_->post(&wr, true));
}

bool IbvEndpoint::pollImmediate(uint32_t* imm) {
  if (lanes_.size() == 1) return qp_->pollImmediate(imm);
  std::lock_guard<std::mutex> g(immMu_);
  for (size_t l = 0; l < lanes_.size(); ++l) {
    if (!haveImm_[l]) haveImm_[l] = lanes_[l]->pollImmediate(&imms_[l]);
    if (!haveImm_[l]) return false;
  }
  for (size_t l = 1; l < lanes_.size(); ++l) {
    if (imms_[l] != imms_[0]) {
      throw Error("ibverbs: rank " + std::to_string(peer_) + "'s queue pairs delivered different immediates (" +
                  std::to_string(imms_[0]) + " on lane 0, " + std::to_string(imms_[l]) + " on lane " +
                  std::to_string(l) + "): the ranks run different rdmacoll versions?");
    }
  }
  std::fill(haveImm_.begin(), haveImm_.end(), false);
  *imm = imms_[0];
  return true;
}

void IbvEndpoint::read(const RemoteMemory& src, size_t srcOff, void* dst, size_t len) {
  wire::checkRemote(src, peer_, srcOff, len, "read");
  if (len == 0) return;
  const uint64_t raddr = src.key[0] + srcOff;
  const uint32_t rkey = wire::rkeyOf(src, 0);
  std::array<uint32_t, kMaxRails> lkeys{};
  if (!dev_->findLkeys(dst, len, &lkeys)) {
    dev_->bounceRead(qp_, raddr, rkey, static_cast<char*>(dst), len);
    return;
  }
  char* d = static_cast<char*>(dst);
  uint64_t last = 0;
  for (size_t done = 0; done < len;) {
    const size_t n = std::min(len - done, dev_->maxMessage());
    ibv_sge sge{reinterpret_cast<uint64_t>(d + done), static_cast<uint32_t>(n), lkeys[0]};
    ibv_send_wr wr = rdmaWr(IBV_WR_RDMA_READ, &sge, raddr + done, rkey);
    last = qp_->post(&wr, done + n == len);
    done += n;
  }
  qp_->waitSent(last);
}

bool IbvEndpoint::alive() {
  bool ok = true;
  for (QueuePair* q : lanes_) ok = q->alive() && ok;  // each lane probes its own peer side
  return ok;
}

}  // namespace ibverbs
}  // namespace transport
}  // namespace rdmacoll
