#include "comm/pairwise.h"

#include <algorithm>
#include <cstring>
#include <vector>

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
// Whether send and dst alias, which they may only piece for piece (pairwise.h): a partial
// overlap would be stored to while pieces sent ahead are still in flight.
bool aliasedPieceForPiece(const char* s, size_t sn, const char* d, size_t dn) {
  if (!overlap(s, sn, d, dn)) return false;
  if (s != d) throw Error("internal: a pairwise exchange whose send and receive ranges overlap partially");
  return true;
}

void recvCopyPiece(Communicator& c, Peer& from, char* dst, size_t len) {
  copyBytes(dst, prim::recvSlot(c, from), len);
  prim::releaseSlot(c, from);
}
// The sending side of a shift: before receiving piece i it has sent pieces up to
// i + window - 1, so the next pieces cross the link while the first are in flight: a
// link with a round trip of t carries a piece per piece time, not one per t + piece time
// (the simulator: halving-doubling of 16 MiB at 64 ranks paid a round trip per 256 KiB
// piece, docs/scale.md). Only where a NIC moves the bytes (prim::writesOffloaded):
// elsewhere a write is this host's CPU work, which sending ahead only interleaved worse
// (1.1-1.5x slower at 4-16 MiB, 2-4 ranks on 2 cores), so there window = 1. Else window =
// half the peer's slots: where the peer sends to me too, the credit it returns for my
// piece m travels behind its own pieces in flight (a connection delivers in order), so my
// credits come back a window late, and the other half of the slots covers that (with all
// of them as the window, the credits' wait cost what the window saved). A send of message
// m waits for the peer to consume message m - slots, which it does before sending its own
// piece m - slots + window < m: every wait is for an earlier message of the other side,
// so no two ranks wait on each other. Where the send aliases the receive (send == dst),
// piece i is stored to once its own write left it (its ticket; the window's later writes
// may still be in flight).
struct Ahead {
  Communicator& c;
  Peer& to;
  const char* src;
  const size_t bytes, seg, pieces, window;
  const bool aliased;
  size_t sent = 0;
  std::vector<uint64_t> tickets;  // piece k's write at k % window (aliased only)
  Ahead(Communicator& c, Peer& to, const char* src, size_t bytes, size_t seg, bool aliased)
      : c(c),
        to(to),
        src(src),
        bytes(bytes),
        seg(seg),
        pieces(pairwise::pieces(bytes, seg)),
        window(prim::writesOffloaded(to) ? static_cast<size_t>(std::max(1, c.protocol().slots / 2)) : 1),
        aliased(aliased),
        tickets(aliased ? window : 0) {}
  void sendThrough(size_t i) {
    for (; sent < pieces && sent < i + window; ++sent) {
      const uint64_t t = prim::sendSlot(c, to, src + sent * seg, pieceLen(bytes, seg, sent));
      if (aliased) tickets[sent % window] = t;
    }
  }
  // Before piece i is stored to where it aliases: piece i's write left it (sent, so its
  // ticket is among the window's last).
  void waitLeft(size_t i) {
    if (aliased && i < pieces) prim::waitWritten(to, tickets[i % window]);
  }
};
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
  Ahead out(c, to, s, sendBytes, segBytes, aliasedPieceForPiece(s, sendBytes, d, recvBytes));
  for (size_t i = 0, nr = pieces(recvBytes, segBytes); i < std::max(out.pieces, nr); ++i) {
    out.sendThrough(i);
    if (i < nr) {
      out.waitLeft(i);
      recvReducePiece(c, from, call, d + i * segBytes, m + i * segBytes, pieceLen(recvBytes, segBytes, i), theirsFirst,
                      scale);
    }
  }
}

void shift(Communicator& c, Peer& to, const void* send, size_t sendBytes, Peer& from, void* dst, size_t recvBytes,
           size_t segBytes) {
  const char* s = static_cast<const char*>(send);
  char* d = static_cast<char*>(dst);
  Ahead out(c, to, s, sendBytes, segBytes, aliasedPieceForPiece(s, sendBytes, d, recvBytes));
  for (size_t i = 0, nr = pieces(recvBytes, segBytes); i < std::max(out.pieces, nr); ++i) {
    out.sendThrough(i);
    if (i < nr) {
      out.waitLeft(i);
      recvCopyPiece(c, from, d + i * segBytes, pieceLen(recvBytes, segBytes, i));
    }
  }
}

}  // namespace pairwise
}  // namespace rdmacoll
