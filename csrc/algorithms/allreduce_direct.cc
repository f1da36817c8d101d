// direct allreduce (same host): every rank owns one chunk, reduces it straight from every
// peer's input and stores the result straight into every peer's output.
//
// Terms: chunk r = elements [chunkBegin(r), chunkBegin(r+1)) of count (partition.h),
// owned by rank r; a piece = up to kPieceBytes of a chunk, the unit that stays in cache
// between the reduction and the stores to the peers.
// Per piece of my chunk: inputs from all p ranks (mapped peer memory is loaded in place;
// user memory arrives by cross-memory read into staging), one p-input reduction into my
// output, then p-1 stores of the result into the peers' outputs (memcpy into mappings,
// cross-memory write into user memory).
// Bytes moved per rank: (p-1)/p n in, (p-1)/p n out, as a ring; but one pass over the
// data instead of the ring's 2(p-1) dependent steps, and no copy-out phase: with two
// ranks and mapped memory a rank reads n and writes n bytes per call, the ring 1.5n and n.
// Conflicts: chunk r of every rank's input and output is read and written only by rank
// r, so in-place needs no ordering between ranks beyond two handshakes: the call
// headers (every peer's buffers are known and free) and a closing `done` from every
// peer (nobody touches my memory any more).
// Staging: a rank whose buffers are user memory (not mappable) and smaller than
// kStageBytes copies its input into a pool block, runs in place there, and copies the
// result out: two local copies instead of 2(p-1) cross-memory system calls per piece,
// which dominate below a few MiB (64 KiB, 4 ranks: 40 us with system calls, ~12 us
// staged). A decision each rank makes alone: peers only see mappable memory.
// User memory where direct is not the best way for it, announced instead of staged: a
// flag in the call headers, so after the header exchange every rank knows whether any
// rank's buffers are user memory and all continue the same way, as a continuation of
// the algorithm table (table.h; the selector cannot choose by memory kind, since ranks
// may differ in it):
//   - direct>ring_slots, 1 to 16 MiB: the ring through slots, which beats both staging
//     and cross-memory calls there (4 ranks, 4 MiB of NumPy arrays: 625 us against
//     1035 us), while for mapped memory direct stays far ahead (190 us);
//   - direct>recursive_doubling, 2 ranks below 1 MiB: a single exchange through slots
//     (one copy and one reduction; staging costs two more copies: 64 KiB of NumPy arrays
//     took 4.3 us staged against 3.3 us).
// Which continuation follows from (bytes, p) and the headers every rank received, so
// every rank picks the same one.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/allreduce.h"
#include "algorithms/partition.h"
#include "algorithms/table.h"
#include "comm/primitives.h"
#include "reduce/reduce.h"

