// Collective entry points: validate, describe (descriptor + hash), select, run.
// Synchronous: the caller's thread drives the algorithm to completion. No allocation on
// this path (results come from the pool, see MemoryPool).
#pragma once
#include <cstddef>
#include <string>

#include "algorithms/collectives.h"
#include "comm/communicator.h"

namespace rdmacoll {

// out may equal in (in place); any other overlap is an error. count may be 0.
// Returns the name of the algorithm that ran.
const char* allreduce(Communicator& c, const void* in, void* out, size_t count, DataType dtype,
                      ReduceOp op, const char* name, size_t nameLen);

// rows x rowElems elements from every rank (rows may differ), gathered in rank order
// into memory from out. Returns the total rows.
size_t allgather(Communicator& c, const void* in, size_t rows, size_t rowElems, DataType dtype,
                 const char* name, size_t nameLen, algorithms::Output& out);
// root's count elements into out on every rank (out may equal in).
void broadcast(Communicator& c, const void* in, void* out, size_t count, DataType dtype, int root,
               const char* name, size_t nameLen);
// count = rows x rowElems; rank r gets the reduction of its share of the rows (the first
// rows % size ranks one row more) in out.
void reducescatter(Communicator& c, const void* in, void* out, size_t count, size_t rowElems,
                   DataType dtype, ReduceOp op, const char* name, size_t nameLen);
// splits[q] rows of rowElems elements to rank q; what each rank sent me lands in rank
// order in memory from out; received[q] = rows from q. Returns the total rows.
size_t alltoall(Communicator& c, const void* in, size_t rowElems, const uint64_t* splits,
                uint64_t* received, DataType dtype, const char* name, size_t nameLen,
                algorithms::Output& out);
void barrier(Communicator& c);
// Rows of rank r in a reducescatter of `rows` rows.
size_t reducescatterRows(size_t rows, int size, int rank);

uint64_t hashDescriptor(const Descriptor& d);

}  // namespace rdmacoll
