#include "comm/pairwise.h"

#include <algorithm>
#include <cstring>

#include "comm/primitives.h"
#include "common/error.h"
#include "reduce/reduce.h"

namespace rdmacoll {
namespace pairwise {

namespace {

void recvReducePiece(Communicator& c, Peer& from, const Call& call, char* dst, const char* mine, size_t len,
                     bool theirsFirst, double scale) {
  const void* theirs = prim::recvSlot(c, from);
  const size_t n = len / call.elemBytes;
  if (theirsFirst) {
    reduce2(call.dtype, call.op, dst, theirs, mine, n, scale);
  } else {
    reduce2(call.dtype, call.op, dst, mine, theirs, n, scale);
  }
  prim::releaseSlot(c, from);
}

bool overlap(const char* a, size_t an, const char* b, size_t bn) { return an && bn && a < b + bn && b < a + an; }

void recvCopyPiece(Communicator& c, Peer& from, char* dst, size_t len) {
  copyBytes(dst, prim::recvSlot(c, from), len);
  prim::releaseSlot(c, from);
}
}  // namespace

void send(Communicator& c, Peer& to, const void* data, size_t bytes, size_t segBytes) {
  const char* p = static_cast<const char*>(data);
  for (size_t i = 0, np = pieces(bytes, segBytes); i < np; ++i) {
    prim::sendSlot(c, to, p + i * segBytes, pieceLen(bytes, segBytes, i));
  }
}

void recvCopy(Communicator& c, Peer& from, void* dst, size_t bytes, size_t segBytes) {
  char* d = static_cast<char*>(dst);
  for (size_t i = 0, np = pieces(bytes, segBytes); i < np; ++i) {
    recvCopyPiece(c, from, d + i * segBytes, pieceLen(bytes, segBytes, i));
  }
}

void recvReduce(Communicator& c, Peer& from, const Call& call, void* dst, const void* mine, size_t bytes,
                size_t segBytes, bool theirsFirst, double scale) {
  char* d = static_cast<char*>(dst);
  const char* m = static_cast<const char*>(mine);
  for (size_t i = 0, np = pieces(bytes, segBytes); i < np; ++i) {
    recvReducePiece(c, from, call, d + i * segBytes, m + i * segBytes, pieceLen(bytes, segBytes, i), theirsFirst,
                    scale);
  }
}

void shiftReduce(Communicator& c, Peer& to, const void* send, size_t sendBytes, Peer& from, const Call& call, void* dst,
                 const void* mine, size_t recvBytes, size_t segBytes, bool theirsFirst, double scale) {
  const char* s = static_cast<const char*>(send);
  char* d = static_cast<char*>(dst);
  const char* m = static_cast<const char*>(mine);
  const size_t ns = pieces(sendBytes, segBytes), nr = pieces(recvBytes, segBytes);
  const bool aliased = overlap(s, sendBytes, d, recvBytes);
  for (size_t i = 0; i < std::max(ns, nr); ++i) {
    const uint64_t sent = i < ns ? prim::sendSlot(c, to, s + i * segBytes, pieceLen(sendBytes, segBytes, i)) : 0;
    if (i < nr) {
      // Piece i of an aliased send is stored to now: its write must have left it (the
      // peer's piece i came independently of mine, which proves nothing about it).
      if (aliased) prim::waitWritten(to, sent);
      recvReducePiece(c, from, call, d + i * segBytes, m + i * segBytes, pieceLen(recvBytes, segBytes, i), theirsFirst,
                      scale);
    }
  }
}

void shift(Communicator& c, Peer& to, const void* send, size_t sendBytes, Peer& from, void* dst, size_t recvBytes,
           size_t segBytes) {
  const char* s = static_cast<const char*>(send);
  char* d = static_cast<char*>(dst);
  const size_t ns = pieces(sendBytes, segBytes), nr = pieces(recvBytes, segBytes);
  const bool aliased = overlap(s, sendBytes, d, recvBytes);
  for (size_t i = 0; i < std::max(ns, nr); ++i) {
    const uint64_t sent = i < ns ? prim::sendSlot(c, to, s + i * segBytes, pieceLen(sendBytes, segBytes, i)) : 0;
    if (i < nr) {
      if (aliased) prim::waitWritten(to, sent);
      recvCopyPiece(c, from, d + i * segBytes, pieceLen(recvBytes, segBytes, i));
    }
  }
}

}  // namespace pairwise
}  // namespace rdmacoll
