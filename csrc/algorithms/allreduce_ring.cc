// ring allreduce: reduce-scatter then allgather around the ring r -> r+1, pipelined by
// segment (terms in algorithms/partition.h: chunk, segment, step, unit).
//
// Two ways to move a segment, chosen by what the transport offers:
//
// ring (direct): every rank reads its predecessor's memory in place. At step j of segment
//   k, rank r waits until prev finished unit (k, j-1), then
//     reduce-scatter  out[c] = in[c] op prev.src[c]   (src = prev's input at j = 0,
//                                                      its output after; scaled at the
//                                                      last step for Average)
//     allgather       out[c] = prev.out[c]
//   where prev's memory is loaded straight from a mapping when it is allocated memory
//   (rc.empty, pool results) and copied by a cross-memory read into a staging segment
//   otherwise (user memory; allgather reads land directly in out).
//   Bytes moved per rank: 2 (p-1)/p n, as any ring. Memory passes per rank over its
//   (p-1)/p n share of each phase: reduce-scatter one pass reading two inputs (plus one
//   kernel copy into staging for user memory), allgather one copy. No slots, no credits:
//   the buffers are the peers' own, so a call ends with a `done` handshake (prev may
//   not return while I still read its memory).
//
// ring_slots: the transport-generic form, comm/ring.h's slot ring over all ranks (chunks
//   as its parts): segments travel as one-sided writes into the successor's receive
//   slots (credits bound them); where the successor's slots are mapped, the reduction
//   stores straight into them (one pass instead of reduce+copy).
//   Bytes moved per rank: 2 (p-1)/p n. Passes: reduce-scatter reads slot + input and
//   writes the next slot; allgather copies slot -> out and slot -> next slot.
#include <algorithm>
#include <cstring>

#include "algorithms/allreduce.h"
#include "algorithms/partition.h"
#include "algorithms/shared.h"
#include "comm/primitives.h"
#include "comm/ring.h"
#include "reduce/reduce.h"

namespace rdmacoll {
namespace algorithms {

void allreduceRing(Communicator& c, Call& call) {
  const int p = c.size(), r = c.rank();
  const size_t E = call.elemBytes;
  const size_t segElems = c.protocol().segment(E) / E;
  const size_t nseg = ring::segmentsPerChunk(call.count, p, segElems);
  const int steps = ring::stepsPerSegment(p);
  Peer& prev = c.peer(ring::prev(r, p));
  Peer& next = c.peer(ring::next(r, p));

  // Where my buffers are, for next; where prev's are, for me.
  BufferRef in, out;
  c.describeBuffer(call.in, call.count * E, &in);
  c.describeBuffer(call.out, call.count * E, &out);
  prim::sendHeader(c, next, call, &in, &out);
  prim::PeerBuffers theirs;
  prim::viewPeer(prev, prim::recvHeader(c, prev, call), &theirs);

  uint64_t unit = 0;
  for (size_t k = 0; k < nseg; ++k) {
    for (int j = 0; j < steps; ++j, ++unit) {
      const int chunk = ring::ringChunk(r, j, p);
      const ring::Range seg = ring::segment(call.count, p, segElems, chunk, k);
      if (j > 0) prim::waitProgress(c, prev, unit);  // prev finished unit (k, j-1)
      if (seg.n > 0) {
        const size_t off = seg.begin * E, len = seg.n * E;
        char* dst = at(call.out, E, seg.begin);
        if (j < p - 1) {  // reduce-scatter: prev's input at step 0, its output afterwards
          void* stage = c.staging(static_cast<int>(k & 1));
          const void* src =
              j == 0 ? prim::inputAt(prev, theirs, off, len, stage) : prim::outputAt(prev, theirs, off, len, stage);
          reduce2(call.dtype, call.op, dst, at(call.in, E, seg.begin), src, seg.n, j == p - 2 ? call.scale : 1.0);
        } else {  // allgather: prev's finished chunk
          prim::readOutput(prev, theirs, off, dst, len);
        }
      }
      prim::putProgress(c, next, unit + 1);
    }
  }
  prim::finishReads(c, prev, next, call, unit);
}

void allreduceRingSlots(Communicator& c, Call& call) {
  // Headers both ways with both neighbours: the ring skips empty segments, so slot
  // traffic alone does not keep a rank from starting call n+2 before its successor read
  // its header of call n (a zero-length call sends no slot message at all).
  prim::headersFromNeighbours(c, call, nullptr, 0);
  ringSlotsAfterHeaders(c, call);
}

void ringSlotsAfterHeaders(Communicator& c, Call& call) {
  const int p = c.size();
  const ring::Bounds chunks(call.count, p);
  const SlotRing slots{nullptr,
                       p,
                       c.rank(),
                       chunks.data(),
                       0,
                       call.elemBytes,
                       c.protocol().slotSegment(call.elemBytes) / call.elemBytes};
  ringAllreduce(c, call, slots, call.in, call.out, call.scale);
}

}  // namespace algorithms
}  // namespace rdmacoll
