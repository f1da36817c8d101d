// One collective call as the algorithms see it: computed once by the entry point
// (runtime/), identical in its descriptor on every rank, read by algorithms and by the
// primitives that check what peers send.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/ctrl.h"
#include "common/types.h"

namespace rdmacoll {

// Memory for a result whose size is known only once the call headers have told every
// rank what its peers contribute (allgather, alltoall): allocated from the pool, where
// peers may read it.
class ResultBuffer {
 public:
  virtual ~ResultBuffer() = default;
  virtual void* allocate(size_t bytes) = 0;
};

// A tensor's shape, for messages only (what peers compare is Descriptor::shapeHash): up
// to 8 dimensions, the first `skip` left out of the check (allgather, alltoall: 1).
struct Shape {
  int64_t dims[8] = {};
  int8_t ndims = -1;  // -1: unknown (a caller's key, or more than 8 dimensions)
  uint8_t skip = 0;
};
// " with shape [3, 4]" (" with shape [*, 4]" where the first dimension is free), or "".
std::string describeShape(const Shape& s);

struct Call {
  const void* in = nullptr;
  void* out = nullptr;  // (allgather, alltoall: from `result`, once sizes are known)
  // Elements in the descriptor: the input's (allreduce, broadcast, reducescatter), one
  // row's (allgather, alltoall: ranks contribute different row counts).
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double scale = 1;  // 1/size for Average, else 1
  size_t elemBytes = 0;
  uint64_t seq = 0;
  HashedDescriptor hd{};  // descriptor and its hash, identical on all ranks when correct
  Shape shape;            // the input's, for a mismatch message
  // Arguments of some collectives.
  int root = -1;                     // broadcast
  size_t rows = 0;                   // allgather: my rows
  size_t rowElems = 0;               // reducescatter: elements per row (count = rows * rowElems)
  const uint64_t* splits = nullptr;  // alltoall: rows to each rank
  uint64_t* received = nullptr;      // alltoall: rows from each rank (filled in)
  ResultBuffer* result = nullptr;    // allgather, alltoall
  size_t resultRows = 0;             // allgather, alltoall: rows of the result (filled in)
};

// The descriptor's hash: any change of any field changes it.
uint64_t hashDescriptor(const Descriptor& d);
// Descriptor::shapeHash of a shape (dims[0..n)); the same function serves keys that
// callers build from several shapes (grouped collectives: _core.shape_hash).
uint32_t hashShape(const int64_t* dims, size_t n);
// "allreduce(#5, count=10, dtype=float32, op=Sum, name='w')", for messages.
std::string describeCall(const Descriptor& d);

}  // namespace rdmacoll
