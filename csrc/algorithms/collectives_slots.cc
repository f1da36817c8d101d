// Transport-generic forms of allgather, broadcast, reducescatter and alltoall: no rank
// reads a peer's memory; everything travels as messages into the peers' receive slots
// (comm/primitives.h), at most one slot (config.slotBytes) per message, bounded by
// credits. A call opens with one exchange of call headers with every peer (which checks
// that all ranks run the same call and carries the row counts / splits a rank needs from
// its peers), and ends when every rank has consumed every slot message sent to it, so
// the per-peer message numbering of the next call starts in step. No closing handshake:
// no peer reads my buffers.
//
// Terms: n = bytes of one rank's contribution, N = bytes of the result, p ranks; a piece
// is one slot message; a step is one round of the ring / chain / pairwise schedule.
//   allgather (ring)        p-1 steps; rank r forwards part r-s to r+1 at step s.
//                           Receives N - n, one copy per byte (slot -> result).
//   broadcast (chain)       root -> root+1 -> ... -> root-1, pipelined by piece.
//                           Each non-root receives n, one copy (slot -> out); all but
//                           the last also send n.
//   reducescatter (ring)    p-1 steps; chunk c is reduced in ring order
//                           in[c+1] op in[c+2] op ... op in[c], once, by the ranks on the
//                           way, and lands at rank c. Sends and receives (p-1)/p n; p-1
//                           reduction passes of n/p (slot + input -> next slot or out).
//   alltoall (pairwise)     p-1 steps; step k sends to r+k while receiving from r-k.
//                           Receives what peers send me, one copy per byte.
//
// Deadlock freedom: within a step a rank interleaves "send piece i" and "receive piece
// i" (like pairwise::exchangeCopy), so a rank blocked on a credit waits on a rank that
// is strictly earlier in the schedule, and no cycle of waits can form with any number
// of slots. reducescatter forwards each partial as soon as it is reduced (like
// ring_slots); it stores straight into next's slot only with 2+ slots (see there).
#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "algorithms/collectives.h"
#include "algorithms/partition.h"
#include "comm/pairwise.h"
#include "comm/primitives.h"
#include "reduce/reduce.h"

