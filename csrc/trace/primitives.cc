// The primitives (comm/primitives.h) of a traced rank: each records what it would put,
// await or read (trace/schedule.h) and returns at once. Credits and counters are the
// real ones' (comm/primitives.cc): a slot message past the first `slots` awaits its
// credit, a progress or done counter is a store the peer awaits.
#include "comm/primitives.h"

#include "algorithms/table.h"
#include "trace/recorder.h"

namespace rdmacoll {
namespace prim {

namespace {
using rdmacoll_trace::Flow;
using rdmacoll_trace::Op;

void put(Peer& to, Flow flow, uint64_t bytes) { trace::Recorder::current().add(Op::kPut, flow, to.rank, bytes); }
void await(Peer& from, Flow flow) {
  const uint64_t n = ++from.received[static_cast<int>(flow)];
  trace::Recorder::current().add(Op::kAwait, flow, from.rank, n);
}
// Reads and stores of nothing move nothing (comm/primitives.cc returns first).
void get(Peer& from, uint64_t bytes) {
  if (bytes) trace::Recorder::current().add(Op::kGet, Flow::kNone, from.rank, bytes);
}
// Addresses that are never dereferenced: what recvSlot and the reads hand back.
void* nowhere() { return reinterpret_cast<void*>(uintptr_t(1) << 44); }
}  // namespace

void continueAs(Communicator& c, Call& call, uint8_t algorithm) { call.hd.desc.algorithm = algorithm; }

void sendHeader(Communicator& c, Peer& to, const Call& call, const BufferRef* in, const BufferRef* out,
                const uint64_t* extra) {
  put(to, Flow::kHeader, rdmacoll_trace::headerBytes());
}
const CallHeader& recvHeader(Communicator& c, Peer& from, const Call& call) {
  await(from, Flow::kHeader);
  return c.header();
}

void viewPeer(Peer& peer, const CallHeader& h, PeerBuffers* b) { b->inMap = b->outMap = nullptr; }
void readInput(Peer& peer, const PeerBuffers& b, size_t off, void* dst, size_t len) { get(peer, len); }
void readOutput(Peer& peer, const PeerBuffers& b, size_t off, void* dst, size_t len) { get(peer, len); }
const void* inputAt(Peer& peer, const PeerBuffers& b, size_t off, size_t len, void* stage) {
  get(peer, len);
  return stage;
}
const void* outputAt(Peer& peer, const PeerBuffers& b, size_t off, size_t len, void* stage) {
  get(peer, len);
  return stage;
}
void writeOutput(Communicator& c, Peer& peer, const PeerBuffers& b, size_t off, const void* src, size_t len) {
  if (len) put(peer, Flow::kStore, len);
}

void sendEager(Communicator& c, Peer& to, const Call& call, const void* data, size_t bytes) {
  put(to, Flow::kEager, bytes);
}
const void* recvEager(Communicator& c, Peer& from, const Call& call) {
  await(from, Flow::kEager);
  return nowhere();
}

void waitSlotCredit(Communicator& c, Peer& to) {
  const uint64_t slots = static_cast<uint64_t>(c.protocol().slots);
  if (to.msgsSent < slots) return;
  trace::Recorder::current().add(Op::kAwait, Flow::kCredit, to.rank, to.msgsSent - slots + 1);
}
void* mappedSlot(Communicator& c, Peer& to) {
  if (!c.peersMappable()) return nullptr;
  waitSlotCredit(c, to);
  return nowhere();
}
uint64_t sendSlot(Communicator& c, Peer& to, const void* data, size_t bytes) {
  if (data != nullptr) waitSlotCredit(c, to);
  put(to, Flow::kSlot, bytes);
  ++to.msgsSent;
  return 0;
}
const void* recvSlot(Communicator& c, Peer& from) {
  await(from, Flow::kSlot);
  return nowhere();
}
void releaseSlot(Communicator& c, Peer& from) {
  put(from, Flow::kCredit, rdmacoll_trace::kCounterBytes);
  ++from.msgsReceived;
}

void waitWritten(Peer& to, uint64_t ticket) {}
// The simulated network is a NIC's (benchmarks/scale/): its writes are offloaded.
bool writesOffloaded(const Peer& to) { return true; }
void* sendStaging(Communicator& c) { return c.staging(0); }
void finishWrites(Communicator& c) {}

void putProgress(Communicator& c, Peer& to, uint64_t units) { put(to, Flow::kProgress, rdmacoll_trace::kCounterBytes); }
void waitProgress(Communicator& c, Peer& from, uint64_t units) {
  from.received[static_cast<int>(Flow::kProgress)] = units;
  trace::Recorder::current().add(Op::kAwait, Flow::kProgress, from.rank, units);
}
void finishReads(Communicator& c, Peer& readFrom, Peer& readBy, const Call& call, uint64_t units) {
  put(readFrom, Flow::kDone, rdmacoll_trace::kCounterBytes);
  await(readBy, Flow::kDone);
}
void finishAll(Communicator& c, const Call& call) {
  const int p = c.size(), r = c.rank();
  for (int k = 1; k < p; ++k) put(c.peer((r + k) % p), Flow::kDone, rdmacoll_trace::kCounterBytes);
  for (int k = 1; k < p; ++k) await(c.peer((r + k) % p), Flow::kDone);
}

}  // namespace prim
}  // namespace rdmacoll
