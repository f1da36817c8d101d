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
// User memory (plain NumPy arrays, torch CPU tensors), by rank count, as measured on 2
// cores (2026-11-29, every variant interleaved in the same processes, MPICH's launcher;
// us, cross-memory / staged / slot ring):
//   - 2 ranks: cross-memory calls at every size (64 KiB 10.6 / 13.9 / 12.2 (recursive
//     doubling); 1 MiB 78 / 194 / 149; 4 MiB 338 / 883 / 598; 16 MiB 1142 / - / 2299);
//   - 3 to kManyRanks-1 ranks (measured at 3, 4 and 8): staged below kStageBytes (64 KiB,
//     4 ranks: 54 / 41; 256 KiB a tie), cross-memory calls from there (1 MiB, 4 ranks:
//     445 / 513 / 619; 16 MiB 5275 / - / 8471);
//   - kManyRanks ranks and more (measured at 16, 8 per core; whether the ring also pays
//     with a core per rank, where the system calls run side by side, is not measured):
//     staged below kRingMinBytes (2 MiB: 8421 / 6106 / 7984), the slot ring from there to
//     kRingMaxBytes (4 MiB: 19970 / 17479 / 14689; 16 MiB: 64635 / - / 59323), where the
//     2(p-1) cross-memory calls per piece cost more than the ring's copies through slots.
// Staging: a rank whose buffers are user memory copies its input into a pool block, runs
// in place there, and copies the result out: two local copies instead of 2(p-1)
// cross-memory system calls per piece. A decision each rank makes alone: peers only see
// mappable memory.
// The ring, announced instead of staged: a flag in the call headers, so after the header
// exchange every rank knows whether any rank's buffers are user memory and all continue
// the same way, as direct>ring_slots, a continuation of the algorithm table (table.h; the
// selector cannot choose by memory kind, since ranks may differ in it). Whether it
// follows from (bytes, p) and the headers every rank received, so every rank picks alike.
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
constexpr int kMaxInline = 64;             // peers described without allocation
// User memory (above): the rank counts and sizes of each way.
constexpr int kManyRanks = 12;                                       // between the measured 8 and 16
constexpr size_t kStageBytes = 256 << 10;                            // 3 to kManyRanks-1 ranks: staged below
constexpr size_t kRingMinBytes = 4 << 20, kRingMaxBytes = 16 << 20;  // kManyRanks and more: the slot ring

// Whether a rank whose buffers are user memory announces it (every rank then continues
// through slots) rather than staging or reading it by cross-memory calls.
bool announces(size_t bytes, int p) { return p >= kManyRanks && bytes >= kRingMinBytes && bytes <= kRingMaxBytes; }

// User memory below this many bytes is staged (2 ranks: never).
size_t stagedBelow(int p) {
  if (p <= 2) return 0;
  return p < kManyRanks ? kStageBytes : kRingMinBytes;
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
    prim::continueAs(c, call, thenRing.id);
    return thenRing.run(c, call);
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
  if (bytes == 0 || bytes >= stagedBelow(c.size()) || !user) return directMapped(c, call, call.in, call.out, false);
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
