// hierarchical allreduce: within each host a ring reduce-scatter, between hosts a ring
// allreduce of each rank's share among the ranks with the same local index (one per
// host), within each host a ring allgather. The network carries 1/l of the data per rank
// instead of all of it, and every host link is used by l ranks at once.
//
// Terms (comm/topology.h): l = ranks per host, h = hosts, local / cross groups,
// i = my index in the local group, j = my index in the cross group.
//   chunk      count elements split into l chunks (ring::chunkBegin); after the local
//              reduce-scatter rank i holds chunk (i+1) mod l reduced over its host.
//   sub-chunk  a chunk split into h sub-chunks, the parts of the cross ring.
//   ring       comm/ring.h's slot ring over a group (the local one, then the cross one),
//              its parts the chunks (or sub-chunks); segment by segment through slots.
// Steps: local reduce-scatter l-1, cross reduce-scatter h-1 and allgather h-1, local
// allgather l-1.
// Bytes moved per rank (n = count * element bytes): within the host 2 (l-1)/l n; across
// hosts 2 (h-1)/h n/l. Memory passes: one copy of the input into out (out of place, so
// that every ring runs in place in out), then per step one reduction straight into the
// successor's slot (or a copy out of the slot and one into the next, allgather).
// Identical results: every element is reduced once, in ring order, by the ranks on the
// way, then copied: all ranks hold the same bits. Average scales once, at the last
// cross reduction.
#include <cstring>

#include "algorithms/allreduce.h"
#include "algorithms/partition.h"
#include "comm/primitives.h"
#include "comm/ring.h"
#include "comm/topology.h"
#include "reduce/reduce.h"

namespace rdmacoll {
namespace algorithms {

void allreduceHierarchical(Communicator& c, Call& call) {
  const schedule::Hierarchy& t = c.topology();
  const int l = static_cast<int>(t.local.size()), h = t.hosts;
  const size_t E = call.elemBytes;
  const size_t segElems = c.protocol().slotSegment(E) / E;
  auto at = [&](const std::vector<int>& g, int k) { return g[((k % int(g.size())) + g.size()) % g.size()]; };
  const int peers[4] = {at(t.local, t.localIndex - 1), at(t.local, t.localIndex + 1), at(t.cross, t.crossIndex - 1),
                        at(t.cross, t.crossIndex + 1)};
  prim::headersFromNeighbours(c, call, peers, 4);

  char* out = static_cast<char*>(call.out);
  if (call.in != call.out) copyBytes(out, call.in, call.count * E);
  const ring::Bounds chunks(call.count, l);
  const SlotRing local{t.local.data(), l, t.localIndex, chunks.data(), 0, E, segElems};
  const int owned = (t.localIndex + 1) % l;
  char* chunk = out + chunks.data()[owned] * E;
  ringReduceScatter(c, call, local, out, chunk, h == 1 ? call.scale : 1.0);
  if (h > 1) {
    const ring::Bounds subchunks(ring::chunkCount(call.count, l, owned), h);
    const SlotRing cross{t.cross.data(), h, t.crossIndex, subchunks.data(), 0, E, segElems};
    ringAllreduce(c, call, cross, chunk, chunk, call.scale);
  }
  ringAllgather(c, local, out);
}

}  // namespace algorithms
}  // namespace rdmacoll
