// One collective as the caller asks for it: the binding fills it from its arguments, the
// entry point (runtime/group.h) validates, describes, selects and runs it. Plain data
// with borrowed pointers: the caller keeps the memory alive until the call finished.
#pragma once
#include <cstddef>
#include <cstdint>

#include "comm/call.h"
#include "common/types.h"

namespace rdmacoll {

struct Request {
  Collective collective = Collective::kAllreduce;
  const void* in = nullptr;
  void* out = nullptr;  // allreduce, broadcast (may equal in), reducescatter
  // allreduce, broadcast, reducescatter: elements of the input; allgather, alltoall:
  // elements of one row (the first dimension's rows may differ between ranks).
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;      // allreduce, reducescatter
  int root = -1;                     // broadcast
  size_t rows = 0;                   // allgather, alltoall, reducescatter: rows of the input
  size_t rowElems = 0;               // reducescatter: elements per row (count = rows * rowElems)
  const uint64_t* splits = nullptr;  // alltoall: rows to each rank (size() entries)
  uint64_t* received = nullptr;      // alltoall: rows from each rank (size() entries, filled in)
  ResultBuffer* result = nullptr;    // allgather, alltoall: where the result is allocated
  const char* name = nullptr;        // optional; the first 15 bytes travel, all are hashed
  size_t nameLen = 0;
  uint32_t shapeHash = 0;  // Descriptor::shapeHash: 0, unchecked
  Shape shape;             // the shape hashed, for messages (ndims -1: a caller's key)
  // A rank in join() standing in for a call a peer started (comm/join.cc): that call's
  // descriptor, whose name and shape hashes this call takes (name and shapeHash unused).
  const Descriptor* like = nullptr;
};

}  // namespace rdmacoll
