// Rank and chunk arithmetic of the ring, as pure functions (unit-tested without any
// transport, see tests/test_partition.py through rdmacoll._core._testing).
//
// Terms
//   chunk    count elements are split into p chunks, as equal as possible: chunk c holds
//            elements [chunkBegin(c), chunkBegin(c+1)); the first count % p chunks have
//            one element more.
//   segment  each chunk is cut into nseg segments of at most segElems elements; nseg is
//            the same for every chunk (computed from the largest chunk), so trailing
//            segments of smaller chunks may be empty: every rank runs the same steps.
//   step     the ring runs 2(p-1) steps per segment: steps 0..p-2 reduce-scatter,
//            steps p-1..2p-3 allgather. At step j rank r handles chunk
//            ringChunk(r, j, p) and consumes what its predecessor produced at step j-1.
//   unit     one (segment, step) pair; units run in order k-major: unit = k*2(p-1) + j.
#pragma once
#include <cstddef>
#include <vector>

namespace rdmacoll {
namespace ring {

inline int prev(int r, int p) { return (r + p - 1) % p; }
inline int next(int r, int p) { return (r + 1) % p; }

inline size_t chunkBegin(size_t count, int p, int c) {
  size_t q = count / p, rem = count % p;
  return q * c + (static_cast<size_t>(c) < rem ? c : rem);
}
inline size_t chunkCount(size_t count, int p, int c) { return chunkBegin(count, p, c + 1) - chunkBegin(count, p, c); }
inline size_t segmentsPerChunk(size_t count, int p, size_t segElems) {
  size_t largest = chunkCount(count, p, 0);
  return largest == 0 ? 1 : (largest + segElems - 1) / segElems;
}
inline int stepsPerSegment(int p) { return 2 * (p - 1); }

// Chunk rank r handles at step j: reduce-scatter step s = j receives chunk r-s-1;
// allgather step s = j-(p-1) receives chunk r-s. At step p-2 it completes chunk r+1,
// the chunk it owns.
inline int ringChunk(int r, int j, int p) {
  int c = j < p - 1 ? r - j - 1 : r - (j - (p - 1));
  return ((c % p) + p) % p;
}

// Elements [begin, begin+n) of segment k of chunk c.
struct Range {
  size_t begin, n;
};
inline Range segment(size_t count, int p, size_t segElems, int c, size_t k) {
  size_t b = chunkBegin(count, p, c), n = chunkCount(count, p, c);
  size_t s = k * segElems;
  if (s >= n) return {b + n, 0};
  return {b + s, n - s < segElems ? n - s : segElems};
}

// The p + 1 boundaries of count elements split into p chunks, each chunk element scaled
// by `unit` (rows of unit elements): the parts of a comm/ring.h slot ring. No allocation
// up to 64 chunks.
class Bounds {
 public:
  Bounds(size_t count, int p, size_t unit = 1) {
    size_t* b = inline_;
    if (p + 1 > kInline) {
      many_.resize(p + 1);
      b = many_.data();
    }
    for (int c = 0; c <= p; ++c) b[c] = chunkBegin(count, p, c) * unit;
    data_ = b;
  }
  Bounds(const Bounds&) = delete;
  Bounds& operator=(const Bounds&) = delete;
  const size_t* data() const { return data_; }

 private:
  static constexpr int kInline = 65;
  size_t inline_[kInline];
  std::vector<size_t> many_;
  const size_t* data_;
};

}  // namespace ring
}  // namespace rdmacoll
