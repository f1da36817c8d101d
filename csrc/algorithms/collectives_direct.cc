// Same-host forms of allgather, broadcast, reducescatter, alltoall and barrier: every
// rank reads what it needs straight from its peers' buffers (mapped memory is loaded in
// place; user memory is copied by a cross-memory read), after one exchange of call
// headers (which also checks that all ranks run the same call), and ends with a `done`
// handshake so that no rank returns while a peer still reads its memory.
//
// Terms: n = bytes of one rank's contribution, N = bytes of the result, p ranks.
//   allgather      moves N - n into each rank, one copy per byte (plus n local copy)
//   broadcast      moves n into each non-root, one copy
//   reducescatter  reads (p-1) n/p from peers, one p-input reduction pass of n/p
//   alltoall       moves what peers send me, one copy per byte
// Each needs peers whose memory can be read (Communicator::peersReadable).
#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "algorithms/collectives.h"
#include "algorithms/partition.h"
#include "comm/primitives.h"
#include "reduce/reduce.h"

namespace rdmacoll {
namespace algorithms {

namespace {

// Headers and views of every peer's buffers, for one call.
struct Peers {
  std::vector<const CallHeader*> headers;
  std::vector<prim::PeerBuffers> bufs;
  Peers(Communicator& c, const Call& call, const BufferRef* in, const BufferRef* out,
        const std::function<void(int, uint64_t*)>& extra)
      : headers(c.size(), nullptr), bufs(c.size()) {
    prim::headersFromAll(c, call, in, out, extra, headers.data());
    for (int q = 0; q < c.size(); ++q) {
      if (q != c.rank()) prim::viewPeer(c.peer(q), *headers[q], &bufs[q]);
    }
  }
};

BufferRef describe(Communicator& c, const void* p, size_t bytes) {
  BufferRef b;
  c.describeBuffer(p, bytes, &b);
  return b;
}

}  // namespace

void allgatherDirect(Communicator& c, Call& call) {
  const int p = c.size(), r = c.rank();
  const size_t rows = call.rows, rowBytes = call.count * call.elemBytes;
  BufferRef in = describe(c, call.in, rows * rowBytes);
  Peers peers(c, call, &in, nullptr, [&](int, uint64_t* e) { e[0] = rows; });
  std::vector<size_t> first(p + 1, 0);  // first row of each rank's part
  for (int q = 0; q < p; ++q) first[q + 1] = first[q] + (q == r ? rows : peers.headers[q]->extra[0]);
  char* dst = static_cast<char*>(call.result->allocate(first[p] * rowBytes));
  copyBytes(dst + first[r] * rowBytes, call.in, rows * rowBytes);
  for (int k = 1; k < p; ++k) {
    const int q = (r + k) % p;
    prim::readInput(c.peer(q), peers.bufs[q], 0, dst + first[q] * rowBytes, (first[q + 1] - first[q]) * rowBytes);
  }
  prim::finishAll(c, call);
  call.resultRows = first[p];
}

void broadcastDirect(Communicator& c, Call& call) {
  const int root = call.root;
  const size_t bytes = call.count * call.elemBytes;
  BufferRef in = describe(c, call.in, bytes);
  Peers peers(c, call, &in, nullptr, [](int, uint64_t*) {});
  if (c.rank() == root) {
    if (call.out != call.in) copyBytes(call.out, call.in, bytes);
  } else {
    prim::readInput(c.peer(root), peers.bufs[root], 0, call.out, bytes);
  }
  prim::finishAll(c, call);
}

void reducescatterDirect(Communicator& c, Call& call) {
  const int p = c.size(), r = c.rank();
  const size_t rowElems = call.rowElems, E = call.elemBytes;
  const size_t rows = rowElems ? call.count / rowElems : 0;
  BufferRef in = describe(c, call.in, call.count * E);
  Peers peers(c, call, &in, nullptr, [](int, uint64_t*) {});
  // My share: rows [first, first + mine) of every rank's input, reduced a segment of
  // elements at a time (a row may be longer than a staging segment).
  const size_t begin = ring::chunkBegin(rows, p, r) * rowElems, n = ring::chunkCount(rows, p, r) * rowElems;
  const size_t pieceElems = c.protocol().segment(E) / E;
  std::vector<const void*> inputs(p);
  for (size_t done = 0; done < n; done += pieceElems) {
    const size_t elems = std::min(pieceElems, n - done);
    const size_t off = (begin + done) * E, len = elems * E;
    int staged = 0;
    for (int q = 0; q < p; ++q) {
      const prim::PeerBuffers& b = peers.bufs[q];
      inputs[q] = q == r ? static_cast<const char*>(call.in) + off
                         : prim::inputAt(c.peer(q), b, off, len, c.staging(b.inMap ? 0 : staged++));
    }
    reduceN(call.dtype, call.op, static_cast<char*>(call.out) + done * E, inputs.data(), p, elems, call.scale);
  }
  prim::finishAll(c, call);
}

void alltoallDirect(Communicator& c, Call& call) {
  const int p = c.size(), r = c.rank();
  const uint64_t* splits = call.splits;
  uint64_t* received = call.received;
  const size_t rowBytes = call.count * call.elemBytes;
  std::vector<uint64_t> firstSent(p + 1, 0);  // first row of what I send to each rank
  for (int q = 0; q < p; ++q) firstSent[q + 1] = firstSent[q] + splits[q];
  BufferRef in = describe(c, call.in, firstSent[p] * rowBytes);
  Peers peers(c, call, &in, nullptr, [&](int q, uint64_t* e) {
    e[0] = firstSent[q];
    e[1] = splits[q];
  });
  size_t total = 0;
  for (int q = 0; q < p; ++q) {
    received[q] = q == r ? splits[r] : peers.headers[q]->extra[1];
    total += received[q];
  }
  char* dst = static_cast<char*>(call.result->allocate(total * rowBytes));
  for (int q = 0; q < p; ++q) {
    const size_t len = received[q] * rowBytes;
    if (q == r) {
      copyBytes(dst, static_cast<const char*>(call.in) + firstSent[r] * rowBytes, len);
    } else {
      prim::readInput(c.peer(q), peers.bufs[q], peers.headers[q]->extra[0] * rowBytes, dst, len);
    }
    dst += len;
  }
  prim::finishAll(c, call);
  call.resultRows = total;
}

void barrierHeaders(Communicator& c, Call& call) {
  // Every rank's header of this call has arrived: every rank has entered it. No memory
  // is read, so no closing handshake.
  std::vector<const CallHeader*> headers(c.size());
  prim::headersFromAll(c, call, nullptr, nullptr, [](int, uint64_t*) {}, headers.data());
}

}  // namespace algorithms
}  // namespace rdmacoll
