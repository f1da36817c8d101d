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
//   reducescatter (ring)    p-1 steps; chunk c is reduced in ring order, from rank c+1 to
//                           rank c, once, by the ranks on the way, and lands at rank c.
//                           Sends and receives (p-1)/p n; p-1 reduction passes of n/p
//                           (slot + input -> next slot or out).
//   alltoall (pairwise)     p-1 steps; step k sends to r+k while receiving from r-k.
//                           Receives what peers send me, one copy per byte.
//
// allgather and reducescatter are comm/ring.h's slot ring (shift -1: rank r owns part r),
// whose deadlock freedom is argued there. broadcast forwards piece i after receiving it,
// and alltoall is pairwise::shift (sending ahead by prim::writesOffloaded), so a rank blocked
// on a credit waits on a rank that is strictly earlier in the schedule, and no cycle of
// waits can form with any number of slots.
#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "algorithms/collectives.h"
#include "algorithms/partition.h"
#include "comm/pairwise.h"
#include "comm/primitives.h"
#include "comm/ring.h"
#include "reduce/reduce.h"

namespace rdmacoll {
namespace algorithms {

namespace {

using pairwise::pieceLen;
using pairwise::pieces;

void headers(Communicator& c, const Call& call, std::vector<const CallHeader*>* h,
             const std::function<void(int, uint64_t*)>& extra) {
  h->assign(c.size(), nullptr);
  prim::headersFromAll(c, call, nullptr, nullptr, extra, h->data());
}

}  // namespace

// ring allgather: parts (rows[q] rows of rowBytes) are placed in the result in rank
// order; the slot ring (in bytes) moves them, rank r owning part r.
void allgatherRing(Communicator& c, Call& call) {
  const int p = c.size(), r = c.rank();
  const size_t rows = call.rows, rowBytes = call.count * call.elemBytes;
  std::vector<const CallHeader*> h;
  headers(c, call, &h, [&](int, uint64_t* e) { e[0] = rows; });
  std::vector<size_t> first(p + 1, 0);  // first byte of each rank's part
  size_t total = 0;
  for (int q = 0; q < p; ++q) {
    const size_t n = q == r ? rows : h[q]->extra[0];
    first[q + 1] = first[q] + n * rowBytes;
    total += n;
  }
  char* dst = static_cast<char*>(call.result->allocate(first[p]));
  copyBytes(dst + first[r], call.in, rows * rowBytes);
  const SlotRing ring{nullptr, p, r, first.data(), -1, 1, c.protocol().slotSegment(1)};
  ringAllgather(c, ring, dst);
  call.resultRows = total;
}

// chain broadcast: rank at distance d = r - root (mod p) receives each piece from
// d-1, copies it into out and forwards it from out to d+1 (the last rank only
// receives); the root sends from its input (and copies it into out when out of place).
void broadcastChain(Communicator& c, Call& call) {
  const int p = c.size(), r = c.rank(), root = call.root;
  const size_t bytes = call.count * call.elemBytes, seg = c.protocol().slotSegment(1);
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
    if (call.out != call.in) copyBytes(call.out, call.in, bytes);
    return;
  }
  for (size_t i = 0, np = pieces(bytes, seg); i < np; ++i) {
    const size_t len = pieceLen(bytes, seg, i);
    copyBytes(o + i * seg, prim::recvSlot(c, prev), len);
    prim::releaseSlot(c, prev);
    if (d < p - 1) prim::sendSlot(c, next, o + i * seg, len);
  }
}

// ring reducescatter: chunk q = rows [chunkBegin(rows, p, q), ...) of every input (rank
// q's share): the slot ring's reduce-scatter, rank r owning part r, its result in out.
void reducescatterRing(Communicator& c, Call& call) {
  const int p = c.size();
  const size_t rowElems = call.rowElems, rows = rowElems ? call.count / rowElems : 0;
  std::vector<const CallHeader*> h;
  headers(c, call, &h, [](int, uint64_t*) {});
  const ring::Bounds shares(rows, p, rowElems);
  const SlotRing ring{nullptr,
                      p,
                      c.rank(),
                      shares.data(),
                      -1,
                      call.elemBytes,
                      c.protocol().slotSegment(call.elemBytes) / call.elemBytes};
  ringReduceScatter(c, call, ring, call.in, call.out, call.scale);
}

// pairwise alltoall: the rows I send to q are splits[q] rows from firstSent[q]; what q
// sends me (received[q] rows, from q's header) lands in the result in rank order. My own
// part is copied locally; at step k (1..p-1) I send to r+k while receiving from r-k.
void alltoallPairwise(Communicator& c, Call& call) {
  const int p = c.size(), r = c.rank();
  const uint64_t* splits = call.splits;
  uint64_t* received = call.received;
  const size_t rowBytes = call.count * call.elemBytes, seg = c.protocol().slotSegment(1);
  std::vector<uint64_t> firstSent(p + 1, 0);
  for (int q = 0; q < p; ++q) firstSent[q + 1] = firstSent[q] + splits[q];
  std::vector<const CallHeader*> h;
  headers(c, call, &h, [&](int q, uint64_t* e) { e[0] = splits[q]; });
  std::vector<uint64_t> firstRecv(p + 1, 0);
  for (int q = 0; q < p; ++q) {
    received[q] = q == r ? splits[r] : h[q]->extra[0];
    firstRecv[q + 1] = firstRecv[q] + received[q];
  }
  char* dst = static_cast<char*>(call.result->allocate(firstRecv[p] * rowBytes));
  const char* in = static_cast<const char*>(call.in);
  copyBytes(dst + firstRecv[r] * rowBytes, in + firstSent[r] * rowBytes, splits[r] * rowBytes);
  for (int k = 1; k < p; ++k) {
    const int to = (r + k) % p, from = (r - k + p) % p;
    pairwise::shift(c, c.peer(to), in + firstSent[to] * rowBytes, splits[to] * rowBytes, c.peer(from),
                    dst + firstRecv[from] * rowBytes, received[from] * rowBytes, seg);
  }
  call.resultRows = firstRecv[p];
}

}  // namespace algorithms
}  // namespace rdmacoll
