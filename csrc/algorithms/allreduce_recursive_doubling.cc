// recursive_doubling allreduce: log2 P steps; at step s every rank exchanges its whole
// partial result with the rank 2^s away and reduces the two, so after step s each rank
// holds the reduction over its group of 2^(s+1) ranks (terms in algorithms/schedule.h:
// fold, new rank, step). For p not a power of two, the even ranks r < 2 rem first fold
// their input into r + 1 and get the result back at the end (two more steps).
//
// Terms: n = count * element size bytes; P = the largest power of two <= p; a piece = up
// to min(segmentBytes, slotBytes) bytes, one slot message.
// Bytes moved per rank: n per step out and in, n log2 P (+ n for a folded pair).
// Steps: log2 P (+ 2 when p is not a power of two): latency-optimal for small messages.
// Memory passes per rank: per step one copy of n into the partner's slots and one
// two-input reduction of n into out.
// Identical results: both partners compute (lower rank's data) op (higher rank's data)
// from identical data, so every member of a group holds the same bits; folded ranks
// receive a copy. Average scales once, at the last step.
#include <algorithm>

#include "algorithms/allreduce.h"
#include "algorithms/shared.h"
#include "algorithms/schedule.h"
#include "comm/pairwise.h"
#include "comm/primitives.h"

namespace rdmacoll {
namespace algorithms {

void allreduceRecursiveDoubling(Communicator& c, Call& call) {
  const int p = c.size(), r = c.rank();
  const int first[2] = {schedule::foldPartner(r, p), schedule::rdPartner(r, p, 0)};
  prim::headersFromNeighbours(c, call, first, 2);
  recursiveDoublingAfterHeaders(c, call);
}

void recursiveDoublingAfterHeaders(Communicator& c, Call& call) {
  const int p = c.size(), r = c.rank();
  const size_t bytes = call.count * call.elemBytes;
  const size_t seg = c.protocol().slotSegment(call.elemBytes);
  const int steps = schedule::rdSteps(p);

  const void* src;
  if (foldIn(c, call, seg, &src)) return;
  for (int s = 0; s < steps; ++s) {
    const int q = schedule::rdPartner(r, p, s);
    const double scale = s == steps - 1 ? call.scale : 1.0;
    pairwise::exchangeReduce(c, c.peer(q), call, src, bytes, call.out, src, bytes, seg, q < r, scale);
    src = call.out;
  }
  foldOut(c, call, seg);
}

}  // namespace algorithms
}  // namespace rdmacoll
