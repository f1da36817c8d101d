// Small pieces several algorithms share.
#pragma once
#include <cstddef>

#include "algorithms/schedule.h"
#include "comm/pairwise.h"

namespace rdmacoll {
namespace algorithms {

// Byte address of element e of an array of elem-byte elements.
inline char* at(void* base, size_t elem, size_t e) { return static_cast<char*>(base) + elem * e; }
inline const char* at(const void* base, size_t elem, size_t e) { return static_cast<const char*>(base) + elem * e; }

// The fold that lets power-of-two schedules (recursive doubling, halving-doubling) run
// on any p (schedule.h): with rem = p - P, the even ranks r < 2 rem hand their input to
// r + 1 and get the result back at the end; the odd ones reduce it into call.out first.
// foldIn returns true when this rank is folded away (its call is then complete) and
// otherwise sets *src to the data this rank enters the schedule with.
inline bool foldIn(Communicator& c, const Call& call, size_t segBytes, const void** src) {
  const int r = c.rank(), p = c.size(), fold = schedule::foldPartner(r, p);
  const size_t bytes = call.count * call.elemBytes;
  *src = call.in;
  if (schedule::foldedAway(r, p)) {
    Peer& q = c.peer(fold);
    pairwise::send(c, q, call.in, bytes, segBytes);
    pairwise::recvCopy(c, q, call.out, bytes, segBytes);
    return true;
  }
  if (fold >= 0) {  // odd r < 2 rem: out = in[r-1] op in[r]
    pairwise::recvReduce(c, c.peer(fold), call, call.out, call.in, bytes, segBytes, true, 1.0);
    *src = call.out;
  }
  return false;
}

// After the schedule: give the folded-away partner its result.
inline void foldOut(Communicator& c, const Call& call, size_t segBytes) {
  const int fold = schedule::foldPartner(c.rank(), c.size());
  if (fold >= 0) pairwise::send(c, c.peer(fold), call.out, call.count * call.elemBytes, segBytes);
}

}  // namespace algorithms
}  // namespace rdmacoll
