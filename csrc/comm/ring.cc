#include "comm/ring.h"

#include <algorithm>
#include <cstring>

#include "comm/primitives.h"
#include "common/error.h"
#include "reduce/reduce.h"

namespace rdmacoll {

namespace {

int mod(int a, int g) { return ((a % g) + g) % g; }

struct Segment {
  size_t begin, n;  // elements
};

Segment segmentOf(const SlotRing& r, int part, size_t k) {
  const size_t b = r.bounds[part], n = r.bounds[part + 1] - b, s = k * r.segElems;
  if (s >= n) return {b + n, 0};
  return {b + s, std::min(r.segElems, n - s)};
}

// The steps of both phases, segment by segment (terms in ring.h).
void steps(Communicator& c, const Call* call, const SlotRing& r, const char* in, char* owned, char* out,
           bool reduceScatter, bool allgather, double scale) {
  const int g = r.size, i = r.me, o = r.shift;
  if (g == 1) {
    if (reduceScatter && in != owned) throw Error("internal: a ring of one member reduces in place only");
    return;
  }
  const size_t E = r.elemBytes;
  auto member = [&](int k) { return r.members ? r.members[mod(k, g)] : mod(k, g); };
  Peer& next = c.peer(member(i + 1));
  Peer& prev = c.peer(member(i - 1));
  const int ownedPart = mod(i + 1 + o, g);
  size_t largest = 0;
  for (int q = 0; q < g; ++q) largest = std::max(largest, r.bounds[q + 1] - r.bounds[q]);
  const size_t nseg = (largest + r.segElems - 1) / r.segElems;
  const bool intoMappedSlot = c.protocol().slots >= 2;
  for (size_t k = 0; k < nseg; ++k) {
    if (reduceScatter) {
      const Segment first = segmentOf(r, mod(i + o, g), k);  // reduced by next at its step 0
      if (first.n) prim::sendSlot(c, next, in + first.begin * E, first.n * E);
      for (int s = 0; s < g - 1; ++s) {
        const Segment seg = segmentOf(r, mod(i + o - s - 1, g), k);
        if (seg.n == 0) continue;
        const size_t len = seg.n * E;
        const void* theirs = prim::recvSlot(c, prev);
        const char* mine = in + seg.begin * E;
        if (s < g - 2) {  // reduce and forward
          void* dst = intoMappedSlot ? prim::mappedSlot(c, next) : nullptr;
          void* into = dst ? dst : prim::sendStaging(c);
          reduce2(call->dtype, call->op, into, mine, theirs, seg.n);
          prim::releaseSlot(c, prev);
          prim::sendSlot(c, next, dst ? nullptr : into, len);
        } else {  // the last step completes my owned part
          char* result = owned + (seg.begin - r.bounds[ownedPart]) * E;
          reduce2(call->dtype, call->op, result, mine, theirs, seg.n, scale);
          prim::releaseSlot(c, prev);
        }
      }
    }
    if (allgather) {
      const Segment mine = segmentOf(r, ownedPart, k);
      if (mine.n) prim::sendSlot(c, next, out + mine.begin * E, mine.n * E);
      for (int s = 0; s < g - 1; ++s) {
        const Segment seg = segmentOf(r, mod(i + o - s, g), k);
        if (seg.n == 0) continue;
        char* dst = out + seg.begin * E;
        copyBytes(dst, prim::recvSlot(c, prev), seg.n * E);
        prim::releaseSlot(c, prev);
        if (s < g - 2) prim::sendSlot(c, next, dst, seg.n * E);
      }
    }
  }
}

}  // namespace

void ringReduceScatter(Communicator& c, const Call& call, const SlotRing& ring, const void* in, void* owned,
                       double scale) {
  steps(c, &call, ring, static_cast<const char*>(in), static_cast<char*>(owned), nullptr, true, false, scale);
}

void ringAllgather(Communicator& c, const SlotRing& ring, void* out) {
  steps(c, nullptr, ring, nullptr, nullptr, static_cast<char*>(out), false, true, 1.0);
}

void ringAllreduce(Communicator& c, const Call& call, const SlotRing& ring, const void* in, void* out, double scale) {
  char* o = static_cast<char*>(out);
  char* owned = o + ring.bounds[mod(ring.me + 1 + ring.shift, ring.size)] * ring.elemBytes;
  steps(c, &call, ring, static_cast<const char*>(in), owned, o, true, true, scale);
}

}  // namespace rdmacoll
