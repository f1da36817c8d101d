// Allreduce algorithms. Each is straight-line code over comm/primitives.h; selection and
// validation live in runtime/. `call.in` may equal `call.out` (in place); partial overlap
// was rejected before.
#pragma once
#include "comm/communicator.h"

namespace rdmacoll {
namespace algorithms {

void allreduceEager(Communicator& c, const Call& call);
void allreduceRing(Communicator& c, const Call& call);
void allreduceRingSlots(Communicator& c, const Call& call);
void allreduceDirect(Communicator& c, const Call& call);
void allreduceRecursiveDoubling(Communicator& c, const Call& call);
void allreduceHalvingDoubling(Communicator& c, const Call& call);
void allreduceTree(Communicator& c, const Call& call);
void allreduceHierarchical(Communicator& c, const Call& call);
// ring_slots once the call headers are exchanged (direct continues with it, see there).
void ringSlotsAfterHeaders(Communicator& c, const Call& call);
void recursiveDoublingAfterHeaders(Communicator& c, const Call& call);

}  // namespace algorithms
}  // namespace rdmacoll