namespace rdmacoll {
namespace algorithms {

namespace {
constexpr size_t kPieceBytes = 256 << 10;  // measured: 64K/128K/256K/512K, 256K best at 16 MiB
constexpr size_t kStageBytes = 4 << 20;    // measured: staged wins at 4 MiB, loses from 8 MiB
constexpr int kMaxInline = 64;             // peers described without allocation
constexpr size_t kRingMinBytes = 1 << 20, kRingMaxBytes = 16 << 20;  // user memory: the slot ring

// Whether a rank whose buffers are user memory announces it (every rank then continues
// through slots) rather than staging or reading it by cross-memory calls.
bool announces(size_t bytes, int p) {
  return (bytes >= kRingMinBytes && bytes <= kRingMaxBytes) || (p == 2 && bytes < kRingMinBytes);
}

// Runs direct on in/out (the call's buffers, or pool blocks they were staged into).
// userMemory: this rank's buffers are user memory and it announces so.
void directMapped(Communicator& c, Call& call, const void* in, void* out, bool userMemory) {
  const int p = c.size(), r = c.rank();
  const size_t E = call.elemBytes;
  // A rank that announces user memory makes every rank continue through slots: nobody
  // reads its buffers, so its headers carry none.
  BufferRef inRef, outRef;
  if (!userMemory) {
    c.describeBuffer(in, call.count * E, &inRef);
    c.describeBuffer(out, call.count * E, &outRef);
  }
  prim::PeerBuffers inline_[kMaxInline];
  const CallHeader* hdrInline[kMaxInline];
  std::vector<prim::PeerBuffers> many;
  std::vector<const CallHeader*> hdrMany;
  prim::PeerBuffers* bufs = inline_;
  const CallHeader** headers = hdrInline;
  if (p > kMaxInline) {
    many.resize(p);
    hdrMany.resize(p);
    bufs = many.data();
    headers = hdrMany.data();
  }
  prim::headersFromAll(
      c, call, userMemory ? nullptr : &inRef, userMemory ? nullptr : &outRef,
      [&](int, uint64_t* e) { e[0] = userMemory; }, headers);
  bool anyUser = userMemory;
  for (int q = 0; q < p; ++q) {
    if (q != r) anyUser = anyUser || headers[q]->extra[0] != 0;
  }
  if (anyUser) {
    static const Algorithm& thenRing = continuation("direct>ring_slots");
    static const Algorithm& thenDoubling = continuation("direct>recursive_doubling");
    const Algorithm& next = call.count * E >= kRingMinBytes ? thenRing : thenDoubling;
    prim::continueAs(c, call, next.id);
    return next.run(c, call);
  }
  for (int q = 0; q < p; ++q) {
    if (q != r) prim::viewPeer(c.peer(q), *headers[q], &bufs[q]);
  }

  const size_t begin = ring::chunkBegin(call.count, p, r);
  const size_t n = ring::chunkCount(call.count, p, r);
  const size_t pieceElems = c.protocol().segment(E, kPieceBytes) / E;
  const void* inputsInline[kMaxInline];
  std::vector<const void*> inputsMany;
  const void** inputs = inputsInline;
  if (p > kMaxInline) {
    inputsMany.resize(p);
    inputs = inputsMany.data();
  }
  for (size_t done = 0; done < n; done += pieceElems) {
    const size_t elems = std::min(pieceElems, n - done);
    const size_t off = (begin + done) * E, len = elems * E;
    int staged = 0;
    for (int q = 0; q < p; ++q) {
      inputs[q] = q == r ? static_cast<const char*>(in) + off
                         : prim::inputAt(c.peer(q), bufs[q], off, len, c.staging(bufs[q].inMap ? 0 : staged++));
    }
    char* result = static_cast<char*>(out) + off;
    reduceN(call.dtype, call.op, result, inputs, p, elems, call.scale);
    for (int k = 1; k < p; ++k) {
      const int q = (r + k) % p;
      prim::writeOutput(c, c.peer(q), bufs[q], off, result, len);
    }
  }
  prim::finishAll(c, call);
}

}  // namespace

void allreduceDirect(Communicator& c, Call& call) {
  const size_t bytes = call.count * call.elemBytes;
  MemoryPool& pool = *c.pool();
  const bool user = !pool.find(call.in, bytes) || !pool.find(call.out, bytes);
  if (announces(bytes, c.size())) return directMapped(c, call, call.in, call.out, user);
  if (bytes == 0 || bytes > kStageBytes || !user) return directMapped(c, call, call.in, call.out, false);
  // Staging (top): in place in a pool block. A decision each rank makes alone: its peers
  // only see mappable memory.
  MemoryPool::Block* block = pool.acquire(bytes);
  copyBytes(block->data, call.in, bytes);
  try {
    directMapped(c, call, block->data, block->data, false);
  } catch (...) {
    pool.release(block);
    throw;
  }
  copyBytes(call.out, block->data, bytes);
  prim::finishWrites(c);  // the block was a source of writes to peers: free before the pool has it back
  pool.release(block);
}

}  // namespace algorithms
}  // namespace rdmacoll
