// Allreduce algorithms (entries of algorithms/table.h). Each is straight-line code over
// comm/'s primitives; validation and selection live above (runtime/, tuning/).
// `call.in` may equal `call.out` (in place); partial overlap was rejected before.
#pragma once
#include "comm/communicator.h"

namespace rdmacoll {
namespace algorithms {

void allreduceEager(Communicator& c, Call& call);
void allreduceRing(Communicator& c, Call& call);
void allreduceRingSlots(Communicator& c, Call& call);
void allreduceDirect(Communicator& c, Call& call);
void allreduceRecursiveDoubling(Communicator& c, Call& call);
void allreduceHalvingDoubling(Communicator& c, Call& call);
void allreduceTree(Communicator& c, Call& call);
void allreduceHierarchical(Communicator& c, Call& call);
// Continuations (table.h): ring_slots once the call headers are exchanged (direct
// continues with it, see there); recursive doubling's own body after its headers.
void ringSlotsAfterHeaders(Communicator& c, Call& call);
void recursiveDoublingAfterHeaders(Communicator& c, Call& call);

}  // namespace algorithms
}  // namespace rdmacoll
