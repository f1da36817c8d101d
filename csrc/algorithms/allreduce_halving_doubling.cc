// halving_doubling allreduce (Rabenseifner): a reduce-scatter by recursive halving, then
// an allgather by recursive doubling, over the P = largest power of two <= p ranks; the
// even ranks r < 2 rem fold their input into r + 1 first and get the result back at the
// end (terms in algorithms/schedule.h: fold, new rank, block, step).
//
// Terms: n = count * element size bytes; count is split into P blocks; a piece = up to
// min(segmentBytes, slotBytes) bytes, one slot message.
// Reduce-scatter step s: the partner n ^ (P >> (s+1)) and I hold the same P >> s blocks;
// I send the half it keeps and reduce the half I keep (its data op mine, lower rank
// first); after log2 P steps new rank b holds block b fully reduced (scaled there, once,
// for Average). Allgather step t reverses reduce-scatter step log2 P - 1 - t: I send
// what I kept and receive what I sent, so the vector doubles back.
// Bytes moved per rank: 2 (P-1)/P n (+ n for a folded pair), as a ring, in 2 log2 P
// steps (+ 2) instead of 2 (p-1).
// Memory passes per rank: reduce-scatter one copy of (P-1)/P n into slots and one
// two-input reduction of the same; allgather one copy into slots and one copy out.
// Identical results: every element is reduced once, by the rank that owns its block,
// and copied everywhere else.
#include <algorithm>

#include "algorithms/allreduce.h"
#include "algorithms/shared.h"
#include "algorithms/schedule.h"
#include "comm/pairwise.h"
#include "comm/primitives.h"

namespace rdmacoll {
namespace algorithms {

void allreduceHalvingDoubling(Communicator& c, Call& call) {
  const int p = c.size(), r = c.rank();
  const size_t E = call.elemBytes;
  const size_t seg = c.protocol().slotSegment(E);
  const int fold = schedule::foldPartner(r, p);
  const int P = schedule::pow2Floor(p), steps = schedule::hdSteps(p);
  const int first[2] = {fold, schedule::hdPartner(r, p, 0)};
  prim::headersFromNeighbours(c, call, first, 2);

  const void* src;
  if (foldIn(c, call, seg, &src)) return;
  const int nr = schedule::foldNewRank(r, p);
  for (int s = 0; s < steps; ++s) {  // reduce-scatter
    const int q = schedule::hdPartner(r, p, s);
    const ring::Range keep = schedule::blockElems(call.count, P, schedule::hdKeep(nr, P, s));
    const ring::Range give = schedule::blockElems(call.count, P, schedule::hdSend(nr, P, s));
    const double scale = s == steps - 1 ? call.scale : 1.0;
    pairwise::exchangeReduce(c, c.peer(q), call, at(src, E, give.begin), give.n * E, at(call.out, E, keep.begin),
                             at(src, E, keep.begin), keep.n * E, seg, q < r, scale);
    src = call.out;
  }
  for (int t = 0; t < steps; ++t) {  // allgather
    const int s = steps - 1 - t;
    const int q = schedule::hdPartner(r, p, s);
    const ring::Range mine = schedule::blockElems(call.count, P, schedule::hdKeep(nr, P, s));
    const ring::Range theirs = schedule::blockElems(call.count, P, schedule::hdSend(nr, P, s));
    pairwise::exchangeCopy(c, c.peer(q), at(call.out, E, mine.begin), mine.n * E, at(call.out, E, theirs.begin),
                           theirs.n * E, seg);
  }
  foldOut(c, call, seg);
}

}  // namespace algorithms
}  // namespace rdmacoll
