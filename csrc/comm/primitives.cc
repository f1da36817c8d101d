#include "comm/primitives.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"
#include "common/timeline.h"

namespace rdmacoll {
namespace prim {

namespace {

// A write just posted to `to` from src: its ticket joins the call's unfinished writes
// (per peer; per staging segment when src is staging).
void track(Communicator& c, Peer& to, const void* src, uint64_t ticket) {
  if (ticket == 0) return;
  if (to.unwritten == 0) c.unwrittenPeers().push_back(to.rank);
  to.unwritten = ticket;
  const int s = c.stagingIndexOf(src);
  if (s >= 0) c.stagedWrites()[static_cast<size_t>(s)] = {to.rank, ticket};
}

[[noreturn]] void protocolError(Communicator& c, Peer& from, uint32_t got, uint32_t want, const Call& call) {
  // A different kind of message means the peer runs another algorithm or collective: try
  // to read its descriptor where that kind keeps it, so the error names the difference.
  uint32_t kind = tagKind(got);
  const HashedDescriptor* theirs = nullptr;
  if (kind == kHeaderTag) {
    // CallHeader starts with the same {hash, descriptor} line.
    theirs = reinterpret_cast<const HashedDescriptor*>(c.ctrl() + c.layout().header(from.rank, call.seq));
  } else if (kind == kEagerTag) {
    theirs = reinterpret_cast<const HashedDescriptor*>(c.ctrl() + c.layout().eager(from.rank, call.seq));
  }
  if (theirs != nullptr) c.checkDescriptor(call.hd, *theirs, from.rank, &call.shape);
  c.abortAll(AbortCode::kMismatch, "protocol mismatch with rank " + std::to_string(from.rank) + " during call #" +
                                       std::to_string(call.seq) + ": expected message " + std::to_string(want) +
                                       ", got " + std::to_string(got) +
                                       " (the ranks run different collectives or settings)");
}

[[noreturn]] void slotMismatch(Communicator& c, Peer& from, uint32_t got, uint32_t want) {
  const uint32_t kindAndMsg = 0xff00ffffu;  // kind, channel and message number
  c.abortAll(AbortCode::kMismatch,
             (got & kindAndMsg) == (want & kindAndMsg)
                 ? "collective mismatch (different algorithms): rank " + std::to_string(from.rank) +
                       " ran another algorithm (or another continuation of it) than rank " + std::to_string(c.rank()) +
                       " in its call " + describeCall(c.currentCall()) +
                       " (the ranks run different rdmacoll versions or settings)"
                 : "protocol mismatch with rank " + std::to_string(from.rank) + ": expected slot message " +
                       std::to_string(want) + ", got " + std::to_string(got));
}

uint32_t recvImmediate(Communicator& c, Peer& from, const char* what) {
  uint32_t imm = 0;
  c.waitUntil([&] { return c.pollImmediate(from, &imm); }, from.rank, what);
  return imm;
}

}  // namespace

void continueAs(Communicator& c, Call& call, uint8_t algorithm) {
  call.hd.desc.algorithm = algorithm;
  call.hd.hash = hashDescriptor(call.hd.desc);
  c.announce(call.hd);
}

void sendHeader(Communicator& c, Peer& to, const Call& call, const BufferRef* in, const BufferRef* out,
                const uint64_t* extra) {
  PhaseScope phase(c.timeline(), Timeline::kNegotiate);
  CallHeader h;
  std::memset(static_cast<void*>(&h), 0, sizeof(h));  // padding too: headers travel as bytes
  h.hash = call.hd.hash;
  h.desc = call.hd.desc;
  if (in) {
    h.in = in->packed;
    h.inOffset = in->offset;
  }
  if (out) {
    h.out = out->packed;
    h.outOffset = out->offset;
  }
  if (extra) {
    h.extra[0] = extra[0];
    h.extra[1] = extra[1];
  }
  // From the stack: the transport copies it (a ticket of 0), as anything outside its memory
  track(c, to, &h,
        to.ep->write(&h, to.ctrl, c.layout().header(c.rank(), call.seq), sizeof(h), true,
                     tag(kHeaderTag, c.channel(), call.seq)));
}

const CallHeader& recvHeader(Communicator& c, Peer& from, const Call& call) {
  PhaseScope phase(c.timeline(), Timeline::kNegotiate);
  uint32_t want = tag(kHeaderTag, c.channel(), call.seq);
  uint32_t got = recvImmediate(c, from, "a call header");
  if (got != want) protocolError(c, from, got, want, call);
  const CallHeader& h = *reinterpret_cast<const CallHeader*>(c.ctrl() + c.layout().header(from.rank, call.seq));
  HashedDescriptor theirs;
  theirs.hash = h.hash;
  theirs.desc = h.desc;
  c.checkDescriptor(call.hd, theirs, from.rank, &call.shape);
  return h;
}

namespace {
// A header names no buffer with all-zero packed bytes (sendHeader with nullptr).
bool named(const transport::PackedMemory& m) {
  for (uint8_t byte : m.bytes) {
    if (byte) return true;
  }
  return false;
}
}  // namespace

void viewPeer(Peer& peer, const CallHeader& h, PeerBuffers* b) {
  if (named(h.in)) peer.ep->unpack(h.in, &b->in);
  if (named(h.out)) peer.ep->unpack(h.out, &b->out);
  b->inOff = h.inOffset;
  b->outOff = h.outOffset;
  const char* in = b->in.len ? static_cast<const char*>(peer.ep->map(&b->in)) : nullptr;
  const char* out = b->out.len ? static_cast<const char*>(peer.ep->map(&b->out)) : nullptr;
  // (offsets come from the peer: no pointer past the region is ever formed; reads with a
  // bad offset then take the checked path and fail there)
  b->inMap = in && b->inOff <= b->in.len ? in + b->inOff : nullptr;
  b->outMap = out && b->outOff <= b->out.len ? out + b->outOff : nullptr;
}

namespace {
void checkPeerRange(const Peer& peer, const transport::RemoteMemory& m, size_t base, size_t off, size_t len) {
  if (base > m.len || off > m.len - base || len > m.len - base - off) {
    throw Error("rank " + std::to_string(peer.rank) + "'s buffer holds " +
                std::to_string(m.len - std::min(base, m.len)) + " bytes; accessing " + std::to_string(len) + " at " +
                std::to_string(off) + " would overrun it");
  }
}

// len bytes at off of a peer region described by (m, base offset, mapping or null).
void readPeer(Peer& peer, const transport::RemoteMemory& m, size_t base, const char* map, size_t off, void* dst,
              size_t len) {
  if (len == 0) return;
  checkPeerRange(peer, m, base, off, len);
  peer.bytesGot += len;
  if (map) {
    std::memcpy(dst, map + off, len);
  } else {
    peer.ep->read(m, base + off, dst, len);
  }
}

// A pointer to the peer region's bytes [off, off+len): mapped, else read into stage.
const void* peerAt(Peer& peer, const transport::RemoteMemory& m, size_t base, const char* map, size_t off, size_t len,
                   void* stage) {
  if (map == nullptr) {
    readPeer(peer, m, base, nullptr, off, stage, len);
    return stage;
  }
  if (len) checkPeerRange(peer, m, base, off, len);
  peer.bytesGot += len;
  return map + off;
}
}  // namespace

void readInput(Peer& peer, const PeerBuffers& b, size_t off, void* dst, size_t len) {
  readPeer(peer, b.in, b.inOff, b.inMap, off, dst, len);
}

void readOutput(Peer& peer, const PeerBuffers& b, size_t off, void* dst, size_t len) {
  readPeer(peer, b.out, b.outOff, b.outMap, off, dst, len);
}

const void* inputAt(Peer& peer, const PeerBuffers& b, size_t off, size_t len, void* stage) {
  return peerAt(peer, b.in, b.inOff, b.inMap, off, len, stage);
}

const void* outputAt(Peer& peer, const PeerBuffers& b, size_t off, size_t len, void* stage) {
  return peerAt(peer, b.out, b.outOff, b.outMap, off, len, stage);
}

void writeOutput(Communicator& c, Peer& peer, const PeerBuffers& b, size_t off, const void* src, size_t len) {
  if (len == 0) return;
  checkPeerRange(peer, b.out, b.outOff, off, len);
  peer.bytesPut += len;
  track(c, peer, src, peer.ep->write(src, b.out, b.outOff + off, len, false, 0));
}

void sendEager(Communicator& c, Peer& to, const Call& call, const void* data, size_t bytes) {
  PhaseScope phase(c.timeline(), Timeline::kTransfer);
  const size_t off = c.layout().eager(c.rank(), call.seq);
  const size_t body = off + sizeof(HashedDescriptor);  // {hash, payload}
  to.bytesPut += bytes;
  track(c, to, &call.hd, to.ep->write(&call.hd, to.ctrl, off, sizeof(HashedDescriptor), false, 0));
  track(c, to, &call.hd.hash, to.ep->write(&call.hd.hash, to.ctrl, body, sizeof(uint64_t), false, 0));
  track(c, to, data,
        to.ep->write(data, to.ctrl, body + sizeof(uint64_t), bytes, true, tag(kEagerTag, c.channel(), call.seq)));
}

const void* recvEager(Communicator& c, Peer& from, const Call& call) {
  PhaseScope phase(c.timeline(), Timeline::kTransfer);
  uint32_t want = tag(kEagerTag, c.channel(), call.seq);
  uint32_t got = recvImmediate(c, from, "an eager message");
  if (got != want) protocolError(c, from, got, want, call);
  const char* p = c.ctrl() + c.layout().eager(from.rank, call.seq);
  const char* body = p + sizeof(HashedDescriptor);
  if (*reinterpret_cast<const uint64_t*>(body) != call.hd.hash) {
    c.checkDescriptor(call.hd, *reinterpret_cast<const HashedDescriptor*>(p), from.rank, &call.shape);
  }
  return body + sizeof(uint64_t);
}

void waitSlotCredit(Communicator& c, Peer& to) {
  PhaseScope phase(c.timeline(), Timeline::kTransfer);
  uint64_t slots = static_cast<uint64_t>(c.protocol().slots);
  if (to.msgsSent < slots) return;
  uint64_t need = to.msgsSent - slots + 1;
  auto& credit = c.word(c.layout().credit(to.rank));
  c.waitUntil([&] { return credit.load(std::memory_order_acquire) >= need; }, to.rank, "a free slot");
}

void* mappedSlot(Communicator& c, Peer& to) {
  void* base = to.ep->map(&to.ctrl);
  if (base == nullptr) return nullptr;
  waitSlotCredit(c, to);
  return static_cast<char*>(base) + c.layout().slot(c.rank(), to.msgsSent);
}

uint64_t sendSlot(Communicator& c, Peer& to, const void* data, size_t bytes) {
  PhaseScope phase(c.timeline(), Timeline::kTransfer);
  if (data != nullptr) waitSlotCredit(c, to);
  const uint64_t ticket = to.ep->write(data, to.ctrl, c.layout().slot(c.rank(), to.msgsSent), data ? bytes : 0, true,
                                       slotTag(c.channel(), c.callTag(), to.msgsSent));
  track(c, to, data, ticket);
  to.bytesPut += bytes;
  ++to.msgsSent;
  return ticket;
}

const void* recvSlot(Communicator& c, Peer& from) {
  PhaseScope phase(c.timeline(), Timeline::kTransfer);
  uint32_t got = recvImmediate(c, from, "a slot message");
  uint32_t want = slotTag(c.channel(), c.callTag(), from.msgsReceived);
  if (got != want) slotMismatch(c, from, got, want);
  return c.ctrl() + c.layout().slot(from.rank, from.msgsReceived);
}

void releaseSlot(Communicator& c, Peer& from) {
  ++from.msgsReceived;
  from.ep->put64(from.ctrl, c.layout().credit(c.rank()), from.msgsReceived);
}

bool writesOffloaded(const Peer& to) { return to.ep->capabilities() & transport::kOffloadsWrites; }

void waitWritten(Peer& to, uint64_t ticket) { to.ep->waitWritten(ticket); }

void* sendStaging(Communicator& c) {
  const int n = c.stagingSegments();
  int& next = c.nextSendStaging();
  const int s = next;
  next = (next + 1) % n;
  Communicator::StagedWrite& w = c.stagedWrites()[static_cast<size_t>(s)];
  if (w.ticket != 0) {
    PhaseScope phase(c.timeline(), Timeline::kTransfer);
    waitWritten(c.peer(w.peer), w.ticket);
    w = {};
  }
  return c.staging(s);
}

void finishWrites(Communicator& c) {
  auto& peers = c.unwrittenPeers();
  if (peers.empty()) return;
  PhaseScope phase(c.timeline(), Timeline::kTransfer);
  for (int q : peers) {
    Peer& p = c.peer(q);
    const uint64_t t = p.unwritten;
    p.unwritten = 0;
    waitWritten(p, t);
  }
  peers.clear();
  std::fill(c.stagedWrites().begin(), c.stagedWrites().end(), Communicator::StagedWrite{});
}

void putProgress(Communicator& c, Peer& to, uint64_t units) {
  to.ep->put64(to.ctrl, c.layout().progress(c.rank()), c.progressBase() + units);
}

void waitProgress(Communicator& c, Peer& from, uint64_t units) {
  PhaseScope phase(c.timeline(), Timeline::kTransfer);
  uint64_t need = from.progressSeen + units;
  auto& w = c.word(c.layout().progress(from.rank));
  c.waitUntil([&] { return w.load(std::memory_order_acquire) >= need; }, from.rank, "a peer's progress");
}

void finishReads(Communicator& c, Peer& readFrom, Peer& readBy, const Call& call, uint64_t units) {
  PhaseScope phase(c.timeline(), Timeline::kTransfer);
  readFrom.progressSeen += units;
  c.advanceProgressBase(units);
  readFrom.ep->put64(readFrom.ctrl, c.layout().done(c.rank()), call.seq);
  auto& w = c.word(c.layout().done(readBy.rank));
  c.waitUntil([&] { return w.load(std::memory_order_acquire) >= call.seq; }, readBy.rank,
              "the peer to finish reading this rank's memory");
}

void finishAll(Communicator& c, const Call& call) {
  PhaseScope phase(c.timeline(), Timeline::kTransfer);
  const int p = c.size(), r = c.rank();
  for (int k = 1; k < p; ++k) {
    Peer& q = c.peer((r + k) % p);
    q.ep->put64(q.ctrl, c.layout().done(r), call.seq);
  }
  for (int k = 1; k < p; ++k) {
    Peer& q = c.peer((r + k) % p);
    auto& w = c.word(c.layout().done(q.rank));
    c.waitUntil([&] { return w.load(std::memory_order_acquire) >= call.seq; }, q.rank,
                "the peers to finish with this rank's memory");
  }
}

}  // namespace prim
}  // namespace rdmacoll
