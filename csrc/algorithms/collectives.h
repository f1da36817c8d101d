// The algorithms of the collectives other than allreduce (entries of algorithms/table.h).
// Each is straight-line code over comm/'s primitives; validation, descriptors and
// selection live above (runtime/, tuning/).
//
// Arguments in the Call (comm/call.h): allgather and alltoall results, whose size depends
// on what the peers contribute, come from call.result once the call headers have told
// every rank the sizes, and their row count goes to call.resultRows.
#pragma once
#include "comm/communicator.h"

namespace rdmacoll {
namespace algorithms {

// Every rank contributes call.rows rows of call.count elements (the row, identical on
// every rank); the result is all rows in rank order.
void allgatherDirect(Communicator& c, Call& call);
void allgatherRing(Communicator& c, Call& call);
// call.root's call.count elements land in call.out on every rank (in place at the root).
void broadcastDirect(Communicator& c, Call& call);
void broadcastChain(Communicator& c, Call& call);
// call.count elements split by rows (call.rowElems each) as evenly as possible, the first
// ranks one row more; rank r receives the reduction of its share into call.out.
void reducescatterDirect(Communicator& c, Call& call);
void reducescatterRing(Communicator& c, Call& call);
// call.splits[q] rows (of call.count elements) go to rank q; the result is what every
// rank sent me, in rank order; call.received[q] gets the rows from q.
void alltoallDirect(Communicator& c, Call& call);
void alltoallPairwise(Communicator& c, Call& call);
// Returns once every rank has entered it.
void barrierHeaders(Communicator& c, Call& call);

}  // namespace algorithms
}  // namespace rdmacoll
