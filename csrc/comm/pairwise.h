// Pairwise transfers of whole ranges through the peer's receive slots, built on the slot
// primitives (primitives.h): a range of any length travels as consecutive slot messages
// of at most `segBytes` each (the caller passes a whole number of elements, no more than
// slotBytes). Both sides of a transfer compute the same lengths, so they agree on the
// number of messages; an empty range sends nothing.
//
// The exchanges send ahead of what they receive by half the peer's slots where a NIC moves
// the bytes (pairwise.cc: Ahead, prim::writesOffloaded; one piece elsewhere), so the link
// stays busy over its round trip, and a send only ever waits for a credit the peer gives
// before its own send of that index: two ranks that exchange with each other never wait on
// each other, with any number of slots.
#pragma once
#include <algorithm>
#include <cstddef>

#include "comm/communicator.h"

namespace rdmacoll {
namespace pairwise {

// A range of `bytes` travels as pieces(bytes, seg) messages; piece i holds pieceLen bytes.
inline size_t pieces(size_t bytes, size_t seg) { return (bytes + seg - 1) / seg; }
inline size_t pieceLen(size_t bytes, size_t seg, size_t i) { return std::min(seg, bytes - i * seg); }

// Send `bytes` from `data` to `to`.
void send(Communicator& c, Peer& to, const void* data, size_t bytes, size_t segBytes);
// Receive `bytes` from `from` into dst.
void recvCopy(Communicator& c, Peer& from, void* dst, size_t bytes, size_t segBytes);
// Receive `bytes` from `from`; dst = mine op theirs (theirsFirst: theirs op mine), times
// scale. dst may alias mine.
void recvReduce(Communicator& c, Peer& from, const Call& call, void* dst, const void* mine, size_t bytes,
                size_t segBytes, bool theirsFirst, double scale);

// Send sendBytes from `send` to `to` while receiving recvBytes from `from`, reduced as
// recvReduce (a reduce-scatter ring step when to != from). `send` may alias dst only
// piece for piece (send == dst): piece i is stored once its write left it.
void shiftReduce(Communicator& c, Peer& to, const void* send, size_t sendBytes, Peer& from, const Call& call, void* dst,
                 const void* mine, size_t recvBytes, size_t segBytes, bool theirsFirst, double scale);
// shiftReduce with one peer q both ways.
inline void exchangeReduce(Communicator& c, Peer& q, const Call& call, const void* send, size_t sendBytes, void* dst,
                           const void* mine, size_t recvBytes, size_t segBytes, bool theirsFirst, double scale) {
  shiftReduce(c, q, send, sendBytes, q, call, dst, mine, recvBytes, segBytes, theirsFirst, scale);
}
// Send sendBytes from `send` to `to` while receiving recvBytes from `from` into dst, piece
// i sent before piece i is received (a ring step when to != from).
void shift(Communicator& c, Peer& to, const void* send, size_t sendBytes, Peer& from, void* dst, size_t recvBytes,
           size_t segBytes);
// Send sendBytes from `send` to q while receiving recvBytes from q into dst.
inline void exchangeCopy(Communicator& c, Peer& q, const void* send, size_t sendBytes, void* dst, size_t recvBytes,
                         size_t segBytes) {
  shift(c, q, send, sendBytes, q, dst, recvBytes, segBytes);
}

}  // namespace pairwise
}  // namespace rdmacoll
