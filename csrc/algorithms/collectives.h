// The collectives other than allreduce. Each is straight-line code over
// comm/primitives.h; validation, descriptors and selection live in runtime/.
//
// Outputs whose size depends on what the peers contribute (allgather, alltoall) are
// allocated by the caller's Output once the call headers have told every rank the sizes.
#pragma once
#include <cstddef>
#include <cstdint>

#include "comm/communicator.h"

namespace rdmacoll {
namespace algorithms {

class Output {
 public:
  virtual ~Output() = default;
  virtual void* allocate(size_t bytes) = 0;  // from the pool: peers may read it
};

// Every rank contributes `rows` rows of call.elemBytes * call.count bytes (the row size,
// identical on every rank); the result is all rows in rank order. Returns total rows.
size_t allgatherDirect(Communicator& c, const Call& call, size_t rows, Output& out);
// root's call.count elements land in call.out on every rank (in place at the root).
void broadcastDirect(Communicator& c, const Call& call, int root);
// call.count elements split by rows (rowElems each) as evenly as possible, the first
// ranks one row more; rank r receives the reduction of its share into call.out.
void reducescatterDirect(Communicator& c, const Call& call, size_t rowElems);
// splits[q] rows go to rank q (rows of call.count elements); the result is what every
// rank sent me, in rank order. received[q] gets the rows from q. Returns total rows.
size_t alltoallDirect(Communicator& c, const Call& call, const uint64_t* splits,
                      uint64_t* received, Output& out);
// Returns once every rank has entered it.
void barrierHeaders(Communicator& c, const Call& call);

}  // namespace algorithms
}  // namespace rdmacoll
