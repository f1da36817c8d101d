// tree allreduce: NCCL's double binary tree. Two complementary binary trees over the
// ranks (algorithms/schedule.h: tree 0 in-order, tree 1 its mirror or shift, so a rank
// interior in one is a leaf in the other); tree t carries half t of the vector. In each
// tree, segments are reduced up from the leaves to the root (scaled there, once, for
// Average), then broadcast down, pipelined by segment.
//
// Terms: half t = chunk t of count split in 2 (partition.h); segment k of a half = up to
// min(segmentBytes, slotBytes) bytes, one slot message. Iteration k handles segment k of
// both halves: up in tree 0, up in tree 1, down in tree 0, down in tree 1, the same
// order on every rank, so the messages between any two ranks arrive in the order they
// are expected, and each one is consumed in the phase that sent it (deadlock-free with
// any number of slots).
//   up    a leaf sends its input segment to its parent; an interior rank reduces its
//         input with its children's segments (inputs in rank order) straight into its
//         parent's slot where that is mapped (else through staging); the root reduces
//         into its output.
//   down  the root sends its output segment to its children; the others copy the
//         parent's segment into their output and send it on to their children.
// Bytes moved per rank: in the tree where it is interior (or the root) n/2 up and up to
// n down, where it is a leaf n/2 up; received the same. About 2 n, in 2 depth + nseg
// steps (depth ~ log2 p): far fewer dependent steps than a ring for large p.
// Memory passes per rank: interior: one three-input reduction of n/2 and one copy out
// plus one copy per child; leaf: one copy of n/2 up, one copy of n/2 out.
// Identical results: every element is reduced once (at each level, then at the root)
// and copied down, so every rank gets the root's bits.
#include <algorithm>
#include <cstring>

#include "algorithms/allreduce.h"
#include "algorithms/shared.h"
#include "algorithms/partition.h"
#include "algorithms/schedule.h"
#include "comm/primitives.h"
#include "reduce/reduce.h"

namespace rdmacoll {
namespace algorithms {

void allreduceTree(Communicator& c, Call& call) {
  const int p = c.size(), r = c.rank();
  const size_t E = call.elemBytes;
  const size_t segElems = c.protocol().slotSegment(E) / E;
  const schedule::TreeLinks tree[2] = {schedule::dtree(p, r, 0), schedule::dtree(p, r, 1)};
  const int neighbours[6] = {tree[0].parent, tree[0].child[0], tree[0].child[1],
                             tree[1].parent, tree[1].child[0], tree[1].child[1]};
  prim::headersFromNeighbours(c, call, neighbours, 6);

  const size_t nseg = call.count == 0 ? 0 : ring::segmentsPerChunk(call.count, 2, segElems);
  for (size_t k = 0; k < nseg; ++k) {
    for (int t = 0; t < 2; ++t) {  // up: reduce towards the root
      const ring::Range seg = ring::segment(call.count, 2, segElems, t, k);
      if (seg.n == 0) continue;
      const schedule::TreeLinks& l = tree[t];
      const size_t len = seg.n * E;
      // Inputs in rank order: children's slots and my input.
      const void* in[3];
      int ranks[3], nin = 0;
      for (int q : {l.child[0], l.child[1]}) {
        if (q < 0) continue;
        ranks[nin] = q;
        in[nin++] = prim::recvSlot(c, c.peer(q));
      }
      ranks[nin] = r;
      in[nin++] = at(call.in, E, seg.begin);
      for (int i = 1; i < nin; ++i) {  // insertion sort of <= 3 inputs by rank
        for (int j = i; j > 0 && ranks[j] < ranks[j - 1]; --j) {
          std::swap(ranks[j], ranks[j - 1]);
          std::swap(in[j], in[j - 1]);
        }
      }
      if (l.parent < 0) {
        reduceN(call.dtype, call.op, at(call.out, E, seg.begin), in, nin, seg.n, call.scale);
      } else if (nin == 1) {
        prim::sendSlot(c, c.peer(l.parent), in[0], len);
      } else {
        Peer& parent = c.peer(l.parent);
        if (void* dst = prim::mappedSlot(c, parent)) {
          reduceN(call.dtype, call.op, dst, in, nin, seg.n);
          prim::sendSlot(c, parent, nullptr, len);
        } else {
          void* stage = prim::sendStaging(c);
          reduceN(call.dtype, call.op, stage, in, nin, seg.n);
          prim::sendSlot(c, parent, stage, len);
        }
      }
      for (int q : {l.child[0], l.child[1]}) {
        if (q >= 0) prim::releaseSlot(c, c.peer(q));
      }
    }
    for (int t = 0; t < 2; ++t) {  // down: broadcast from the root
      const ring::Range seg = ring::segment(call.count, 2, segElems, t, k);
      if (seg.n == 0) continue;
      const schedule::TreeLinks& l = tree[t];
      const size_t len = seg.n * E;
      char* result = at(call.out, E, seg.begin);
      if (l.parent >= 0) {
        Peer& parent = c.peer(l.parent);
        std::memcpy(result, prim::recvSlot(c, parent), len);
        prim::releaseSlot(c, parent);
      }
      for (int q : {l.child[0], l.child[1]}) {
        if (q >= 0) prim::sendSlot(c, c.peer(q), result, len);
      }
    }
  }
}

}  // namespace algorithms
}  // namespace rdmacoll
