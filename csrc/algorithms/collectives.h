// The collectives other than allreduce. Each is straight-line code over
// comm/primitives.h; validation, descriptors and selection live in runtime/.
//
// Outputs whose size depends on what the peers contribute (allgather, alltoall) are
// allocated by the caller's Output once the call headers have told every rank the sizes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tuning/cost_model.h"

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
// Transport-generic forms of the four above (collectives_slots.cc): same arguments and
// results, everything moves through slot messages, no peer memory is read.
size_t allgatherRing(Communicator& c, const Call& call, size_t rows, Output& out);
void broadcastChain(Communicator& c, const Call& call, int root);
void reducescatterRing(Communicator& c, const Call& call, size_t rowElems);
size_t alltoallPairwise(Communicator& c, const Call& call, const uint64_t* splits,
                        uint64_t* received, Output& out);
// Returns once every rank has entered it.
void barrierHeaders(Communicator& c, const Call& call);

// The registry of these collectives' algorithms (UCC style: a name, a one-line
// description, where it can run, what it costs); RDMACOLL_ALGO rules name them, e.g.
// `allgather:direct`. Costs take n = the collective's bytes as selection sees them
// (runtime/collectives.cc: the same on every rank) and p ranks.
template <class Fn>
struct CollectiveAlgorithm {
  uint8_t id;  // in the descriptor hash: ranks that chose differently get an error
  const char* name;
  const char* description;
  bool (*usable)(const Communicator&);
  Fn* run;
  double (*cost)(const tuning::CostModel& m, size_t n, int p);
};
using AllgatherFn = size_t(Communicator&, const Call&, size_t rows, Output&);
using BroadcastFn = void(Communicator&, const Call&, int root);
using ReducescatterFn = void(Communicator&, const Call&, size_t rowElems);
using AlltoallFn = size_t(Communicator&, const Call&, const uint64_t* splits, uint64_t* received, Output&);

const std::vector<CollectiveAlgorithm<AllgatherFn>>& allgatherAlgorithms();
const std::vector<CollectiveAlgorithm<BroadcastFn>>& broadcastAlgorithms();
const std::vector<CollectiveAlgorithm<ReducescatterFn>>& reducescatterAlgorithms();
const std::vector<CollectiveAlgorithm<AlltoallFn>>& alltoallAlgorithms();
// Names registered for a collective other than allreduce (empty for barrier).
std::vector<std::string> algorithmNames(Collective coll);

}  // namespace algorithms
}  // namespace rdmacoll
