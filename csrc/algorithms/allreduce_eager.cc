// eager allreduce: every rank sends its whole input to every peer, then reduces all p
// inputs locally in rank order (so every rank computes bit-identical results).
//
// Terms: n = count * element size bytes, p ranks.
// Bytes moved per rank: (p-1) n out, (p-1) n in. Steps: 1 (latency-optimal).
// Memory passes per rank: p-1 copies of n into peers' inboxes, one p-input reduction.
// For small messages (n <= RDMACOLL_EAGER_BYTES): a header and the payload share the
// first cache lines of the inbox, so 8 bytes cost one line and one immediate per peer.
#include <vector>

#include "algorithms/allreduce.h"
#include "comm/primitives.h"
#include "reduce/reduce.h"

namespace rdmacoll {
namespace algorithms {

void allreduceEager(Communicator& c, Call& call) {
  const int p = c.size(), r = c.rank();
  const size_t bytes = call.count * call.elemBytes;
  for (int k = 1; k < p; ++k) prim::sendEager(c, c.peer((r + k) % p), call, call.in, bytes);

  const void* inputs[256];
  std::vector<const void*> many;
  const void** in = inputs;
  if (p > 256) {
    many.resize(p);
    in = many.data();
  }
  in[r] = call.in;
  // The predecessor first: any mismatch is seen between neighbours, where every
  // algorithm starts (prim::headersFromNeighbours).
  for (int k = p - 1; k >= 1; --k) {
    int q = (r + k) % p;
    in[q] = prim::recvEager(c, c.peer(q), call);
  }
  // In place, the result lands where my payloads were sent from, and the peers' payloads
  // prove nothing about mine: they must have left first (deferred completion).
  if (call.out == call.in) prim::finishWrites(c);
  reduceN(call.dtype, call.op, call.out, in, p, call.count, call.scale);
}

}  // namespace algorithms
}  // namespace rdmacoll
