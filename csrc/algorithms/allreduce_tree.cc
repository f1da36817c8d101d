// tree allreduce: NCCL's double binary tree. Two complementary binary trees over the
// ranks (algorithms/schedule.h: tree 0 in-order, tree 1 its mirror or shift, so a rank
// interior in one is a leaf in the other); tree t carries half t of the vector. In each
// tree, segments are reduced up from the leaves to the root (scaled there, once, for
// Average), then broadcast down, pipelined by segment.
//
// Terms: half t = chunk t of count split in 2 (partition.h); segment k of a half = up to
// min(segmentBytes, slotBytes) bytes, one slot message. Iterations run segments up and
// down the trees skewed by depth (below), tree 0 before tree 1 in each, the same order on
// every rank, so the messages between any two ranks arrive in the order they are
// expected, and each one is consumed in the phase that sent it.
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
#include "common/error.h"
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
  // Skewed by depth: in iteration k, tree 0 then tree 1, a rank at depth d takes segment
  // k - (D - d) up and passes segment k - (D + 1 + d) down, where D >= every rank's depth
  // (the same on every rank). Whatever a rank awaits in iteration k was sent in iteration
  // k - 1 (a child, one deeper, sent that segment up one iteration earlier; the parent
  // passed it down one iteration earlier), so no iteration waits on a chain of hops:
  // segments stream up and down the trees at the links' rate after 2 D + 1 iterations of
  // filling. Both streams of a pair (a parent in one tree can be a child in the other)
  // are consumed one iteration after they were sent, in the order they were sent. A pair
  // carries at most two messages each way per iteration, so with four slots a credit a
  // rank waits for in iteration k was given in iteration k - 1 at the latest: no
  // iteration waits on its own. With fewer slots (RDMACOLL_SLOTS < 4) each segment goes
  // all the way up, then down, before the next (the form before).
  // Before, iteration k took segment k up and then down: a round trip to the root per
  // segment, 6x the links' time at 64 ranks (found by the simulator, docs/scale.md).
  const bool skew = c.protocol().slots >= 4;
  const int D = skew ? schedule::log2Floor(p) + 1 : 0;
  int depth[2] = {0, 0};
  for (int t = 0; t < 2 && skew; ++t) {
    for (int q = r; (q = schedule::dtree(p, q, t).parent) >= 0;) ++depth[t];
    if (depth[t] > D) throw Error("internal: a tree deeper than its bound");
  }
  auto up = [&](int t, size_t k) {
    const ring::Range seg = ring::segment(call.count, 2, segElems, t, k);
    if (seg.n == 0) return;
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
  };
  auto down = [&](int t, size_t k) {
    const ring::Range seg = ring::segment(call.count, 2, segElems, t, k);
    if (seg.n == 0) return;
    const schedule::TreeLinks& l = tree[t];
    const size_t len = seg.n * E;
    char* result = at(call.out, E, seg.begin);
    if (l.parent >= 0) {
      Peer& parent = c.peer(l.parent);
      copyBytes(result, prim::recvSlot(c, parent), len);
      prim::releaseSlot(c, parent);
    }
    for (int q : {l.child[0], l.child[1]}) {
      if (q >= 0) prim::sendSlot(c, c.peer(q), result, len);
    }
  };
  if (!skew) {
    for (size_t k = 0; k < nseg; ++k) {
      for (int t = 0; t < 2; ++t) up(t, k);
      for (int t = 0; t < 2; ++t) down(t, k);
    }
    return;
  }
  const long n = static_cast<long>(nseg);
  for (long k = 0; k < n + 2 * D + 1 && n > 0; ++k) {
    for (int t = 0; t < 2; ++t) {
      const long u = k - (D - depth[t]), d = k - (D + 1 + depth[t]);
      if (u >= 0 && u < n) up(t, static_cast<size_t>(u));
      if (d >= 0 && d < n) down(t, static_cast<size_t>(d));
    }
  }
}

}  // namespace algorithms
}  // namespace rdmacoll
