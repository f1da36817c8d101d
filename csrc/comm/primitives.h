// Primitives: the verbs algorithms are written in. Each names what moves, to whom, and
// what it waits for; none names a transport.
//
// Immediates carry a tag checked on receipt: kind (header/eager/slot) and low bits of
// the call sequence or message number, so a peer running a different collective or
// algorithm is caught at its first message rather than misread.
#pragma once
#include <cstdint>

#include "comm/communicator.h"

namespace rdmacoll {
namespace prim {

enum TagKind : uint32_t { kHeaderTag = 1, kEagerTag = 2, kSlotTag = 3 };
inline uint32_t tag(TagKind k, uint64_t n) { return (static_cast<uint32_t>(k) << 28) | (n & 0x0fffffff); }

// ---- call headers: hash + descriptor (+ buffer locations), double-buffered by parity
void sendHeader(Communicator& c, Peer& to, const Call& call, const BufferRef* in, const BufferRef* out,
                const uint64_t* extra = nullptr);
// Wait for `from`'s header of this call and compare descriptors (abort on mismatch).
const CallHeader& recvHeader(Communicator& c, Peer& from, const Call& call);

// Send my header to every peer (extra(q) gives the per-destination values, may be
// null) and receive every peer's, predecessor first: a mismatch anywhere is seen by some
// rank at its first receive, which aborts everyone. headers[q] for q != me.
template <class Extra>
void exchangeHeaders(Communicator& c, const Call& call, const BufferRef* in, const BufferRef* out,
                     Extra extra, const CallHeader** headers) {
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
// mappedSlot already).
void sendSlot(Communicator& c, Peer& to, const void* data, size_t bytes);
// Wait for the next slot message from `from`; returns its bytes in my memory.
const void* recvSlot(Communicator& c, Peer& from);
// Give the slot back to its sender (a credit).
void releaseSlot(Communicator& c, Peer& from);

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
