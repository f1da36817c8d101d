// The ring through receive slots, written once: ring_slots allreduce, hierarchical
// allreduce (its rings within and across hosts), and the slot forms of reducescatter and
// allgather all run it.
//
// Terms
//   members   the ranks of the ring in ring order (all ranks, or a group such as the
//             ranks of one host); member i sends to member i+1 and receives from i-1.
//   parts     the data split into g = members parts: part q holds the elements
//             [bounds[q], bounds[q+1]) (any sizes, empty ones too).
//   shift     member i ends the reduce-scatter owning part i + 1 + shift (mod g): 0 for
//             allreduce (member i first sends its own part i), -1 for reducescatter and
//             allgather (member i owns part i).
//   segment   every part is cut into segments of segElems elements (the largest part
//             sets how many); segment k of every part moves before segment k+1, and
//             empty segments send nothing (both sides compute the same lengths).
//   step      reduce-scatter step s (0..g-2): member i receives the partial of part
//             i+shift-s-1 from i-1 and reduces its own input into it; the partial is
//             forwarded to i+1 until the last step, which completes the owned part.
//             allgather step s: member i sends the part it got last (first its owned
//             one) and receives part i+shift-s.
// Bytes moved per rank: reduce-scatter (g-1)/g n, allgather (g-1)/g n (n = all parts).
// Memory passes per rank over its (g-1)/g n share: reduce-scatter one two-input
// reduction (slot + input) that stores straight into the successor's slot where the
// transport maps it (else into staging, then one copy into the slot); allgather one copy
// out of the slot into the result and one into the successor's slot.
// Reduction order: each part is reduced once, along the ring, from the member that sends
// it first to its owner, every member combining its input with the partial it received
// (input op partial); the allgather then copies it, so every member holds the same bits.
//
// Deadlock freedom: a slot taken from the predecessor is released before any send whose
// source is not that slot, except when reducing straight into the successor's mapped
// slot, which holds the predecessor's slot while waiting for the successor's credit and
// is used only with two slots or more (the successor then holds an older message of
// mine): no cycle of waits around the ring with any number of slots.
#pragma once
#include <cstddef>

#include "comm/communicator.h"

namespace rdmacoll {

struct SlotRing {
  const int* members;    // g ranks in ring order (nullptr: ranks 0..g-1)
  int size;              // g
  int me;                // my index in members
  const size_t* bounds;  // g + 1 element offsets
  int shift;             // 0 or -1 (above)
  size_t elemBytes;      // bytes of one element of bounds
  size_t segElems;       // elements per slot message
};

// Reduce-scatter of `in` (call's dtype and op): the owned part's reduction, times scale,
// lands at `owned` (its first element). in may equal the memory owned points into.
void ringReduceScatter(Communicator& c, const Call& call, const SlotRing& ring, const void* in, void* owned,
                       double scale);
// Allgather within `out` (parts at bounds): the owned part must be in place.
void ringAllgather(Communicator& c, const SlotRing& ring, void* out);
// Both, pipelined per segment (each owned segment goes around as soon as it is reduced):
// the result lands in out at the parts' places.
void ringAllreduce(Communicator& c, const Call& call, const SlotRing& ring, const void* in, void* out, double scale);

}  // namespace rdmacoll
