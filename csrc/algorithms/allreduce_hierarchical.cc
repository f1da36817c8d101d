// hierarchical allreduce: within each host a ring reduce-scatter, between hosts a ring
// allreduce of each rank's share among the ranks with the same local index (one per
// host), within each host a ring allgather. The network carries 1/l of the data per rank
// instead of all of it, and every host link is used by l ranks at once.
//
// Terms (comm/topology.h): l = ranks per host, h = hosts, local / cross groups,
// i = my index in the local group, j = my index in the cross group.
//   chunk      count elements split into l chunks (ring::chunkBegin); after the local
//              reduce-scatter rank i holds chunk (i+1) mod l reduced over its host.
//   sub-chunk  a chunk split into h sub-chunks, the unit of the cross ring.
//   step       one shift around a ring: send one range to the successor while receiving
//              one from the predecessor, piece by piece through slots (pairwise.h).
// Steps: local reduce-scatter l-1, cross reduce-scatter h-1 and allgather h-1, local
// allgather l-1.
// Bytes moved per rank (n = count * element bytes): within the host 2 (l-1)/l n; across
// hosts 2 (h-1)/h n/l. Memory passes: one copy of the input into out (out of place),
// then per step one copy into the successor's slot and one reduction or copy out of it.
// Identical results: every element is reduced once, in ring order, by the ranks on the
// way, then copied: all ranks hold the same bits. Average scales once, at the last
// cross reduction.
#include <algorithm>
#include <cstring>

#include "algorithms/allreduce.h"
#include "comm/topology.h"
#include "algorithms/partition.h"
#include "algorithms/shared.h"
#include "comm/pairwise.h"

namespace rdmacoll {
namespace algorithms {

namespace {

struct Ring {
  const std::vector<int>& ranks;
  int me;
  int size() const { return static_cast<int>(ranks.size()); }
  int at(int k) const { return ranks[((k % size()) + size()) % size()]; }
};

// Ring reduce-scatter of [first, first + count) split into g = ring.size() parts, in
// place in out: at step s rank me sends part me-s and reduces part me-s-1 arriving from
// its predecessor; it ends holding part me+1 complete (scaled by `scale`).
void ringReduceScatter(Communicator& c, const Call& call, const Ring& ring, char* out, size_t count,
                       size_t seg, double scale) {
  const int g = ring.size(), i = ring.me;
  const size_t E = call.elemBytes;
  Peer& next = c.peer(ring.at(i + 1));
  Peer& prev = c.peer(ring.at(i - 1));
  for (int s = 0; s < g - 1; ++s) {
    const int sp = ((i - s) % g + g) % g, rp = ((i - s - 1) % g + g) % g;
    char* send = out + ring::chunkBegin(count, g, sp) * E;
    char* recv = out + ring::chunkBegin(count, g, rp) * E;
    pairwise::shiftReduce(c, next, send, ring::chunkCount(count, g, sp) * E, prev, call, recv, recv,
                          ring::chunkCount(count, g, rp) * E, seg, false, s == g - 2 ? scale : 1.0);
  }
}

// Ring allgather of the g parts of [first, first + count) in out, rank me holding part
// me+1: at step s it sends part me+1-s and receives part me-s.
void ringAllgather(Communicator& c, const Call& call, const Ring& ring, char* out, size_t count, size_t seg) {
  const int g = ring.size(), i = ring.me;
  const size_t E = call.elemBytes;
  Peer& next = c.peer(ring.at(i + 1));
  Peer& prev = c.peer(ring.at(i - 1));
  for (int s = 0; s < g - 1; ++s) {
    const int sp = ((i + 1 - s) % g + g) % g, rp = ((i - s) % g + g) % g;
    pairwise::shift(c, next, out + ring::chunkBegin(count, g, sp) * E, ring::chunkCount(count, g, sp) * E, prev,
                    out + ring::chunkBegin(count, g, rp) * E, ring::chunkCount(count, g, rp) * E, seg);
  }
}

}  // namespace

void allreduceHierarchical(Communicator& c, const Call& call) {
  const schedule::Hierarchy& t = c.topology();
  const int l = static_cast<int>(t.local.size()), h = t.hosts;
  const size_t E = call.elemBytes, n = call.count * E;
  const size_t seg = std::max(E, std::min(c.config().segmentBytes, c.config().slotBytes) / E * E);
  const Ring local{t.local, t.localIndex}, cross{t.cross, t.crossIndex};
  const int peers[4] = {local.at(t.localIndex - 1), local.at(t.localIndex + 1), cross.at(t.crossIndex - 1),
                        cross.at(t.crossIndex + 1)};
  pairwise::exchangeHeaders(c, call, peers, 4);

  char* out = static_cast<char*>(call.out);
  if (call.in != call.out) std::memcpy(out, call.in, n);
  const double scaleLocal = h == 1 ? call.scale : 1.0;
  ringReduceScatter(c, call, local, out, call.count, seg, scaleLocal);
  const int owned = (t.localIndex + 1) % l;
  char* chunk = out + ring::chunkBegin(call.count, l, owned) * E;
  const size_t chunkCount = ring::chunkCount(call.count, l, owned);
  if (h > 1) {
    ringReduceScatter(c, call, cross, chunk, chunkCount, seg, call.scale);
    ringAllgather(c, call, cross, chunk, chunkCount, seg);
  }
  ringAllgather(c, call, local, out, call.count, seg);
}

}  // namespace algorithms
}  // namespace rdmacoll