namespace rdmacoll {
namespace algorithms {

namespace {

using pairwise::pieceLen;
using pairwise::pieces;
using pairwise::shift;

// Pure copies: pieces of a whole slot.
size_t copyPiece(const Communicator& c) { return c.config().slotBytes; }

void headers(Communicator& c, const Call& call, std::vector<const CallHeader*>* h,
             const std::function<void(int, uint64_t*)>& extra) {
  h->assign(c.size(), nullptr);
  prim::exchangeHeaders(c, call, nullptr, nullptr, extra, h->data());
}

}  // namespace

// ring allgather: parts (rows[q] rows of rowBytes) are placed in the result in rank
// order; at step s (0..p-2) rank r sends part r-s (its own at step 0, afterwards the
// one it received at step s-1, straight from the result) to r+1 and receives part
// r-s-1 from r-1 into the result.
size_t allgatherRing(Communicator& c, const Call& call, size_t rows, Output& out) {
  const int p = c.size(), r = c.rank();
  const size_t rowBytes = call.count * call.elemBytes, seg = copyPiece(c);
  std::vector<const CallHeader*> h;
  headers(c, call, &h, [&](int, uint64_t* e) { e[0] = rows; });
  std::vector<size_t> first(p + 1, 0);  // first row of each rank's part
  for (int q = 0; q < p; ++q) first[q + 1] = first[q] + (q == r ? rows : h[q]->extra[0]);
  char* dst = static_cast<char*>(out.allocate(first[p] * rowBytes));
  std::memcpy(dst + first[r] * rowBytes, call.in, rows * rowBytes);
  Peer& next = c.peer(ring::next(r, p));
  Peer& prev = c.peer(ring::prev(r, p));
  for (int s = 0; s < p - 1; ++s) {
    const int sp = ((r - s) % p + p) % p, rp = ((r - s - 1) % p + p) % p;
    shift(c, next, dst + first[sp] * rowBytes, (first[sp + 1] - first[sp]) * rowBytes, prev,
          dst + first[rp] * rowBytes, (first[rp + 1] - first[rp]) * rowBytes, seg);
  }
  return first[p];
}

// chain broadcast: rank at distance d = r - root (mod p) receives each piece from
// d-1, copies it into out and forwards it from out to d+1 (the last rank only
// receives); the root sends from its input (and copies it into out when out of place).
void broadcastChain(Communicator& c, const Call& call, int root) {
  const int p = c.size(), r = c.rank();
  const size_t bytes = call.count * call.elemBytes, seg = copyPiece(c);
  std::vector<const CallHeader*> h;
  headers(c, call, &h, [](int, uint64_t*) {});
  const int d = ((r - root) % p + p) % p;
  Peer& next = c.peer(ring::next(r, p));
  Peer& prev = c.peer(ring::prev(r, p));
  char* o = static_cast<char*>(call.out);
  if (d == 0) {
    const char* in = static_cast<const char*>(call.in);
    for (size_t i = 0, np = pieces(bytes, seg); i < np; ++i) {
      prim::sendSlot(c, next, in + i * seg, pieceLen(bytes, seg, i));
    }
    if (call.out != call.in) std::memcpy(call.out, call.in, bytes);
    return;
  }
  for (size_t i = 0, np = pieces(bytes, seg); i < np; ++i) {
    const size_t len = pieceLen(bytes, seg, i);
    std::memcpy(o + i * seg, prim::recvSlot(c, prev), len);
    prim::releaseSlot(c, prev);
    if (d < p - 1) prim::sendSlot(c, next, o + i * seg, len);
  }
}

// ring reducescatter: chunk c = rows [chunkBegin(rows, p, c), ...) of every input (rank
// c's share), cut into nseg segments of at most segElems elements. For each segment k:
// rank r sends its input of chunk r-1 to r+1; at step j (0..p-2) it receives the partial
// of chunk r-j-2 from r-1 and reduces partial op input (into r+1's slot, or staging, and
// sends it), except at j = p-2, where the chunk is its own (r) and the result, scaled
// for Average, goes to out.
void reducescatterRing(Communicator& c, const Call& call, size_t rowElems) {
  const int p = c.size(), r = c.rank();
  const size_t E = call.elemBytes;
  const size_t rows = rowElems ? call.count / rowElems : 0;
  const size_t segElems = std::max<size_t>(1, std::min(c.config().segmentBytes, c.config().slotBytes) / E);
  std::vector<const CallHeader*> h;
  headers(c, call, &h, [](int, uint64_t*) {});
  Peer& next = c.peer(ring::next(r, p));
  Peer& prev = c.peer(ring::prev(r, p));
  const size_t largest = ring::chunkCount(rows, p, 0) * rowElems;
  const size_t nseg = (largest + segElems - 1) / segElems;
  // Elements [begin, begin + n) of segment k of chunk ch.
  auto segment = [&](int ch, size_t k) {
    const size_t b = ring::chunkBegin(rows, p, ch) * rowElems, n = ring::chunkCount(rows, p, ch) * rowElems;
    const size_t s = std::min(k * segElems, n);
    return ring::Range{b + s, std::min(segElems, n - s)};
  };
  const char* in = static_cast<const char*>(call.in);
  const size_t mineBegin = ring::chunkBegin(rows, p, r) * rowElems;
  for (size_t k = 0; k < nseg; ++k) {
    const ring::Range first = segment(ring::prev(r, p), k);
    prim::sendSlot(c, next, in + first.begin * E, first.n * E);
    for (int j = 0; j < p - 1; ++j) {
      const int ch = ((r - j - 2) % p + p) % p;
      const ring::Range seg = segment(ch, k);
      const void* theirs = prim::recvSlot(c, prev);
      const char* input = in + seg.begin * E;
      if (j < p - 2) {
        // Waiting for next's credit while holding prev's slot is safe with 2+ slots
        // (next then holds an older message of mine); with one slot every rank could
        // hold its predecessor's only slot, so reduce into staging and release first.
        void* slot = c.config().slots >= 2 ? prim::mappedSlot(c, next) : nullptr;
        void* dst = slot ? slot : c.staging(0);
        reduce2(call.dtype, call.op, dst, theirs, input, seg.n);
        prim::releaseSlot(c, prev);
        prim::sendSlot(c, next, slot ? nullptr : dst, seg.n * E);
      } else {
        char* result = static_cast<char*>(call.out) + (seg.begin - mineBegin) * E;
        reduce2(call.dtype, call.op, result, theirs, input, seg.n, call.scale);
        prim::releaseSlot(c, prev);
      }
    }
  }
}

// pairwise alltoall: the rows I send to q are splits[q] rows from firstSent[q]; what q
// sends me (received[q] rows, from q's header) lands in the result in rank order. My own
// part is copied locally; at step k (1..p-1) I send to r+k while receiving from r-k.
size_t alltoallPairwise(Communicator& c, const Call& call, const uint64_t* splits, uint64_t* received,
                        Output& out) {
  const int p = c.size(), r = c.rank();
  const size_t rowBytes = call.count * call.elemBytes, seg = copyPiece(c);
  std::vector<uint64_t> firstSent(p + 1, 0);
  for (int q = 0; q < p; ++q) firstSent[q + 1] = firstSent[q] + splits[q];
  std::vector<const CallHeader*> h;
  headers(c, call, &h, [&](int q, uint64_t* e) { e[0] = splits[q]; });
  std::vector<uint64_t> firstRecv(p + 1, 0);
  for (int q = 0; q < p; ++q) {
    received[q] = q == r ? splits[r] : h[q]->extra[0];
    firstRecv[q + 1] = firstRecv[q] + received[q];
  }
  char* dst = static_cast<char*>(out.allocate(firstRecv[p] * rowBytes));
  const char* in = static_cast<const char*>(call.in);
  std::memcpy(dst + firstRecv[r] * rowBytes, in + firstSent[r] * rowBytes, splits[r] * rowBytes);
  for (int k = 1; k < p; ++k) {
    const int to = (r + k) % p, from = (r - k + p) % p;
    shift(c, c.peer(to), in + firstSent[to] * rowBytes, splits[to] * rowBytes, c.peer(from),
          dst + firstRecv[from] * rowBytes, received[from] * rowBytes, seg);
  }
  return firstRecv[p];
}

}  // namespace algorithms
}  // namespace rdmacoll
