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
// ring_slots: the transport-generic form: segments travel as one-sided writes into the
//   successor's receive slots (credits bound them); where the successor's slots are
//   mapped, the reduction stores straight into them (one pass instead of reduce+copy).
//   Bytes moved per rank: 2 (p-1)/p n. Passes: reduce-scatter reads slot + input and
//   writes the next slot; allgather copies slot -> out and slot -> next slot.
#include <algorithm>
#include <cstring>

#include "algorithms/allreduce.h"
#include "algorithms/shared.h"
#include "algorithms/partition.h"
#include "comm/primitives.h"
#include "reduce/reduce.h"

namespace rdmacoll {
namespace algorithms {

void allreduceRing(Communicator& c, const Call& call) {
  const int p = c.size(), r = c.rank();
  const size_t E = call.elemBytes;
  const size_t segElems = c.config().segmentBytes / E;
  const size_t nseg = ring::segmentsPerChunk(call.count, p, segElems);
  const int steps = ring::stepsPerSegment(p);
  Peer& prev = c.peer(ring::prev(r, p));
  Peer& next = c.peer(ring::next(r, p));

  // Where my buffers are, for next; where prev's are, for me.
  BufferRef in, out;
  c.describeBuffer(call.in, call.count * E, &in);
  c.describeBuffer(call.out, call.count * E, &out);
  prim::sendHeader(c, next, call, &in, &out);
  const CallHeader& h = prim::recvHeader(c, prev, call);
  transport::RemoteMemory prevIn, prevOut;
  prev.ep->unpack(h.in, &prevIn);
  prev.ep->unpack(h.out, &prevOut);
  const size_t prevInOff = h.inOffset, prevOutOff = h.outOffset;
  const char* prevInMap = static_cast<const char*>(prev.ep->map(&prevIn));
  const char* prevOutMap = static_cast<const char*>(prev.ep->map(&prevOut));

  uint64_t unit = 0;
  for (size_t k = 0; k < nseg; ++k) {
    for (int j = 0; j < steps; ++j, ++unit) {
      const int chunk = ring::ringChunk(r, j, p);
      const ring::Range seg = ring::segment(call.count, p, segElems, chunk, k);
      if (j > 0) prim::waitProgress(c, prev, unit);  // prev finished unit (k, j-1)
      if (seg.n > 0) {
        const size_t off = seg.begin * E, len = seg.n * E;
        char* dst = at(call.out, E, seg.begin);
        const bool reduceScatter = j < p - 1;
        // prev's data for this step: its input at step 0, its output afterwards.
        const transport::RemoteMemory& src = j == 0 ? prevIn : prevOut;
        const char* srcMap = j == 0 ? prevInMap : prevOutMap;
        const size_t srcOff = (j == 0 ? prevInOff : prevOutOff) + off;
        if (reduceScatter) {
          const void* theirs = srcMap ? srcMap + srcOff : nullptr;
          if (!theirs) {
            void* stage = c.staging(static_cast<int>(k & 1));
            prev.ep->read(src, srcOff, stage, len);
            theirs = stage;
          }
          const bool last = j == p - 2;
          reduce2(call.dtype, call.op, dst, at(call.in, E, seg.begin), theirs, seg.n,
                  last ? call.scale : 1.0);
        } else if (srcMap) {
          std::memcpy(dst, srcMap + srcOff, len);
        } else {
          prev.ep->read(src, srcOff, dst, len);
        }
      }
      prim::putProgress(c, next, unit + 1);
    }
  }
  prim::finishReads(c, prev, next, call, unit);
}

void allreduceRingSlots(Communicator& c, const Call& call) {
  const int p = c.size(), r = c.rank();
  prim::sendHeader(c, c.peer(ring::next(r, p)), call, nullptr, nullptr);
  prim::recvHeader(c, c.peer(ring::prev(r, p)), call);
  ringSlotsAfterHeaders(c, call);
}

void ringSlotsAfterHeaders(Communicator& c, const Call& call) {
  const int p = c.size(), r = c.rank();
  const size_t E = call.elemBytes;
  size_t segBytes = std::min(c.config().segmentBytes, c.config().slotBytes);
  const size_t segElems = segBytes / E;
  const size_t nseg = ring::segmentsPerChunk(call.count, p, segElems);
  const int steps = ring::stepsPerSegment(p);
  Peer& prev = c.peer(ring::prev(r, p));
  Peer& next = c.peer(ring::next(r, p));

  for (size_t k = 0; k < nseg; ++k) {
    // Step 0 sends my own chunk r, which next reduces at its step 0.
    ring::Range mine = ring::segment(call.count, p, segElems, r, k);
    prim::sendSlot(c, next, at(call.in, E, mine.begin), mine.n * E);
    for (int j = 0; j < steps; ++j) {
      const int chunk = ring::ringChunk(r, j, p);
      const ring::Range seg = ring::segment(call.count, p, segElems, chunk, k);
      const size_t len = seg.n * E;
      const void* slot = prim::recvSlot(c, prev);
      const char* input = at(call.in, E, seg.begin);
      char* result = at(call.out, E, seg.begin);
      const bool reduceScatter = j < p - 1, lastReduce = j == p - 2, lastStep = j == steps - 1;
      // The incoming slot is given back before any send whose source is not that slot:
      // a rank holding prev's slot while it waits for next's credit closes a cycle of
      // waits around the ring when each peer has a single slot.
      if (reduceScatter && !lastReduce) {
        // recvReduceSend: reduce straight into next's slot when it is mapped (this holds
        // prev's slot while waiting for next's credit: only with two slots or more).
        void* dst = c.config().slots >= 2 ? prim::mappedSlot(c, next) : nullptr;
        if (dst) {
          reduce2(call.dtype, call.op, dst, input, slot, seg.n);
          prim::releaseSlot(c, prev);
          prim::sendSlot(c, next, nullptr, len);
        } else {
          void* stage = c.staging(0);
          reduce2(call.dtype, call.op, stage, input, slot, seg.n);
          prim::releaseSlot(c, prev);
          prim::sendSlot(c, next, stage, len);
        }
      } else if (lastReduce) {
        // recvReduceCopySend: my owned chunk is final; it starts the allgather.
        reduce2(call.dtype, call.op, result, input, slot, seg.n, call.scale);
        prim::releaseSlot(c, prev);
        prim::sendSlot(c, next, result, len);
      } else {
        // recvCopySend (or recvCopy at the last step).
        std::memcpy(result, slot, len);
        prim::releaseSlot(c, prev);
        if (!lastStep) prim::sendSlot(c, next, result, len);
      }
    }
  }
}

}  // namespace algorithms
}  // namespace rdmacoll
