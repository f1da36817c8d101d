// Primitives: the verbs algorithms are written in. Each names what moves, to whom, and
// what it waits for; none names a transport.
//
// Algorithms reach peers only through these (and comm/ring.h, comm/pairwise.h): they
// never name an Endpoint.
//
// Immediates carry a tag checked on receipt:
//   bits 30-31  kind (header, eager, slot)
//   bits 24-29  the communicator's channel (comm/links.h: which communicator it is for)
//   bits  0-23  headers, eager: the call sequence's low bits; slots: 8 bits of the hash
//               of the call the sender runs (after a continuation: of what it continues
//               as) and the message number's low 16 bits
// so a peer running a different collective, algorithm or continuation is caught at its
// first message rather than misread.
#pragma once
#include <cstdint>

#include "comm/communicator.h"
#include "common/error.h"

namespace rdmacoll {
namespace prim {

enum TagKind : uint32_t { kHeaderTag = 1, kEagerTag = 2, kSlotTag = 3 };
inline uint32_t tag(TagKind k, uint32_t channel, uint64_t n) {
  return (static_cast<uint32_t>(k) << 30) | ((channel & 0x3f) << 24) | (n & 0xffffff);
}
inline uint32_t slotTag(uint32_t channel, uint32_t callTag, uint64_t msg) {
  return tag(kSlotTag, channel, ((callTag & 0xff) << 16) | (msg & 0xffff));
}
inline uint32_t tagKind(uint32_t imm) { return imm >> 30; }

// The call continues as another entry of the algorithm table (algorithms/table.h), decided
// alike on every rank from what the call headers revealed: the descriptor names it from
// now on (its hash, the slot tags, the stall inspector, last_algorithm).
void continueAs(Communicator& c, Call& call, uint8_t algorithm);

// ---- call headers: hash + descriptor (+ buffer locations), double-buffered by parity
void sendHeader(Communicator& c, Peer& to, const Call& call, const BufferRef* in, const BufferRef* out,
                const uint64_t* extra = nullptr);
// Wait for `from`'s header of this call and compare descriptors (abort on mismatch).
const CallHeader& recvHeader(Communicator& c, Peer& from, const Call& call);

// Send my header to every peer (extra(q) gives the per-destination values, may be
// null) and receive every peer's, predecessor first: a mismatch anywhere is seen by some
// rank at its first receive, which aborts everyone. headers[q] for q != me.
template <class Extra>
void headersFromAll(Communicator& c, const Call& call, const BufferRef* in, const BufferRef* out, Extra extra,
                    const CallHeader** headers) {
  const int p = c.size(), r = c.rank();
  for (int k = 1; k < p; ++k) {
    const int q = (r + k) % p;
    uint64_t e[2] = {0, 0};
    extra(q, e);
    sendHeader(c, c.peer(q), call, in, out, e);
  }
  for (int k = p - 1; k >= 1; --k) {
    const int q = (r + k) % p;
    headers[q] = &recvHeader(c, c.peer(q), call);
  }
}

// Call headers, without buffers, with the ring neighbours and `peers` (n of them,
// duplicates and -1 allowed): send mine to each of them, then receive theirs, the
// predecessor's first. Every algorithm's first message goes to the successor and its
// first wait is on the predecessor, so ranks that picked different algorithms or calls
// meet at a header and fail with a mismatch instead of waiting for messages that never
// come; and every rank I send a header to sends me one, so a rank never starts call n+2
// (overwriting its header of call n, slots are per parity) before each of them started
// call n+1.
inline void headersFromNeighbours(Communicator& c, const Call& call, const int* peers, int n) {
  const int p = c.size(), r = c.rank();
  const int pred = (r + p - 1) % p, succ = (r + 1) % p;
  // Distinct peers, successor first and predecessor second (p <= 2: they coincide).
  constexpr int kMax = 16;
  int list[kMax];
  int m = 0;
  auto add = [&](int q) {
    if (q < 0 || q == r) return;
    for (int i = 0; i < m; ++i) {
      if (list[i] == q) return;
    }
    if (m == kMax) throw Error("internal: too many header peers");
    list[m++] = q;
  };
  add(succ);
  add(pred);
  for (int i = 0; i < n; ++i) add(peers[i]);
  for (int i = 0; i < m; ++i) sendHeader(c, c.peer(list[i]), call, nullptr, nullptr);
  recvHeader(c, c.peer(pred), call);
  for (int i = 0; i < m; ++i) {
    if (list[i] != pred) recvHeader(c, c.peer(list[i]), call);
  }
}

// A peer's buffers from its header, ready to read: mapped where the transport maps
// (then loads come straight from the peer's memory), else read() copies.
struct PeerBuffers {
  transport::RemoteMemory in, out;
  size_t inOff = 0, outOff = 0;
  const char* inMap = nullptr;   // at inOff, or null
  const char* outMap = nullptr;  // at outOff, or null
};
void viewPeer(Peer& peer, const CallHeader& h, PeerBuffers* b);
// Copy len bytes at byte offset off of the peer's input (or output) into dst.
void readInput(Peer& peer, const PeerBuffers& b, size_t off, void* dst, size_t len);
void readOutput(Peer& peer, const PeerBuffers& b, size_t off, void* dst, size_t len);
// The peer's input (or output) bytes [off, off+len): a pointer into the peer's memory
// where it is mapped, else a copy read into `stage` (at least len bytes).
const void* inputAt(Peer& peer, const PeerBuffers& b, size_t off, size_t len, void* stage);
const void* outputAt(Peer& peer, const PeerBuffers& b, size_t off, size_t len, void* stage);
// One-sided store of len bytes from src into the peer's output at byte offset off.
void writeOutput(Communicator& c, Peer& peer, const PeerBuffers& b, size_t off, const void* src, size_t len);

// ---- eager: hash/descriptor line + whole payload into the peer's eager inbox
void sendEager(Communicator& c, Peer& to, const Call& call, const void* data, size_t bytes);
// Wait for `from`'s eager message of this call, check it, return its payload.
const void* recvEager(Communicator& c, Peer& from, const Call& call);

// ---- slots: pipelined messages into the peer's receive slots, with credits
// Pointer into `to`'s next free slot when it can be stored to directly (kCanMap), after
// waiting for a credit; nullptr when the transport needs write() (then use sendSlot).
void* mappedSlot(Communicator& c, Peer& to);
void waitSlotCredit(Communicator& c, Peer& to);
// Send bytes to `to`'s next slot (data may be null when it was stored through
// mappedSlot already). Returns the write's ticket (below).
uint64_t sendSlot(Communicator& c, Peer& to, const void* data, size_t bytes);
// Wait for the next slot message from `from`; returns its bytes in my memory.
const void* recvSlot(Communicator& c, Peer& from);
// Give the slot back to its sender (a credit).
void releaseSlot(Communicator& c, Peer& from);

// ---- deferred completion (transport.h): a write's source is the transport's until the
// write left it. Every write here is tracked: a call's sources are free when it returns
// (finishWrites); inside a call, memory sent from may be stored to again only once its
// peer consumed it (its data came back, changed, through the peer) or after waitWritten.
// Where sources are reused within a call without that: staging, handed out for sends by
// sendStaging, which rotates over the segments and waits for the one it gives; aliased
// pairwise exchanges (pairwise.cc) and eager in place, which wait themselves; a pool
// block handed back inside a call (finishWrites first).
void waitWritten(Peer& to, uint64_t ticket);
// Whether writes to `to` need none of this host's CPUs (the transport declares
// kOffloadsWrites: a NIC moves the bytes). Where a write is this host's CPU work, several
// in flight only interleave it worse; pairwise exchanges send ahead only where offloaded.
bool writesOffloaded(const Peer& to);
// A staging segment (segmentBytes) to build a message in: free of earlier writes.
void* sendStaging(Communicator& c);
// At a call's end: until every write of it has left its source (the user's memory, the
// pool's, staging) so that they may change; clears the tracking.
void finishWrites(Communicator& c);

// ---- direct progress: counters in the peer's control region
// Tell `to` that I completed `units` units of the current call (cumulative per call).
void putProgress(Communicator& c, Peer& to, uint64_t units);
// Wait until `from` completed `units` units of the current call.
void waitProgress(Communicator& c, Peer& from, uint64_t units);
// At the end of a call that read peer memory: finish the call's progress accounting,
// tell `readFrom` I no longer read its memory, and wait until `readBy` no longer reads
// mine.
void finishReads(Communicator& c, Peer& readFrom, Peer& readBy, const Call& call, uint64_t units);
// At the end of a call in which every rank may access every peer's memory: tell every
// peer I am done with its memory, wait until every peer is done with mine.
void finishAll(Communicator& c, const Call& call);

}  // namespace prim
}  // namespace rdmacoll
