// Pool of allocated memory: rc.empty() arrays and out-of-place results come from here,
// never from a fresh mapping per call (page faults on fresh buffers are what cost MPI
// 3x above 32 MiB on these machines). Freed blocks return to per-size-class free lists
// and are reused; segments are unmapped only when the pool dies (peers map them once
// and cache the mapping, keyed by segment id).
//
// Size classes: 4 per power of two (at most 25% waste), at least 4 KiB.
// Thread-safe (one mutex): blocks are released from Python destructors while a
// collective may be running on another thread.
// The pool outlives shutdown() while arrays from it are alive: detach() makes it stop
// allocating, blocks stay valid until the last one is released.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/transport.h"

namespace rdmacoll {

class MemoryPool {
 public:
  struct Block {
    std::unique_ptr<transport::Memory> mem;
    size_t sizeClass;
    bool inUse;
  };
  explicit MemoryPool(transport::Device* dev) : dev_(dev) {}

  Block* acquire(size_t bytes);
  void release(Block* b);
  // The block holding [p, p+len), or nullptr when that range is not pool memory.
  const Block* find(const void* p, size_t len) const;
  void detach();  // the device is going away: no more allocations
  size_t bytesMapped() const;
  static size_t sizeClass(size_t bytes);

 private:
  mutable std::mutex mu_;
  transport::Device* dev_;
  std::map<uintptr_t, std::unique_ptr<Block>> blocks_;  // by start address
  std::map<size_t, std::vector<Block*>> free_;          // by size class
};

}  // namespace rdmacoll
