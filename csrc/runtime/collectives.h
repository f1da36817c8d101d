// Collective entry points: validate, describe (descriptor + hash), select, run.
// Synchronous: the caller's thread drives the algorithm to completion. No allocation on
// this path (results come from the pool, see MemoryPool).
#pragma once
#include <cstddef>
#include <string>

#include "comm/communicator.h"

namespace rdmacoll {

// out may equal in (in place); any other overlap is an error. count may be 0.
// Returns the name of the algorithm that ran.
const char* allreduce(Communicator& c, const void* in, void* out, size_t count, DataType dtype,
                      ReduceOp op, const char* name, size_t nameLen);

uint64_t hashDescriptor(const Descriptor& d);

}  // namespace rdmacoll
